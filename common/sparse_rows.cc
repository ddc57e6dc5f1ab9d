#include "common/sparse_rows.h"

#include <cstring>

#include <glog/logging.h>

namespace pstrain {

// The wire is little-endian; so are the machines this builds for (the dense path copies floats
// the same way).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format assumes a little-endian host");

void SetKeys(int32_t table_id, absl::Span<const uint64_t> keys, SparseRows* rows) {
  rows->set_table_id(table_id);
  rows->set_keys(reinterpret_cast<const char*>(keys.data()), keys.size() * sizeof(uint64_t));
  rows->clear_rows();
}

void KeysOf(const SparseRows& rows, std::vector<uint64_t>* out) {
  DCHECK_EQ(rows.keys().size() % 8, 0u);
  out->resize(rows.keys().size() / 8);
  if (!out->empty()) std::memcpy(out->data(), rows.keys().data(), out->size() * sizeof(uint64_t));
}

std::vector<uint64_t> KeysOf(const SparseRows& rows) {
  std::vector<uint64_t> keys;
  KeysOf(rows, &keys);
  return keys;
}

void CopyRows(const SparseRows& rows, absl::Span<float> out) {
  CHECK_EQ(out.size() * sizeof(float), rows.rows().size());
  if (!out.empty()) std::memcpy(out.data(), rows.rows().data(), rows.rows().size());
}

void SetRows(absl::Span<const float> values, SparseRows* rows) {
  rows->set_rows(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

}  // namespace pstrain
