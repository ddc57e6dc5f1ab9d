// The planted model behind pstrain-gen-ctr: draws Criteo-format samples (criteo_reader.h) whose
// click probability is known exactly, so the best achievable test AUC is known.
//
// Keys. Categorical field f (of 26) has n_f distinct values, n_f = unique_keys / 26 (the first
// unique_keys % 26 fields one more). A sample's value in field f is missing with probability
// missing_rate, else its rank r in [0, n_f) is drawn Zipf(zipf) (zipf.h: rank 0 most frequent),
// and written as the 8-hex-digit value V_f(r), a seeded bijection of 32-bit integers, so values
// look random and V_f can be inverted to recover r.
//
// Per-key parameters, derived on the fly from Mix64(seed-hash ^ CriteoKey(f, V_f(r))), so no
// table of 10^8 keys is ever built: a weight w and a 4-dim embedding e, each component uniform
// with standard deviation (kWeightStd, kEmbeddingStd) / (1 + r / 50): rare keys matter less, as
// in real logs where a rare value carries little evidence, and the planted AUC stays nearly
// learnable from 2M samples. A missing field has its own parameters (at rank 0's scale).
//
// Drifting keys (days > 1 or new_key_rate > 0). Samples belong to a day d in [0, days). With
// probability new_key_rate a present categorical value is drawn from day d's own ids instead of
// the field's lasting ones: its rank r is drawn the same way, and it is written as
// V_f(n_f * (1 + d) + r), an id no other day uses, so every day brings ids never seen before and
// the ids of past days are never drawn again (they retire). A day's own id of rank r has its own
// parameters (from its key, as every key) at rank r's scale. With new_key_rate 0 (the default)
// every day draws the same ids, and the samples are exactly those of a generator without days.
//
// Dense features. I_i = floor(exp(mu_i + Z)) - 1, Z standard normal, mu_i in [0.5, 4] planted per
// feature: count-like, heavy-tailed, at most 10^7; missing with probability missing_rate.
//
// The label is Bernoulli(sigmoid(logit)),
//   logit = bias + sum_f w_f + sum_{f<g} <e_f, e_g> + sum_i d_i (LogTransform(I_i) - mu_i),
// with a missing dense feature counting as 0 (the reader's convention), and d_i planted per
// feature. bias (-2) gives a positive rate near Criteo's 25%.
//
// Thread-compatible and immutable after Create: const methods may run concurrently.
#ifndef PSTRAIN_DATA_PLANTED_CTR_MODEL_H_
#define PSTRAIN_DATA_PLANTED_CTR_MODEL_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "data/criteo_reader.h"
#include "data/zipf.h"

namespace pstrain {
namespace data {

struct PlantedCtrOptions {
  uint64_t unique_keys = 1000000;  // Over all 26 fields; in [26, 26 * 2^32).
  double zipf = 1.1;               // Exponent, > 0.
  double missing_rate = 0.05;      // In [0, 1).
  uint64_t seed = 1;
  // Drifting keys (above): days >= 1, and new_key_rate in [0, 1]. With new_key_rate > 0,
  // n_f * (days + 1) must stay below 2^32 (each day's ids are a copy of a field's id range).
  int days = 1;
  double new_key_rate = 0;
};

class PlantedCtrModel {
 public:
  static constexpr int kEmbeddingDim = 4;
  static constexpr double kWeightStd = 0.6;
  static constexpr double kEmbeddingStd = 0.12;

  // INVALID_ARGUMENT for an option out of its range, naming it.
  static absl::StatusOr<PlantedCtrModel> Create(const PlantedCtrOptions& options);

  // Draws the features of one sample of day `day` (not its label) into `*sample`, as the reader
  // would return them. REQUIRES: 0 <= day < days.
  void DrawFeatures(SplitMix64& rng, CtrSample* sample, int day = 0) const;

  // The planted logit of a sample's features; depends only on what a Criteo line carries, so
  // it is the same for a drawn sample and for the sample read back from the file.
  double Logit(const CtrSample& sample) const;

  static double Sigmoid(double logit);

  uint64_t keys_in_field(int field) const { return samplers_[field].n(); }

  // The day whose own id `value` of field `field` is (see drifting keys above), or -1 for one of
  // the field's lasting ids.
  int DayOfValue(int field, uint32_t value) const;

 private:
  explicit PlantedCtrModel(const PlantedCtrOptions& options);

  // V_f(rank), and its inverse: the rank (r for a lasting id, n_f * (1 + d) + r for day d's own)
  // of value `value` of field `field`.
  uint32_t Value(int field, uint64_t rank) const;
  uint64_t Rank(int field, uint32_t value) const;

  PlantedCtrOptions options_;
  uint64_t seed_hash_;
  std::array<uint32_t, kCriteoCategorical> salt_;
  std::vector<ZipfSampler> samplers_;
  std::array<double, kCriteoDense> mu_;
  std::array<double, kCriteoDense> dense_weight_;
  double bias_;
};

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_PLANTED_CTR_MODEL_H_
