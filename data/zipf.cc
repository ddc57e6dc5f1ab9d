#include "data/zipf.h"

#include <cmath>

#include <glog/logging.h>

namespace pstrain {
namespace data {
namespace {

// log1p(x) / x, accurate near 0.
double Helper1(double x) { return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x)); }

// expm1(x) / x, accurate near 0.
double Helper2(double x) {
  return std::fabs(x) > 1e-8 ? std::expm1(x) / x : 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x));
}

}  // namespace

ZipfSampler::ZipfSampler(uint64_t n, double exponent) : n_(n), s_(exponent) {
  CHECK_GE(n, 1u);
  CHECK_GT(exponent, 0);
  h_integral_x1_ = H(1.5) - 1;
  h_integral_n_ = H(static_cast<double>(n) + 0.5);
  s_const_ = 2 - HInverse(H(2.5) - h(2));
}

double ZipfSampler::h(double x) const { return std::exp(-s_ * std::log(x)); }

// (x^(1-s) - 1) / (1 - s), and log(x) at s = 1, without the division's cancellation.
double ZipfSampler::H(double x) const {
  const double log_x = std::log(x);
  return Helper2((1 - s_) * log_x) * log_x;
}

double ZipfSampler::HInverse(double x) const {
  double t = x * (1 - s_);
  if (t < -1) t = -1;  // Rounding; keeps log1p defined.
  return std::exp(Helper1(t) * x);
}

uint64_t ZipfSampler::Sample(SplitMix64& rng) const {
  while (true) {
    const double u = h_integral_n_ + rng.Uniform() * (h_integral_x1_ - h_integral_n_);
    const double x = HInverse(u);
    double k = std::floor(x + 0.5);
    if (k < 1) {
      k = 1;
    } else if (k > static_cast<double>(n_)) {
      k = static_cast<double>(n_);
    }
    if (k - x <= s_const_ || u >= H(k + 0.5) - h(k)) return static_cast<uint64_t>(k);
  }
}

}  // namespace data
}  // namespace pstrain
