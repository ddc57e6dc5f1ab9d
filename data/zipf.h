// Draws Zipf-distributed ranks in O(1) memory and expected O(1) time: P(k) ∝ k^-s for k in
// [1, n], any n up to 2^53 and any exponent s > 0, by rejection-inversion (W. Hörmann and
// G. Derflinger, "Rejection-inversion to generate variates from monotone discrete distributions",
// 1996; the form of Apache Commons' RejectionInversionZipfSampler). No per-rank table, so a field
// may have 10^9 distinct keys. Needs one or two uniforms per draw.
//
// Thread-compatible; Sample takes the uniform source, so one sampler serves many generators.
#ifndef PSTRAIN_DATA_ZIPF_H_
#define PSTRAIN_DATA_ZIPF_H_

#include <cstdint>

namespace pstrain {
namespace data {

// SplitMix64: a tiny, fast, deterministic generator (the same sequence on every platform).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t NextU64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 53 random bits.
  double Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

class ZipfSampler {
 public:
  // REQUIRES: n >= 1, exponent > 0 (checked: programmer errors; main.cc validates flags).
  ZipfSampler(uint64_t n, double exponent);

  // A rank in [1, n].
  uint64_t Sample(SplitMix64& rng) const;

  uint64_t n() const { return n_; }
  double exponent() const { return s_; }

 private:
  double H(double x) const;  // An antiderivative of h(x) = x^-s.
  double HInverse(double x) const;
  double h(double x) const;

  uint64_t n_;
  double s_;
  double h_integral_x1_;  // H(1.5) - 1
  double h_integral_n_;   // H(n + 0.5)
  double s_const_;        // 2 - HInverse(H(2.5) - h(2)): accepts without evaluating H.
};

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_ZIPF_H_
