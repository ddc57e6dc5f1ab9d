// RowAdmission: which keys of an embedding table become rows (TableSpec.admission). A key without
// a row reads as its initial value either way (EmbeddingTable::Read); what admission decides is
// whether an update of such a key creates its row, or is dropped and counted.
//
//   always            every key an update brings becomes a row (the default; no state)
//   count:N           a key becomes a row at the N-th update that brings it. Updates of keys
//                     without a row are counted in a count-min sketch (Cormode & Muthukrishnan
//                     2005) of `sketch_bytes`: kDepth rows of one-byte counters, saturating at 255,
//                     with conservative update (only the smallest of a key's counters grow), so a
//                     key's estimate is never below its true count and exceeds it only through
//                     collisions: a key may be admitted early (a false admission), never late.
//                     Once a key has a row the sketch no longer counts it.
//   probability:p     each update of a key without a row admits it with probability p, decided by
//                     a hash of (seed, table, key, update number): the same on a replica, after a
//                     restore and in a repeated run.
//
// The update number is the store's (SYNC: the step; ASYNC/SSP: its update count), and the SYNC
// step brings each key once (the workers' rows are summed first), so a key's count is the number
// of steps whose pushes carried it. Decisions depend only on the sequence of updates, which a
// replica and a repeated SYNC run see in the same order: they admit exactly the same keys.
//
// The sketch is the table's state: checkpoints carry it (Serialize / Restore), so a restored server
// decides as the lost one would have.
//
// False admissions: with n distinct keys each brought once, width w counters per row and depth d,
// a key's d counters all hold at least one other key with probability about (1 - e^(-n/w))^d;
// count:2 then admits it at its first update. row_admission_test measures the rate; see
// docs/guides/embedding-tables.md for the figures. Counters never decay: over a very long stream
// they fill up and admit more; size the sketch for the keys a server sees between restarts, or
// use eviction to bound the rows.
//
// Thread safety: none; the table that owns it serializes calls.
#ifndef PSTRAIN_SERVER_ROW_ADMISSION_H_
#define PSTRAIN_SERVER_ROW_ADMISSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace pstrain::server {

class RowAdmission {
 public:
  static constexpr int kDepth = 4;

  // The policy of `spec` (after ApplyTableDefaults: sketch_bytes set) for table `table_id` of a
  // job with `seed`. INVALID_ARGUMENT as ValidateAdmission (common/table_spec.h), its fields
  // prefixed with `what`.
  static absl::StatusOr<std::unique_ptr<RowAdmission>> Create(absl::string_view what, const AdmissionSpec& spec,
                                                              uint64_t seed, int32_t table_id);

  // Whether `key`, which has no row, becomes one at update `step`. Counts the update (count:N).
  bool Admit(uint64_t key, int64_t step);

  // count:N: the sketch's count of `key` (the smallest of its counters), without counting it; 0
  // for the other policies.
  int Estimate(uint64_t key) const;

  // Whether admission keeps state (count:N): what Serialize writes.
  bool has_state() const { return !counters_.empty(); }
  // Heap bytes held (the sketch).
  int64_t bytes_used() const { return static_cast<int64_t>(counters_.size()); }

  // Appends the sketch (nothing for the stateless policies).
  void Serialize(std::string* out) const;
  // Replaces the sketch with a Serialize output of the same policy and size; DATA_LOSS (prefixed
  // with `what`) when the size differs. On error nothing changes.
  absl::Status Restore(absl::string_view what, absl::string_view data);

  const AdmissionSpec& spec() const { return spec_; }

 private:
  RowAdmission(const AdmissionSpec& spec, uint64_t seed, int32_t table_id);
  // The key's counter in sketch row d.
  size_t Cell(int d, uint64_t key) const;

  const AdmissionSpec spec_;
  uint64_t salt_[kDepth];          // per sketch row, from (seed, table)
  uint64_t coin_salt_;             // probability:p's hash input, from (seed, table)
  uint64_t coin_threshold_;        // probability:p as a fraction of 2^64 (p = 1: every key)
  int64_t width_ = 0;              // counters per sketch row
  std::vector<uint8_t> counters_;  // kDepth x width_
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_ROW_ADMISSION_H_
