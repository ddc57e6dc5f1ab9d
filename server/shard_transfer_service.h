// The ShardTransfer gRPC service (proto/ps.proto): a server answers other servers the parts of the
// checkpoint cuts it holds, for a change of the server count whose servers do not share a
// checkpoint folder (docs/design/resharding.md, "A migration with a background copy").
//
// A part is what server `to_rank` of a new shard map keeps of this server's checkpoint of a step
// (server/cut_part.h), read from this server's folder through its chain and encoded as a
// checkpoint file's bytes (EncodeCheckpoint), so the receiver checks its checksum as it would a
// file's. It is answered in pages of at most `page_bytes`, so no message is larger than that
// whatever the shard; a part is encoded once and kept until its last page is answered, for at
// most kMaxParts parts at a time (the oldest is dropped first, and encoded again if asked again).
// So the memory it holds is bounded by kMaxParts parts, each at most this server's shard.
//
// The new map is the one in this server's cluster view (SetMap); a request for a version it has
// not seen yet is UNAVAILABLE, which callers retry, and so is every call before Start (the server
// has not joined its job yet).
//
// Sessions: with a verifier (what every server process gives Start), every call must carry a server's session
// credential (none, forged, or a worker's: UNAUTHENTICATED or PERMISSION_DENIED). With TLS the port's session gate
// hands this service's calls to Admit, which refuses such calls before they are read and asks for
// a server's certificate too.
//
// Thread safety: all methods may be called from any thread.
#ifndef PSTRAIN_SERVER_SHARD_TRANSFER_SERVICE_H_
#define PSTRAIN_SERVER_SHARD_TRANSFER_SERVICE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "transport/peer_role.h"
#include "common/session_credential.h"
#include "proto/cluster.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/checkpoint.h"

namespace pstrain::server {

class ShardTransferService final : public ShardTransfer::Service {
 public:
  static constexpr int kMaxParts = 4;
  static constexpr int64_t kDefaultPageBytes = int64_t{4} << 20;

  // Every call is UNAVAILABLE until Start. REQUIRES: page_bytes > 0.
  explicit ShardTransferService(int64_t page_bytes = kDefaultPageBytes);

  // Answers for server `rank`'s checkpoints in `checkpoint_dir` from now on, checking every
  // caller's session credential with `verifier` (null: callers are not checked, for tests).
  // REQUIRES: called at most once.
  void Start(int rank, std::string checkpoint_dir, std::unique_ptr<SessionVerifier> verifier);
  // The newest shard map this server knows (its cluster view's); requests name one of the last
  // two it was given.
  void SetMap(const ShardMap& map);

  grpc::Status FetchCutPart(grpc::ServerContext* context, const CutPartRequest* request,
                            CutPartResponse* response) override;

  // The port's session gate for this service's calls (ServerRunner's gate hands them here): OK for
  // a server's session from a server's certificate; UNAVAILABLE before Start; otherwise
  // UNAUTHENTICATED or PERMISSION_DENIED naming the method.
  absl::Status Admit(absl::string_view method, absl::string_view credential, const Peer& peer) const;

  // FetchCutPart without gRPC: the whole part, as the pages add up to. Errors as FetchCutPart's.
  absl::StatusOr<std::shared_ptr<const std::string>> Part(const CutPartRequest& request);

 private:
  using Key = std::tuple<int64_t, int64_t, int>;  // step, shard map version, to_rank

  // OK for a server's session (or when sessions are not required); UNAVAILABLE before Start.
  absl::Status CheckCaller(absl::string_view credential, absl::string_view method) const;
  absl::StatusOr<ShardMap> MapOf(int64_t version) const;

  const int64_t page_bytes_;

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  int rank_ ABSL_GUARDED_BY(mu_) = -1;
  std::string checkpoint_dir_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<SessionVerifier> sessions_ ABSL_GUARDED_BY(mu_);
  std::deque<ShardMap> maps_ ABSL_GUARDED_BY(mu_);  // newest last, at most 2
  std::map<Key, std::shared_ptr<const std::string>> parts_ ABSL_GUARDED_BY(mu_);
  std::deque<Key> order_ ABSL_GUARDED_BY(mu_);  // parts_' keys, oldest first
};

// Fetches server `from_rank`'s part of its checkpoint of `step` for server `to_rank` of map
// `shard_map_version` from `stub` (the server at that rank), page by page, each call carrying
// `session_credential` and with `timeout` each; the part decoded and checked (DecodeCheckpoint).
// Errors: the server's, prefixed with what was asked; DATA_LOSS when the pages do not add up or
// the bytes are no sound checkpoint.
absl::StatusOr<ShardCheckpoint> FetchCutPart(ShardTransfer::StubInterface* stub, const std::string& session_credential,
                                             absl::Duration timeout, int64_t step, int from_rank,
                                             int64_t shard_map_version, int to_rank);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SHARD_TRANSFER_SERVICE_H_
