// Which server owns a key of a sparse (embedding) table.
//
// A key is a uint64 id (a hashed feature value). Its owner is
//
//   ServerOfKey(key, n) = JumpConsistentHash(MixKey64(key), n)
//
// - MixKey64 is the splitmix64 finalizer, a bijection whose output bits each depend on every input
//   bit, so sequential ids (0, 1, 2, ...) spread like random ones.
// - JumpConsistentHash is Lamping & Veach, "A Fast, Minimal Memory, Consistent Hash Algorithm"
//   (2014): buckets are equally likely, and going from n to n + 1 buckets moves a key only to the
//   new bucket, with probability 1/(n + 1). A job that grows from n to n + 1 servers therefore
//   moves about 1/(n + 1) of its rows, the least any balanced assignment can move; taking the key
//   modulo n would move about n/(n + 1) of them. No table of ranges is kept: O(log n) time, no
//   memory.
//
// Both functions are fixed forever (they define where rows of a checkpoint live): changing them
// changes every job's layout.
//
// Thread safety: pure functions, safe from any thread.
#ifndef PSTRAIN_COMMON_KEY_HASH_H_
#define PSTRAIN_COMMON_KEY_HASH_H_

#include <cstdint>

namespace pstrain {

// The splitmix64 finalizer (Steele, Lea & Flood 2014): bijective on uint64.
inline uint64_t MixKey64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Lamping & Veach's jump consistent hash of `hash` into [0, num_buckets).
// REQUIRES: num_buckets > 0.
int JumpConsistentHash(uint64_t hash, int num_buckets);

// The server in [0, num_servers) that owns `key`. REQUIRES: num_servers > 0.
inline int ServerOfKey(uint64_t key, int num_servers) { return JumpConsistentHash(MixKey64(key), num_servers); }

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_KEY_HASH_H_
