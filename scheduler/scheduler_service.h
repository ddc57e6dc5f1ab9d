// The Scheduler gRPC service: a thin adapter that turns requests into calls on a Scheduler core
// and absl::Status into grpc::Status. Requests arrive as bytes and are parsed here, so a malformed
// one gets INVALID_ARGUMENT naming the method (gRPC's own parsing would answer UNIMPLEMENTED).
//
// Sessions. Register answers a session credential (common/session_credential.h). Every method that
// acts as a rank (Heartbeat, Barrier, ReportFailure, Leave as the request's role and rank;
// LeaseWork, ReportProgress, SubmitFinalModel, DeclareModel as its worker_rank; ReportCheckpoints,
// ReportSlowStep and SubmitFinalShard as its server_rank) checks the call's credential (Scheduler::Authenticate)
// before parsing the request, then that it names that role and rank: UNAUTHENTICATED without a
// valid one, PERMISSION_DENIED for another rank or role, and the core never sees a refused call.
// Register, GetClusterView, GetJobStatus and GetInitialModel act as nobody and need the job's
// transport credentials only (the launcher polls GetJobStatus without registering).
// Scale acts as the operator: no session (an operator does not register), and with TLS only an
// operator's certificate (PERMISSION_DENIED otherwise, and nothing changes).
//
// Certificates (transport/peer_role.h). With TLS, acting as a server (registering as one, its
// heartbeats, barriers, ReportCheckpoints, ReportSlowStep, ...) needs the job's server
// certificate, and acting as a worker the worker certificate, besides the session: otherwise
// PERMISSION_DENIED "Register as server: the peer's certificate is for role worker; a server
// needs the job's server certificate (--tls_cert)", and nothing changes. The check follows the
// session's (the gate has refused a call without a valid session before its request was read).
// On a unix socket (no certificate) the token and session alone decide.
//
// GetClusterView(wait_until_running) and Barrier park their reactor in the core without holding a
// thread; whoever releases them (the last registration or barrier entry, or the job's end)
// finishes the call. When the job fails, parked calls end with ABORTED "job failed: <reason>".
//
// Thread-safe (the core is). The Scheduler is borrowed and must outlive the gRPC server.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "transport/session_gate.h"
#include "proto/scheduler.grpc.pb.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {

// Every method raw (transport/parsed_unary.h): a request that does not parse is INVALID_ARGUMENT.
using RawSchedulerBase = pstrain::Scheduler::WithRawCallbackMethod_Register<
    pstrain::Scheduler::WithRawCallbackMethod_GetClusterView<pstrain::Scheduler::WithRawCallbackMethod_Heartbeat<
        pstrain::Scheduler::WithRawCallbackMethod_Barrier<pstrain::Scheduler::WithRawCallbackMethod_LeaseWork<
            pstrain::Scheduler::WithRawCallbackMethod_ReportProgress<
                pstrain::Scheduler::WithRawCallbackMethod_ReportFailure<pstrain::Scheduler::WithRawCallbackMethod_Leave<
                    pstrain::Scheduler::WithRawCallbackMethod_ReportCheckpoints<
                        pstrain::Scheduler::WithRawCallbackMethod_ReportSlowStep<
                            pstrain::Scheduler::WithRawCallbackMethod_SubmitFinalModel<
                                pstrain::Scheduler::WithRawCallbackMethod_SubmitFinalShard<
                                    pstrain::Scheduler::WithRawCallbackMethod_DeclareModel<
                                        pstrain::Scheduler::WithRawCallbackMethod_GetInitialModel<
                                            pstrain::Scheduler::WithRawCallbackMethod_GetJobStatus<
                                                pstrain::Scheduler::WithRawCallbackMethod_Scale<
                                                    pstrain::Scheduler::Service>>>>>>>>>>>>>>>>;

class SchedulerService final : public RawSchedulerBase, public SessionGate {
 public:
  // `core` is borrowed; it must outlive the server this service is registered with.
  explicit SchedulerService(Scheduler* core) : core_(core) {}

  // SessionGate, for the transport (transport/session_gate.h): with TLS, a call of a method that acts
  // as a rank without a valid session credential (Scheduler::Authenticate) is refused before its
  // request is read. The handlers check the rank the request names.
  absl::Status Admit(absl::string_view method, absl::string_view credential, const Peer& peer) const override;

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetClusterView(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* LeaseWork(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportFailure(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Scale(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportCheckpoints(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportSlowStep(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SubmitFinalModel(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SubmitFinalShard(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeclareModel(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetInitialModel(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJobStatus(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  Scheduler* const core_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
