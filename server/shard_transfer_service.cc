#include "server/shard_transfer_service.h"

#include <algorithm>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "transport/grpc_status.h"
#include "transport/session_metadata.h"
#include "common/status_macros.h"
#include "server/checkpoint_chain.h"
#include "server/cut_part.h"

namespace pstrain::server {

ShardTransferService::ShardTransferService(int64_t page_bytes) : page_bytes_(page_bytes) { CHECK_GT(page_bytes_, 0); }

void ShardTransferService::Start(int rank, std::string checkpoint_dir, std::unique_ptr<SessionVerifier> verifier) {
  absl::MutexLock lock(&mu_);
  CHECK(!started_) << "ShardTransferService::Start called twice";
  started_ = true;
  rank_ = rank;
  checkpoint_dir_ = std::move(checkpoint_dir);
  sessions_ = std::move(verifier);
}

void ShardTransferService::SetMap(const ShardMap& map) {
  absl::MutexLock lock(&mu_);
  if (!maps_.empty() && maps_.back().version() >= map.version()) return;
  maps_.push_back(map);
  while (maps_.size() > 2) maps_.pop_front();
}

absl::StatusOr<ShardMap> ShardTransferService::MapOf(int64_t version) const {
  absl::MutexLock lock(&mu_);
  for (const ShardMap& map : maps_) {
    if (map.version() == version) return map;
  }
  return absl::UnavailableError(absl::StrCat("server ", rank_, " does not know shard map version ", version,
                                             " yet (it knows ", maps_.empty() ? 0 : maps_.back().version(),
                                             "); try again"));
}

absl::Status ShardTransferService::CheckCaller(absl::string_view credential, absl::string_view method) const {
  absl::MutexLock lock(&mu_);
  if (!started_)
    return absl::UnavailableError(absl::StrCat(method, ": server not ready: it has not joined its job yet"));
  if (sessions_ == nullptr) return absl::OkStatus();
  absl::StatusOr<SessionClaims> caller = sessions_->Verify(credential);
  if (!caller.ok()) return absl::Status(caller.status().code(), absl::StrCat(method, ": ", caller.status().message()));
  if (caller->role != SERVER) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, ": ", DescribeCaller(*caller), " may not fetch a part of a cut; only servers do"));
  }
  return absl::OkStatus();
}

absl::Status ShardTransferService::Admit(absl::string_view method, absl::string_view credential,
                                         const Peer& peer) const {
  RETURN_IF_ERROR(CheckCaller(credential, method));
  return CheckPeerRole(peer, CertRole::kServer, method);
}

absl::StatusOr<std::shared_ptr<const std::string>> ShardTransferService::Part(const CutPartRequest& request) {
  int me = -1;  // this server's rank
  std::string checkpoint_dir;
  {
    absl::MutexLock lock(&mu_);
    if (!started_) return absl::UnavailableError("server not ready: it has not joined its job yet");
    me = rank_;
    checkpoint_dir = checkpoint_dir_;
  }
  const std::string what =
      absl::StrCat("server ", me, "'s part of its checkpoint of step ", request.step(), " for server ",
                   request.to_rank(), " of shard map version ", request.shard_map_version());
  if (request.from_rank() != me) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the request asks for server ", request.from_rank(), "'s, expected ", me));
  }
  ASSIGN_OR_RETURN(const ShardMap map, MapOf(request.shard_map_version()));
  const int servers = map.num_servers();
  if (request.to_rank() < 0 || request.to_rank() >= servers) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected a destination in [0, ", servers, "), the map's servers"));
  }
  const Key key{request.step(), request.shard_map_version(), request.to_rank()};
  {
    absl::MutexLock lock(&mu_);
    if (auto it = parts_.find(key); it != parts_.end()) return it->second;
  }
  // Read and cut outside the lock: other parts are answered meanwhile.
  absl::StatusOr<ShardCheckpoint> own = ReadCheckpointChain(checkpoint_dir, me, request.step());
  if (!own.ok()) return absl::Status(own.status().code(), absl::StrCat(what, ": ", own.status().message()));
  absl::StatusOr<ShardCheckpoint> part = CutPartFor(*own, map, servers, request.to_rank());
  if (!part.ok()) return absl::FailedPreconditionError(absl::StrCat(what, ": ", part.status().message()));
  ASSIGN_OR_RETURN(std::string bytes, EncodeCheckpoint(*part));
  auto shared = std::make_shared<const std::string>(std::move(bytes));
  absl::MutexLock lock(&mu_);
  if (auto [it, added] = parts_.emplace(key, shared); !added) return it->second;
  order_.push_back(key);
  while (static_cast<int>(order_.size()) > kMaxParts) {
    parts_.erase(order_.front());
    order_.pop_front();
  }
  return shared;
}

