#include "tests/in_process/in_process_scheduler.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"

namespace pstrain::in_process {

InProcessScheduler::InProcessScheduler(scheduler::Scheduler* core) : core_(core) {}

void InProcessScheduler::FailNext(const std::string& method, int count, absl::Status status) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < count; ++i) failures_[method].push_back(status);
}

void InProcessScheduler::set_after_call(std::function<void()> after_call) {
  absl::MutexLock lock(&mu_);
  after_call_ = std::move(after_call);
}

int64_t InProcessScheduler::calls(const std::string& method) const {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

absl::Status InProcessScheduler::Enter(const std::string& method) {
  absl::MutexLock lock(&mu_);
  ++calls_[method];
  std::vector<absl::Status>& failures = failures_[method];
  if (failures.empty()) return absl::OkStatus();
  absl::Status status = failures.front();
  failures.erase(failures.begin());
  return status;
}

void InProcessScheduler::After() {
  std::function<void()> after_call;
  {
    absl::MutexLock lock(&mu_);
    after_call = after_call_;
  }
  if (after_call) after_call();
}

absl::StatusOr<RegisterResponse> InProcessScheduler::Register(Role role, const std::string& address, absl::Duration,
                                                              const LocalEndpoint& local) {
  RETURN_IF_ERROR(Enter("Register"));
  RegisterRequest request;
  request.set_role(role);
  request.set_address(address);
  *request.mutable_local() = local;
  absl::StatusOr<RegisterResponse> answer = core_->Register(request);
  After();
  return answer;
}

absl::StatusOr<ClusterView> InProcessScheduler::WaitUntilRunning(absl::Duration timeout) {
  RETURN_IF_ERROR(Enter("WaitUntilRunning"));
  absl::Notification answered;
  absl::Mutex mu;
  std::optional<absl::StatusOr<ClusterView>> answer;
  core_->WhenRunning([&](absl::StatusOr<ClusterView> view) {
    absl::MutexLock lock(&mu);
    answer = std::move(view);
    answered.Notify();
  });
  if (!answered.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("no complete view within ", absl::FormatDuration(timeout)));
  }
  After();
  absl::MutexLock lock(&mu);
  return *answer;
}

absl::StatusOr<ClusterView> InProcessScheduler::GetClusterView() {
  RETURN_IF_ERROR(Enter("GetClusterView"));
  ClusterView view = core_->View();
  After();
  return view;
}

absl::Status InProcessScheduler::Barrier(const std::string& name, BarrierRequest::Participants who, Role role, int rank,
                                         absl::Duration timeout) {
  RETURN_IF_ERROR(Enter("Barrier"));
  BarrierRequest request;
  request.set_name(name);
  request.set_participants(who);
  request.set_role(role);
  request.set_rank(rank);
  absl::Notification answered;
  absl::Mutex mu;
  absl::Status answer;
  core_->Barrier(request, [&](absl::Status s) {
    absl::MutexLock lock(&mu);
    answer = std::move(s);
    answered.Notify();
  });
  if (!answered.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("barrier '", name, "' not released within ", absl::FormatDuration(timeout)));
  }
  After();
  absl::MutexLock lock(&mu);
  return answer;
}

absl::StatusOr<HeartbeatResponse> InProcessScheduler::Heartbeat(Role role, int rank) {
  RETURN_IF_ERROR(Enter("Heartbeat"));
  HeartbeatRequest request;
  request.set_role(role);
  request.set_rank(rank);
  absl::StatusOr<HeartbeatResponse> answer = core_->Heartbeat(request);
  After();
  return answer;
}

absl::StatusOr<LeaseResponse> InProcessScheduler::LeaseWork(int worker_rank, int epoch) {
  RETURN_IF_ERROR(Enter("LeaseWork"));
  return Lease(worker_rank, epoch, /*eval=*/false);
}

absl::StatusOr<LeaseResponse> InProcessScheduler::LeaseEval(int worker_rank, int epoch) {
  RETURN_IF_ERROR(Enter("LeaseEval"));
  return Lease(worker_rank, epoch, /*eval=*/true);
}

absl::StatusOr<LeaseResponse> InProcessScheduler::Lease(int worker_rank, int epoch, bool eval) {
  LeaseRequest request;
  request.set_worker_rank(worker_rank);
  request.set_epoch(epoch);
  request.set_eval(eval);
  {
    absl::MutexLock lock(&mu_);
    request.set_request_seq(next_seq_++);
  }
  absl::StatusOr<LeaseResponse> answer = core_->LeaseWork(request);
  After();
  return answer;
}

std::vector<ProgressReport> InProcessScheduler::reports() const {
  absl::MutexLock lock(&mu_);
  return reports_;
}

absl::Status InProcessScheduler::ReportProgress(const ProgressReport& report) {
  RETURN_IF_ERROR(Enter("ReportProgress"));
  ProgressReport stamped = report;
  {
    absl::MutexLock lock(&mu_);
    stamped.set_report_seq(next_seq_++);
    reports_.push_back(stamped);
  }
  absl::Status answer = core_->ReportProgress(stamped);
  After();
  return answer;
}

absl::Status InProcessScheduler::ReportFailure(Role role, int rank, const std::string& message) {
  RETURN_IF_ERROR(Enter("ReportFailure"));
  FailureReport report;
  report.set_role(role);
  report.set_rank(rank);
  report.set_message(message);
  core_->ReportFailure(report);
  After();
  return absl::OkStatus();
}

absl::StatusOr<JobStatus> InProcessScheduler::GetJobStatus() {
  RETURN_IF_ERROR(Enter("GetJobStatus"));
  return core_->Status();
}

absl::Status InProcessScheduler::Leave(Role role, int rank, const std::string& reason) {
  RETURN_IF_ERROR(Enter("Leave"));
  LeaveRequest request;
  request.set_role(role);
  request.set_rank(rank);
  request.set_reason(reason);
  absl::Status answer = core_->Leave(request);
  After();
  return answer;
}

absl::Status InProcessScheduler::ReportCheckpoints(int server_rank, const std::vector<int64_t>& steps,
                                                   int64_t* keep_from) {
  RETURN_IF_ERROR(Enter("ReportCheckpoints"));
  CheckpointReport report;
  report.set_server_rank(server_rank);
  for (int64_t step : steps) report.add_steps(step);
  absl::Status answer = core_->ReportCheckpoints(report);
  if (answer.ok() && keep_from != nullptr) *keep_from = core_->CheckpointsKeptFrom();
  After();
  return answer;
}

absl::Status InProcessScheduler::ReportSlowStep(const SlowStepReport& report) {
  RETURN_IF_ERROR(Enter("ReportSlowStep"));
  return core_->ReportSlowStep(report);
}

absl::Status InProcessScheduler::SubmitFinalShard(const FinalShard& shard) {
  RETURN_IF_ERROR(Enter("SubmitFinalShard"));
  absl::Status answer = core_->SubmitFinalShard(shard);
  After();
  return answer;
}

absl::Status InProcessScheduler::DeclareModel(ModelDeclaration declaration) {
  RETURN_IF_ERROR(Enter("DeclareModel"));
  absl::Status answer = core_->DeclareModel(declaration);
  After();
  return answer;
}

absl::StatusOr<std::string> InProcessScheduler::GetInitialModel() {
  RETURN_IF_ERROR(Enter("GetInitialModel"));
  ASSIGN_OR_RETURN(const scheduler::Scheduler::DeclaredModel model, core_->InitialModel());
  return *model.model_file;
}

}  // namespace pstrain::in_process
