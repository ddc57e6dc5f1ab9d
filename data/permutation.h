// Deterministic per-epoch sample orders.
//
// Every worker, server and the scheduler must agree on the order of an epoch without talking,
// so the permutation is a pure function of (seed, epoch, n), bit-identical on every machine and
// standard library: the generator (xoshiro256**, seeded through splitmix64) and the unbiased
// bounded draw are implemented here, never taken from <random> (whose distributions and
// std::shuffle are implementation-defined).
//
// Free functions without state; safe to call from any thread.
#ifndef PSTRAIN_DATA_PERMUTATION_H_
#define PSTRAIN_DATA_PERMUTATION_H_

#include <cstdint>
#include <vector>

namespace pstrain {
namespace data {

// A permutation of [0, n) determined by (seed, epoch) alone (Fisher-Yates shuffle).
// REQUIRES: n >= 0. Allocates n int64s; O(n).
std::vector<int64_t> EpochPermutation(uint64_t seed, int epoch, int64_t n);

// The generator behind EpochPermutation, exposed so other code that needs a portable,
// reproducible stream (e.g. tests) uses the same one. Not thread-safe: one per thread.
class Xoshiro256 {
 public:
  // The four state words are filled from splitmix64 seeded with `seed`, so any seed
  // (including 0) gives a valid, well-mixed state.
  explicit Xoshiro256(uint64_t seed);

  uint64_t Next();
  // Uniform in [0, bound), unbiased (rejection of the short top range). REQUIRES: bound > 0.
  uint64_t Below(uint64_t bound);

 private:
  uint64_t s_[4];
};

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_PERMUTATION_H_
