#include "common/key_hash.h"

#include <glog/logging.h>

namespace pstrain {

int JumpConsistentHash(uint64_t hash, int num_buckets) {
  CHECK_GT(num_buckets, 0) << "JumpConsistentHash needs at least one bucket";
  // The paper's loop: a linear congruential generator seeded with the hash draws the next bucket
  // count at which this key jumps; the last jump below num_buckets is its bucket.
  int64_t bucket = -1;
  int64_t next = 0;
  while (next < num_buckets) {
    bucket = next;
    hash = hash * 2862933555777941757ULL + 1;
    next = static_cast<int64_t>(static_cast<double>(bucket + 1) *
                                (static_cast<double>(int64_t{1} << 31) / static_cast<double>((hash >> 33) + 1)));
  }
  return static_cast<int>(bucket);
}

}  // namespace pstrain
