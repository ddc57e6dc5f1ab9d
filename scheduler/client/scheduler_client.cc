#include "scheduler/client/scheduler_client.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "transport/grpc_status.h"
#include "transport/session_metadata.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

absl::string_view RoleName(Role role) {
  switch (role) {
    case SERVER:
      return "server";
    case WORKER:
      return "worker";
    default:
      return "role";
  }
}

// Host name, process id and a random number: unique per process, also across restarts that reuse
// a pid.
std::string MakeInstanceId() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "/", getpid(), "/", absl::Hex(absl::Uniform<uint64_t>(absl::BitGen())));
}

// gRPC waits up to 2 minutes between attempts to reconnect a channel whose server went away; a
// restarted scheduler must be found again within a heartbeat or two. (The minimum backoff stays at
// its default: it is also each connection attempt's deadline, which a busy machine needs.)
grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Model files travel both ways (DeclareModel, GetInitialModel, SubmitFinalShard); the scheduler
  // takes up to 1 GiB too.
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  return args;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerClient>> SchedulerClient::Create(
    const std::string& address, absl::Duration rpc_timeout, std::shared_ptr<const TransportSecurity> security) {
  if (address.empty() || address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler address: got '", address, "', expected host:port"));
  }
  if (security == nullptr) security = TransportSecurity::Loopback();
  return std::unique_ptr<SchedulerClient>(new SchedulerClient(address, rpc_timeout, *security));
}

SchedulerClient::SchedulerClient(std::string address, absl::Duration rpc_timeout, const TransportSecurity& security)
    : address_(std::move(address)),
      rpc_timeout_(rpc_timeout),
      instance_id_(MakeInstanceId()),
      stub_(Scheduler::NewStub(security.NewChannel(address_, ChannelArgs(), CertRole::kScheduler))) {}

absl::Duration SchedulerClient::reconnect_window() const { return absl::Nanoseconds(reconnect_window_ns_.load()); }

void SchedulerClient::set_reconnect_window(absl::Duration window) {
  reconnect_window_ns_.store(absl::ToInt64Nanoseconds(std::max(window, absl::ZeroDuration())));
}

void SchedulerClient::set_metrics_address(const std::string& address) {
  absl::MutexLock lock(&mu_);
  metrics_address_ = address;
}

void SchedulerClient::set_build_fingerprint(uint64_t fingerprint) {
  absl::MutexLock lock(&mu_);
  build_fingerprint_ = fingerprint;
}

std::string SchedulerClient::session_credential() const {
  absl::MutexLock lock(&mu_);
  return session_credential_;
}

std::string SchedulerClient::Prepare(grpc::ClientContext* context, absl::string_view what,
                                     absl::Duration timeout) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  AttachSession(context, session_credential());
  // While the scheduler may be restarting, a call waits (up to its deadline) for the connection
  // instead of failing at once, which also keeps gRPC trying to reconnect.
  if (reconnect_window() > absl::ZeroDuration()) context->set_wait_for_ready(true);
  return absl::StrCat(what, " to scheduler at ", address_);
}

