#include "common/table_spec.h"

#include <functional>

#include "absl/strings/str_cat.h"
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
  const JobSpec again = [&] {
    JobSpec j = job;
    ApplyJobDefaults(&j);
    return j;
  }();
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

TEST(TableSpecTest, DeepFmRowsDefaultToASmallerRateAndStartNearZero) {
  EXPECT_FALSE(CtrJob().tables(0).has_init_bound()) << "the MLP alone: 1/sqrt(dim)";
  JobSpec job;
  job.set_model("ctr");
  job.set_ctr_interaction(JobSpec::CTR_INTERACTION_FM);
  ApplyJobDefaults(&job);
  EXPECT_FLOAT_EQ(job.tables(0).optimizer().lr(), kCtrFmAdagradLr);
  EXPECT_FLOAT_EQ(job.tables(0).init_bound(), kCtrFmInitBound);
  JobSpec given;
  given.set_model("ctr");
  given.set_ctr_interaction(JobSpec::CTR_INTERACTION_FM);
  given.mutable_table_optimizer()->set_lr(1.5f);
  given.set_table_init_bound(0.1f);
  ApplyJobDefaults(&given);
  EXPECT_FLOAT_EQ(given.tables(0).optimizer().lr(), 1.5f) << "a given rate stays";
  EXPECT_FLOAT_EQ(given.tables(0).init_bound(), 0.1f) << "a given bound stays";
  JobSpec stream = job;
  stream.clear_tables();
  stream.mutable_data()->set_stream_dir("/data/stream");
  ApplyJobDefaults(&stream);
  EXPECT_FLOAT_EQ(stream.tables(0).init_bound(), 0.0f) << "a stream's rows start at zero";
}

TEST(TableSpecTest, OverlapIsOffWithTables) { EXPECT_FALSE(OverlapOn(CtrJob())); }

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
      {[](JobSpec* j) { j->mutable_data()->set_format("idx"); },
       "data.format: got 'idx', expected 'criteo' or 'libsvm'"},
      {[](JobSpec* j) { j->mutable_data()->set_format("csv"); }, "data.format: got 'csv'"},
      {[](JobSpec* j) { j->mutable_data()->set_bad_records("maybe"); }, "data.bad_records: got 'maybe'"},
      {[](JobSpec* j) { j->set_model("mlp"); }, "data.format: got 'criteo', expected 'idx' for model 'mlp'"},
      {[](JobSpec* j) { j->mutable_tables(3)->set_row_dtype(static_cast<TableSpec::RowDtype>(7)); },
       "tables[3].row_dtype: got unknown (7), expected FP32, FP16 or BF16"},
      {[](JobSpec* j) { j->set_table_row_dtype(static_cast<TableSpec::RowDtype>(-1)); },
       "table_row_dtype: got unknown (-1)"},
      // ttl_seconds needs the lease times of ASYNC/SSP pushes.
      {[](JobSpec* j) { j->mutable_tables(5)->mutable_eviction()->set_ttl_seconds(60); },
       "tables[5].eviction.ttl_seconds: got 60, expected 0 in a SYNC job (its clock is its steps: use "
       "ttl_updates; ttl_seconds needs mode ASYNC or SSP)"},
      {[](JobSpec* j) {
         j->set_mode(SYNC);
         j->mutable_table_eviction()->set_ttl_seconds(60);
       },
       "table_eviction.ttl_seconds: got 60, expected 0 in a SYNC job"},
      {[](JobSpec* j) {
         j->set_mode(ASYNC);
         j->mutable_tables(0)->mutable_eviction()->set_ttl_seconds(-1);
       },
       "tables[0].eviction.ttl_seconds: got -1"},
  };
  for (const Case& c : cases) {
    JobSpec job = CtrJob();
    c.edit(&job);
    const absl::Status status = ValidateJobSpec(job);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
}

