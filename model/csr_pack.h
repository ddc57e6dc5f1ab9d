// Sparse matrices in CSR form (see CsrMatrix in model/backend.h), built on the host and packed
// back to back in two arrays, so that a whole batch's worth of them crosses to the backend in two
// copies instead of three per matrix (each copy to a GPU waits for the device).
//
//   ints:   [m0 offsets | m0 indices | m1 offsets | m1 indices | ...]
//   floats: [m0 values  | m1 values  | ...]
//
// CsrPack is the host side: append matrices, fill them, transpose them. BackendCsrPack uploads a
// pack and hands out CsrMatrix views of it in backend memory for CsrMatMul.
//
// Thread safety: neither class is thread-safe.
#ifndef PSTRAIN_MODEL_CSR_PACK_H_
#define PSTRAIN_MODEL_CSR_PACK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/backend.h"

namespace pstrain {
namespace model {

class CsrPack {
 public:
  // Where matrix m lives in the two arrays.
  struct Layout {
    int rows = 0;
    int cols = 0;
    int64_t nnz = 0;
    int64_t offsets_at = 0;  // in ints(); rows + 1 entries
    int64_t indices_at = 0;  // in ints(); nnz entries
    int64_t values_at = 0;   // in floats(); nnz entries
  };

  // Removes every matrix; keeps the memory.
  void Clear();

  // Appends a rows x cols matrix with room for nnz entries, all zero (so every row is empty until
  // the caller writes the offsets), and returns its number (0, 1, ... since Clear). REQUIRES:
  // rows >= 0, cols >= 0, 0 <= nnz <= INT32_MAX (callers check sizes that come from data).
  int Append(int rows, int cols, int64_t nnz);

  // Appends the transpose of matrix m and returns its number. Stable: the entries of each new row
  // come in ascending order of their old row, and in their old order within one old row, so a
  // CsrMatMul through the transpose adds in a fixed order. REQUIRES: m is complete (offsets, then
  // indices in [0, cols)).
  int AppendTranspose(int m);

  int size() const { return static_cast<int>(layouts_.size()); }
  const Layout& layout(int m) const { return layouts_[m]; }

  // Matrix m's arrays. Spans stay valid until the next Append, AppendTranspose or Clear.
  absl::Span<int32_t> offsets(int m);
  absl::Span<int32_t> indices(int m);
  absl::Span<float> values(int m);
  absl::Span<const int32_t> offsets(int m) const;
  absl::Span<const int32_t> indices(int m) const;
  absl::Span<const float> values(int m) const;

  absl::Span<const int32_t> ints() const { return ints_; }
  absl::Span<const float> floats() const { return floats_; }

 private:
  std::vector<Layout> layouts_;
  std::vector<int32_t> ints_;
  std::vector<float> floats_;
  std::vector<int32_t> fill_;  // AppendTranspose's scratch
};

// A CsrPack in backend memory. The backend is borrowed and must outlive the object.
class BackendCsrPack {
 public:
  explicit BackendCsrPack(Backend* backend);

  // Copies `pack` to the backend in two uploads, growing the buffers when needed. Errors come from
  // the backend's Allocate and Upload; the views are then unusable until an Upload succeeds.
  absl::Status Upload(const CsrPack& pack);

  int size() const { return static_cast<int>(layouts_.size()); }
  // Matrix m of the last uploaded pack, pointing into backend memory; valid until the next Upload.
  CsrMatrix matrix(int m) const;

 private:
  Backend* const backend_;  // borrowed
  std::vector<CsrPack::Layout> layouts_;
  BackendBuffer<int32_t> ints_;
  BackendBuffer<float> floats_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CSR_PACK_H_
