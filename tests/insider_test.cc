// Insiders against a real job secured with mutual TLS and a job token (real pstrain-scheduler,
// pstrain-server and pstrain-worker processes, real sockets). An insider holds the job's
// certificate and token and registers as a new worker, so it has a valid session and a rank of its
// own; what it may do with that rank is what a worker must do, and no more:
//   - evaluation leases: none before the epoch's training is over, and impossible results refused;
//   - progress: no more samples than the job handed it;
//   - barriers: only the job's names; spam is refused before anything is stored, and the
//     scheduler's memory, state and summary stay bounded;
//   - ReportFailure: the insider leaves; the job goes on;
//   - never pushing while heartbeating: evicted once it holds a SYNC step up for dead_after;
//   - ASYNC leases reported done without a push: completed only by the servers' confirmations,
//     so the insider holds the epoch's end up until it is evicted, and its leases are trained by
//     the honest workers, each sample once.
// The job then finishes as an undisturbed run of it does.
#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/barriers.h"
#include "transport/job_credentials.h"
#include "scheduler/client/scheduler_client.h"
#include "transport/session_metadata.h"
#include "transport/transport_security.h"
#include "gmock/gmock.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

double FinalTestAccuracy(const std::string& summary) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex("\"final_test_accuracy\": ([0-9.eE+-]+)"))) return -1;
  return std::stod(m[1]);
}

std::vector<int> LiveWorkers(SchedulerClient* client) {
  std::vector<int> ranks;
  absl::StatusOr<ClusterView> view = client->GetClusterView();
  if (!view.ok()) return ranks;
  for (const WorkerInfo& w : view->workers()) ranks.push_back(w.rank());
  return ranks;
}

