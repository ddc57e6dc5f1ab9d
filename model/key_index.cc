#include "model/key_index.h"

#include <algorithm>
#include <limits>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace model {

void KeyIndex::Clear() {
  pending_.clear();
  part_begin_.assign(1, 0);
  unique_keys_.clear();
  indices_.clear();
}

int KeyIndex::Add(absl::Span<const uint64_t> keys) {
  int64_t position = static_cast<int64_t>(pending_.size());
  for (uint64_t key : keys) pending_.push_back(Occurrence{key, position++});
  part_begin_.push_back(position);
  return num_parts() - 1;
}

absl::Status KeyIndex::Build() {
  unique_keys_.clear();
  indices_.clear();
  const int64_t total = num_occurrences();
  if (total > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("key index: ", total, " key occurrences, at most ",
                                                   std::numeric_limits<int32_t>::max(), " allowed"));
  }
  sorted_.assign(pending_.begin(), pending_.end());
  // Ties in key need no order: every occurrence of a key gets the same index.
  std::sort(sorted_.begin(), sorted_.end(), [](const Occurrence& a, const Occurrence& b) { return a.key < b.key; });
  indices_.resize(total);
  for (const Occurrence& o : sorted_) {
    if (unique_keys_.empty() || unique_keys_.back() != o.key) unique_keys_.push_back(o.key);
    indices_[o.position] = static_cast<int32_t>(unique_keys_.size() - 1);
  }
  return absl::OkStatus();
}

absl::Span<const int32_t> KeyIndex::indices(int part) const {
  CHECK_GE(part, 0);
  CHECK_LT(part, num_parts());
  CHECK_EQ(indices_.size(), pending_.size()) << "KeyIndex::indices before Build";
  return absl::MakeConstSpan(indices_).subspan(part_begin_[part], part_begin_[part + 1] - part_begin_[part]);
}

}  // namespace model
}  // namespace pstrain
