// SchedulerApi (scheduler/client/scheduler_api.h) over a scheduler::Scheduler in this process: the scheduler
// of a unit-test cluster, without sockets. Parked calls (WaitUntilRunning, Barrier) block the
// caller until the core answers. A test can make calls fail before they reach the core (a lost
// request) and learn of every call that did (to let the servers follow a membership change).
//
// Thread-safe.
#ifndef PSTRAIN_TESTS_IN_PROCESS_IN_PROCESS_SCHEDULER_H_
#define PSTRAIN_TESTS_IN_PROCESS_IN_PROCESS_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/client/scheduler_api.h"
#include "scheduler/scheduler.h"

namespace pstrain::in_process {

class InProcessScheduler : public SchedulerApi {
 public:
  // `core` is borrowed and must outlive this object.
  explicit InProcessScheduler(scheduler::Scheduler* core);

  // The next `count` calls of `method` (the SchedulerApi method's name, e.g. "LeaseWork") fail
  // with `status` without reaching the core.
  void FailNext(const std::string& method, int count, absl::Status status);
  // Runs after every call that reached the core, on the caller's thread. May be empty.
  void set_after_call(std::function<void()> after_call);
  // Calls of `method` so far (failed ones included).
  int64_t calls(const std::string& method) const;
  // Every progress report that reached the core, in order, as stamped.
  std::vector<ProgressReport> reports() const;

  absl::StatusOr<RegisterResponse> Register(Role role, const std::string& address, absl::Duration timeout,
                                            const LocalEndpoint& local = {}) override;
  absl::StatusOr<ClusterView> WaitUntilRunning(absl::Duration timeout) override;
  absl::StatusOr<ClusterView> GetClusterView() override;
  absl::Status Barrier(const std::string& name, BarrierRequest::Participants who, Role role, int rank,
                       absl::Duration timeout) override;
  absl::StatusOr<HeartbeatResponse> Heartbeat(Role role, int rank) override;
  absl::StatusOr<LeaseResponse> LeaseWork(int worker_rank, int epoch) override;
  absl::StatusOr<LeaseResponse> LeaseEval(int worker_rank, int epoch) override;
  absl::Status ReportProgress(const ProgressReport& report) override;
  absl::Status ReportFailure(Role role, int rank, const std::string& message) override;
  absl::StatusOr<JobStatus> GetJobStatus() override;
  absl::Status Leave(Role role, int rank, const std::string& reason) override;
  absl::Status ReportCheckpoints(int server_rank, const std::vector<int64_t>& steps,
                                 int64_t* keep_from = nullptr) override;
  absl::Status ReportSlowStep(const SlowStepReport& report) override;
  absl::Status SubmitFinalShard(const FinalShard& shard) override;
  absl::Status DeclareModel(ModelDeclaration declaration) override;
  absl::StatusOr<std::string> GetInitialModel() override;

 private:
  // Counts the call; the injected failure for it, or OK to go on to the core.
  absl::Status Enter(const std::string& method);
  void After();
  // LeaseWork and LeaseEval: one LeaseRequest, stamped like the gRPC client's.
  absl::StatusOr<LeaseResponse> Lease(int worker_rank, int epoch, bool eval);

  scheduler::Scheduler* const core_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<absl::Status>> failures_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::function<void()> after_call_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<ProgressReport> reports_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain::in_process

#endif  // PSTRAIN_TESTS_IN_PROCESS_IN_PROCESS_SCHEDULER_H_
