#include "scheduler/scheduler_service.h"

#include <utility>

#include "common/parsed_unary.h"
#include "glog/logging.h"

namespace pstrain {
namespace scheduler {

grpc::ServerUnaryReactor* SchedulerService::Register(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                     grpc::ByteBuffer* out) {
  return ServeParsed<RegisterRequest, RegisterResponse>(in, out, "Register", [this](auto* call) {
    VLOG(1) << "Register " << RoleName(call->request.role()) << " at '" << call->request.address() << "'";
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

grpc::ServerUnaryReactor* SchedulerService::Heartbeat(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return ServeParsed<HeartbeatRequest, HeartbeatResponse>(in, out, "Heartbeat", [this](auto* call) {
    VLOG(3) << "Heartbeat " << RoleName(call->request.role()) << " " << call->request.rank();
    call->Reply(core_->Heartbeat(call->request));
  });
}

grpc::ServerUnaryReactor* SchedulerService::Barrier(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
  return ServeParsed<BarrierRequest, BarrierResponse>(in, out, "Barrier", [this](auto* call) {
    core_->Barrier(call->request, [call](absl::Status status) { call->Reply(status); });
  });
}

grpc::ServerUnaryReactor* SchedulerService::LeaseWork(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return ServeParsed<LeaseRequest, LeaseResponse>(in, out, "LeaseWork",
                                                  [this](auto* call) { call->Reply(core_->LeaseWork(call->request)); });
}

grpc::ServerUnaryReactor* SchedulerService::ReportProgress(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                           grpc::ByteBuffer* out) {
  return ServeParsed<ProgressReport, ProgressResponse>(in, out, "ReportProgress", [this](auto* call) {
    const ProgressReport& r = call->request;
    VLOG(2) << "ReportProgress worker " << r.worker_rank() << " epoch " << r.epoch() << " step " << r.step()
            << " evals " << r.evals_size();
    call->Reply(core_->ReportProgress(r));
  });
}

grpc::ServerUnaryReactor* SchedulerService::ReportFailure(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                          grpc::ByteBuffer* out) {
  return ServeParsed<FailureReport, FailureResponse>(in, out, "ReportFailure", [this](auto* call) {
    core_->ReportFailure(call->request);
    call->Reply(absl::OkStatus());
  });
}

grpc::ServerUnaryReactor* SchedulerService::Leave(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                  grpc::ByteBuffer* out) {
  return ServeParsed<LeaveRequest, LeaveResponse>(in, out, "Leave", [this](auto* call) {
    const LeaveRequest& r = call->request;
    VLOG(1) << "Leave " << RoleName(r.role()) << " " << r.rank() << ": " << r.reason();
    call->Reply(core_->Leave(r));
  });
}

grpc::ServerUnaryReactor* SchedulerService::ReportCheckpoints(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                              grpc::ByteBuffer* out) {
  return ServeParsed<CheckpointReport, CheckpointAck>(in, out, "ReportCheckpoints", [this](auto* call) {
    VLOG(2) << "ReportCheckpoints server " << call->request.server_rank() << ": " << call->request.steps_size()
            << " steps";
    call->Reply(core_->ReportCheckpoints(call->request));
  });
}

grpc::ServerUnaryReactor* SchedulerService::ReportSlowStep(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                           grpc::ByteBuffer* out) {
  return ServeParsed<SlowStepReport, SlowStepAck>(
      in, out, "ReportSlowStep", [this](auto* call) { call->Reply(core_->ReportSlowStep(call->request)); });
}

grpc::ServerUnaryReactor* SchedulerService::SubmitFinalModel(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                             grpc::ByteBuffer* out) {
  return ServeParsed<FinalModel, FinalModelAck>(in, out, "SubmitFinalModel", [this](auto* call) {
    VLOG(1) << "SubmitFinalModel worker " << call->request.worker_rank() << ": "
            << call->request.model_file().size() << " bytes";
    // Writes (and fsyncs) the file on this callback thread: rare, and the caller waits for it anyway.
    call->Reply(core_->SubmitFinalModel(call->request));
  });
}

grpc::ServerUnaryReactor* SchedulerService::DeclareModel(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
                                                         grpc::ByteBuffer* out) {
  return ServeParsed<ModelDeclaration, ModelDeclarationAck>(in, out, "DeclareModel", [this](auto* call) {
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

}  // namespace scheduler
}  // namespace pstrain
