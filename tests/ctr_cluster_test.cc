// Model "ctr" on data made by pstrain-gen-ctr, as a user runs it: real processes over real
// sockets. SYNC, ASYNC and SSP jobs learn (their test log loss beats predicting the click rate, and
// the progressive AUC of epoch 0 is well above chance),
// count every record once per epoch, survive a worker killed mid-epoch, repeat bit for bit with
// admission (count:N and probability:P), eviction and a memory budget on, evict rows by the
// seconds of the scheduler's clock (ASYNC), and a malformed line
// either stops the job naming its file and line or is skipped and counted. pstrain-export of a
// chain of delta checkpoints holds the final model and every row.
#include <signal.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "serving/model_export.h"
#include "tests/cluster.h"
#include "tests/ctr_data.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kTrain = kCtrTrain;

const std::string& DataDir() { return CtrDataDir(); }
double TestClickRate() { return CtrTestClickRate(CtrDataDir()); }
std::vector<std::string> Job(const std::string& data_dir, std::vector<std::string> extra = {}) {
  return CtrJob(data_dir, std::move(extra));
}

void ExpectEveryRecordOncePerEpoch(const std::string& summary) {
  const std::vector<double> samples = JsonNumbers(summary, "samples");
  ASSERT_GE(samples.size(), 2u) << summary;
  for (int e = 0; e < 2; ++e) EXPECT_EQ(samples[e], kTrain) << "epoch " << e << "\n" << summary;
}

ClusterRun Launch(const std::string& name, const std::vector<std::string>& flags) {
  absl::StatusOr<ClusterRun> run = LaunchCluster(name, flags, absl::Minutes(4));
  EXPECT_TRUE(run.ok()) << run.status();
  return run.ok() ? *run : ClusterRun{};
}

TEST(CtrClusterTest, JobsInEveryModeLearnAndCountEveryRecordOnce) {
  // The log loss of predicting the click rate for everyone: what a model that learnt nothing scores.
  const double p = TestClickRate();
  const double base_loss = -(p * std::log(p) + (1 - p) * std::log(1 - p));
  for (const std::string mode : {"sync", "async", "ssp"}) {
    SCOPED_TRACE(mode);
    const ClusterRun run = Launch("ctr-" + mode, Job(DataDir(), {"--mode=" + mode}));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    ExpectEveryRecordOncePerEpoch(run.summary_json);
    EXPECT_LT(JsonNumber(run.summary_json, "final_test_loss"), base_loss - 0.01) << run.summary_json;
    EXPECT_NEAR(JsonNumber(run.summary_json, "final_test_logloss"), JsonNumber(run.summary_json, "final_test_loss"),
                1e-9);
    // AUC over the whole test set, merged from every evaluation lease's score histogram.
    EXPECT_GT(JsonNumber(run.summary_json, "final_test_auc"), 0.65) << run.summary_json;
    EXPECT_LT(JsonNumber(run.summary_json, "final_test_auc_error_bound"), 1e-3) << run.summary_json;
    // Progressive validation: epoch 0's trained records, each scored before the update it led to,
    // on records the model had not seen: well above chance, below the test AUC after two epochs.
    const double progressive = JsonNumber(run.summary_json, "train_auc");
    EXPECT_GT(progressive, 0.6) << run.summary_json;
    EXPECT_LT(progressive, JsonNumber(run.summary_json, "final_test_auc") + 0.02) << run.summary_json;
    // Every server says how many rows of each table it holds, in its log and in the summary.
    EXPECT_THAT(run.output, HasSubstr("embedding rows")) << run.output.substr(run.output.size() - 3000);
    EXPECT_THAT(run.summary_json, HasSubstr("\"embedding_tables\": {\"rows\": ")) << run.summary_json;
    EXPECT_GT(JsonNumber(run.summary_json, "bytes_per_row"), JsonNumber(run.summary_json, "floor_bytes_per_row"));
    EXPECT_THAT(run.summary_json, ::testing::ContainsRegex("\"server\": 1, \"shard\": 1, \"replica\": false, "
                                                           "\"table\": \"C26\", \"rows\": [1-9]"));
  }
}

