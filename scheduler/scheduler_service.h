// The Scheduler gRPC service: a thin adapter that turns requests into calls on a Scheduler core
// and absl::Status into grpc::Status.
//
// GetClusterView(wait_until_running) and Barrier park their reactor in the core without holding a
// thread; whoever releases them (the last registration or barrier entry, or the job's end)
// finishes the call. When the job fails, parked calls end with ABORTED "job failed: <reason>".
//
// Thread-safe (the core is). The Scheduler is borrowed and must outlive the gRPC server.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "proto/scheduler.grpc.pb.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {

class SchedulerService final : public pstrain::Scheduler::CallbackService {
 public:
  // `core` is borrowed; it must outlive the server this service is registered with.
  explicit SchedulerService(Scheduler* core) : core_(core) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const RegisterRequest* request,
                                     RegisterResponse* response) override;
  grpc::ServerUnaryReactor* GetClusterView(grpc::CallbackServerContext* ctx,
                                           const GetClusterViewRequest* request,
                                           ClusterView* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const HeartbeatRequest* request,
                                      HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx, const BarrierRequest* request,
                                    BarrierResponse* response) override;
  grpc::ServerUnaryReactor* LeaseWork(grpc::CallbackServerContext* ctx, const LeaseRequest* request,
                                      LeaseResponse* response) override;
  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* ctx,
                                           const ProgressReport* request,
                                           ProgressResponse* response) override;
  grpc::ServerUnaryReactor* ReportFailure(grpc::CallbackServerContext* ctx,
                                          const FailureReport* request,
                                          FailureResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const LeaveRequest* request,
                                  LeaveResponse* response) override;
  grpc::ServerUnaryReactor* ReportCheckpoints(grpc::CallbackServerContext* ctx,
                                              const CheckpointReport* request,
                                              CheckpointAck* response) override;
  grpc::ServerUnaryReactor* ReportSlowStep(grpc::CallbackServerContext* ctx, const SlowStepReport* request,
                                           SlowStepAck* response) override;
  grpc::ServerUnaryReactor* SubmitFinalModel(grpc::CallbackServerContext* ctx, const FinalModel* request,
                                             FinalModelAck* response) override;
  grpc::ServerUnaryReactor* DeclareModel(grpc::CallbackServerContext* ctx, const ModelDeclaration* request,
                                         ModelDeclarationAck* response) override;
  grpc::ServerUnaryReactor* GetInitialModel(grpc::CallbackServerContext* ctx, const InitialModelRequest* request,
                                            InitialModel* response) override;
  grpc::ServerUnaryReactor* GetJobStatus(grpc::CallbackServerContext* ctx,
                                         const JobStatusRequest* request, JobStatus* response) override;

 private:
  Scheduler* const core_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