TEST(TableSpecTest, AdmissionIsParsedDefaultedAndCheckedNamingTheField) {
  EXPECT_EQ(ParseAdmission("always")->policy(), AdmissionSpec::ALWAYS);
  EXPECT_EQ(ParseAdmission("")->policy(), AdmissionSpec::ALWAYS);
  const absl::StatusOr<AdmissionSpec> count = ParseAdmission("count:3");
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->policy(), AdmissionSpec::COUNT);
  EXPECT_EQ(count->min_count(), 3);
  EXPECT_EQ(AdmissionName(*count), "count:3");
  const absl::StatusOr<AdmissionSpec> coin = ParseAdmission(" Probability:0.25 ");
  ASSERT_TRUE(coin.ok());
  EXPECT_FLOAT_EQ(coin->probability(), 0.25f);
  EXPECT_EQ(AdmissionName(*coin), "probability:0.25");
  for (const char* bad : {"count", "count:two", "probability:", "lru:3", "count:2:3"}) {
    const absl::StatusOr<AdmissionSpec> parsed = ParseAdmission(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("expected always, count:N (N in [1, 255]) or probability:P"));
  }

  // Model ctr's tables take the job's table_admission, with the sketch's default size.
  JobSpec job;
  job.set_model("ctr");
  *job.mutable_table_admission() = *count;
  ApplyJobDefaults(&job);
  EXPECT_EQ(job.tables(7).admission().min_count(), 3);
  EXPECT_EQ(job.tables(7).admission().sketch_bytes(), kDefaultSketchBytes);
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  EXPECT_FALSE(CtrJob().tables(0).has_admission());  // the default admits every key, unset

  struct Case {
    std::function<void(JobSpec*)> edit;
    const char* message;
  } cases[] = {
      {[](JobSpec* j) { j->mutable_tables(2)->mutable_admission()->set_min_count(0); },
       "tables[2].admission.min_count: got 0, expected in [1, 255] for count:N"},
      {[](JobSpec* j) { j->mutable_tables(2)->mutable_admission()->set_min_count(300); },
       "tables[2].admission.min_count: got 300"},
      {[](JobSpec* j) { j->mutable_tables(2)->mutable_admission()->set_sketch_bytes(16); },
       "tables[2].admission.sketch_bytes: got 16, expected 0 (the default, 1048576) or in [4096, 1073741824]"},
      {[](JobSpec* j) {
         AdmissionSpec* a = j->mutable_tables(2)->mutable_admission();
         a->set_policy(AdmissionSpec::PROBABILITY);
         a->set_min_count(0);
         a->set_sketch_bytes(0);
         a->set_probability(-0.5f);
       },
       "tables[2].admission.probability: got -0.5, expected in (0, 1] for probability:P"},
      {[](JobSpec* j) { j->mutable_tables(2)->mutable_admission()->set_probability(0.5f); },
       "tables[2].admission.probability: got 0.5, expected 0: the policy is count:3, not probability:P"},
      {[](JobSpec* j) { j->mutable_table_admission()->set_min_count(-1); }, "table_admission.min_count: got -1"},
  };
  for (const Case& c : cases) {
    JobSpec edited = job;
    c.edit(&edited);
    const absl::Status status = ValidateJobSpec(edited);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
}

// A budget must hold every table's fixed bytes and one row of each: for ctr's 26 tables of dim 16
// with Adagrad, 26 x (1024 x (128 + 12) + 2^16 x 16) fixed (a block of rows with their eviction
// metadata, and the tombstones) and 26 x (128 + 12 + 30) for the rows.
TEST(TableSpecTest, MemoryBudgetMustHoldOneRowOfEveryTable) {
  JobSpec job = CtrJob();
  EXPECT_EQ(TableBudgetRowBytes(job.tables(0)), 170);
  EXPECT_EQ(TableBudgetFixedBytes(job.tables(0)), 1024 * 140 + (1 << 20));
  const int64_t least = 26 * (1024 * 140 + (1 << 20) + 170);
  job.set_table_memory_budget(least);
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  job.set_table_memory_budget(least - 1);
  EXPECT_THAT(ValidateJobSpec(job).message(),
              HasSubstr(absl::StrCat("table_memory_budget: got ", least - 1, " bytes, expected at least ", least,
                                     " bytes a server: for each of the 26 tables")));
  job.set_table_memory_budget(-5);
  EXPECT_THAT(ValidateJobSpec(job).message(), HasSubstr("table_memory_budget: got -5, expected >= 0"));
  // count:N's sketch is fixed bytes too.
  job = CtrJob();
  job.mutable_tables(3)->mutable_admission()->set_policy(AdmissionSpec::COUNT);
  job.mutable_tables(3)->mutable_admission()->set_min_count(2);
  ApplyJobDefaults(&job);
  EXPECT_EQ(TableBudgetFixedBytes(job.tables(3)), 1024 * 140 + (1 << 20) + kDefaultSketchBytes);
  job.set_table_memory_budget(least);
  EXPECT_EQ(ValidateMemoryBudget(job).code(), absl::StatusCode::kInvalidArgument);
  // Without tables: an external model's come with its declaration (checked then); a built-in
  // dense model has none to bound.
  JobSpec external;
  external.set_model(kExternalModel);
  external.set_table_memory_budget(1 << 30);
  EXPECT_TRUE(ValidateMemoryBudget(external).ok());
  JobSpec mlp = external;
  mlp.set_model("mlp");
  EXPECT_THAT(ValidateMemoryBudget(mlp).message(),
              HasSubstr("table_memory_budget: got 1073741824, expected 0 for a job without embedding tables"));
}
TEST(TableSpecTest, TtlSecondsIsForAsyncAndSspJobs) {
  for (Mode mode : {ASYNC, SSP}) {
    JobSpec job = CtrJob();
    job.set_mode(mode);
    if (mode == SSP) job.set_staleness(2);
    job.mutable_tables(5)->mutable_eviction()->set_ttl_seconds(3600);
    EXPECT_TRUE(ValidateJobSpec(job).ok()) << Mode_Name(mode) << ": " << ValidateJobSpec(job);
  }
  EvictionSpec spec;
  spec.set_ttl_seconds(3600);
  EXPECT_TRUE(EvictionOn(spec));
  ApplyEvictionDefaults(&spec);
  EXPECT_EQ(spec.every_updates(), kDefaultEvictEveryUpdates);
}

