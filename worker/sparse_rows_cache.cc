#include "worker/sparse_rows_cache.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/key_hash.h"

namespace pstrain::worker {
namespace {

template <typename T>
absl::string_view Bytes(const std::vector<T>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

SparseRowsCache::SparseRowsCache(std::vector<int> dims, int num_shards) : num_shards_(num_shards) {
  for (int dim : dims) {
    Table& t = tables_.emplace_back();
    t.dim = dim;
    t.by_shard.resize(num_shards);
    t.push_keys.resize(num_shards);
    t.push_rows.resize(num_shards);
  }
}

absl::Status SparseRowsCache::SetKeys(const std::vector<absl::Span<const uint64_t>>& keys) {
  if (keys.size() != tables_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("batch keys: got ", keys.size(), " tables' keys, expected ",
                                                   tables_.size(), " (the job's tables)"));
  }
  std::vector<int> all(tables_.size());
  for (size_t t = 0; t < all.size(); ++t) all[t] = static_cast<int>(t);
  return SetKeys(all, keys);
}

absl::Status SparseRowsCache::SetKeys(absl::Span<const int> tables,
                                      const std::vector<absl::Span<const uint64_t>>& keys) {
  if (keys.size() != tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch keys: got ", keys.size(), " tables' keys for ", tables.size(), " table ids"));
  }
  std::vector<bool> seen(tables_.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    const int t = tables[i];
    if (t < 0 || t >= num_tables()) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch keys: table id ", t, ", expected one in [0, ", num_tables(), ") (the job's tables)"));
    }
    if (seen[t]) return absl::InvalidArgumentError(absl::StrCat("batch keys: table ", t, " is listed twice"));
    seen[t] = true;
    for (size_t k = 1; k < keys[i].size(); ++k) {
      if (keys[i][k] <= keys[i][k - 1]) {
        return absl::InvalidArgumentError(absl::StrCat("batch keys of table ", t, ": key ", keys[i][k], " at position ",
                                                       k, " is not greater than the one before (", keys[i][k - 1],
                                                       "); expected strictly ascending keys"));
      }
    }
  }
  for (size_t i = 0; i < tables.size(); ++i) Assign(tables[i], keys[i]);
  pulling_.clear();
  for (int t = 0; t < num_tables(); ++t) {
    if (seen[t]) pulling_.push_back(t);
  }
  return absl::OkStatus();
}

void SparseRowsCache::Assign(int t, absl::Span<const uint64_t> keys) {
  Table& table = tables_[t];
  table.keys.assign(keys.begin(), keys.end());
  table.rows.assign(table.keys.size() * table.dim, 0.0f);
  table.grads.assign(table.keys.size() * table.dim, 0.0f);
  for (std::vector<uint32_t>& positions : table.by_shard) positions.clear();
  for (size_t i = 0; i < table.keys.size(); ++i) {
    table.by_shard[ServerOfKey(table.keys[i], num_shards_)].push_back(static_cast<uint32_t>(i));
  }
}

void SparseRowsCache::SetShards(int num_shards) {
  num_shards_ = num_shards;
  pulling_.clear();
  for (int t = 0; t < num_tables(); ++t) {
    Table& table = tables_[t];
    table.by_shard.assign(num_shards, {});
    table.push_keys.assign(num_shards, {});
    table.push_rows.assign(num_shards, {});
    const std::vector<uint64_t> keys = table.keys;
    Assign(t, keys);
    pulling_.push_back(t);
  }
}

void SparseRowsCache::Clear() {
  for (int t = 0; t < num_tables(); ++t) Assign(t, {});
  pulling_.clear();
}

void SparseRowsCache::AddPullKeys(int shard, google::protobuf::RepeatedPtrField<SparseRows>* out) const {
  for (int t : pulling_) {
    const Table& table = tables_[t];
    const std::vector<uint32_t>& positions = table.by_shard[shard];
    if (positions.empty()) continue;
    SparseRows* entry = out->Add();
    entry->set_table_id(static_cast<int32_t>(t));
    // Gathered straight into the message (keys are little-endian uint64 on the wire, as here).
    std::string* keys = entry->mutable_keys();
    keys->resize(positions.size() * sizeof(uint64_t));
    char* dst = keys->data();
    for (size_t i = 0; i < positions.size(); ++i) {
      std::memcpy(dst + i * sizeof(uint64_t), &table.keys[positions[i]], sizeof(uint64_t));
    }
  }
}

absl::Status SparseRowsCache::ScatterRows(int shard, absl::Span<const IncomingRows> answer) {
  size_t entry = 0;
  for (int t : pulling_) {
    Table& table = tables_[t];
    const std::vector<uint32_t>& positions = table.by_shard[shard];
    if (positions.empty()) continue;
    if (entry >= answer.size() || answer[entry].table_id != t) {
      return absl::DataLossError(absl::StrCat("rows from shard ", shard, ": table ", t, "'s entry is missing"));
    }
    const PayloadView& rows = answer[entry++].rows;
    const size_t row_bytes = sizeof(float) * table.dim;
    if (rows.size() != positions.size() * row_bytes) {
      return absl::DataLossError(absl::StrCat("rows from shard ", shard, " for table ", t, ": ", rows.size(),
                                              " bytes, expected ", positions.size(), " keys x ", row_bytes));
    }
    if (positions.size() == table.keys.size()) {
      // Every key of the table is this shard's (one server): the rows arrive in place.
      rows.CopyTo(table.rows.data());
      continue;
    }
    PayloadReader reader(rows);
    for (size_t i = 0; i < positions.size(); ++i) {
      reader.Read(row_bytes, table.rows.data() + size_t{positions[i]} * table.dim);
    }
  }
  if (entry != answer.size()) {
    return absl::DataLossError(
        absl::StrCat("rows from shard ", shard, ": ", answer.size(), " entries, expected ", entry));
  }
  return absl::OkStatus();
}

void SparseRowsCache::AddPushRows(int shard, std::vector<OutgoingRows>* out) {
  for (size_t t = 0; t < tables_.size(); ++t) {
    Table& table = tables_[t];
    const std::vector<uint32_t>& positions = table.by_shard[shard];
    if (positions.empty()) continue;
    std::vector<uint64_t>& keys = table.push_keys[shard];
    std::vector<float>& rows = table.push_rows[shard];
    const size_t dim = table.dim;
    if (positions.size() == table.keys.size()) {
      // One server: the batch's own keys and gradients are the entry, no gather.
      out->push_back({static_cast<int32_t>(t), Bytes(table.keys), Bytes(table.grads)});
      continue;
    }
    keys.resize(positions.size());
    rows.resize(positions.size() * dim);
    for (size_t i = 0; i < positions.size(); ++i) {
      keys[i] = table.keys[positions[i]];
      std::memcpy(rows.data() + i * dim, table.grads.data() + size_t{positions[i]} * dim, dim * sizeof(float));
    }
    out->push_back({static_cast<int32_t>(t), Bytes(keys), Bytes(rows)});
  }
}

}  // namespace pstrain::worker
