#include "tests/played_worker_job.h"

#include <csignal>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/barriers.h"
#include "gtest/gtest.h"

namespace pstrain::testing {

void PlayedWorkerJob::Start(const std::string& dir, const std::vector<std::string>& role_flags,
                            std::shared_ptr<const TransportSecurity> security,
                            const std::vector<std::string>& server_flags) {
  const std::string port_file = dir + "/scheduler.port";
  // --dead_after_ms: the played worker heartbeats from the test's process, which its test may load
  // with huge calls on a busy machine; how fast a silent worker is found dead is not what these
  // tests check.
  std::vector<std::string> argv = {BinDir() + "/pstrain-scheduler",
                                   "--port=0",
                                   "--port_file=" + port_file,
                                   "--servers=1",
                                   "--workers=1",
                                   "--train_limit=256",
                                   "--test_limit=64",
                                   "--optimizer=sgd",
                                   "--lr=0.5",
                                   "--epochs=1",
                                   "--heartbeat_ms=200",
                                   "--dead_after_ms=20000"};
  argv.insert(argv.end(), role_flags.begin(), role_flags.end());
  absl::StatusOr<Child> started = Child::Start(argv, dir + "/scheduler.log");
  ASSERT_TRUE(started.ok()) << started.status();
  scheduler = std::make_unique<Child>(*started);
  std::string port;
  for (int i = 0; i < 300 && port.empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    port = std::string(absl::StripAsciiWhitespace(ReadFile(port_file)));
  }
  ASSERT_FALSE(port.empty()) << scheduler->Output();
  address = absl::StrCat("127.0.0.1:", port);
  std::vector<std::string> server_argv = {BinDir() + "/pstrain-server", "--scheduler=" + address, "--port=0"};
  server_argv.insert(server_argv.end(), role_flags.begin(), role_flags.end());
  server_argv.insert(server_argv.end(), server_flags.begin(), server_flags.end());
  started = Child::Start(server_argv, dir + "/server.log");
  ASSERT_TRUE(started.ok()) << started.status();
  server = std::make_unique<Child>(*started);

  client = *SchedulerClient::Create(address, absl::Seconds(10), std::move(security));
  absl::StatusOr<RegisterResponse> registration = client->Register(WORKER, "", absl::Seconds(30));
  ASSERT_TRUE(registration.ok()) << registration.status();
  heartbeater_ = std::make_unique<Heartbeater>(client.get(), WORKER, registration->rank(), absl::Milliseconds(200),
                                               absl::Seconds(30), [](absl::Status) {});
  absl::StatusOr<ClusterView> running = client->WaitUntilRunning(absl::Seconds(30));
  ASSERT_TRUE(running.ok()) << running.status();
  view = *running;
  ASSERT_TRUE(client->Barrier(kServersReadyBarrier, BarrierRequest::ALL, WORKER, 0, absl::Seconds(30)).ok());
}

void PlayedWorkerJob::Finish() {
  if (client != nullptr) {
    // The epoch's training is over (its last step reported), so its evaluation leases go out.
    ProgressReport trained;
    trained.set_worker_rank(0);
    trained.set_step(view.total_steps());
    ASSERT_TRUE(client->ReportProgress(trained).ok());
    for (int i = 0; i < 1000; ++i) {
      absl::StatusOr<LeaseResponse> lease = client->LeaseEval(0, 0);
      ASSERT_TRUE(lease.ok()) << lease.status();
      if (lease->epoch_done()) break;
      if (lease->wait()) continue;
      ProgressReport report;
      report.set_worker_rank(0);
      EvalStats* eval = report.add_evals();
      eval->set_lease_id(lease->lease_id());
      eval->set_samples(lease->end() - lease->begin());
      report.set_step(view.total_steps());
      ASSERT_TRUE(client->ReportProgress(report).ok());
    }
    ProgressReport done;
    done.set_worker_rank(0);
    done.set_done(true);
    ASSERT_TRUE(client->ReportProgress(done).ok());
  }
  heartbeater_.reset();
  for (std::unique_ptr<Child>* child : {&server, &scheduler}) {
    if (*child == nullptr) continue;
    absl::StatusOr<int> code = (*child)->Wait(absl::Seconds(20));
    EXPECT_TRUE(code.ok() && *code == 0) << (*child)->Output();
    (*child)->Kill(SIGKILL);
  }
}

PushRequest PlayedWorkerJob::GoodPush(int64_t step, float value) const {
  PushRequest push;
  push.set_worker_rank(0);
  push.set_membership_epoch(view.membership_epoch());
  push.set_step(step);
  push.set_num_samples(8);
  push.set_request_id(1000 + step);
  for (const ChunkSpec& c : view.shard_map().chunks()) {
    TensorChunk* chunk = push.add_chunks();
    chunk->set_tensor_id(c.tensor_id());
    chunk->set_offset(c.offset());
    chunk->set_length(c.length());
    std::vector<float> values(c.length(), value);
    chunk->set_data(values.data(), values.size() * sizeof(float));
  }
  return push;
}

}  // namespace pstrain::testing
