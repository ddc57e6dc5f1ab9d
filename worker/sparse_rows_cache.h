// A worker's embedding rows for one batch: the keys of each table split by the server that owns
// them (common/key_hash.h), the rows pulled for them, and the row gradients to push back.
//
// The session (worker/training_session.h) fills the pull requests from it, scatters the answers
// into rows(t), and gathers row_gradient(t) into each shard's push. Keys stay in the order the
// loop gave them (strictly ascending), so each shard's subset is ascending too, as the servers
// require.
//
// Thread safety: none (the session's thread).
#ifndef PSTRAIN_WORKER_SPARSE_ROWS_CACHE_H_
#define PSTRAIN_WORKER_SPARSE_ROWS_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor_messages.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/ps.pb.h"

namespace pstrain::worker {

class SparseRowsCache {
 public:
  // Tables of dims[t] floats per row over `num_shards` servers.
  SparseRowsCache(std::vector<int> dims, int num_shards);

  int num_tables() const { return static_cast<int>(tables_.size()); }

  // Takes a batch's keys: keys[t] for table t, strictly ascending (may be empty). Sizes rows and
  // row gradients (zeroed). INVALID_ARGUMENT, keeping the previous batch, for a wrong number of
  // tables or keys out of order (naming the table and position). The next pull is of every table.
  absl::Status SetKeys(const std::vector<absl::Span<const uint64_t>>& keys);
  // The same for some tables only: keys[i] for table tables[i] (distinct ids). Those tables'
  // rows and row gradients are sized and zeroed; every other table keeps its keys, rows and row
  // gradients, so a batch's tables may be looked up one by one (a module per table). The next
  // pull is of these tables only. INVALID_ARGUMENT, changing nothing, for an unknown or repeated
  // table id, a count of key lists other than of ids, or keys out of order.
  absl::Status SetKeys(absl::Span<const int> tables, const std::vector<absl::Span<const uint64_t>>& keys);
  // Drops every table's keys, rows and row gradients: a step that looks nothing up pushes no rows.
  void Clear();
  // The job changed its server count (docs/design/resharding.md): every table's keys are split
  // among `num_shards` servers from now on, by their owners there. The batch's keys stay; rows and
  // row gradients are zeroed, and the next pull is of every table (what was pulled came from the
  // old owners).
  void SetShards(int num_shards);

  // Appends shard `shard`'s keys (rows empty) of the tables of the last SetKeys to `out`: one
  // entry per such table that has keys there.
  void AddPullKeys(int shard, google::protobuf::RepeatedPtrField<SparseRows>* out) const;
  // Installs an answer of shard `shard` (entries as AddPullKeys asked), copying each row once,
  // straight from the received bytes to its place in rows(t). DATA_LOSS when it does not match
  // what was asked (a table, key count or row size), naming what differs.
  absl::Status ScatterRows(int shard, absl::Span<const IncomingRows> answer);
  // Appends shard `shard`'s row gradients (keys and rows) of every table to `out`, gathered into
  // buffers of this cache that the entries point at: they stay valid until the next AddPushRows
  // for the same shard, SetKeys or Clear (the push is sent before any of those).
  void AddPushRows(int shard, std::vector<OutgoingRows>* out);

  // The batch's rows and row gradients of table t: keys[t].size() x dim floats, row i for key i.
  absl::Span<float> rows(int t) { return absl::MakeSpan(tables_[t].rows); }
  absl::Span<float> row_gradient(int t) { return absl::MakeSpan(tables_[t].grads); }
  absl::Span<const uint64_t> keys(int t) const { return tables_[t].keys; }

 private:
  struct Table {
    int dim = 0;
    std::vector<uint64_t> keys;
    std::vector<float> rows;
    std::vector<float> grads;
    // by_shard[s]: positions (into keys) of the keys shard s owns, ascending.
    std::vector<std::vector<uint32_t>> by_shard;
    // AddPushRows' gathered keys and row gradients per shard, reused from push to push.
    std::vector<std::vector<uint64_t>> push_keys;
    std::vector<std::vector<float>> push_rows;
  };
  // Sets table t's keys (already checked) and sizes its buffers.
  void Assign(int t, absl::Span<const uint64_t> keys);

  int num_shards_;
  std::vector<Table> tables_;
  // The tables of the last SetKeys, ascending: what the next pull asks for.
  std::vector<int> pulling_;
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_SPARSE_ROWS_CACHE_H_