bool Contains(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

class InsiderTest : public ::testing::Test {
 protected:
  // A SYNC job of 1 server and 2 workers over TLS + token: 3 epochs of 4096 samples, so that the
  // insider acts while epoch 0 is still training.
  void StartJob(ManualCluster* cluster, const JobCredentials& job) {
    // Each role its own certificate.
    auto secured = [&job](CertRole role, std::vector<std::string> flags) {
      const std::vector<std::string> tls = TransportSecurityFlags(job.For(role));
      flags.insert(flags.end(), tls.begin(), tls.end());
      return flags;
    };
    cluster->Start(/*servers=*/1, /*workers=*/2,
                   secured(CertRole::kScheduler,
                           {"--mode=sync", "--epochs=3", "--train_limit=4096", "--test_limit=512", "--batch_size=32",
                            "--optimizer=sgd", "--lr=0.1", "--dead_after_ms=4000", "--spare_workers=2"}),
                   secured(CertRole::kServer, {}), secured(CertRole::kWorker, {}));
  }

  static JobCredentials Credentials(const std::string& dir) {
    std::filesystem::create_directories(dir + "/job");
    absl::StatusOr<JobCredentials> made = MakeJobCredentials(dir + "/job");
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? *made : JobCredentials{};
  }
};

TEST_F(InsiderTest, AWorkerCredentialDoesWhatAWorkerMustAndNoMore) {
  // The undisturbed run, for its test accuracy.
  ManualCluster reference("insider-reference");
  ASSERT_NO_FATAL_FAILURE(StartJob(&reference, Credentials(reference.dir())));
  const std::string reference_summary = RunToEnd(reference);
  const double reference_accuracy = FinalTestAccuracy(reference_summary);
  ASSERT_GT(reference_accuracy, 0) << reference_summary;

  ManualCluster cluster("insider");
  const JobCredentials job = Credentials(cluster.dir());
  ASSERT_NO_FATAL_FAILURE(StartJob(&cluster, job));
  // The insiders hold a worker's files.
  std::shared_ptr<const TransportSecurity> security = *TransportSecurity::Create(job.For(CertRole::kWorker));
  std::unique_ptr<SchedulerClient> insider = *SchedulerClient::Create(cluster.address, absl::Seconds(10), security);
  ASSERT_TRUE(insider->WaitUntilRunning(absl::Seconds(60)).ok());
  absl::StatusOr<RegisterResponse> joined = insider->Register(WORKER, "", absl::Seconds(10));
  ASSERT_TRUE(joined.ok()) << joined.status();
  const int rank = joined->rank();
  ASSERT_GE(rank, 2);
  auto heartbeats = std::make_unique<Heartbeater>(insider.get(), WORKER, rank, absl::Milliseconds(200),
                                                  absl::Seconds(30), [](absl::Status) {});
  // While the insider is a member and does not push, the SYNC job cannot step on: its actions
  // below all happen before epoch 0's training is over.
  absl::StatusOr<JobStatus> status = insider->GetJobStatus();
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->epochs_done_size(), 0) << "the job went too fast for this test";

  // Item 4: no evaluation lease of any epoch yet; results for leases never handed out are refused.
  for (int epoch = 0; epoch < 3; ++epoch) {
    absl::StatusOr<LeaseResponse> lease = insider->LeaseEval(rank, epoch);
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_TRUE(lease->wait()) << "epoch " << epoch;
    EXPECT_EQ(lease->lease_id(), 0) << "epoch " << epoch;
  }
  ProgressReport fake_eval;
  fake_eval.set_worker_rank(rank);
  EvalStats* eval = fake_eval.add_evals();
  eval->set_lease_id(1);
  eval->set_samples(32);
  eval->set_correct(32);
  EXPECT_FALSE(insider->ReportProgress(fake_eval).ok());

  // Item 11: progress beyond what the job handed out.
  ProgressReport inflated;
  inflated.set_worker_rank(rank);
  inflated.set_step(1);
  inflated.mutable_train()->set_steps(1);
  inflated.mutable_train()->set_samples(1000000000);
  absl::Status refused = insider->ReportProgress(inflated);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("samples in 1 steps, expected at most 64"));

  // Item 6: barrier spam, with huge and with many names. Refused; memory stays.
  const int64_t rss_before = ResidentKib(cluster.scheduler->pid());
  ASSERT_GT(rss_before, 0);
  auto stub = pstrain::Scheduler::NewStub(security->NewChannel(cluster.address, grpc::ChannelArguments()));
  auto enter = [&](const std::string& name) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    AttachSession(&context, insider->session_credential());
    BarrierRequest request;
    request.set_name(name);
    request.set_role(WORKER);
    request.set_rank(rank);
    BarrierResponse response;
    return stub->Barrier(&context, request, &response);
  };
  for (int i = 0; i < 30; ++i) {
    const grpc::Status s = enter(absl::StrCat(i, std::string(1000000, 'b')));
    // INVALID_ARGUMENT from the name rule, or RESOURCE_EXHAUSTED from a receive limit below 1 MB.
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_code() << " " << s.error_message().substr(0, 200);
  }
  for (int i = 0; i < 1000; ++i) {
    const grpc::Status s = enter(absl::StrCat("insider-barrier-", i));
    ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  EXPECT_THAT(enter("epoch-99-trained").error_message(), HasSubstr("names no epoch of the job"));
  const int64_t rss_after = ResidentKib(cluster.scheduler->pid());
  if (kResidentMemoryIsGlibcs) {
    EXPECT_LT(rss_after - rss_before, 64 * 1024) << "scheduler RSS " << rss_before << " KiB -> " << rss_after << " KiB";
  }

  // Item 8: its failure is its own: it leaves, and the job goes on.
  ASSERT_TRUE(insider->ReportFailure(WORKER, rank, "an insider says the job failed").ok());
  status = insider->GetJobStatus();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), RUNNING) << status->failure();
  EXPECT_FALSE(Contains(LiveWorkers(insider.get()), rank));
  heartbeats.reset();

  // Item 9: a second insider joins and heartbeats, but never pushes: the SYNC step it holds up
  // gets it evicted after dead_after, and the job goes on without it.
  std::unique_ptr<SchedulerClient> staller = *SchedulerClient::Create(cluster.address, absl::Seconds(10), security);
  absl::StatusOr<RegisterResponse> stalling = staller->Register(WORKER, "", absl::Seconds(10));
  ASSERT_TRUE(stalling.ok()) << stalling.status();
  const int stall_rank = stalling->rank();
  Heartbeater stall_heartbeats(staller.get(), WORKER, stall_rank, absl::Milliseconds(200), absl::Seconds(30),
                               [](absl::Status) {});
  const absl::Time joined_at = absl::Now();
  bool evicted = false;
  while (!evicted && absl::Now() - joined_at < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(200));
    evicted = !Contains(LiveWorkers(staller.get()), stall_rank);
  }
  ASSERT_TRUE(evicted) << cluster.scheduler->Output();
  EXPECT_GE(absl::Now() - joined_at, absl::Seconds(4));  // Not before dead_after.
  EXPECT_THAT(cluster.scheduler->Output(), HasSubstr("while heartbeating: evicted"));

  // Joining and leaving in a loop, which bumps the membership epoch (and so aborts the SYNC step)
  // each time: a running job admits at most 10 joins a minute here (twice --workers plus
  // --spare_workers, at least 10), two of them made above. Register retries the refusal until its
  // timeout, then returns it.
  std::unique_ptr<SchedulerClient> churner = *SchedulerClient::Create(cluster.address, absl::Seconds(10), security);
  int joins = 0;
  absl::Status busy;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<RegisterResponse> joined_again = churner->Register(WORKER, "", absl::Seconds(1));
    if (!joined_again.ok()) {
      busy = joined_again.status();
      break;
    }
    ++joins;
    ASSERT_TRUE(churner->Leave(WORKER, joined_again->rank(), "churn").ok());
  }
  EXPECT_TRUE(absl::IsResourceExhausted(busy)) << busy;
  EXPECT_THAT(busy.message(), HasSubstr("workers joined the running job in the last minute"));
  EXPECT_GE(joins, 8);
  EXPECT_LE(joins, 10);

  // The job finishes as the undisturbed one did.
  const std::string summary = RunToEnd(cluster);
  EXPECT_THAT(summary, HasSubstr("\"state\": \"FINISHED\""));
  EXPECT_THAT(summary, HasSubstr("an insider says the job failed"));
  EXPECT_LT(summary.size(), 200000u);
  EXPECT_TRUE(NearAnyReference(FinalTestAccuracy(summary), {reference_accuracy}, 0.02)) << summary;
}

