// The ParameterServer gRPC service (proto/ps.proto): a thin adapter from rpcs to a ParameterStore.
//
// Handlers never block: a request the store parks keeps its reactor open without a thread and is
// finished by whichever thread releases it (see server/parameter_store.h). A client that cancels a
// parked request still holds a slot in the store until the step it waits for arrives or the
// store shuts down.
//
// The service is registered before the gRPC server starts, but the store can only be built once
// the cluster view is known; until SetStore, every rpc answers UNAVAILABLE, which clients retry.
//
// Thread safety: all methods may be called from any thread.
#ifndef PSTRAIN_SERVER_PS_SERVICE_H_
#define PSTRAIN_SERVER_PS_SERVICE_H_

#include <atomic>

#include <grpcpp/grpcpp.h>

#include "proto/ps.grpc.pb.h"
#include "server/parameter_store.h"

namespace pstrain::server {

class ParameterServerService final : public ParameterServer::CallbackService {
 public:
  ParameterServerService() = default;
  ParameterServerService(const ParameterServerService&) = delete;
  ParameterServerService& operator=(const ParameterServerService&) = delete;

  // Starts serving from `store`. Borrowed: it must outlive every rpc, so shut the store down
  // (which finishes parked rpcs) and then the gRPC server before destroying it.
  // REQUIRES: called at most once, with a non-null store.
  void SetStore(ParameterStore* store);

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context, const PullRequest* request,
                                 PullResponse* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context, const PushRequest* request,
                                 PushResponse* response) override;
  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* context, const PushRequest* request,
                                     PullResponse* response) override;
  grpc::ServerUnaryReactor* FinishEpoch(grpc::CallbackServerContext* context,
                                        const FinishEpochRequest* request,
                                        FinishEpochResponse* response) override;

 private:
  // The store, or nullptr after finishing `reactor` with UNAVAILABLE.
  ParameterStore* StoreOrFinish(grpc::ServerUnaryReactor* reactor) const;

  std::atomic<ParameterStore*> store_{nullptr};
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_PS_SERVICE_H_
