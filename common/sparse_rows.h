// The byte layout of proto/ps.proto's SparseRows: keys as little-endian uint64, rows as
// little-endian float32, back to back. Both ends (the worker's pulls and pushes, the server's
// tables) read and write it through these helpers.
//
// Thread safety: pure functions.
#ifndef PSTRAIN_COMMON_SPARSE_ROWS_H_
#define PSTRAIN_COMMON_SPARSE_ROWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"

namespace pstrain {

// Keys in an entry: keys().size() / 8 (a size that is not a multiple of 8 is the caller's check).
inline int64_t NumKeys(const SparseRows& rows) { return static_cast<int64_t>(rows.keys().size() / 8); }

// Sets `rows`' table and keys (and clears its rows).
void SetKeys(int32_t table_id, absl::Span<const uint64_t> keys, SparseRows* rows);

// The entry's keys, decoded. REQUIRES: keys().size() is a multiple of 8.
std::vector<uint64_t> KeysOf(const SparseRows& rows);
void KeysOf(const SparseRows& rows, std::vector<uint64_t>* out);

// Copies the entry's rows (rows().size() / 4 floats) to `out`. REQUIRES: out.size() * 4 ==
// rows().size().
void CopyRows(const SparseRows& rows, absl::Span<float> out);

// Sets the entry's rows to `values` (n x dim floats).
void SetRows(absl::Span<const float> values, SparseRows* rows);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SPARSE_ROWS_H_