absl::StatusOr<RegisterResponse> SchedulerClient::Register(Role role, const std::string& address,
                                                           absl::Duration timeout, const LocalEndpoint& local) {
  RegisterRequest request;
  request.set_role(role);
  request.set_address(address);
  if (!local.unix_address().empty()) *request.mutable_local() = local;
  request.set_instance_id(instance_id_);
  {
    absl::MutexLock lock(&mu_);
    request.set_metrics_address(metrics_address_);
    request.set_build_fingerprint(build_fingerprint_);
  }
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + timeout;
  absl::Time next_note = start + absl::Seconds(5);
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    absl::StatusOr<RegisterResponse> response =
        Call(&Scheduler::Stub::Register, request, absl::StrCat("register ", RoleName(role)),
             std::min(rpc_timeout_, std::max(give_up - absl::Now(), absl::Milliseconds(1))));
    if (response.ok()) {
      set_reconnect_window(absl::Milliseconds(response->reconnect_ms()));
      absl::MutexLock lock(&mu_);
      session_credential_ = response->session_credential();
      return response;
    }
    const absl::Status& status = response.status();
    // RESOURCE_EXHAUSTED: too many workers joined the running job in the last minute; a place
    // opens within the minute.
    const bool busy = absl::IsResourceExhausted(status);
    bool retryable = absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || busy;
    if (!retryable) return status;
    if (absl::Now() + backoff >= give_up) {
      if (busy) return status;
      // The one line a newcomer sees when nothing answers: what to check.
      return absl::Status(status.code(),
                          absl::StrCat(status.message(), "; no scheduler answered at ", address_, " for ",
                                       absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Seconds(1))),
                                       ": start it first, or check --scheduler (PSTRAIN_SCHEDULER)"));
    }
    if (absl::Now() >= next_note) {
      next_note = absl::Now() + absl::Seconds(10);
      LOG(WARNING) << "still waiting for the scheduler at " << address_ << " (" << status.message()
                   << "); giving up in " << absl::FormatDuration(absl::Trunc(give_up - absl::Now(), absl::Seconds(1)));
    } else {
      VLOG(1) << status << "; retrying";
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

template <typename Request, typename Response>
absl::StatusOr<Response> SchedulerClient::Call(grpc::Status (Scheduler::Stub::*method)(grpc::ClientContext*,
                                                                                       const Request&, Response*),
                                               const Request& request, absl::string_view what,
                                               absl::Duration timeout) const {
  grpc::ClientContext context;
  const std::string where = Prepare(&context, what, timeout);
  Response response;
  absl::Status status = FromGrpcStatus(((*stub_).*method)(&context, request, &response), where);
  if (absl::IsCancelled(status)) {
    // This client never cancels a call, so the scheduler did: it is shutting down (SIGTERM), and
    // with --state_dir a restarted one goes on. That is the scheduler being away, which callers
    // ride out for the reconnect window, not a verdict on the job.
    return absl::UnavailableError(absl::StrCat(status.message(), " (the scheduler ended the call)"));
  }
  if (absl::IsResourceExhausted(status) && absl::StrContains(status.message(), "RST_STREAM with error code 11")) {
    // HTTP/2 ENHANCE_YOUR_CALM: the scheduler's transport reset the call to stay within its memory
    // quota while others sent it more than it holds (scheduler_runner.cc). Not an answer to this
    // call: the scheduler is briefly unavailable to it, as when it restarts.
    return absl::UnavailableError(absl::StrCat(status.message(), " (the scheduler's buffers were full)"));
  }
  if (!status.ok()) return status;
  return response;
}

template <typename Request, typename Response>
absl::StatusOr<Response> SchedulerClient::CallRetrying(
    grpc::Status (Scheduler::Stub::*method)(grpc::ClientContext*, const Request&, Response*), const Request& request,
    absl::string_view what, absl::Duration timeout, bool parked) const {
  const absl::Time overall = parked ? absl::Now() + timeout : absl::InfiniteFuture();
  std::optional<absl::Time> first_failure;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    absl::StatusOr<Response> response =
        Call(method, request, what, parked ? std::max(overall - absl::Now(), absl::Milliseconds(1)) : timeout);
    const absl::Time now = absl::Now();
    if (response.ok()) {
      if (first_failure.has_value()) {
        LOG(INFO) << what << ": the scheduler at " << address_ << " answers again after "
                  << absl::FormatDuration(now - *first_failure);
      }
      return response;
    }
    const absl::Status& status = response.status();
    const absl::Duration window = reconnect_window();
    const bool retryable = absl::IsUnavailable(status) || (!parked && absl::IsDeadlineExceeded(status));
    if (!retryable || window <= absl::ZeroDuration()) return response;
    if (!first_failure.has_value()) {
      first_failure = now;
      LOG(WARNING) << status.message() << "; retrying for up to " << absl::FormatDuration(window)
                   << " (the scheduler may be restarting)";
    }
    if (now + backoff - *first_failure > window || now + backoff >= overall) {
      return absl::Status(status.code(), absl::StrCat(status.message(), " (retried for ",
                                                      absl::FormatDuration(now - *first_failure), ")"));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

absl::StatusOr<ClusterView> SchedulerClient::WaitUntilRunning(absl::Duration timeout) {
  GetClusterViewRequest request;
  request.set_wait_until_running(true);
  ASSIGN_OR_RETURN(ClusterView view, CallRetrying(&Scheduler::Stub::GetClusterView, request, "wait for cluster view",
                                                  timeout, /*parked=*/true));
  if (view.state() == FAILED) return absl::AbortedError(absl::StrCat("job failed: ", view.failure()));
  return view;
}

absl::StatusOr<ClusterView> SchedulerClient::GetClusterView() {
  return CallRetrying(&Scheduler::Stub::GetClusterView, GetClusterViewRequest(), "get cluster view", rpc_timeout_,
                      /*parked=*/false);
}

absl::Status SchedulerClient::Barrier(const std::string& name, BarrierRequest::Participants who, Role role, int rank,
                                      absl::Duration timeout) {
  BarrierRequest request;
  request.set_name(name);
  request.set_participants(who);
  request.set_role(role);
  request.set_rank(rank);
  return CallRetrying(&Scheduler::Stub::Barrier, request, absl::StrCat("barrier '", name, "'"), timeout,
                      /*parked=*/true)
      .status();
}

absl::StatusOr<HeartbeatResponse> SchedulerClient::Heartbeat(Role role, int rank) {
  HeartbeatRequest request;
  request.set_role(role);
  request.set_rank(rank);
  return Heartbeat(request);
}

absl::StatusOr<HeartbeatResponse> SchedulerClient::Heartbeat(const HeartbeatRequest& request) {
  return Call(&Scheduler::Stub::Heartbeat, request, "heartbeat", rpc_timeout_);
}

absl::StatusOr<LeaseResponse> SchedulerClient::LeaseWork(int worker_rank, int epoch) {
  LeaseRequest request;
  request.set_worker_rank(worker_rank);
  request.set_epoch(epoch);
  request.set_request_seq(next_seq_.fetch_add(1));
  return CallRetrying(&Scheduler::Stub::LeaseWork, request, "lease work", rpc_timeout_, /*parked=*/false);
}

absl::StatusOr<LeaseResponse> SchedulerClient::LeaseEval(int worker_rank, int epoch) {
  LeaseRequest request;
  request.set_worker_rank(worker_rank);
  request.set_epoch(epoch);
  request.set_eval(true);
  request.set_request_seq(next_seq_.fetch_add(1));
  return CallRetrying(&Scheduler::Stub::LeaseWork, request, "lease evaluation work", rpc_timeout_,
                      /*parked=*/false);
}

absl::Status SchedulerClient::ReportProgress(const ProgressReport& report) {
  ProgressReport stamped = report;
  stamped.set_report_seq(next_seq_.fetch_add(1));
  return CallRetrying(&Scheduler::Stub::ReportProgress, stamped, "report progress", rpc_timeout_, /*parked=*/false)
      .status();
}

absl::Status SchedulerClient::ReportFailure(Role role, int rank, const std::string& message) {
  FailureReport request;
  request.set_role(role);
  request.set_rank(rank);
  request.set_message(message);
  return Call(&Scheduler::Stub::ReportFailure, request, "report failure", rpc_timeout_).status();
}

absl::Status SchedulerClient::Leave(Role role, int rank, const std::string& reason) {
  LeaveRequest request;
  request.set_role(role);
  request.set_rank(rank);
  request.set_reason(reason);
  return CallRetrying(&Scheduler::Stub::Leave, request, "leave", rpc_timeout_, /*parked=*/false).status();
}

absl::Status SchedulerClient::ReportCheckpoints(int server_rank, const std::vector<int64_t>& steps,
                                                int64_t* keep_from) {
  CheckpointReport request;
  request.set_server_rank(server_rank);
  for (int64_t step : steps) request.add_steps(step);
  absl::StatusOr<CheckpointAck> ack =
      CallRetrying(&Scheduler::Stub::ReportCheckpoints, request,
                   absl::StrCat("report checkpoints of server ", server_rank), rpc_timeout_, /*parked=*/false);
  if (ack.ok() && keep_from != nullptr) *keep_from = ack->has_keep_from_step() ? ack->keep_from_step() : -1;
  return ack.status();
}

absl::Status SchedulerClient::ReportSlowStep(const SlowStepReport& report) {
  return Call(&Scheduler::Stub::ReportSlowStep, report,
              absl::StrCat("report slow step ", report.step(), " of server ", report.server_rank()), rpc_timeout_)
      .status();
}

absl::Status SchedulerClient::SubmitFinalShard(const FinalShard& shard) {
  return CallRetrying(&Scheduler::Stub::SubmitFinalShard, shard,
                      absl::StrCat("submit final shard ", shard.shard(), " of server ", shard.server_rank()),
                      std::max(rpc_timeout_, absl::Minutes(1)), /*parked=*/false)
      .status();
}

absl::Status SchedulerClient::DeclareModel(ModelDeclaration declaration) {
  const std::string what = absl::StrCat("declare the model of worker ", declaration.worker_rank());
  return CallRetrying(&Scheduler::Stub::DeclareModel, declaration, what, std::max(rpc_timeout_, absl::Minutes(1)),
                      /*parked=*/false)
      .status();
}

absl::StatusOr<std::string> SchedulerClient::GetInitialModel() {
  ASSIGN_OR_RETURN(InitialModel answer, CallRetrying(&Scheduler::Stub::GetInitialModel, InitialModelRequest(),
                                                     "get the initial model", std::max(rpc_timeout_, absl::Minutes(1)),
                                                     /*parked=*/false));
  return std::move(*answer.mutable_model_file());
}

absl::StatusOr<ScaleResponse> SchedulerClient::Scale(int servers) {
  ScaleRequest request;
  request.set_servers(servers);
  return Call(&Scheduler::Stub::Scale, request, "operator request", rpc_timeout_);
}

absl::StatusOr<ScaleResponse> SchedulerClient::CancelScale() {
  ScaleRequest request;
  request.set_cancel(true);
  return Call(&Scheduler::Stub::Scale, request, "operator request", rpc_timeout_);
}

absl::StatusOr<JobStatus> SchedulerClient::GetJobStatus() {
  return Call(&Scheduler::Stub::GetJobStatus, JobStatusRequest(), "get job status", rpc_timeout_);
}

Heartbeater::Heartbeater(SchedulerClient* client, Role role, int rank, absl::Duration interval,
                         absl::Duration give_up_after, std::function<void(absl::Status)> on_end,
                         std::function<void(int64_t)> on_membership_change,
                         std::function<void(HeartbeatRequest*)> describe,
                         std::function<void(const HeartbeatResponse&)> on_answer)
    : client_(client),
      role_(role),
      rank_(rank),
      interval_(interval),
      give_up_after_(give_up_after),
      on_end_(std::move(on_end)),
      on_membership_change_(std::move(on_membership_change)),
      describe_(std::move(describe)),
      on_answer_(std::move(on_answer)),
      thread_([this] { Loop(); }) {}

Heartbeater::~Heartbeater() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Heartbeater::Nudge() {
  absl::MutexLock lock(&mu_);
  nudged_ = true;
}

bool Heartbeater::WaitForNextBeat(absl::Time last) {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || nudged_; };
  mu_.AwaitWithDeadline(absl::Condition(&woken), last + interval_);
  if (!stopping_ && nudged_) {
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), last + kMinNudgeGap);
  }
  nudged_ = false;
  return !stopping_;
}

