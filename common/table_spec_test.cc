#include "common/table_spec.h"

#include <functional>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

JobSpec CtrJob(const std::string& format = "") {
  JobSpec job;
  job.set_model("ctr");
  job.mutable_data()->set_format(format);
  ApplyJobDefaults(&job);
  return job;
}

TEST(TableSpecTest, CtrDeclaresOneTablePerCriteoFieldWithTheJobsDimAndOptimizer) {
  JobSpec job;
  job.set_model("ctr");
  job.set_embedding_dim(8);
  job.mutable_table_optimizer()->set_type(SparseOptimizerSpec::FTRL);
  ApplyJobDefaults(&job);
  EXPECT_EQ(job.data().format(), "criteo");
  ASSERT_EQ(job.tables_size(), 26);
  EXPECT_EQ(job.tables(0).name(), "C1");
  EXPECT_EQ(job.tables(25).name(), "C26");
  EXPECT_EQ(job.tables(3).dim(), 8);
  EXPECT_EQ(job.tables(3).optimizer().type(), SparseOptimizerSpec::FTRL);
  EXPECT_FLOAT_EQ(job.tables(3).optimizer().lr(), 0.05f);
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  const JobSpec again = [&] { JobSpec j = job; ApplyJobDefaults(&j); return j; }();
  EXPECT_EQ(again.tables_size(), 26) << "idempotent";
}

TEST(TableSpecTest, LibsvmHasOneTableAndDefaultsAreAdagrad) {
  const JobSpec job = CtrJob("libsvm");
  ASSERT_EQ(job.tables_size(), 1);
  EXPECT_EQ(job.tables(0).name(), "features");
  EXPECT_EQ(job.tables(0).dim(), 16);
  EXPECT_EQ(job.tables(0).optimizer().type(), SparseOptimizerSpec::ADAGRAD);
  EXPECT_FLOAT_EQ(job.tables(0).optimizer().initial_accumulator(), 0.1f);
  EXPECT_FLOAT_EQ(job.tables(0).optimizer().lr(), kCtrAdagradLr) << "model ctr's Adagrad rate";
  JobSpec external;
  external.set_model("external");
  external.add_tables()->set_name("t");
  ApplyJobDefaults(&external);
  EXPECT_FLOAT_EQ(external.tables(0).optimizer().lr(), 0.05f) << "the generic Adagrad rate";
}

TEST(TableSpecTest, OverlapIsOffWithTables) {
  EXPECT_FALSE(OverlapOn(CtrJob()));
}

TEST(TableSpecTest, BadTablesAndFormatsNameTheField) {
  struct Case {
    std::function<void(JobSpec*)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](JobSpec* j) { j->mutable_tables(2)->set_dim(0); }, "tables[2].dim: got 0, expected in [1, 4096]"},
      {[](JobSpec* j) { j->mutable_tables(1)->set_name("C1"); }, "tables[1].name: got 'C1', expected a name no other"},
      {[](JobSpec* j) { j->mutable_tables(0)->set_name("a b"); }, "tables[0].name: got 'a b'"},
      {[](JobSpec* j) { j->mutable_tables(0)->set_init_bound(-1); }, "tables[0].init_bound: got -1"},
      {[](JobSpec* j) { j->mutable_tables(4)->mutable_optimizer()->set_lr(0); }, "tables[4].optimizer.lr: got 0"},
      {[](JobSpec* j) { j->mutable_tables(4)->mutable_optimizer()->set_beta1(1); }, "tables[4].optimizer.beta1: got 1"},
      {[](JobSpec* j) { j->mutable_tables(4)->mutable_optimizer()->set_l1(-1); }, "tables[4].optimizer.l1: got -1"},
      {[](JobSpec* j) { j->mutable_data()->set_format("idx"); }, "data.format: got 'idx', expected 'criteo' or 'libsvm'"},
      {[](JobSpec* j) { j->mutable_data()->set_format("csv"); }, "data.format: got 'csv'"},
      {[](JobSpec* j) { j->mutable_data()->set_bad_records("maybe"); }, "data.bad_records: got 'maybe'"},
      {[](JobSpec* j) { j->set_model("mlp"); }, "data.format: got 'criteo', expected 'idx' for model 'mlp'"},
  };
  for (const Case& c : cases) {
    JobSpec job = CtrJob();
    c.edit(&job);
    const absl::Status status = ValidateJobSpec(job);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
}

TEST(TableSpecTest, ParsesOptimizerNamesAndRowFloors) {
  EXPECT_EQ(*ParseSparseOptimizer("LAZY_ADAM"), SparseOptimizerSpec::LAZY_ADAM);
  EXPECT_THAT(ParseSparseOptimizer("adam").status().message(), HasSubstr("adagrad, sgd, lazy_adam or ftrl"));
  TableSpec t;
  t.set_dim(16);
  t.mutable_optimizer()->set_type(SparseOptimizerSpec::ADAGRAD);
  EXPECT_EQ(TableRowFloorBytes(t), 128);
  t.mutable_optimizer()->set_type(SparseOptimizerSpec::LAZY_ADAM);
  EXPECT_EQ(TableRowFloorBytes(t), 196);
  t.mutable_optimizer()->set_type(SparseOptimizerSpec::SGD);
  EXPECT_EQ(TableRowFloorBytes(t), 64);
}

}  // namespace
}  // namespace pstrain