TEST(CtrClusterTest, KilledWorkerLosesAndDuplicatesNothing) {
  // With admission on (a key's row starts at its second update): churn re-splits the global
  // batch, but every step's summed rows, and so admission's decisions, stay the same.
  const std::vector<std::string> job = Job(DataDir(), {"--table_admission=count:2"});
  ManualCluster reference("ctr-reference");
  reference.Start(2, 3, job);
  const std::string expected = RunToEnd(reference);
  EXPECT_GT(TablesNumber(expected, "refused"), 0) << expected;

  ManualCluster cluster("ctr-kill");
  cluster.Start(2, 3, job);
  cluster.WaitForSteps(40);
  cluster.workers[1]->Kill(SIGKILL);
  ASSERT_EQ(cluster.scheduler->Wait(absl::Minutes(3)).value_or(-1), 0) << cluster.scheduler->Output();
  const std::string summary = ReadFile(cluster.summary_path());
  ExpectEveryRecordOncePerEpoch(summary);
  EXPECT_NEAR(JsonNumber(summary, "final_test_loss"), JsonNumber(expected, "final_test_loss"), 0.005) << summary;
}

// The budget as server/table_budget.h counts a server's tables, from the summary's "stores"
// entries of its own shard: for the job below (26 tables of dim 8, Adagrad, count:2) each table is
// 1024 x (64 + 12) bytes of a block, 2^20 of sketch and 2^20 of tombstones fixed, and 64 + 12 +
// 30 a row. Also the rows.
struct BudgetedServer {
  int64_t bytes = 0;
  int64_t rows = 0;
  int64_t tombstones = 0;
};
std::map<int, BudgetedServer> BudgetedByServer(const std::string& summary) {
  std::map<int, BudgetedServer> servers;
  const std::regex entry(R"re("server": (\d+), "shard": \d+, "replica": false, "table": "[^"]+", "rows": (\d+), )re"
                         R"re("bytes": \d+, "admitted": \d+, "refused": \d+, "evicted": \d+, "tombstones": (\d+))re");
  for (std::sregex_iterator it(summary.begin(), summary.end(), entry), end; it != end; ++it) {
    BudgetedServer& s = servers[std::stoi((*it)[1])];
    const int64_t rows = std::stoll((*it)[2]), tombstones = std::stoll((*it)[3]);
    s.bytes += 1024 * (64 + 12) + (int64_t{2} << 20) + rows * (64 + 12 + 30);
    s.rows += rows;
    s.tombstones += tombstones;
  }
  return servers;
}

