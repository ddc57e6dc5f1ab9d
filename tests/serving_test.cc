// pstrain-serve as a user runs it: real processes, real files, real sockets.
//   - Following a CTR job that trains with a checkpoint after every step (a base every 10): its
//     answers change as the cuts land, each from one cut; a row that left (eviction) reads as its
//     initial value; after the job ends it serves the last cut, whose rows equal pstrain-export's
//     bit for bit, and Predict over the whole test set gives the run summary's final log loss.
//   - Secured (mutual TLS, the job token, its own serving certificate): a caller with the token
//     is served, one without is refused, a serving process given another role's certificate does
//     not start; bad requests are refused with what was expected.
#include <signal.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "transport/job_credentials.h"
#include "transport/transport_security.h"
#include "data/criteo_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "server/embedding_table.h"
#include "serving/model_export.h"
#include "serving/serve_client.h"
#include "tests/cluster.h"
#include "tests/ctr_data.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using serving::ServeClient;
using ::testing::HasSubstr;

// Starts pstrain-serve with `flags` on a free port; waits until it listens.
std::unique_ptr<Child> StartServe(const std::string& name, std::vector<std::string> flags, std::string* address) {
  const int port = FreeLoopbackPort();
  *address = "127.0.0.1:" + std::to_string(port);
  flags.insert(flags.begin(), {BinDir() + "/pstrain-serve", "--port=" + std::to_string(port)});
  absl::StatusOr<Child> child = Child::Start(flags, MakeTempDir(name) + "/serve.log");
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return nullptr;
  auto serve = std::make_unique<Child>(*std::move(child));
  for (int i = 0; i < 200 && serve->Output().find("serving listening on") == std::string::npos; ++i) {
    if (serve->Wait(absl::Milliseconds(50)).ok()) break;  // exited
  }
  return serve;
}

