// A whole job in one process, for unit tests of the worker library: a scheduler core, one
// parameter store per server, and the in-process SchedulerApi and PsApi that workers (training
// sessions, driven by the test on threads of its own) use to reach them. Time is simulated, so
// timeouts and dead-worker detection happen when the test says so, not after real seconds: the
// scheduler's clock moves only in HeartbeatAndAdvance, the workers' whenever a worker sleeps (its
// waits and timeouts pass at once). Two clocks, so that a worker spinning in a wait cannot make a
// role that just heartbeated look silent to the scheduler.
//
// The servers follow the scheduler's membership at once: after every scheduler call, each store
// installs the view's membership epoch and live workers (what pstrain-server learns from its
// heartbeats), and tells the scheduler which leased batches it applied (what pstrain-server's
// heartbeats confirm). A test can hold that back (follow_membership(false)) to see workers meet a server
// that has not learnt the newest epoch yet.
//
// Not thread-safe to set up; once Start() returned, the scheduler and PS interfaces are.
#ifndef PSTRAIN_TESTS_IN_PROCESS_IN_PROCESS_CLUSTER_H_
#define PSTRAIN_TESTS_IN_PROCESS_IN_PROCESS_CLUSTER_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "model/param_spec.h"
#include "proto/job.pb.h"
#include "scheduler/scheduler.h"
#include "server/parameter_store.h"
#include "tests/in_process/in_process_ps.h"
#include "tests/in_process/in_process_scheduler.h"
#include "worker/training_session.h"

namespace pstrain::in_process {

class InProcessCluster {
 public:
  // A job over `params` (model/param_spec.h; init and fan-in as the servers should initialise
  // them) with the given data set sizes. The job's defaults are applied; num_servers and
  // num_workers say how many roles the scheduler waits for. The params named in `averaged` are
  // averaged tensors (TensorSpec.averaged in the shard map).
  static absl::StatusOr<std::unique_ptr<InProcessCluster>> Create(JobSpec job, std::vector<model::ParamSpec> params,
                                                                  int64_t train_samples, int64_t test_samples,
                                                                  const std::vector<std::string>& averaged = {});
  ~InProcessCluster();

  // Registers every server and num_workers workers (ranks 0..W-1), creates the stores from the
  // complete view and releases the servers-ready barrier's server side.
  absl::Status Start();
  // Registers one more worker while the job runs (it joins at the next membership epoch); its rank.
  absl::StatusOr<int> AddWorker();

  // Options for a training session of worker `rank` under the current view.
  worker::SessionOptions SessionOptionsFor(int rank) const;
  absl::StatusOr<std::unique_ptr<worker::TrainingSession>> NewSession(int rank);

  // Heartbeats every live role but the workers in `silent`, then advances the clock by `d` and
  // runs the scheduler's health check: a worker that stays silent past dead_after is removed.
  void HeartbeatAndAdvance(absl::Duration d, const std::vector<int>& silent = {});
  // Every store confirms to the scheduler the leased batches it applied (HeartbeatRequest
  // .applied_leases); done after every scheduler call.
  void ConfirmLeases();
  // Installs the scheduler's current membership in every store (done after every scheduler call
  // while following).
  void FollowMembership();
  void follow_membership(bool on) { follow_.store(on); }

  scheduler::Scheduler& core() { return *core_; }
  InProcessScheduler& scheduler() { return *scheduler_api_; }
  InProcessPs& ps() { return *ps_; }
  server::ParameterStore& store(int server) { return *stores_[server]; }
  SimulatedClock& scheduler_clock() { return scheduler_clock_; }
  SimulatedClock& worker_clock() { return worker_clock_; }
  const JobSpec& job() const { return job_; }
  const std::vector<model::ParamSpec>& params() const { return params_; }
  // The whole model as the servers hold it, in the params' flat layout.
  std::vector<float> ServerWeights() const;

 private:
  InProcessCluster(JobSpec job, std::vector<model::ParamSpec> params);

  const JobSpec job_;
  const std::vector<model::ParamSpec> params_;
  SimulatedClock scheduler_clock_;
  SimulatedClock worker_clock_;
  std::unique_ptr<scheduler::Scheduler> core_;
  std::unique_ptr<InProcessScheduler> scheduler_api_;
  std::vector<std::unique_ptr<server::ParameterStore>> stores_;
  std::unique_ptr<InProcessPs> ps_;
  std::atomic<bool> follow_{true};
};

}  // namespace pstrain::in_process

#endif  // PSTRAIN_TESTS_IN_PROCESS_IN_PROCESS_CLUSTER_H_
