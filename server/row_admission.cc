#include "server/row_admission.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/key_hash.h"
#include "common/table_spec.h"

namespace pstrain::server {
namespace {

// A hash of `key` under `salt`: two splitmix64 rounds, so salts that differ in one bit give
// unrelated hashes (MixKey64 alone is also the shard's hash, common/key_hash.h).
uint64_t Hash(uint64_t salt, uint64_t key) { return MixKey64(MixKey64(key ^ salt) + salt); }

}  // namespace

absl::StatusOr<std::unique_ptr<RowAdmission>> RowAdmission::Create(absl::string_view what, const AdmissionSpec& spec,
                                                                   uint64_t seed, int32_t table_id) {
  if (absl::Status s = ValidateAdmission(absl::StrCat(what, ".admission"), spec); !s.ok()) return s;
  return std::unique_ptr<RowAdmission>(new RowAdmission(spec, seed, table_id));
}

RowAdmission::RowAdmission(const AdmissionSpec& spec, uint64_t seed, int32_t table_id) : spec_(spec) {
  uint64_t state = MixKey64(seed ^ (static_cast<uint64_t>(table_id) << 32) ^ 0x61646d6974ULL);  // "admit"
  for (uint64_t& salt : salt_) salt = state = MixKey64(state);
  coin_salt_ = MixKey64(state);
  // p as a fraction of 2^64, rounded down; p = 1 (the largest threshold) admits every key.
  coin_threshold_ = spec.probability() >= 1
                        ? std::numeric_limits<uint64_t>::max()
                        : static_cast<uint64_t>(std::ldexp(static_cast<double>(spec.probability()), 64));
  if (spec.policy() == AdmissionSpec::COUNT) {
    const int64_t bytes = spec.sketch_bytes() > 0 ? spec.sketch_bytes() : kDefaultSketchBytes;
    width_ = std::max<int64_t>(1, bytes / kDepth);
    counters_.assign(static_cast<size_t>(width_ * kDepth), 0);
  }
}

bool RowAdmission::Admit(uint64_t key, int64_t step) {
  switch (spec_.policy()) {
    case AdmissionSpec::COUNT: {
      // Conservative update: only the counters at the key's current minimum grow, so a counter
      // holds no more than the largest true count among the keys that share it.
      uint8_t* cell[kDepth];
      uint8_t least = std::numeric_limits<uint8_t>::max();
      for (int d = 0; d < kDepth; ++d) {
        cell[d] = &counters_[Cell(d, key)];
        least = std::min(least, *cell[d]);
      }
      if (least < std::numeric_limits<uint8_t>::max()) {
        for (uint8_t* c : cell) {
          if (*c == least) ++*c;
        }
        ++least;
      }
      return least >= spec_.min_count();
    }
    case AdmissionSpec::PROBABILITY:
      if (coin_threshold_ == std::numeric_limits<uint64_t>::max()) return true;
      return Hash(coin_salt_, MixKey64(key) ^ static_cast<uint64_t>(step)) < coin_threshold_;
    default:
      return true;
  }
}

size_t RowAdmission::Cell(int d, uint64_t key) const {
  return static_cast<size_t>(d * width_ + static_cast<int64_t>(Hash(salt_[d], key) % static_cast<uint64_t>(width_)));
}

int RowAdmission::Estimate(uint64_t key) const {
  if (counters_.empty()) return 0;
  uint8_t least = std::numeric_limits<uint8_t>::max();
  for (int d = 0; d < kDepth; ++d) least = std::min(least, counters_[Cell(d, key)]);
  return least;
}

void RowAdmission::Serialize(std::string* out) const {
  out->append(reinterpret_cast<const char*>(counters_.data()), counters_.size());
}

absl::Status RowAdmission::Restore(absl::string_view what, absl::string_view data) {
  if (data.size() != counters_.size()) {
    return absl::DataLossError(absl::StrCat(what, ": the admission sketch holds ", data.size(), " bytes, expected ",
                                            counters_.size(), " (", AdmissionName(spec_), " with sketch_bytes ",
                                            spec_.sketch_bytes(), ")"));
  }
  std::memcpy(counters_.data(), data.data(), data.size());
  return absl::OkStatus();
}

}  // namespace pstrain::server
