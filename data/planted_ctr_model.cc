#include "data/planted_ctr_model.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace data {
namespace {

constexpr uint32_t kMulA = 0x9e3779b1u;  // Odd, so multiplication by it is a bijection mod 2^32.
constexpr uint32_t kMulB = 0x85ebca6bu;

constexpr uint32_t InverseMod32(uint32_t a) {  // Newton's iteration; REQUIRES: a odd.
  uint32_t x = a;
  for (int i = 0; i < 5; ++i) x *= 2 - a * x;
  return x;
}
constexpr uint32_t kInvA = InverseMod32(kMulA);
constexpr uint32_t kInvB = InverseMod32(kMulB);
static_assert(kMulA * kInvA == 1u && kMulB * kInvB == 1u, "modular inverses");

// Uniform in [-sqrt(3), sqrt(3)): mean 0, variance 1.
double UnitUniform(uint64_t bits) { return (static_cast<double>(bits >> 11) * 0x1.0p-53 * 2 - 1) * 1.7320508075688772; }

// Parameters shrink as 1 / (1 + rank / kRankScale). Chosen so that the planted AUC is nearly
// learnable from the default 2M samples: a one-pass FM with Adagrad reaches 0.863 where the
// planted model has 0.874 (0.867 from 8M samples). With slower decay the rare keys, seen too few
// times to be learned, carry much of the signal and the gap widens (0.05 at 1 / sqrt(1 + r/1000)).
constexpr double kRankScale = 50;

}  // namespace

absl::StatusOr<PlantedCtrModel> PlantedCtrModel::Create(const PlantedCtrOptions& options) {
  if (options.unique_keys < kCriteoCategorical || options.unique_keys / kCriteoCategorical >= (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat("unique_keys ", options.unique_keys, ", expected at least ",
                                                   kCriteoCategorical, " (one per field) and below 26 * 2^32"));
  }
  if (!(options.zipf > 0) || !std::isfinite(options.zipf)) {
    return absl::InvalidArgumentError(absl::StrCat("zipf ", options.zipf, ", expected > 0"));
  }
  if (!(options.missing_rate >= 0 && options.missing_rate < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("missing_rate ", options.missing_rate, ", expected in [0, 1)"));
  }
  if (options.days < 1) {
    return absl::InvalidArgumentError(absl::StrCat("days ", options.days, ", expected >= 1"));
  }
  if (!(options.new_key_rate >= 0 && options.new_key_rate <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("new_key_rate ", options.new_key_rate, ", expected in [0, 1]"));
  }
  // The largest field has ceil(unique_keys / 26) ids; each day's own ids are one more copy.
  const uint64_t largest_field = (options.unique_keys + kCriteoCategorical - 1) / kCriteoCategorical;
  if (options.new_key_rate > 0 && largest_field * (static_cast<uint64_t>(options.days) + 1) > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat("unique_keys ", options.unique_keys, " with days ", options.days,
                                                   " and new_key_rate > 0: each day needs its own copy of a field's ",
                                                   largest_field, " ids, and (days + 1) * ", largest_field,
                                                   " must stay within 2^32"));
  }
  return PlantedCtrModel(options);
}

PlantedCtrModel::PlantedCtrModel(const PlantedCtrOptions& options)
    : options_(options), seed_hash_(Mix64(options.seed ^ 0x5eed5eed5eed5eedULL)) {
  for (int f = 0; f < kCriteoCategorical; ++f) {
    salt_[f] = static_cast<uint32_t>(Mix64(seed_hash_ + 0x100 + f) >> 32);
    const uint64_t n = options.unique_keys / kCriteoCategorical +
                       (static_cast<uint64_t>(f) < options.unique_keys % kCriteoCategorical ? 1 : 0);
    samplers_.emplace_back(n, options.zipf);
  }
  for (int i = 0; i < kCriteoDense; ++i) {
    const uint64_t h = Mix64(seed_hash_ + 0x200 + i);
    mu_[i] = 0.5 + 3.5 * (static_cast<double>(h >> 11) * 0x1.0p-53);
    dense_weight_[i] = 0.15 * UnitUniform(Mix64(h));
  }
  bias_ = -2.0;
}

