#include "scheduler/scheduler_service.h"

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "transport/parsed_unary.h"
#include "transport/peer_role.h"
#include "transport/session_metadata.h"
#include "glog/logging.h"

namespace pstrain {
namespace scheduler {
namespace {

// The certificate role that may act as (or register as) `role`.
CertRole CertRoleFor(Role role) { return role == SERVER ? CertRole::kServer : CertRole::kWorker; }

// OK when the call's peer may act as `role` by its certificate (transport/peer_role.h): a server's
// certificate for a server, a worker's for a worker; always on a unix socket or plaintext.
absl::Status CheckCertificateFor(const grpc::CallbackServerContext& ctx, Role role, absl::string_view what) {
  if (role != SERVER && role != WORKER) return absl::OkStatus();  // The core refuses any other role.
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  return CheckPeerRole(PeerOf(auth.get()), CertRoleFor(role), what);
}

// Who a request says it acts as.
struct Acting {
  Role role;
  int rank;
};

// ServeParsed for a method that acts as a rank: the call's session credential is checked
// (Scheduler::Authenticate) before the request is parsed, and must name the role and rank
// `acting_as(request)` gives. A refused call changes nothing: the handler never runs.
template <typename Request, typename Response, typename ActingAs, typename Handler>
grpc::ServerUnaryReactor* ServeAs(const Scheduler& core, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                  grpc::ByteBuffer* out, absl::string_view method, ActingAs acting_as,
                                  Handler&& handle) {
  absl::StatusOr<SessionClaims> caller = core.Authenticate(SessionCredentialOf(*ctx));
  if (!caller.ok()) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(
        ToGrpcStatus(absl::Status(caller.status().code(), absl::StrCat(method, ": ", caller.status().message()))));
    return reactor;
  }
  return ServeParsed<Request, Response>(in, out, method, [&](auto* call) {
    const Acting as = acting_as(call->request);
    absl::Status s = CheckActsAs(*caller, as.role, as.rank, method);
    if (s.ok()) s = CheckCertificateFor(*ctx, as.role, method);
    if (!s.ok()) {
      LOG(WARNING) << "refused: " << s.message();
      return call->Reply(s);
    }
    std::forward<Handler>(handle)(call);
  });
}

template <typename Request>
Acting AsRoleRank(const Request& r) {
  return {r.role(), r.rank()};
}
template <typename Request>
Acting AsWorker(const Request& r) {
  return {WORKER, r.worker_rank()};
}
template <typename Request>
Acting AsServer(const Request& r) {
  return {SERVER, r.server_rank()};
}

// The methods that act as nobody: they need the job's transport credentials only.
// Scale acts as the operator, whose certificate its handler checks.
constexpr absl::string_view kOpenMethods[] = {"Register", "GetClusterView", "GetJobStatus", "GetInitialModel", "Scale"};

}  // namespace

absl::Status SchedulerService::Admit(absl::string_view method, absl::string_view credential,
                                     const Peer& /*peer*/) const {
  // gRPC health needs no session; neither do the open methods. Anything else, a method of no
  // service here included, is read only for a session: a member without one cannot make the
  // scheduler read a payload only to answer UNIMPLEMENTED.
  if (absl::StartsWith(method, kHealthServicePrefix)) return absl::OkStatus();
  if (absl::ConsumePrefix(&method, "/pstrain.Scheduler/")) {
    for (absl::string_view open : kOpenMethods) {
      if (method == open) return absl::OkStatus();
    }
  }
  // The certificate's role is checked by the handlers (ServeAs), after the session and the rank
  // the request names: a refusal then says first what the session may not do.
  absl::Status caller = core_->Authenticate(credential).status();
  if (caller.ok()) return caller;
  return absl::Status(caller.code(), absl::StrCat(method, ": ", caller.message()));
}

grpc::ServerUnaryReactor* SchedulerService::Register(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                     grpc::ByteBuffer* out) {
  return ServeParsed<RegisterRequest, RegisterResponse>(in, out, "Register", [this, ctx](auto* call) {
    VLOG(1) << "Register " << RoleName(call->request.role()) << " at '" << call->request.address() << "'";
    // A worker's certificate cannot register a server (and take its rank and address).
    const Role role = call->request.role();
    if (absl::Status s = CheckCertificateFor(*ctx, role, absl::StrCat("Register as ", RoleName(role))); !s.ok()) {
      LOG(WARNING) << "refused: " << s.message();
      return call->Reply(s);
    }
    call->Reply(core_->Register(call->request));
  });
}

grpc::ServerUnaryReactor* SchedulerService::GetClusterView(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                           grpc::ByteBuffer* out) {
  return ServeParsed<GetClusterViewRequest, ClusterView>(in, out, "GetClusterView", [this](auto* call) {
    VLOG(2) << "GetClusterView wait_until_running=" << call->request.wait_until_running();
    if (!call->request.wait_until_running()) return call->Reply(core_->View());
    // The call stays alive until Reply, however late that is.
    core_->WhenRunning([call](absl::StatusOr<ClusterView> view) { call->Reply(std::move(view)); });
  });
}

grpc::ServerUnaryReactor* SchedulerService::Heartbeat(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return ServeAs<HeartbeatRequest, HeartbeatResponse>(
      *core_, ctx, in, out, "Heartbeat", AsRoleRank<HeartbeatRequest>, [this](auto* call) {
        VLOG(3) << "Heartbeat " << RoleName(call->request.role()) << " " << call->request.rank();
        call->Reply(core_->Heartbeat(call->request));
      });
}

grpc::ServerUnaryReactor* SchedulerService::Barrier(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
  return ServeAs<BarrierRequest, BarrierResponse>(
      *core_, ctx, in, out, "Barrier", AsRoleRank<BarrierRequest>,
      [this](auto* call) { core_->Barrier(call->request, [call](absl::Status status) { call->Reply(status); }); });
}

grpc::ServerUnaryReactor* SchedulerService::LeaseWork(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return ServeAs<LeaseRequest, LeaseResponse>(*core_, ctx, in, out, "LeaseWork", AsWorker<LeaseRequest>,
                                              [this](auto* call) { call->Reply(core_->LeaseWork(call->request)); });
}

grpc::ServerUnaryReactor* SchedulerService::ReportProgress(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                           grpc::ByteBuffer* out) {
  return ServeAs<ProgressReport, ProgressResponse>(
      *core_, ctx, in, out, "ReportProgress", AsWorker<ProgressReport>, [this](auto* call) {
        const ProgressReport& r = call->request;
        VLOG(2) << "ReportProgress worker " << r.worker_rank() << " epoch " << r.epoch() << " step " << r.step()
                << " evals " << r.evals_size();
        call->Reply(core_->ReportProgress(r));
      });
}

grpc::ServerUnaryReactor* SchedulerService::ReportFailure(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                          grpc::ByteBuffer* out) {
  return ServeAs<FailureReport, FailureResponse>(*core_, ctx, in, out, "ReportFailure", AsRoleRank<FailureReport>,
                                                 [this](auto* call) {
                                                   core_->ReportFailure(call->request);
                                                   call->Reply(absl::OkStatus());
                                                 });
}

grpc::ServerUnaryReactor* SchedulerService::Leave(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                  grpc::ByteBuffer* out) {
  return ServeAs<LeaveRequest, LeaveResponse>(
      *core_, ctx, in, out, "Leave", AsRoleRank<LeaveRequest>, [this](auto* call) {
        const LeaveRequest& r = call->request;
        VLOG(1) << "Leave " << RoleName(r.role()) << " " << r.rank() << ": " << r.reason();
        call->Reply(core_->Leave(r));
      });
}

grpc::ServerUnaryReactor* SchedulerService::ReportCheckpoints(grpc::CallbackServerContext* ctx,
                                                              const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return ServeAs<CheckpointReport, CheckpointAck>(
      *core_, ctx, in, out, "ReportCheckpoints", AsServer<CheckpointReport>, [this](auto* call) {
        VLOG(2) << "ReportCheckpoints server " << call->request.server_rank() << ": " << call->request.steps_size()
                << " steps";
        if (absl::Status s = core_->ReportCheckpoints(call->request); !s.ok()) {
          call->Reply(s);
          return;
        }
        if (const int64_t from = core_->CheckpointsKeptFrom(); from >= 0) call->response.set_keep_from_step(from);
        call->Reply(absl::OkStatus());
      });
}

grpc::ServerUnaryReactor* SchedulerService::ReportSlowStep(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                           grpc::ByteBuffer* out) {
  return ServeAs<SlowStepReport, SlowStepAck>(
      *core_, ctx, in, out, "ReportSlowStep", AsServer<SlowStepReport>,
      [this](auto* call) { call->Reply(core_->ReportSlowStep(call->request)); });
}

grpc::ServerUnaryReactor* SchedulerService::SubmitFinalModel(grpc::CallbackServerContext* ctx,
                                                             const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return ServeAs<FinalModel, FinalModelAck>(
      *core_, ctx, in, out, "SubmitFinalModel", AsWorker<FinalModel>, [this](auto* call) {
        VLOG(1) << "SubmitFinalModel worker " << call->request.worker_rank() << ": "
                << call->request.model_file().size() << " bytes (refused)";
        call->Reply(core_->SubmitFinalModel(call->request));
      });
}

grpc::ServerUnaryReactor* SchedulerService::SubmitFinalShard(grpc::CallbackServerContext* ctx,
                                                             const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return ServeAs<FinalShard, FinalShardAck>(
      *core_, ctx, in, out, "SubmitFinalShard", AsServer<FinalShard>, [this](auto* call) {
        VLOG(1) << "SubmitFinalShard server " << call->request.server_rank() << ": shard " << call->request.shard()
                << ", " << call->request.chunks_size() << " chunks";
        // The last shard writes (and fsyncs) the model on this callback thread: once per job, and the
        // server waits for it anyway.
        call->Reply(core_->SubmitFinalShard(call->request));
      });
}

grpc::ServerUnaryReactor* SchedulerService::DeclareModel(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                         grpc::ByteBuffer* out) {
  return ServeAs<ModelDeclaration, ModelDeclarationAck>(
      *core_, ctx, in, out, "DeclareModel", AsWorker<ModelDeclaration>, [this](auto* call) {
        VLOG(1) << "DeclareModel worker " << call->request.worker_rank() << ": " << call->request.model_file().size()
                << " bytes";
        // Parses (and, the first time, saves) the model file on this callback thread: once per worker.
        call->Reply(core_->DeclareModel(call->request));
      });
}

grpc::ServerUnaryReactor* SchedulerService::GetInitialModel(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                            grpc::ByteBuffer* out) {
  return ServeParsed<InitialModelRequest, InitialModel>(in, out, "GetInitialModel", [this](auto* call) {
    absl::StatusOr<Scheduler::DeclaredModel> model = core_->InitialModel();
    if (model.ok()) {
      call->response.set_model_file(*model->model_file);
      call->response.set_declared_by(model->worker_rank);
    }
    call->Reply(model.status());
  });
}

grpc::ServerUnaryReactor* SchedulerService::GetJobStatus(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                         grpc::ByteBuffer* out) {
  return ServeParsed<JobStatusRequest, JobStatus>(in, out, "GetJobStatus",
                                                  [this](auto* call) { call->Reply(core_->Status()); });
}

grpc::ServerUnaryReactor* SchedulerService::Scale(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                  grpc::ByteBuffer* out) {
  return ServeParsed<ScaleRequest, ScaleResponse>(in, out, "Scale", [this, ctx](auto* call) {
    const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
    if (absl::Status s = CheckPeerRole(PeerOf(auth.get()), CertRole::kOperator, "Scale"); !s.ok()) {
      LOG(WARNING) << "refused a scale request: " << s.message();
      call->Reply(s);
      return;
    }
    call->Reply(core_->Scale(call->request));
  });
}

}  // namespace scheduler
}  // namespace pstrain
