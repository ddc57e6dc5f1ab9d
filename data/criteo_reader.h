// Streaming reader for the Criteo Display Advertising format (Kaggle's train.txt, the 1TB logs,
// and what pstrain-gen-ctr writes), plain or gzip (detected from the magic bytes).
//
// Format: one sample per line, 40 tab-separated fields:
//   label (0 or 1) \t I1 .. I13 (decimal integers, may be negative) \t C1 .. C26 (1 to 8 hex
//   digits, e.g. "68fd1e64", either case)
// Any feature may be empty (missing). With Options::has_label false the label field is absent
// (39 fields, as in Kaggle's test.txt).
//
// What a sample holds:
//   dense[i]       the integer value as a float; 0 when missing, with bit i of dense_missing set.
//                  Models usually feed LogTransform(dense[i]) = log(1 + max(x, 0)).
//   keys[f]        CriteoKey(f, value): a 64-bit key, unique per (field, value) across all fields.
//   categorical[f] the hex value as read (0 when missing, with bit f of categorical_missing set).
//
// The key hash: CriteoKey(f, v) = Mix64((f << 33) | v) for a present value v (< 2^32) and
// Mix64((f << 33) | 2^32) for a missing one, where Mix64 is the SplitMix64 finalizer (a bijection
// of uint64). The inputs differ for every (field, value) and every field's "missing", and a
// bijection maps them to different keys, so keys never collide, across fields included; the mixing
// spreads them evenly over any key-range or hash split of servers.
//
// Bad records (a line with the wrong number of fields, a label other than 0/1, a non-integer
// dense value, a categorical value that is not 1-8 hex digits) follow Options::bad_records; the
// message is "FILE:LINE: what, expected what". Record ranges: see text_records.h.
//
// Thread-compatible: one thread at a time. Next blocks on file I/O.
#ifndef PSTRAIN_DATA_CRITEO_READER_H_
#define PSTRAIN_DATA_CRITEO_READER_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/line_reader.h"
#include "data/text_records.h"

namespace pstrain {
namespace data {

inline constexpr int kCriteoDense = 13;
inline constexpr int kCriteoCategorical = 26;

struct CtrSample {
  int label = 0;  // 0 or 1; -1 when the file has no labels.
  std::array<float, kCriteoDense> dense{};
  uint32_t dense_missing = 0;  // Bit i: dense[i] was empty (and is 0).
  std::array<uint64_t, kCriteoCategorical> keys{};
  std::array<uint32_t, kCriteoCategorical> categorical{};
  uint32_t categorical_missing = 0;  // Bit f: field f was empty (categorical[f] is 0).
};

// The SplitMix64 finalizer: a bijection of uint64 that mixes every input bit into every output bit.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The key of categorical field `field` (0-based, < kCriteoCategorical) holding hex value `value`.
inline uint64_t CriteoKey(int field, uint32_t value) { return Mix64((uint64_t(field) << 33) | value); }

// The key of categorical field `field` when it is empty.
inline uint64_t CriteoMissingKey(int field) { return Mix64((uint64_t(field) << 33) | (uint64_t{1} << 32)); }

// log(1 + max(x, 0)): the usual transform of Criteo's count-like dense features.
inline float LogTransform(float x) { return std::log1p(x > 0 ? x : 0.0f); }

// Parses one line (without '\n') into `*sample`. INVALID_ARGUMENT "what, expected what" (no
// file or line: the reader adds them) for a bad record; `*sample` is then unspecified.
absl::Status ParseCriteoLine(absl::string_view line, bool has_label, CtrSample* sample);

class CriteoReader {
 public:
  struct Options {
    BadRecords bad_records = BadRecords::kFail;
    bool has_label = true;
    RecordRange range;
  };

  // Opens `path` and skips to options.range.first. Errors: those of LineReader::Open and Skip.
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(const std::string& path, const Options& options);

  // The next sample of the range: true; false after the range's last record. DATA_LOSS for a
  // bad record under kFail ("FILE:LINE: what, expected what") or for a corrupt file.
  absl::StatusOr<bool> Next(CtrSample* sample);

  // Bad records skipped so far (kSkip).
  int64_t skipped() const { return skipped_; }

 private:
  CriteoReader(std::unique_ptr<LineReader> lines, const Options& options)
      : lines_(std::move(lines)), options_(options) {}

  std::unique_ptr<LineReader> lines_;
  const Options options_;
  int64_t skipped_ = 0;
};

// The number of records in `path` (its lines), in one streaming pass, for a scheduler to split
// into ranges.
inline absl::StatusOr<int64_t> CountCriteoRecords(const std::string& path) { return CountLines(path); }

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_CRITEO_READER_H_
