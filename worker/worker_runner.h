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
#include "worker/job_member.h"

namespace pstrain::worker {

struct WorkerOptions {
  // Where to compute: "cpu", "cuda" or "cuda:N" (model/device.h).
  std::string device = "cpu";
  // Lets a CUDA device use TF32 tensor cores for GEMMs (model/cuda/cuda_backend.h).
  bool allow_tf32 = false;
  // The scheduler, timeouts, connections, the leave flag and the health service.
  MemberOptions member;
};

// Runs the worker to the end of the job, or until it leaves it (`member.leave`). OK when the job finished
// or the worker left, and at once when it registers with a job that is already over (FINISHED);
// otherwise the first error, which is also reported to the scheduler (ABORTED when the job had
// failed before the worker registered).
absl::Status RunWorker(const WorkerOptions& options);

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_WORKER_RUNNER_H_
