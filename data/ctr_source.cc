#include "data/ctr_source.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace data {
namespace {

// Capacity reserved up front is capped: a range may be a whole lease of millions of records, or
// run past the end of the file, and a batch must not grow to the size of the request.
constexpr int64_t kMaxReserve = 1 << 16;

int NumFields(DataFormat format) { return format == DataFormat::kCriteo ? kCriteoCategorical : 1; }

}  // namespace

void ClearCtrBatch(DataFormat format, CtrBatch* out) {
  const int fields = NumFields(format);
  out->size = 0;
  out->num_dense = format == DataFormat::kCriteo ? kCriteoDense : 0;
  out->labels.clear();
  out->dense.clear();
  out->keys.resize(fields);
  out->offsets.resize(fields);
  out->weights.resize(fields);
  for (int f = 0; f < fields; ++f) {
    out->keys[f].clear();
    out->offsets[f].assign(1, 0);
    out->weights[f].clear();
  }
}

void AppendCtrBatch(const CtrBatch& from, CtrBatch* to) {
  CHECK_EQ(from.num_dense, to->num_dense) << "appending batches of different formats";
  CHECK_EQ(from.num_fields(), to->num_fields()) << "appending batches of different formats";
  CHECK_NE(&from, to) << "appending a batch to itself";
  to->labels.insert(to->labels.end(), from.labels.begin(), from.labels.end());
  to->dense.insert(to->dense.end(), from.dense.begin(), from.dense.end());
  for (int f = 0; f < from.num_fields(); ++f) {
    std::vector<uint64_t>& keys = to->keys[f];
    std::vector<float>& weights = to->weights[f];
    if (!from.weights[f].empty() || !weights.empty()) {
      // Empty weights mean 1 per key: spelled out for whichever side has none.
      if (weights.empty()) weights.assign(keys.size(), 1.0f);
      if (from.weights[f].empty()) {
        weights.insert(weights.end(), from.keys[f].size(), 1.0f);
      } else {
        weights.insert(weights.end(), from.weights[f].begin(), from.weights[f].end());
      }
    }
    const int64_t base = static_cast<int64_t>(keys.size());
    keys.insert(keys.end(), from.keys[f].begin(), from.keys[f].end());
    std::vector<int64_t>& offsets = to->offsets[f];
    for (int64_t i = 1; i <= from.size; ++i) offsets.push_back(base + from.offsets[f][i]);
  }
  to->size += from.size;
}

absl::StatusOr<std::unique_ptr<CtrSource>> CtrSource::Open(const std::string& path, const Options& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<LineReader> lines, LineReader::Open(path));
  return std::unique_ptr<CtrSource>(new CtrSource(path, options, std::move(lines)));
}

absl::Status CtrSource::ReadBatch(int64_t first, int64_t count, CtrBatch* out) {
  ClearCtrBatch(options_.format, out);
  if (first < 0 || count < 0 || count > std::numeric_limits<int64_t>::max() - first) {
    return absl::InvalidArgumentError(absl::StrCat("records [", first, ", +", count, ") of ", path_,
                                                   ": expected first >= 0, count >= 0 and first + "
                                                   "count <= 2^63 - 1"));
  }
  const RecordRange range{first, count};
  absl::Status status = Seek(first);
  if (status.ok()) {
    status = options_.format == DataFormat::kCriteo ? AppendCriteo(range, out) : AppendLibsvm(range, out);
  }
  if (!status.ok()) {
    // The reader stopped somewhere inside the range (or inside a corrupt block): drop it rather
    // than reason about where, and do not hand out the samples read before the error.
    lines_.reset();
    ClearCtrBatch(options_.format, out);
  }
  return status;
}

absl::Status CtrSource::Seek(int64_t first) {
  if (lines_ != nullptr && first >= lines_->lines()) {
    // A reader that hit the end of the file skips nothing more: the range is then empty.
    ASSIGN_OR_RETURN(const int64_t skipped, lines_->Skip(first - lines_->lines()));
    (void)skipped;
    return absl::OkStatus();
  }
  ++reopens_;
  lines_.reset();  // Close before opening again: one file handle and one buffer at a time.
  ASSIGN_OR_RETURN(lines_, LineReader::Open(path_, first));
  return absl::OkStatus();
}

absl::Status CtrSource::AppendCriteo(const RecordRange& range, CtrBatch* out) {
  const int64_t reserve = std::min(range.count, kMaxReserve);
  out->labels.reserve(reserve);
  out->dense.reserve(reserve * kCriteoDense);
  for (int f = 0; f < kCriteoCategorical; ++f) {
    out->keys[f].reserve(reserve);
    out->offsets[f].reserve(reserve + 1);
  }
  CtrSample& sample = criteo_sample_;
  const auto parse = [&sample](absl::string_view line) -> absl::StatusOr<bool> {
    RETURN_IF_ERROR(ParseCriteoLine(line, /*has_label=*/true, &sample));
    return true;
  };
  while (true) {
    ASSIGN_OR_RETURN(const bool more, NextRecord(*lines_, range, options_.bad_records, &skipped_, parse));
    if (!more) return absl::OkStatus();
    AppendCriteoSample(sample, out);
  }
}

void AppendCriteoSample(const CtrSample& sample, CtrBatch* out) {
  out->labels.push_back(static_cast<float>(sample.label));
  // Missing values parse as 0, and LogTransform(0) is 0: the batch's "0 when missing".
  for (int i = 0; i < kCriteoDense; ++i) out->dense.push_back(LogTransform(sample.dense[i]));
  ++out->size;
  for (int f = 0; f < kCriteoCategorical; ++f) {
    out->keys[f].push_back(sample.keys[f]);
    out->offsets[f].push_back(out->size);
  }
}

absl::Status CtrSource::AppendLibsvm(const RecordRange& range, CtrBatch* out) {
  const int64_t reserve = std::min(range.count, kMaxReserve);
  out->labels.reserve(reserve);
  out->offsets[0].reserve(reserve + 1);
  LibsvmSample& sample = libsvm_sample_;
  const auto parse = [&sample](absl::string_view line) { return ParseLibsvmLine(line, &sample); };
  while (true) {
    ASSIGN_OR_RETURN(const bool more, NextRecord(*lines_, range, options_.bad_records, &skipped_, parse));
    if (!more) return absl::OkStatus();
    AppendLibsvmSample(sample, out);
  }
}

void AppendLibsvmSample(const LibsvmSample& sample, CtrBatch* out) {
  out->labels.push_back(sample.label > 0 ? 1.0f : 0.0f);
  for (const auto& [index, value] : sample.features) {
    out->keys[0].push_back(index);
    out->weights[0].push_back(value);
  }
  ++out->size;
  out->offsets[0].push_back(static_cast<int64_t>(out->keys[0].size()));
}

}  // namespace data
}  // namespace pstrain