uint32_t PlantedCtrModel::Value(int field, uint64_t rank) const {
  uint32_t x = static_cast<uint32_t>(rank) * kMulA + salt_[field];
  x ^= x >> 16;
  x *= kMulB;
  x ^= x >> 16;
  return x;
}

uint64_t PlantedCtrModel::Rank(int field, uint32_t value) const {
  uint32_t x = value;
  x ^= x >> 16;  // x ^= x >> 16 is its own inverse on 32 bits.
  x *= kInvB;
  x ^= x >> 16;
  return static_cast<uint32_t>((x - salt_[field]) * kInvA);
}

int PlantedCtrModel::DayOfValue(int field, uint32_t value) const {
  return static_cast<int>(Rank(field, value) / samplers_[field].n()) - 1;
}

void PlantedCtrModel::DrawFeatures(SplitMix64& rng, CtrSample* sample, int day) const {
  sample->dense_missing = 0;
  for (int i = 0; i < kCriteoDense; ++i) {
    if (rng.Uniform() < options_.missing_rate) {
      sample->dense_missing |= 1u << i;
      sample->dense[i] = 0;
      continue;
    }
    // Box-Muller; 1 - Uniform() is in (0, 1], so the log is finite.
    const double z = std::sqrt(-2 * std::log(1 - rng.Uniform())) * std::cos(6.283185307179586 * rng.Uniform());
    const double count = std::floor(std::exp(mu_[i] + z)) - 1;
    sample->dense[i] = static_cast<float>(std::min(std::max(count, 0.0), 1e7));
  }
  sample->categorical_missing = 0;
  for (int f = 0; f < kCriteoCategorical; ++f) {
    if (rng.Uniform() < options_.missing_rate) {
      sample->categorical_missing |= 1u << f;
      sample->categorical[f] = 0;
      sample->keys[f] = CriteoMissingKey(f);
      continue;
    }
    uint64_t rank = samplers_[f].Sample(rng) - 1;
    // Only a drifting generator draws the extra uniform, so one without drift writes the files it
    // always wrote.
    if (options_.new_key_rate > 0 && rng.Uniform() < options_.new_key_rate) {
      rank += samplers_[f].n() * (1 + static_cast<uint64_t>(day));
    }
    const uint32_t value = Value(f, rank);
    sample->categorical[f] = value;
    sample->keys[f] = CriteoKey(f, value);
  }
}

double PlantedCtrModel::Logit(const CtrSample& sample) const {
  double logit = bias_;
  double sum[kEmbeddingDim] = {0};
  double sum_sq = 0;
  for (int f = 0; f < kCriteoCategorical; ++f) {
    const bool missing = (sample.categorical_missing >> f) & 1;
    // A day's own id of rank r has rank r's scale.
    const double rank = missing ? 0 : static_cast<double>(Rank(f, sample.categorical[f]) % samplers_[f].n());
    const double scale = 1 / (1 + rank / kRankScale);
    const uint64_t h = Mix64(seed_hash_ ^ sample.keys[f]);
    logit += kWeightStd * scale * UnitUniform(h);
    for (int d = 0; d < kEmbeddingDim; ++d) {
      const double e = kEmbeddingStd * scale * UnitUniform(Mix64(h + (d + 1) * 0x9e3779b97f4a7c15ULL));
      sum[d] += e;
      sum_sq += e * e;
    }
  }
  // sum_{f<g} <e_f, e_g> = (|sum_f e_f|^2 - sum_f |e_f|^2) / 2.
  double sum_norm = 0;
  for (int d = 0; d < kEmbeddingDim; ++d) sum_norm += sum[d] * sum[d];
  logit += 0.5 * (sum_norm - sum_sq);
  for (int i = 0; i < kCriteoDense; ++i) {
    logit += dense_weight_[i] * (LogTransform(sample.dense[i]) - mu_[i]);
  }
  return logit;
}

double PlantedCtrModel::Sigmoid(double logit) { return 1 / (1 + std::exp(-logit)); }

}  // namespace data
}  // namespace pstrain
