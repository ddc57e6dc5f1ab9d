#include "scheduler/scheduler_service.h"

#include <utility>

#include "common/grpc_status.h"
#include "glog/logging.h"

namespace pstrain {
namespace scheduler {
namespace {

// Copies an OK result into the response and finishes the call.
template <typename T>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, absl::StatusOr<T> result,
                                 T* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (result.ok()) *response = *std::move(result);
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* SchedulerService::Register(grpc::CallbackServerContext* ctx,
                                                     const RegisterRequest* request,
                                                     RegisterResponse* response) {
  VLOG(1) << "Register " << RoleName(request->role()) << " at '" << request->address() << "'";
  return Answer(ctx, core_->Register(*request), response);
}

grpc::ServerUnaryReactor* SchedulerService::GetClusterView(grpc::CallbackServerContext* ctx,
                                                           const GetClusterViewRequest* request,
                                                           ClusterView* response) {
  VLOG(2) << "GetClusterView wait_until_running=" << request->wait_until_running();
  if (!request->wait_until_running()) return Answer(ctx, absl::StatusOr<ClusterView>(core_->View()), response);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The call stays alive (and `response` valid) until Finish, however late that is.
  core_->WhenRunning([reactor, response](absl::StatusOr<ClusterView> view) {
    if (view.ok()) *response = *std::move(view);
    reactor->Finish(ToGrpcStatus(view.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                      const HeartbeatRequest* request,
                                                      HeartbeatResponse* response) {
  VLOG(3) << "Heartbeat " << RoleName(request->role()) << " " << request->rank();
  return Answer(ctx, core_->Heartbeat(*request), response);
}

grpc::ServerUnaryReactor* SchedulerService::Barrier(grpc::CallbackServerContext* ctx,
                                                    const BarrierRequest* request,
                                                    BarrierResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core_->Barrier(*request, [reactor](absl::Status status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::LeaseWork(grpc::CallbackServerContext* ctx,
                                                      const LeaseRequest* request,
                                                      LeaseResponse* response) {
  return Answer(ctx, core_->LeaseWork(*request), response);
}

grpc::ServerUnaryReactor* SchedulerService::ReportProgress(grpc::CallbackServerContext* ctx,
                                                           const ProgressReport* request,
                                                           ProgressResponse* response) {
  VLOG(2) << "ReportProgress worker " << request->worker_rank() << " epoch " << request->epoch()
          << " step " << request->step() << " evals " << request->evals_size();
  return Answer(ctx, core_->ReportProgress(*request));
}

grpc::ServerUnaryReactor* SchedulerService::ReportFailure(grpc::CallbackServerContext* ctx,
                                                          const FailureReport* request,
                                                          FailureResponse* response) {
  core_->ReportFailure(*request);
  return Answer(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::Leave(grpc::CallbackServerContext* ctx,
                                                  const LeaveRequest* request, LeaveResponse* response) {
  VLOG(1) << "Leave " << RoleName(request->role()) << " " << request->rank() << ": " << request->reason();
  return Answer(ctx, core_->Leave(*request));
}

grpc::ServerUnaryReactor* SchedulerService::ReportCheckpoints(grpc::CallbackServerContext* ctx,
                                                              const CheckpointReport* request,
                                                              CheckpointAck* response) {
  VLOG(2) << "ReportCheckpoints server " << request->server_rank() << ": " << request->steps_size() << " steps";
  return Answer(ctx, core_->ReportCheckpoints(*request));
}

grpc::ServerUnaryReactor* SchedulerService::ReportSlowStep(grpc::CallbackServerContext* ctx,
                                                           const SlowStepReport* request, SlowStepAck* response) {
  return Answer(ctx, core_->ReportSlowStep(*request));
}

grpc::ServerUnaryReactor* SchedulerService::SubmitFinalModel(grpc::CallbackServerContext* ctx,
                                                             const FinalModel* request, FinalModelAck* response) {
  VLOG(1) << "SubmitFinalModel worker " << request->worker_rank() << ": " << request->model_file().size() << " bytes";
  // Writes (and fsyncs) the file on this callback thread: rare, and the caller waits for it anyway.
  return Answer(ctx, core_->SubmitFinalModel(*request));
}

grpc::ServerUnaryReactor* SchedulerService::DeclareModel(grpc::CallbackServerContext* ctx,
                                                         const ModelDeclaration* request,
                                                         ModelDeclarationAck* response) {
  VLOG(1) << "DeclareModel worker " << request->worker_rank() << ": " << request->model_file().size() << " bytes";
  // Parses (and, the first time, saves) the model file on this callback thread: once per worker.
  return Answer(ctx, core_->DeclareModel(*request));
}

grpc::ServerUnaryReactor* SchedulerService::GetInitialModel(grpc::CallbackServerContext* ctx,
                                                            const InitialModelRequest* request,
                                                            InitialModel* response) {
  absl::StatusOr<Scheduler::DeclaredModel> model = core_->InitialModel();
  if (model.ok()) {
    response->set_model_file(*model->model_file);
    response->set_declared_by(model->worker_rank);
  }
  return Answer(ctx, model.status());
}

grpc::ServerUnaryReactor* SchedulerService::GetJobStatus(grpc::CallbackServerContext* ctx,
                                                         const JobStatusRequest* request,
                                                         JobStatus* response) {
  return Answer(ctx, absl::StatusOr<JobStatus>(core_->Status()), response);
}

}  // namespace scheduler
}  // namespace pstrain
