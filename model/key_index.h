// The keys of a batch against one embedding table: which rows to pull, and where each key
// occurrence finds its row among them.
//
// A worker pulls each distinct key once per step. KeyIndex collects the key occurrences of one or
// more bags (several fields may share a table), sorts the distinct keys ascending (the order of
// the pull request and of the host buffer it fills: row i belongs to unique_keys()[i]) and gives
// every occurrence the index of its key in that list:
//
//   Add({7, 3, 7})  -> part 0          unique_keys() = {3, 7, 9}
//   Add({9, 3})     -> part 1    =>    indices(0) = {1, 0, 1}, indices(1) = {2, 0}
//   Build()
//
// Build sorts (key, occurrence) pairs once: O(K log K) for K occurrences, no hashing, no
// allocation once the buffers have grown to the largest batch seen.
//
// Thread safety: not thread-safe; one index per training thread.
#ifndef PSTRAIN_MODEL_KEY_INDEX_H_
#define PSTRAIN_MODEL_KEY_INDEX_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace pstrain {
namespace model {

class KeyIndex {
 public:
  // Forgets every key and part; keeps the memory for the next batch.
  void Clear();

  // Adds the key occurrences of one bag (any order, repeats allowed) and returns its part number:
  // 0 for the first Add after Clear, then 1, 2, ... The keys are copied.
  int Add(absl::Span<const uint64_t> keys);

  // Sorts the distinct keys and assigns every occurrence its index. INVALID_ARGUMENT when the
  // parts hold more occurrences than an int32 index can count (the index is then empty).
  absl::Status Build();

  // After a successful Build: the distinct keys, ascending; and for part p, one index into them
  // per key passed to the p-th Add, in that call's order. Valid until the next Clear or Add.
  absl::Span<const uint64_t> unique_keys() const { return unique_keys_; }
  absl::Span<const int32_t> indices(int part) const;

  int num_parts() const { return static_cast<int>(part_begin_.size()) - 1; }
  int64_t num_occurrences() const { return static_cast<int64_t>(pending_.size()); }

 private:
  struct Occurrence {
    uint64_t key;
    int64_t position;  // in the concatenation of all parts
  };

  std::vector<Occurrence> pending_;     // every occurrence, in Add order
  std::vector<Occurrence> sorted_;      // Build's scratch
  std::vector<int64_t> part_begin_{0};  // part p occupies [part_begin_[p], part_begin_[p + 1])
  std::vector<uint64_t> unique_keys_;
  std::vector<int32_t> indices_;  // per occurrence, in Add order
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_KEY_INDEX_H_