// Eviction's interval defaults to 100 updates, or a tenth of a shorter TTL; one given is kept.
TEST(TableSpecTest, EvictionIntervalDefaultsToATenthOfAShortTtl) {
  auto every = [](int64_t ttl, int64_t max_rows, int64_t given) {
    EvictionSpec spec;
    spec.set_ttl_updates(ttl);
    spec.set_max_rows(max_rows);
    spec.set_every_updates(given);
    ApplyEvictionDefaults(&spec);
    ApplyEvictionDefaults(&spec);  // idempotent
    return spec.every_updates();
  };
  EXPECT_EQ(every(0, 0, 0), 0);  // off: nothing to default
  EXPECT_EQ(every(5000, 0, 0), 100);
  EXPECT_EQ(every(250, 0, 0), 25);
  EXPECT_EQ(every(5, 0, 0), 1);
  EXPECT_EQ(every(0, 1000, 0), 100);
  EXPECT_EQ(every(250, 0, 7), 7);
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
  // Half-width values: 2 bytes an element, padded to a word; the state stays 4.
  t.set_row_dtype(TableSpec::FP16);
  EXPECT_EQ(TableRowFloorBytes(t), 32);
  t.mutable_optimizer()->set_type(SparseOptimizerSpec::ADAGRAD);
  t.set_dim(3);
  t.set_row_dtype(TableSpec::BF16);
  EXPECT_EQ(TableRowFloorBytes(t), 8 + 12);
}

TEST(TableSpecTest, RowDtypeIsParsedAndTheCtrTablesTakeTheJobs) {
  EXPECT_EQ(*ParseRowDtype("FP16"), TableSpec::FP16);
  EXPECT_EQ(*ParseRowDtype(" bf16"), TableSpec::BF16);
  EXPECT_EQ(*ParseRowDtype("fp32"), TableSpec::FP32);
  EXPECT_THAT(ParseRowDtype("int8").status().message(),
              HasSubstr("row_dtype: got 'int8', expected fp32, fp16 or bf16"));
  EXPECT_EQ(RowDtypeName(TableSpec::BF16), "bf16");
  JobSpec job;
  job.set_model("ctr");
  job.set_table_row_dtype(TableSpec::FP16);
  ApplyJobDefaults(&job);
  ASSERT_EQ(job.tables_size(), 26);
  for (const TableSpec& t : job.tables()) EXPECT_EQ(RowDtypeOf(t), TableSpec::FP16) << t.name();
  EXPECT_FALSE(CtrJob().tables(0).has_row_dtype());  // fp32 by default, as before the field existed
}

// Model ctr's rows start at 1/sqrt(dim) (TableSpec.init_bound unset), at zero on a data stream,
// and at --table_init_bound wherever it is given; a negative bound names the field.
TEST(TableSpecTest, CtrRowsStartAtZeroOnAStreamAndAtTheGivenBound) {
  EXPECT_FALSE(CtrJob().tables(0).has_init_bound());
  JobSpec stream;
  stream.set_model("ctr");
  stream.mutable_data()->set_stream_dir("/somewhere");
  ApplyJobDefaults(&stream);
  ASSERT_EQ(stream.tables_size(), 26);
  for (const TableSpec& t : stream.tables()) EXPECT_EQ(t.init_bound(), 0.0f) << t.name();
  for (bool on_stream : {false, true}) {
    JobSpec job;
    job.set_model("ctr");
    if (on_stream) job.mutable_data()->set_stream_dir("/somewhere");
    job.set_table_init_bound(0.01f);
    ApplyJobDefaults(&job);
    for (const TableSpec& t : job.tables()) EXPECT_EQ(t.init_bound(), 0.01f) << t.name();
    EXPECT_TRUE(ValidateJobSpec(job).ok());
  }
  JobSpec bad = CtrJob();
  bad.set_table_init_bound(-0.5f);
  EXPECT_THAT(ValidateJobSpec(bad).message(), HasSubstr("table_init_bound: got -0.5, expected a finite value >= 0"));
}

}  // namespace
}  // namespace pstrain
