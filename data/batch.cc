#include "data/batch.h"

#include <glog/logging.h>

#include <cstring>

namespace pstrain {
namespace data {

void GatherBatch(const Dataset& data, absl::Span<const int64_t> indices, float* x, int32_t* labels) {
  const int64_t features = data.features();
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t s = indices[i];
    CHECK(s >= 0 && s < data.num_samples)
        << "GatherBatch: sample index " << s << " at position " << i << ", expected [0, " << data.num_samples << ")";
    if (x != nullptr) {
      std::memcpy(x + i * features, data.images.data() + s * features, sizeof(float) * static_cast<size_t>(features));
    }
    if (labels != nullptr) labels[i] = data.labels[static_cast<size_t>(s)];
  }
}

void GatherRange(const Dataset& data, absl::Span<const int64_t> perm, Range range, float* x, int32_t* labels) {
  CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= static_cast<int64_t>(perm.size()))
      << "GatherRange: range [" << range.begin << ", " << range.end << ") of a permutation of " << perm.size();
  GatherBatch(data, perm.subspan(range.begin, range.size()), x, labels);
}

}  // namespace data
}  // namespace pstrain