double JsonNumber(const std::string& json, const std::string& key, size_t from = 0) {
  std::smatch m;
  const std::string tail = json.substr(from);
  if (!std::regex_search(tail, m, std::regex("\"" + key + "\": ([0-9.eE+-]+)"))) return -1;
  return std::stod(m[1]);
}

// Item 11's ASYNC half: an insider takes training leases and reports each one done without pushing
// a single batch. Before servers confirmed leases, the scheduler took its word: the leases counted
// as trained, and their samples were never trained at all.
TEST_F(InsiderTest, AsyncLeasesReportedDoneWithoutPushesAreTrainedByOthers) {
  ManualCluster cluster("insider-async");
  const JobCredentials job = Credentials(cluster.dir());
  auto secured = [&job](CertRole role, std::vector<std::string> flags) {
    const std::vector<std::string> tls = TransportSecurityFlags(job.For(role));
    flags.insert(flags.end(), tls.begin(), tls.end());
    return flags;
  };
  // Two servers, one honest worker; the job waits for a second worker, which the insider becomes.
  constexpr int kSamples = 4096, kEpochs = 2;
  cluster.Start(
      /*servers=*/2, /*workers=*/1,
      secured(CertRole::kScheduler, {"--mode=async", "--workers=2", absl::StrCat("--epochs=", kEpochs),
                                     absl::StrCat("--train_limit=", kSamples), "--test_limit=512", "--batch_size=32",
                                     "--lease_batches=4", "--optimizer=sgd", "--lr=0.1", "--dead_after_ms=3000"}),
      secured(CertRole::kServer, {}), secured(CertRole::kWorker, {}));
  std::shared_ptr<const TransportSecurity> security = *TransportSecurity::Create(job.For(CertRole::kWorker));
  std::unique_ptr<SchedulerClient> insider = *SchedulerClient::Create(cluster.address, absl::Seconds(10), security);
  absl::StatusOr<RegisterResponse> joined = insider->Register(WORKER, "", absl::Seconds(30));
  ASSERT_TRUE(joined.ok()) << joined.status();
  const int rank = joined->rank();
  Heartbeater heartbeats(insider.get(), WORKER, rank, absl::Milliseconds(200), absl::Seconds(30), [](absl::Status) {});
  const absl::Status ready =
      insider->Barrier(kServersReadyBarrier, BarrierRequest::ALL, WORKER, rank, absl::Seconds(60));
  ASSERT_TRUE(ready.ok()) << ready;

  // It takes every lease it can get in epoch 0 and reports each done at once, with the samples a
  // worker would report for it; the scheduler accepts the reports (they are within what it handed
  // out) but completes nothing on them.
  int taken = 0;
  int64_t claimed = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(30)) {
    absl::StatusOr<LeaseResponse> lease = insider->LeaseWork(rank, 0);
    if (!lease.ok()) break;  // Evicted.
    if (lease->epoch_done()) break;
    if (lease->wait()) {
      absl::SleepFor(absl::Milliseconds(20));
      continue;
    }
    const int64_t batches = (lease->end() - lease->begin() + 31) / 32;
    ProgressReport report;
    report.set_worker_rank(rank);
    report.set_epoch(0);
    report.set_step(taken + 1);
    report.mutable_train()->set_steps(batches);
    report.mutable_train()->set_samples(lease->end() - lease->begin());
    LeaseProgress* progress = report.add_leases();
    progress->set_lease_id(lease->lease_id());
    progress->set_batches_done(batches);
    ASSERT_TRUE(insider->ReportProgress(report).ok());
    ++taken;
    claimed += lease->end() - lease->begin();
  }
  EXPECT_GT(taken, 0);
  // The epoch's end waited for the insider's leases until it was evicted.
  EXPECT_FALSE(Contains(LiveWorkers(insider.get()), rank)) << cluster.scheduler->Output();

  const std::string summary = RunToEnd(cluster);
  ASSERT_THAT(summary, HasSubstr("\"state\": \"FINISHED\"")) << summary;
  // Every epoch covers its samples once, and the honest worker trained all of them: the insider's
  // claimed leases came back to it as remainders.
  const size_t workers_at = summary.find("\"workers\": [");
  ASSERT_NE(workers_at, std::string::npos);
  const size_t honest_at = summary.find(absl::StrCat("{\"rank\": ", rank == 0 ? 1 : 0, ","), workers_at);
  ASSERT_NE(honest_at, std::string::npos) << summary;
  EXPECT_EQ(JsonNumber(summary, "samples", honest_at), kSamples * kEpochs) << summary;
  EXPECT_EQ(JsonNumber(summary, "samples", summary.find("{\"epoch\": 0,")), kSamples) << summary;
  LOG(INFO) << "the insider took " << taken << " leases and claimed " << claimed << " samples of epoch 0";
}

}  // namespace
}  // namespace pstrain::testing