grpc::Status ShardTransferService::FetchCutPart(grpc::ServerContext* context, const CutPartRequest* request,
                                                CutPartResponse* response) {
  if (absl::Status caller = CheckCaller(SessionCredentialOf(*context), "FetchCutPart"); !caller.ok()) {
    return ToGrpcStatus(caller);
  }
  absl::StatusOr<std::shared_ptr<const std::string>> part = Part(*request);
  if (!part.ok()) return ToGrpcStatus(part.status());
  const auto total = static_cast<int64_t>((*part)->size());
  if (request->offset() < 0 || request->offset() > total) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("FetchCutPart: offset ", request->offset(), " is outside the part's ", total, " bytes")));
  }
  const int64_t size = std::min(page_bytes_, total - request->offset());
  response->set_data((*part)->substr(static_cast<size_t>(request->offset()), static_cast<size_t>(size)));
  response->set_total_bytes(total);
  if (request->offset() + size == total) {
    // The last page: the destination has the whole part.
    absl::MutexLock lock(&mu_);
    const Key key{request->step(), request->shard_map_version(), request->to_rank()};
    if (parts_.erase(key) > 0) order_.erase(std::find(order_.begin(), order_.end(), key));
  }
  return grpc::Status::OK;
}

absl::StatusOr<ShardCheckpoint> FetchCutPart(ShardTransfer::StubInterface* stub, const std::string& session_credential,
                                             absl::Duration timeout, int64_t step, int from_rank,
                                             int64_t shard_map_version, int to_rank) {
  const std::string what = absl::StrCat("fetching server ", from_rank, "'s part of its checkpoint of step ", step,
                                        " for server ", to_rank, " of shard map version ", shard_map_version);
  CutPartRequest request;
  request.set_step(step);
  request.set_from_rank(from_rank);
  request.set_shard_map_version(shard_map_version);
  request.set_to_rank(to_rank);
  std::string bytes;
  int64_t total = -1;
  while (total < 0 || static_cast<int64_t>(bytes.size()) < total) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    AttachSession(&context, session_credential);
    request.set_offset(static_cast<int64_t>(bytes.size()));
    CutPartResponse response;
    if (grpc::Status s = stub->FetchCutPart(&context, request, &response); !s.ok()) return FromGrpcStatus(s, what);
    if (total >= 0 && response.total_bytes() != total) {
      return absl::DataLossError(absl::StrCat(what, ": the part's size changed from ", total, " to ",
                                              response.total_bytes(), " bytes between pages"));
    }
    total = response.total_bytes();
    if (response.data().empty() && static_cast<int64_t>(bytes.size()) < total) {
      return absl::DataLossError(absl::StrCat(what, ": an empty page at byte ", bytes.size(), " of ", total));
    }
    bytes += response.data();
    if (static_cast<int64_t>(bytes.size()) > total) {
      return absl::DataLossError(absl::StrCat(what, ": the pages hold more than the part's ", total, " bytes"));
    }
  }
  absl::StatusOr<ShardCheckpoint> part = DecodeCheckpoint(bytes, what);
  if (!part.ok()) return absl::DataLossError(part.status().message());
  return part;
}

}  // namespace pstrain::server
