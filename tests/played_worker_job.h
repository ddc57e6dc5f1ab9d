// A one-worker job whose worker is the test itself: a real pstrain-scheduler and one real
// pstrain-server (processes on 127.0.0.1), with the test registered as worker 0 through
// SchedulerClient, heartbeating and past the servers-ready barrier. Tests that send requests by
// hand (malformed, unauthorized) start one, talk to its server, and Finish() it so both processes
// exit 0 on their own.
//
// The job: MLP, 256 training and 64 test samples, SGD lr 0.5, one epoch.
#ifndef PSTRAIN_TESTS_PLAYED_WORKER_JOB_H_
#define PSTRAIN_TESTS_PLAYED_WORKER_JOB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/client/scheduler_client.h"
#include "transport/transport_security.h"
#include "proto/cluster.pb.h"
#include "proto/ps.pb.h"
#include "tests/process.h"

namespace pstrain::testing {

class PlayedWorkerJob {
 public:
  // Starts the scheduler and the server in `dir`, both with `role_flags` appended (the security
  // flags, say), the server also with `server_flags`, and registers the test as the worker through
  // `security` (null: plaintext). Failures are fatal gtest failures: call through
  // ASSERT_NO_FATAL_FAILURE.
  void Start(const std::string& dir, const std::vector<std::string>& role_flags,
             std::shared_ptr<const TransportSecurity> security = nullptr,
             const std::vector<std::string>& server_flags = {});
  // Reports every evaluation lease of the only epoch as done and the worker as finished, then
  // expects both processes to exit 0 within 20 s (and kills what is left).
  void Finish();

  // A well-formed push from worker 0 for `step`, `value` everywhere, 8 samples.
  PushRequest GoodPush(int64_t step, float value) const;

  std::string address;  // the scheduler's host:port
  ClusterView view;
  std::unique_ptr<SchedulerClient> client;
  std::unique_ptr<Child> scheduler, server;

 private:
  std::unique_ptr<Heartbeater> heartbeater_;
};

}  // namespace pstrain::testing

#endif  // PSTRAIN_TESTS_PLAYED_WORKER_JOB_H_