int64_t Heartbeater::membership_epoch() const {
  absl::MutexLock lock(&mu_);
  return membership_epoch_;
}

void Heartbeater::Loop() {
  absl::Time last_ok = absl::Now();
  int failures_in_a_row = 0;
  do {
    HeartbeatRequest request;
    request.set_role(role_);
    request.set_rank(rank_);
    if (describe_) describe_(&request);
    absl::StatusOr<HeartbeatResponse> response = client_->Heartbeat(request);
    const bool unreachable =
        !response.ok() && (absl::IsUnavailable(response.status()) || absl::IsDeadlineExceeded(response.status()));
    if (!response.ok() && !unreachable) {
      // The scheduler answered and refuses us (e.g. this worker was declared dead): final.
      on_end_(response.status());
      return;
    }
    if (response.ok()) {
      last_ok = absl::Now();
      bool changed = false;
      {
        absl::MutexLock lock(&mu_);
        changed = membership_epoch_ != 0 && response->membership_epoch() > membership_epoch_;
        membership_epoch_ = std::max(membership_epoch_, response->membership_epoch());
      }
      if (changed && on_membership_change_) on_membership_change_(response->membership_epoch());
      if (response->state() == FINISHED) {
        on_end_(absl::OkStatus());
        return;
      }
      if (response->state() == FAILED) {
        on_end_(absl::AbortedError(absl::StrCat("job failed: ", response->failure())));
        return;
      }
      if (on_answer_) on_answer_(*response);
      failures_in_a_row = 0;
    } else if (++failures_in_a_row >= 2 &&
               absl::Now() - last_ok > std::max(give_up_after_, client_->reconnect_window())) {
      // Two failures at least: after the process itself was stopped (SIGSTOP) for a long time, the
      // first attempt may fail on a stale connection although the scheduler is fine.
      on_end_(absl::UnavailableError(absl::StrCat(
          "lost the scheduler at ", client_->address(), ": no heartbeat answered for ",
          absl::FormatDuration(absl::Now() - last_ok), " (last error: ", response.status().message(), ")")));
      return;
    }
  } while (WaitForNextBeat(absl::Now()));
}

}  // namespace pstrain
