// A batch of click-through-rate records as a model consumes it: labels, dense features and, per
// categorical field, a bag of 64-bit keys per sample (one key for a Criteo field, any number for
// a libsvm line). Readers fill it (data/ctr_source.h); models look keys up in embedding tables
// (model/embedding_bag.h) whose rows the parameter servers hold.
//
// A plain value; no invariants beyond those documented on the fields.
#ifndef PSTRAIN_DATA_CTR_BATCH_H_
#define PSTRAIN_DATA_CTR_BATCH_H_

#include <cstdint>
#include <vector>

namespace pstrain {
namespace data {

struct CtrBatch {
  // Samples in the batch.
  int64_t size = 0;
  // Dense features per sample (13 for Criteo, 0 for libsvm).
  int num_dense = 0;
  // labels[i] in {0, 1} (libsvm labels <= 0 map to 0, > 0 to 1).
  std::vector<float> labels;
  // size * num_dense floats, sample-major, already transformed for the model (Criteo:
  // LogTransform, missing values 0).
  std::vector<float> dense;
  // One entry per categorical field (26 for Criteo, 1 for libsvm). Field f of sample i is the bag
  // keys[f][offsets[f][i], offsets[f][i + 1]); offsets[f] has size + 1 entries, starting at 0.
  std::vector<std::vector<uint64_t>> keys;
  std::vector<std::vector<int64_t>> offsets;
  // Per field, either empty (every key weighs 1) or one weight per key (libsvm's values).
  std::vector<std::vector<float>> weights;

  int num_fields() const { return static_cast<int>(keys.size()); }
};

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_CTR_BATCH_H_
