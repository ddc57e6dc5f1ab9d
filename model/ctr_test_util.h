// Helpers shared by the CTR model tests: random batches shaped like the readers', and embedding
// tables held on the host the way a parameter server holds them (a map from key to row), with
// the pull and the plain SGD step a worker would do.
#ifndef PSTRAIN_MODEL_CTR_TEST_UTIL_H_
#define PSTRAIN_MODEL_CTR_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "data/ctr_batch.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace testutil {

struct RandomBatchOptions {
  int64_t size = 8;
  int num_fields = 3;
  int num_dense = 2;
  // Keys of field f are drawn from `vocabulary` values (distinct per field), so they repeat.
  int vocabulary = 5;
  // Bags hold 0 to max_bag keys (Criteo: exactly 1; libsvm: any number).
  int max_bag = 3;
  // Field 1 gets per-key weights in [0.5, 2) (when there is a field 1).
  bool weighted_field_1 = true;
};

// A batch with random labels in {0, 1}, dense features in [-1, 1) and random bags; sample 0's
// bag of field 0 is always empty.
inline data::CtrBatch RandomBatch(const RandomBatchOptions& o, uint32_t seed) {
  std::mt19937 rng(seed);
  data::CtrBatch batch;
  batch.size = o.size;
  batch.num_dense = o.num_dense;
  for (int64_t i = 0; i < o.size; ++i) batch.labels.push_back(static_cast<float>(rng() % 2));
  batch.dense = RandomVector(o.size * o.num_dense, seed + 1);
  batch.keys.resize(o.num_fields);
  batch.offsets.resize(o.num_fields);
  batch.weights.resize(o.num_fields);
  for (int f = 0; f < o.num_fields; ++f) {
    batch.offsets[f].push_back(0);
    for (int64_t i = 0; i < o.size; ++i) {
      const int length = (f == 0 && i == 0) ? 0 : static_cast<int>(rng() % (o.max_bag + 1));
      for (int j = 0; j < length; ++j) {
        batch.keys[f].push_back(static_cast<uint64_t>(f) * 1000003 + rng() % o.vocabulary);
        if (f == 1 && o.weighted_field_1) {
          batch.weights[f].push_back(0.5f + 1.5f * static_cast<float>(rng() % 1000) / 1000.0f);
        }
      }
      batch.offsets[f].push_back(static_cast<int64_t>(batch.keys[f].size()));
    }
  }
  return batch;
}

// Embedding tables on the host: rows created on first pull with reproducible values in
// [-scale, scale).
class HostTables {
 public:
  HostTables(int num_tables, int dim, float scale) : tables_(num_tables), dim_(dim), scale_(scale) {}

  // The rows of `keys` per table, back to back, as a worker's pull returns them.
  std::vector<std::vector<float>> Pull(const std::vector<absl::Span<const uint64_t>>& keys) {
    std::vector<std::vector<float>> rows(keys.size());
    for (size_t t = 0; t < keys.size(); ++t) {
      for (uint64_t key : keys[t]) {
        const std::vector<float>& row = Row(static_cast<int>(t), key);
        rows[t].insert(rows[t].end(), row.begin(), row.end());
      }
    }
    return rows;
  }

  // row -= lr * grad for every pulled key.
  void Sgd(const std::vector<absl::Span<const uint64_t>>& keys, const std::vector<std::vector<float>>& grads,
           float lr) {
    for (size_t t = 0; t < keys.size(); ++t) {
      for (size_t k = 0; k < keys[t].size(); ++k) {
        std::vector<float>& row = Row(static_cast<int>(t), keys[t][k]);
        for (int d = 0; d < dim_; ++d) row[d] -= lr * grads[t][k * dim_ + d];
      }
    }
  }

 private:
  std::vector<float>& Row(int table, uint64_t key) {
    std::vector<float>& row = tables_[table][key];
    if (row.empty()) {
      row = RandomVector(dim_, static_cast<uint32_t>(key * 31 + table), -scale_, scale_);
    }
    return row;
  }

  std::vector<std::map<uint64_t, std::vector<float>>> tables_;
  int dim_;
  float scale_;
};

// Spans over vectors, the form the CTR model takes its buffers in.
template <typename T>
std::vector<absl::Span<const T>> ConstSpans(const std::vector<std::vector<T>>& v) {
  return std::vector<absl::Span<const T>>(v.begin(), v.end());
}
template <typename T>
std::vector<absl::Span<T>> Spans(std::vector<std::vector<T>>* v) {
  std::vector<absl::Span<T>> spans;
  for (std::vector<T>& x : *v) spans.push_back(absl::MakeSpan(x));
  return spans;
}

// Buffers shaped like `rows`, for the row gradients.
inline std::vector<std::vector<float>> SameShape(const std::vector<std::vector<float>>& rows) {
  std::vector<std::vector<float>> out;
  for (const std::vector<float>& r : rows) out.emplace_back(r.size());
  return out;
}

}  // namespace testutil
}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CTR_TEST_UTIL_H_
