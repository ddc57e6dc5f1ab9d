#include "server/rows_before_update.h"

#include <algorithm>
#include <cstring>

#include <glog/logging.h>

namespace pstrain::server {

void RowsBeforeUpdate::Add(int id, absl::Span<const uint64_t> keys, const EmbeddingTable& table) {
  if (static_cast<int>(tables_.size()) <= id) tables_.resize(id + 1);
  Table& t = tables_[id];
  t.dim = table.dim();
  t.keys.assign(keys.begin(), keys.end());
  t.rows.resize(keys.size() * t.dim);
  const absl::Status s = table.Read(keys, absl::MakeSpan(t.rows));
  CHECK(s.ok()) << "checked keys failed to read: " << s;
}

void RowsBeforeUpdate::Clear() {
  for (Table& t : tables_) {
    t.keys.clear();
    t.rows.clear();
  }
}

void RowsBeforeUpdate::Overlay(int table, absl::Span<const uint64_t> keys, absl::Span<float> rows) const {
  if (table < 0 || table >= static_cast<int>(tables_.size())) return;
  const Table& t = tables_[table];
  if (t.keys.empty()) return;
  // Both lists ascend: one merge walk.
  size_t j = 0;
  for (size_t i = 0; i < keys.size() && j < t.keys.size(); ++i) {
    j = std::lower_bound(t.keys.begin() + j, t.keys.end(), keys[i]) - t.keys.begin();
    if (j < t.keys.size() && t.keys[j] == keys[i]) {
      std::memcpy(rows.data() + i * t.dim, t.rows.data() + j * t.dim, t.dim * sizeof(float));
    }
  }
}

}  // namespace pstrain::server
