#include "data/permutation.h"

#include <glog/logging.h>

#include <numeric>
#include <utility>

namespace pstrain {
namespace data {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): advances *state and returns a well-mixed word.
uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  uint64_t sm = seed;
  for (uint64_t& word : s_) word = SplitMix64(&sm);
}

// xoshiro256** 1.0 (Blackman, Vigna 2018).
uint64_t Xoshiro256::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Xoshiro256::Below(uint64_t bound) {
  CHECK_GT(bound, 0u);
  // Values below 2^64 mod bound would make the low residues more likely; redraw them.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = Next();
    if (r >= threshold) return r % bound;
  }
}

std::vector<int64_t> EpochPermutation(uint64_t seed, int epoch, int64_t n) {
  CHECK_GE(n, 0) << "EpochPermutation of a negative count";
  // One splitmix64 step per input mixes (seed, epoch) into the stream's seed, so neighbouring
  // epochs and seeds give unrelated orders.
  uint64_t mix = seed;
  uint64_t stream_seed = SplitMix64(&mix);
  mix = stream_seed ^ static_cast<uint64_t>(static_cast<int64_t>(epoch));
  stream_seed = SplitMix64(&mix);
  Xoshiro256 rng(stream_seed);

  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

}  // namespace data
}  // namespace pstrain
