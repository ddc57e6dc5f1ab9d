#include "common/job_flags.h"

#include <gflags/gflags.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Gives each flag as the command line would (gflags then counts it as given).
void Give(const std::vector<std::pair<const char*, const char*>>& flags) {
  for (const auto& [name, value] : flags) {
    ASSERT_FALSE(gflags::SetCommandLineOption(name, value).empty()) << "--" << name << "=" << value;
  }
}

class JobFlagsTest : public ::testing::Test {
 protected:
  gflags::FlagSaver saver_;  // Every flag back to its default after each test.
};

TEST_F(JobFlagsTest, EveryFlagIsRegisteredWithItsTypeDefaultAndHelp) {
  gflags::CommandLineFlagInfo info;
  ASSERT_TRUE(gflags::GetCommandLineFlagInfo("seed", &info));
  EXPECT_EQ(info.type, "uint64");
  EXPECT_EQ(info.default_value, "1");
  EXPECT_THAT(info.description, HasSubstr("Seed for initial weights"));
  EXPECT_THAT(info.filename, HasSubstr("common/job_flags.cc"));
  ASSERT_TRUE(gflags::GetCommandLineFlagInfo("servers", &info));
  EXPECT_EQ(info.type, "int32");
  ASSERT_TRUE(gflags::GetCommandLineFlagInfo("max_chunk_bytes", &info));
  EXPECT_EQ(info.type, "int64");
  EXPECT_EQ(info.default_value, std::to_string(4 << 20));
  ASSERT_TRUE(gflags::GetCommandLineFlagInfo("lr", &info));
  EXPECT_EQ(info.type, "double");
  ASSERT_TRUE(gflags::GetCommandLineFlagInfo("overlap", &info));
  EXPECT_EQ(info.type, "bool");
  EXPECT_EQ(info.default_value, "true");
  ASSERT_TRUE(gflags::GetCommandLineFlagInfo("table_memory_budget", &info));
  EXPECT_EQ(info.type, "string");
  // A bad value of a typed flag is refused by gflags itself.
  EXPECT_TRUE(gflags::SetCommandLineOption("servers", "two").empty());
}

TEST_F(JobFlagsTest, GivenFlagsReachTheirFieldsAtEveryDepth) {
  Give({{"model", "ctr"},
        {"data_stream", "/tmp/stream"},
        {"servers", "3"},
        {"seed", "12345678901"},
        {"lr", "0.25"},
        {"lr_gamma", "0.5"},
        {"warmup_steps", "7"},
        {"table_lr", "0.125"},
        {"table_admission", "count:3"},
        {"table_sketch_bytes", "8192"},
        {"table_ttl_updates", "50"},
        {"table_evict_order", "lfu"},
        {"table_max_rows", "1000"},
        {"table_memory_budget", "64MiB"},
        {"overlap", "false"},
        {"output_mode", "0640"}});
  absl::StatusOr<JobSpec> job = JobSpecFromFlags();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model(), "ctr");
  EXPECT_EQ(job->data().stream_dir(), "/tmp/stream");
  EXPECT_EQ(job->num_servers(), 3);
  EXPECT_EQ(job->seed(), 12345678901u);
  EXPECT_FLOAT_EQ(job->optimizer().lr(), 0.25f);
  EXPECT_FLOAT_EQ(job->optimizer().schedule().gamma(), 0.5f);
  EXPECT_EQ(job->optimizer().schedule().warmup_steps(), 7);
  EXPECT_FLOAT_EQ(job->table_optimizer().lr(), 0.125f);
  // --table_admission sets the whole message, --table_sketch_bytes a field inside it: both stay.
  EXPECT_EQ(job->table_admission().policy(), AdmissionSpec::COUNT);
  EXPECT_EQ(job->table_admission().min_count(), 3);
  EXPECT_EQ(job->table_admission().sketch_bytes(), 8192);
  EXPECT_EQ(job->table_eviction().ttl_updates(), 50);
  EXPECT_EQ(job->table_eviction().order(), EvictionSpec::LFU);
  EXPECT_EQ(job->table_eviction().max_rows(), 1000);
  EXPECT_EQ(job->table_memory_budget(), int64_t{64} << 20);
  EXPECT_FALSE(job->overlap());
  EXPECT_EQ(job->output_mode(), 0640u);
}

TEST_F(JobFlagsTest, FlagsLeftAtTheirDefaultsLeaveTheJobToItsDefaults) {
  absl::StatusOr<JobSpec> job = JobSpecFromFlags();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model(), "mlp");
  EXPECT_EQ(job->num_servers(), 2);
  EXPECT_FALSE(job->has_table_eviction());
  EXPECT_THAT(ExplicitJobFlags(), ElementsAre());
}

TEST_F(JobFlagsTest, ExplicitZerosAndBadValuesAreRefusedNamingTheFlag) {
  const struct {
    const char* name;
    const char* value;
    const char* message;
  } cases[] = {
      {"servers", "0", "--servers: got 0, expected >= 1"},
      {"embedding_dim", "-2", "--embedding_dim: got -2, expected >= 1"},
      {"lr", "0", "--lr: got 0, expected > 0"},
      {"seed", "0", "--seed: got 0, expected a non-zero seed"},
      {"hidden", "64,x", "--hidden: got '64,x', expected positive integers"},
      {"spare_workers", "-1", "--spare_workers: got -1, expected >= 0"},
      {"table_evict_order", "fifo", "--table_evict_order: got 'fifo', expected lru or lfu"},
      {"table_memory_budget", "lots", "--table_memory_budget: got 'lots'"},
      {"output_mode", "0200", "--output_mode: got '0200'"},
      {"ctr_interaction", "dot", "--ctr_interaction='dot': expected none or fm"},
  };
  for (const auto& c : cases) {
    gflags::FlagSaver saver;
    Give({{c.name, c.value}});
    absl::StatusOr<JobSpec> job = JobSpecFromFlags();
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(job.status().message(), HasSubstr(c.message)) << c.name;
  }
}

TEST_F(JobFlagsTest, SpareWorkersAddToTheWorkerCountUnlessMaxWorkersIsGiven) {
  Give({{"workers", "3"}, {"spare_workers", "4"}});
  absl::StatusOr<JobSpec> job = JobSpecFromFlags();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->max_workers(), 7);
  Give({{"max_workers", "5"}});
  job = JobSpecFromFlags();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->max_workers(), 5);
}

TEST_F(JobFlagsTest, ExplicitFlagsAreListedInTheTablesOrderToHandOn) {
  Give({{"table_lr", "0.5"}, {"model", "ctr"}, {"workers", "3"}});
  EXPECT_THAT(ExplicitJobFlags(), ElementsAre("--model=ctr", "--workers=3", "--table_lr=0.5"));
}

}  // namespace
}  // namespace pstrain
