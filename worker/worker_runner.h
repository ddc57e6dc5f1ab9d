// A whole worker process, minus flag parsing: registers with the scheduler, loads its data, builds
// the model, connects to every server, trains, and reports the end.
//
//   Register(WORKER) -> rank, job      WaitUntilRunning -> cluster view
//   load train/test data, build model, connect to servers
//   Barrier("servers-ready", ALL)      every server holds its initialised shard
//   Trainer::Run()                     while a Heartbeater runs beside it
//
// If the job fails elsewhere while this worker is parked in a step (a dead peer, a dead server),
// the heartbeat answer says so and the worker's calls are cancelled, so it never hangs.
#ifndef PSTRAIN_WORKER_WORKER_RUNNER_H_
#define PSTRAIN_WORKER_WORKER_RUNNER_H_

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pstrain::worker {

struct WorkerOptions {
  std::string scheduler_address;  // host:port
  // Where to compute: "cpu", "cuda" or "cuda:N" (model/device.h).
  std::string device = "cpu";
  // Lets a CUDA device use TF32 tensor cores for GEMMs (model/cuda/cuda_backend.h).
  bool allow_tf32 = false;
  absl::Duration rpc_timeout = absl::Seconds(60);
  // TCP connections to each server not on this host (worker/ps_client.h); >= 1.
  int tcp_connections = 2;
  absl::Duration startup_timeout = absl::Minutes(2);
  // Set from another thread (SIGTERM) to leave the job gracefully; may be null.
  const std::atomic<bool>* leave = nullptr;
  // With health_port > 0, a gRPC health service (common/health.h) listens on
  // health_host:health_port: NOT_SERVING until the worker has registered, SERVING while it is in
  // the job, NOT_SERVING once it is done. 0: no health service.
  std::string health_host = "0.0.0.0";
  int health_port = 0;
};

// Runs the worker to the end of the job, or until it leaves it (`leave`). OK when the job finished
// or the worker left, and at once when it registers with a job that is already over (FINISHED);
// otherwise the first error, which is also reported to the scheduler (ABORTED when the job had
// failed before the worker registered).
absl::Status RunWorker(const WorkerOptions& options);

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_WORKER_RUNNER_H_
