#include "server/rows_before_update.h"

#include <algorithm>
#include <cstring>

namespace pstrain::server {

absl::Span<float> RowsBeforeUpdate::Add(int id, absl::Span<const uint64_t> keys, int dim) {
  if (static_cast<int>(tables_.size()) <= id) tables_.resize(id + 1);
  Table& t = tables_[id];
  t.dim = dim;
  t.keys.assign(keys.begin(), keys.end());
  t.rows.resize(keys.size() * dim);
  return absl::MakeSpan(t.rows);
}

void RowsBeforeUpdate::Clear() {
  for (int id = 0; id < static_cast<int>(tables_.size()); ++id) Forget(id);
}

void RowsBeforeUpdate::Forget(int id) {
  if (id < 0 || id >= static_cast<int>(tables_.size())) return;
  tables_[id].keys.clear();
  tables_[id].rows.clear();
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