// The first `n` lines of `path`.
std::vector<std::string> Lines(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; lines.size() < n && std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Per table (C1..C26), the distinct keys of `records`.
std::vector<std::vector<uint64_t>> KeysOf(const std::vector<std::string>& records) {
  std::vector<std::set<uint64_t>> keys(data::kCriteoCategorical);
  data::CtrSample sample;
  for (const std::string& r : records) {
    if (!data::ParseCriteoLine(r, true, &sample).ok()) continue;
    for (int f = 0; f < data::kCriteoCategorical; ++f) keys[f].insert(sample.keys[f]);
  }
  std::vector<std::vector<uint64_t>> out;
  for (const auto& k : keys) out.emplace_back(k.begin(), k.end());
  return out;
}

std::string Table(int t) { return "C" + std::to_string(t + 1); }

TEST(ServingTest, FollowsATrainingJobAndEndsOnItsLastCut) {
  const std::string ckpt = MakeTempDir("serve-ckpt");
  std::string address;
  std::unique_ptr<Child> serve = StartServe("serve-follow", {"--checkpoint_dir=" + ckpt, "--poll_ms=50"}, &address);
  ASSERT_NE(serve, nullptr);
  absl::StatusOr<std::unique_ptr<ServeClient>> client = ServeClient::Create(address, absl::Seconds(10), nullptr);
  ASSERT_TRUE(client.ok()) << client.status();
  // Before the job's first checkpoint: nothing to answer from.
  EXPECT_EQ((*client)->GetModelInfo().status().code(), absl::StatusCode::kUnavailable);

  const std::vector<std::string> test_records = Lines(CtrDataDir() + "/test.tsv", kCtrTest);
  const std::vector<std::vector<uint64_t>> keys = KeysOf({test_records.begin(), test_records.begin() + 300});
  const std::string model = MakeTempDir("serve-model") + "/model.bin";
  ManualCluster cluster("serve-job");
  cluster.Start(
      2, 2,
      CtrJob(CtrDataDir(), {"--checkpoint_dir=" + ckpt, "--checkpoint_every_steps=1", "--full_checkpoint_every=10",
                            "--table_ttl_updates=20", "--table_evict_every=5", "--final_model=" + model}));
  // While it trains: each version seen, and what table C1 answered for the keys in it.
  std::map<int64_t, serving::LookupResult> seen;
  for (int i = 0; i < 600 && !cluster.scheduler->Wait(absl::Milliseconds(1)).ok(); ++i) {
    absl::StatusOr<serving::LookupResult> got = (*client)->Lookup(Table(0), keys[0]);
    if (got.ok()) seen.emplace(got->step, *got);
    absl::SleepFor(absl::Milliseconds(50));
  }
  const std::string summary = RunToEnd(cluster);
  ASSERT_GE(seen.size(), 3u) << "the answers should follow the cuts as they land\n" << serve->Output();
  // Versions differ: some key's value changed from the first version seen to the last.
  EXPECT_NE(seen.begin()->second.values, seen.rbegin()->second.values);
  // A key that had a row and lost it (eviction) reads as its initial value.
  const serving::LookupResult& last_seen = seen.rbegin()->second;
  int evicted = 0;
  for (const auto& [step, got] : seen) {
    for (size_t k = 0; k < keys[0].size(); ++k) {
      if (!got.found[k] || last_seen.found[k]) continue;
      ++evicted;
      for (int j = 0; j < last_seen.dim; ++j) {
        EXPECT_EQ(last_seen.values[k * last_seen.dim + j],
                  server::EmbeddingInitialValue(/*seed=*/5, /*table_id=*/0, keys[0][k], j,
                                                1.0f / std::sqrt(static_cast<float>(last_seen.dim))))
            << "key " << keys[0][k];
      }
    }
  }
  EXPECT_GT(TablesNumber(summary, "evicted"), 0) << summary;
  EXPECT_GT(evicted, 0) << "no key of C1 lost its row between the versions seen";

  // After the end: the last cut, whose rows equal the export's bit for bit.
  const std::string out = MakeTempDir("serve-export") + "/model";
  absl::StatusOr<RunResult> exported = pstrain::testing::Run(
      {BinDir() + "/pstrain-export", "--checkpoint_dir=" + ckpt, "--out=" + out}, absl::Minutes(2));
  ASSERT_TRUE(exported.ok() && exported->exit_code == 0) << (exported.ok() ? exported->output : "");
  absl::StatusOr<serving::ModelExport> e = serving::ReadModelExport(out);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<ModelInfo> info;
  for (int i = 0; i < 200; ++i) {
    info = (*client)->GetModelInfo();
    if (info.ok() && info->step() == e->manifest.step()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->step(), e->manifest.step()) << serve->Output();
  EXPECT_EQ(info->newest_step(), info->step()) << "caught up with the last cut";
  ASSERT_EQ(info->tables_size(), 26);
  for (int t = 0; t < 26; ++t) {
    SCOPED_TRACE(Table(t));
    const serving::TableRows& rows = e->tables[t];
    EXPECT_EQ(info->tables(t).rows(), static_cast<int64_t>(rows.keys.size()));
    absl::StatusOr<serving::LookupResult> got = (*client)->Lookup(Table(t), rows.keys);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->step, e->manifest.step());
    EXPECT_EQ(got->values, rows.values);
    EXPECT_EQ(std::count(got->found.begin(), got->found.end(), true), static_cast<int64_t>(rows.keys.size()));
  }
  // The last cut is the final model: Predict over the whole test set scores the run's log loss.
  absl::StatusOr<serving::PredictResult> predicted = (*client)->Predict(test_records);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  ASSERT_EQ(predicted->probabilities.size(), test_records.size());
  double loss = 0;
  data::CtrSample sample;
  for (size_t i = 0; i < test_records.size(); ++i) {
    ASSERT_TRUE(data::ParseCriteoLine(test_records[i], true, &sample).ok());
    const double p = std::clamp<double>(predicted->probabilities[i], 1e-7, 1 - 1e-7);
    loss -= sample.label == 1 ? std::log(p) : std::log(1 - p);
  }
  loss /= static_cast<double>(test_records.size());
  EXPECT_NEAR(loss, JsonNumber(summary, "final_test_logloss"), 1e-4) << summary;
  serve->Kill(SIGTERM);
  absl::StatusOr<int> code = serve->Wait(absl::Seconds(10));
  EXPECT_TRUE(code.ok() && *code == 0) << serve->Output();
  EXPECT_THAT(serve->Output(), HasSubstr("deltas applied"));
}

// A one-table export of model "mlp" (no Predict), written to a fresh folder.
std::string SmallExport() {
  serving::ModelExport e;
  e.manifest.set_step(3);
  e.manifest.mutable_job()->set_model("mlp");
  e.dense.params.resize(1);
  e.dense.params[0].name = "w";
  e.dense.params[0].shape = {2};
  e.dense.params[0].num_elements = 2;
  e.dense.values = {0.5f, -0.5f};
  ExportedTable* t = e.manifest.add_tables();
  t->set_name("ads");
  t->set_dim(2);
  t->set_init_bound(0.1f);
  t->set_seed(9);
  e.tables.push_back({{7, 8}, {1, 2, 3, 4}});
  const std::vector<float> stored = {1, 2, 3, 4};
  e.stored_values.emplace_back(reinterpret_cast<const char*>(stored.data()), stored.size() * sizeof(float));
  const std::string dir = MakeTempDir("serve-small") + "/export";
  EXPECT_TRUE(serving::WriteModelExport(e, dir).ok());
  return dir;
}

TEST(ServingTest, SecuredItServesTheTokenHolderAndRefusesBadCallsAndAnotherRolesCertificate) {
  const std::string dir = MakeTempDir("serve-tls");
  absl::StatusOr<JobCredentials> job = MakeJobCredentials(MakeTempDir("serve-tls-credentials"));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string exported = SmallExport();
  std::vector<std::string> flags = {"--export_dir=" + exported, "--max_lookup_keys=10"};
  for (std::string& f : TransportSecurityFlags(job->For(CertRole::kServing))) flags.push_back(f);
  std::string address;
  std::unique_ptr<Child> serve = StartServe("serve-tls", flags, &address);
  ASSERT_NE(serve, nullptr);

  // A worker's certificate with the token: served, from the export's step.
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> worker =
      TransportSecurity::Create(job->For(CertRole::kWorker));
  ASSERT_TRUE(worker.ok());
  absl::StatusOr<std::unique_ptr<ServeClient>> client = ServeClient::Create(address, absl::Seconds(10), *worker);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<serving::LookupResult> got;
  for (int i = 0; i < 100; ++i) {
    got = (*client)->Lookup("ads", {8, 99});
    if (got.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(got.ok()) << got.status() << "\n" << serve->Output();
  EXPECT_EQ(got->step, 3);
  EXPECT_EQ(got->found, (std::vector<bool>{true, false}));
  EXPECT_EQ(got->values[0], 3);
  EXPECT_EQ(got->values[1], 4);
  EXPECT_EQ(got->values[2], server::EmbeddingInitialValue(9, 0, 99, 0, 0.1f));
  // Bad calls: an unknown table, too many keys, no keys, Predict of a model that is not "ctr".
  const absl::Status unknown = (*client)->Lookup("clicks", {1}).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("unknown table 'clicks'; the model's tables: ads"));
  const absl::Status many = (*client)->Lookup("ads", std::vector<uint64_t>(11, 1)).status();
  EXPECT_EQ(many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(many.message(), HasSubstr("expected 1 to 10 (--max_lookup_keys)"));
  EXPECT_EQ((*client)->Lookup("ads", {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*client)->Predict({"1 2:1"}).status().code(), absl::StatusCode::kFailedPrecondition);

  // Another token: refused before the request is read.
  TransportSecurityOptions wrong = job->For(CertRole::kWorker);
  wrong.token_file = dir + "/wrong-token";
  std::ofstream(wrong.token_file) << "0123456789abcdef-not-the-jobs-token\n";
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> stranger = TransportSecurity::Create(wrong);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  absl::StatusOr<std::unique_ptr<ServeClient>> refused = ServeClient::Create(address, absl::Seconds(10), *stranger);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ((*refused)->Lookup("ads", {8}).status().code(), absl::StatusCode::kUnauthenticated);
  serve->Kill(SIGTERM);
  EXPECT_TRUE(serve->Wait(absl::Seconds(10)).ok());

  // A serving process given the worker's certificate does not start.
  std::vector<std::string> as_worker = {"--export_dir=" + exported};
  for (std::string& f : TransportSecurityFlags(job->For(CertRole::kWorker))) as_worker.push_back(f);
  std::string unused;
  std::unique_ptr<Child> impostor = StartServe("serve-impostor", as_worker, &unused);
  ASSERT_NE(impostor, nullptr);
  absl::StatusOr<int> code = impostor->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2);
  EXPECT_THAT(impostor->Output(), HasSubstr("serving"));
}

}  // namespace
}  // namespace pstrain::testing
