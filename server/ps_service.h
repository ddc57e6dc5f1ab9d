// The ParameterServer gRPC service (proto/ps.proto): a thin adapter from rpcs to a ParameterStore.
//
// Pull, Push and PushPull are served raw: the handler gets the received bytes and decodes them in
// place with common/tensor_wire.h, so a gradient's values are copied once, from the received
// slices into the store, and the weights of an answer once, from the store into a pooled buffer
// that gRPC sends from. The bytes are the protobuf encoding of the messages all the same, so any
// protobuf client can call them. FinishEpoch carries no tensor and is an ordinary typed method.
//
// Handlers never block: a request the store parks keeps its reactor open without a thread and is
// finished by whichever thread releases it (see server/parameter_store.h). A client that cancels a
// parked request still holds a slot in the store until the step it waits for arrives or the
// store shuts down.
//
// The service is registered before the gRPC server starts, but the store can only be built once
// the cluster view is known; until SetStore, every rpc answers UNAVAILABLE, which clients retry.
//
// Replicas (JobSpec.replicas = 2): the server hosts two stores, its own shard and the live copy of
// the shard before it (server/server_runner.h). A request goes to the store of the shard it names
// (PushRequest.shard etc.; absent: the server's own shard); a shard the server does not host is
// FAILED_PRECONDITION "server 1 does not host shard 3 (it hosts shards 1 and 0)". Which store is
// primary and which a backup does not matter here: both take the same requests.
//
// Thread safety: all methods may be called from any thread.
#ifndef PSTRAIN_SERVER_PS_SERVICE_H_
#define PSTRAIN_SERVER_PS_SERVICE_H_

#include <atomic>
#include <optional>

#include <grpcpp/grpcpp.h>

#include "common/tensor_wire.h"
#include "proto/ps.grpc.pb.h"
#include "server/parameter_store.h"

namespace pstrain::server {

using RawParameterServerBase = ParameterServer::WithRawCallbackMethod_Pull<ParameterServer::WithRawCallbackMethod_Push<
    ParameterServer::WithRawCallbackMethod_PushPull<ParameterServer::WithCallbackMethod_FinishEpoch<ParameterServer::Service>>>>;

class ParameterServerService final : public RawParameterServerBase {
 public:
  ParameterServerService() = default;
  ParameterServerService(const ParameterServerService&) = delete;
  ParameterServerService& operator=(const ParameterServerService&) = delete;

  // Starts serving from `store`. Borrowed: it must outlive every rpc, so shut the store down
  // (which finishes parked rpcs) and then the gRPC server before destroying it.
  // REQUIRES: called at most once, with a non-null store.
  void SetStore(ParameterStore* store) { SetStores(store, nullptr); }
  // The same with a replica: `own` answers for shard own->rank() (and requests naming no shard),
  // `replica`, when not null, for shard replica->rank(). Both borrowed like SetStore's.
  // REQUIRES: called at most once (either form), own != nullptr, ranks differ.
  void SetStores(ParameterStore* own, ParameterStore* replica);

  // Raw: a PullRequest in, a PullResponse out.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  // Raw: a PushRequest in, a PushResponse out.
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  // Raw: a PushRequest in, a PullResponse out.
  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* FinishEpoch(grpc::CallbackServerContext* context,
                                        const FinishEpochRequest* request,
                                        FinishEpochResponse* response) override;

 private:
  // The store of `shard` (nullopt: the server's own), or nullptr after finishing `reactor` with
  // UNAVAILABLE (not ready yet) or FAILED_PRECONDITION (a shard this server does not host).
  ParameterStore* StoreOrFinish(std::optional<int> shard, grpc::ServerUnaryReactor* reactor) const;
  // Decodes a push into `push` (its views borrow the request's bytes) and returns the store of its
  // shard, or nullptr after finishing `reactor` with INVALID_ARGUMENT (bytes that do not decode)
  // or as StoreOrFinish does.
  ParameterStore* DecodePushOrFinish(const grpc::ByteBuffer& request, IncomingPush* push,
                                     grpc::ServerUnaryReactor* reactor) const;

  // replica_ is written before store_, and store_ is read first: a non-null store_ means both are set.
  std::atomic<ParameterStore*> store_{nullptr};
  std::atomic<ParameterStore*> replica_{nullptr};
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_PS_SERVICE_H_