TEST(CtrClusterTest, TwoSyncRunsWithEveryTablePolicyOnAreBitwiseEqual) {
  // Every kind of table policy at once: admission at the second update; rows leave after 40
  // steps without an update, past 200 rows a table per server (least often updated first), never
  // below 50, checked every 7 steps; and each server's tables within a memory budget of 57.15 MB,
  // 56.56 MB of it fixed (without it the tables reach 57.31 MB a server: 7,100 rows; with it
  // they hold at most 5,600).
  // Checkpoints every 17 steps, each run into a folder of its own: each records the tombstones
  // since the one before, and the servers hold only those since the last.
  constexpr int64_t kBudget = 57150000;
  auto job = [](const std::string& name) {
    return Job(DataDir(), {"--table_admission=count:2", "--table_ttl_updates=40", "--table_max_rows=200",
                           "--table_evict_order=lfu", "--table_keep_rows=50", "--table_evict_every=7",
                           "--table_memory_budget=" + std::to_string(kBudget),
                           "--checkpoint_dir=" + MakeTempDir(name + "-ckpt"), "--checkpoint_every_steps=17"});
  };
  const ClusterRun first = Launch("ctr-policies-1", job("ctr-policies-1"));
  const ClusterRun second = Launch("ctr-policies-2", job("ctr-policies-2"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_GT(TablesNumber(first.summary_json, "refused"), 0) << first.summary_json;
  EXPECT_GT(TablesNumber(first.summary_json, "evicted"), 0) << first.summary_json;
  EXPECT_GT(TablesNumber(first.summary_json, "tombstones"), 0) << first.summary_json;
  EXPECT_LT(TablesNumber(first.summary_json, "tombstones"), TablesNumber(first.summary_json, "evicted"))
      << "the checkpoints took theirs\n"
      << first.summary_json;
  // After the last update each server's tables are within the budget, and above the keep-floor.
  const std::map<int, BudgetedServer> servers = BudgetedByServer(first.summary_json);
  ASSERT_EQ(servers.size(), 2u) << first.summary_json;
  for (const auto& [server, s] : servers) {
    EXPECT_LE(s.bytes, kBudget) << "server " << server << "\n" << first.summary_json;
    EXPECT_GT(s.rows, 26 * 50) << "server " << server << "\n" << first.summary_json;
    EXPECT_GT(s.tombstones, 0) << "server " << server;
  }
  for (const char* key : {"rows", "admitted", "refused", "evicted", "tombstones"}) {
    EXPECT_EQ(TablesNumber(first.summary_json, key), TablesNumber(second.summary_json, key)) << key;
  }
  // The dense weights learnt from the rows each step pulled: equal bytes only if both runs
  // admitted and evicted the same rows at the same steps.
  EXPECT_EQ(ReadFile(first.model_path), ReadFile(second.model_path));
}

TEST(CtrClusterTest, RowsAtHalfWidthAreBitwiseRepeatableAndHalveTheValuesFloor) {
  // dim 8, Adagrad: 32 bytes of value and 32 of state a row in fp32; 16 and 32 in fp16 or bf16.
  for (const std::string dtype : {"fp16", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::vector<std::string> job = Job(DataDir(), {"--epochs=1", "--table_row_dtype=" + dtype});
    const ClusterRun first = Launch("ctr-" + dtype + "-1", job);
    const ClusterRun second = Launch("ctr-" + dtype + "-2", job);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    ASSERT_EQ(second.exit_code, 0) << second.output;
    EXPECT_EQ(JsonNumber(first.summary_json, "floor_bytes_per_row"), 48) << first.summary_json;
    EXPECT_GT(JsonNumber(first.summary_json, "final_test_auc"), 0.65) << first.summary_json;
    EXPECT_EQ(ReadFile(first.model_path), ReadFile(second.model_path));
  }
}

TEST(CtrClusterTest, ProbabilityAdmissionDecidesAlikeInTwoSyncRuns) {
  // probability:P hashes (seed, table, key, update): the same keys are let in at the same steps
  // in a repeated run, whatever the order the workers' pushes arrive in.
  const std::vector<std::string> job = Job(DataDir(), {"--epochs=1", "--table_admission=probability:0.3"});
  const ClusterRun first = Launch("ctr-probability-1", job);
  const ClusterRun second = Launch("ctr-probability-2", job);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_GT(TablesNumber(first.summary_json, "refused"), 0) << first.summary_json;
  EXPECT_GT(TablesNumber(first.summary_json, "admitted"), 0) << first.summary_json;
  for (const char* key : {"rows", "admitted", "refused"}) {
    EXPECT_EQ(TablesNumber(first.summary_json, key), TablesNumber(second.summary_json, key)) << key;
  }
  EXPECT_EQ(ReadFile(first.model_path), ReadFile(second.model_path));
}

TEST(CtrClusterTest, AsyncRowsLeaveAfterTtlSecondsOfTheSchedulersClock) {
  // Rows not updated for a second of lease time leave, while every record still counts once. Batches
  // of 16 in leases of one: epochs of about 2 s here, so the keys seen about once an epoch go
  // untouched for more than the TTL; an eviction pass every 10 updates.
  const ClusterRun run =
      Launch("ctr-ttl-seconds", Job(DataDir(), {"--mode=async", "--table_ttl_seconds=1", "--batch_size=16",
                                                "--lease_batches=1", "--table_evict_every=10"}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectEveryRecordOncePerEpoch(run.summary_json);
  EXPECT_GT(TablesNumber(run.summary_json, "evicted"), 0) << run.summary_json;
  EXPECT_GT(JsonNumber(run.summary_json, "final_test_auc"), 0.6) << run.summary_json;
  // A SYNC job has no lease times: refused before anything starts, naming the flag's field.
  const ClusterRun sync = Launch("ctr-ttl-seconds-sync", Job(DataDir(), {"--table_ttl_seconds=1"}));
  EXPECT_NE(sync.exit_code, 0);
  EXPECT_THAT(sync.output, HasSubstr("table_eviction.ttl_seconds: got 1, expected 0 in a SYNC job"));
}

// Copies `name` of the data, with a malformed record at line `bad + 1` (1-based).
void CopyWithBadLine(const std::string& dir, const std::string& name, int64_t bad) {
  std::ifstream in(DataDir() + "/" + name);
  std::ofstream out(dir + "/" + name);
  std::string line;
  for (int64_t i = 0; std::getline(in, line); ++i) {
    if (i == bad) line = "1\tnot-a-number" + line.substr(line.find('\t', 2));
    out << line << "\n";
  }
}

// A copy of the data with a malformed record in each file: the training file's at line
// kTrain / 2 + 1, the test file's at line 101.
std::string DataWithBadLines() {
  const std::string dir = MakeTempDir("ctr-bad");
  CopyWithBadLine(dir, "train.tsv", kTrain / 2);
  CopyWithBadLine(dir, "test.tsv", 100);
  return dir;
}

TEST(CtrClusterTest, MalformedLineStopsTheJobNamingFileAndLineOrIsSkipped) {
  const std::string dir = DataWithBadLines();
  const ClusterRun failed = Launch("ctr-bad-fail", Job(dir, {"--epochs=1"}));
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_THAT(failed.output, HasSubstr("train.tsv:" + std::to_string(kTrain / 2 + 1) + ":")) << failed.output;

  const ClusterRun skipped = Launch("ctr-bad-skip", Job(dir, {"--epochs=1", "--bad_records=skip"}));
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  // Both lines skipped (each worker logs its own count): the test file's too, whose record still
  // counts as its evaluation lease's.
  int64_t total = 0;
  const std::regex counted("skipped ([0-9]+) bad records");
  for (auto it = std::sregex_iterator(skipped.output.begin(), skipped.output.end(), counted);
       it != std::sregex_iterator(); ++it) {
    total += std::stoll((*it)[1].str());
  }
  EXPECT_EQ(total, 2) << skipped.output;
}

// pstrain-export with `flags`.
RunResult Export(std::vector<std::string> flags) {
  flags.insert(flags.begin(), BinDir() + "/pstrain-export");
  absl::StatusOr<RunResult> run = pstrain::testing::Run(flags, absl::Minutes(2));
  EXPECT_TRUE(run.ok()) << run.status();
  return run.ok() ? *run : RunResult{};
}

TEST(CtrClusterTest, TheExportOfTheLastCutIsTheFinalModelWithEveryRow) {
  // A cut after every step, a whole shard every 5th (the rest deltas): pstrain-export of the
  // newest cut, the job's last step, reads each server's chain and holds the final model's dense
  // tensors bit for bit and every row the servers held at the end.
  const std::string ckpt = MakeTempDir("ctr-export-ckpt");
  const ClusterRun run =
      Launch("ctr-export", Job(DataDir(), {"--epochs=1", "--checkpoint_dir=" + ckpt, "--checkpoint_every_steps=1",
                                           "--full_checkpoint_every=5"}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string out = MakeTempDir("ctr-export-out") + "/model";
  const RunResult exported = Export({"--checkpoint_dir=" + ckpt, "--out=" + out});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_THAT(exported.output, HasSubstr("26 tables")) << exported.output;
  absl::StatusOr<serving::ModelExport> e = serving::ReadModelExport(out);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<model::ModelFile> final_model = model::ReadModelFile(run.model_path);
  ASSERT_TRUE(final_model.ok()) << final_model.status();
  EXPECT_EQ(e->dense.values, final_model->values) << "the export of step " << e->manifest.step();
  ASSERT_EQ(e->dense.params.size(), final_model->params.size());
  for (size_t i = 0; i < e->dense.params.size(); ++i) EXPECT_EQ(e->dense.params[i].name, final_model->params[i].name);
  int64_t rows = 0;
  for (const serving::TableRows& t : e->tables) rows += static_cast<int64_t>(t.keys.size());
  EXPECT_EQ(rows, TablesNumber(run.summary_json, "rows")) << run.summary_json;
  // Written once; and an earlier cut still kept (the newest chain: a base at 56, deltas after it)
  // exports too.
  const RunResult again = Export({"--checkpoint_dir=" + ckpt, "--out=" + out});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.output, HasSubstr("it exists"));
  const RunResult earlier = Export({"--checkpoint_dir=" + ckpt, "--out=" + out + "-step-58", "--step=58"});
  EXPECT_EQ(earlier.exit_code, 0) << earlier.output;
  EXPECT_THAT(earlier.output, HasSubstr("exported step 58 "));
}

}  // namespace
}  // namespace pstrain::testing
