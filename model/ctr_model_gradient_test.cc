// The CTR model's numbers against a plain double-precision reference written from the model's
// definition (ctr_model.h): loss, correct count and probabilities, and both gradients (dense
// parameters and embedding rows) against central differences of the reference loss, for each
// pooling and interaction (the FM term as its definition: a dot product per pair of fields).
//
// Tolerances: the model computes in float, the reference and its differences (step 1e-5) in
// double, whose own error is below 1e-9; a float gradient of this size is within about 1e-7 of
// the truth. So |model - numeric| <= 1e-5 + 1e-3 * |numeric| leaves a wide margin for float
// rounding while a missing 1/n, weight or bag-length factor is off by far more.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "model/cpu_backend.h"
#include "model/ctr_model.h"
#include "model/ctr_test_util.h"

namespace pstrain {
namespace model {
namespace {

using testutil::ConstSpans;
using testutil::HostTables;
using testutil::RandomBatch;
using testutil::RandomBatchOptions;
using testutil::SameShape;
using testutil::Spans;

// The model's definition in double: pooled bags and dense features, the MLP, the FM term, the log
// loss.
class Reference {
 public:
  Reference(const CtrModelOptions& options, const std::vector<ParamSpec>& params,
            const std::vector<absl::Span<const uint64_t>>& keys)
      : options_(options), params_(params), keys_(keys) {}

  // Logit of every sample.
  std::vector<double> Logits(const data::CtrBatch& batch, const std::vector<double>& dense,
                             const std::vector<std::vector<double>>& rows) const {
    std::vector<double> logits;
    for (int64_t i = 0; i < batch.size; ++i) {
      std::vector<double> x(batch.dense.begin() + i * options_.num_dense,
                            batch.dense.begin() + (i + 1) * options_.num_dense);
      std::vector<std::vector<double>> pools;
      for (int f = 0; f < options_.num_fields; ++f) {
        std::vector<double> pooled(options_.dim, 0.0);
        const int64_t begin = batch.offsets[f][i], end = batch.offsets[f][i + 1];
        for (int64_t j = begin; j < end; ++j) {
          double scale = batch.weights[f].empty() ? 1.0 : batch.weights[f][j];
          if (options_.pooling == BagPooling::kMean) scale /= static_cast<double>(end - begin);
          const int64_t row = RowOf(f, batch.keys[f][j]);
          for (int d = 0; d < options_.dim; ++d) {
            pooled[d] += scale * rows[f][row * options_.dim + d];
          }
        }
        x.insert(x.end(), pooled.begin(), pooled.end());
        pools.push_back(std::move(pooled));
      }
      const size_t layers = params_.size() / 2;
      for (size_t l = 0; l < layers; ++l) {
        const ParamSpec& w = params_[2 * l];
        const ParamSpec& b = params_[2 * l + 1];
        const int64_t in = w.shape[0], out = w.shape[1];
        EXPECT_EQ(static_cast<int64_t>(x.size()), in);
        std::vector<double> y(out);
        for (int64_t o = 0; o < out; ++o) {
          double sum = dense[b.flat_offset + o];
          for (int64_t k = 0; k < in; ++k) sum += x[k] * dense[w.flat_offset + k * out + o];
          y[o] = l + 1 < layers ? std::max(sum, 0.0) : sum;
        }
        x = std::move(y);
      }
      double pairs = 0;
      if (options_.interaction == CtrInteraction::kFm) {
        for (int f = 0; f < options_.num_fields; ++f) {
          for (int g = f + 1; g < options_.num_fields; ++g) {
            for (int d = 0; d < options_.dim; ++d) pairs += pools[f][d] * pools[g][d];
          }
        }
      }
      logits.push_back(x[0] + pairs);
    }
    return logits;
  }

  double MeanLoss(const data::CtrBatch& batch, const std::vector<double>& dense,
                  const std::vector<std::vector<double>>& rows) const {
    const std::vector<double> z = Logits(batch, dense, rows);
    double sum = 0;
    for (int64_t i = 0; i < batch.size; ++i) {
      const double p = 1.0 / (1.0 + std::exp(-z[i]));
      const double y = batch.labels[i];
      sum += -y * std::log(p) - (1 - y) * std::log(1 - p);
    }
    return sum / static_cast<double>(batch.size);
  }

 private:
  int64_t RowOf(int table, uint64_t key) const {
    const absl::Span<const uint64_t> k = keys_[table];
    const auto it = std::lower_bound(k.begin(), k.end(), key);
    EXPECT_TRUE(it != k.end() && *it == key) << "key " << key << " was not pulled";
    return it - k.begin();
  }

  const CtrModelOptions options_;
  const std::vector<ParamSpec> params_;
  const std::vector<absl::Span<const uint64_t>> keys_;
};

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Checks analytic[i] against the central difference of loss() in (*values)[i].
template <typename Loss>
void ExpectMatchesDifferences(const std::string& what, std::vector<double>* values, Loss loss,
                              const std::vector<float>& analytic) {
  constexpr double kStep = 1e-5;
  ASSERT_EQ(values->size(), analytic.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < values->size() && failures < 5; ++i) {
    const double saved = (*values)[i];
    (*values)[i] = saved + kStep;
    const double plus = loss();
    (*values)[i] = saved - kStep;
    const double minus = loss();
    (*values)[i] = saved;
    const double numeric = (plus - minus) / (2 * kStep);
    if (std::fabs(analytic[i] - numeric) > 1e-5 + 1e-3 * std::fabs(numeric)) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": model " << analytic[i] << ", numeric " << numeric;
    }
  }
}

class CtrModelGradientTest : public ::testing::TestWithParam<std::tuple<BagPooling, CtrInteraction>> {
 protected:
  void SetUp() override {
    options_.num_fields = 3;
    options_.num_dense = 2;
    options_.dim = 4;
    options_.hidden_sizes = {6, 5};
    options_.pooling = std::get<0>(GetParam());
    options_.interaction = std::get<1>(GetParam());
    absl::StatusOr<std::unique_ptr<CtrModel>> model = CtrModel::Create(options_, backend_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    ASSERT_TRUE(model_->InitializeParameters(17).ok());
    dense_.resize(model_->num_parameters());
    ASSERT_TRUE(model_->GetParameters(absl::MakeSpan(dense_)).ok());
  }

  CtrModelOptions options_;
  std::unique_ptr<Backend> backend_ = NewCpuBackend();
  std::unique_ptr<CtrModel> model_;
  std::vector<float> dense_;
};

TEST_P(CtrModelGradientTest, LossAndGradientsMatchTheDoubleReference) {
  RandomBatchOptions batch_options;
  batch_options.size = 8;
  const data::CtrBatch batch = RandomBatch(batch_options, 5);
  absl::StatusOr<std::vector<absl::Span<const uint64_t>>> keys = model_->TableKeys(batch);
  ASSERT_TRUE(keys.ok()) << keys.status();
  HostTables tables(options_.num_fields, options_.dim, 0.5f);
  const std::vector<std::vector<float>> rows = tables.Pull(*keys);

  std::vector<float> dense_grad(model_->num_parameters());
  std::vector<std::vector<float>> row_grads = SameShape(rows);
  BatchStats stats;
  ASSERT_TRUE(
      model_->ComputeGradient(batch, ConstSpans(rows), absl::MakeSpan(dense_grad), Spans(&row_grads), &stats).ok());

  const Reference reference(options_, model_->params(), *keys);
  std::vector<double> dense = ToDouble(dense_);
  std::vector<std::vector<double>> rows_d;
  for (const std::vector<float>& r : rows) rows_d.push_back(ToDouble(r));
  const double mean_loss = reference.MeanLoss(batch, dense, rows_d);
  EXPECT_EQ(stats.samples, batch.size);
  EXPECT_NEAR(stats.loss_sum, mean_loss * batch.size, 1e-5 * mean_loss * batch.size);
  const std::vector<double> logits = reference.Logits(batch, dense, rows_d);
  int64_t correct = 0;
  for (int64_t i = 0; i < batch.size; ++i) correct += (logits[i] > 0) == (batch.labels[i] > 0.5f);
  EXPECT_EQ(stats.correct, correct);

  auto loss = [&] { return reference.MeanLoss(batch, dense, rows_d); };
  ExpectMatchesDifferences("dense", &dense, loss, dense_grad);
  for (int t = 0; t < options_.num_fields; ++t) {
    ExpectMatchesDifferences(model_->tables()[t].name + " rows", &rows_d[t], loss, row_grads[t]);
  }
  // Every table got keys, and the gradients are not trivially zero.
  for (int t = 0; t < options_.num_fields; ++t) {
    ASSERT_FALSE(row_grads[t].empty());
    double norm = 0;
    for (float g : row_grads[t]) norm += g * g;
    EXPECT_GT(norm, 1e-8) << model_->tables()[t].name;
  }
}

TEST_P(CtrModelGradientTest, PredictGivesTheReferenceProbabilities) {
  RandomBatchOptions batch_options;
  batch_options.size = 12;
  const data::CtrBatch batch = RandomBatch(batch_options, 9);
  absl::StatusOr<std::vector<absl::Span<const uint64_t>>> keys = model_->TableKeys(batch);
  ASSERT_TRUE(keys.ok()) << keys.status();
  HostTables tables(options_.num_fields, options_.dim, 0.5f);
  const std::vector<std::vector<float>> rows = tables.Pull(*keys);
  std::vector<float> probabilities(batch.size, -1.0f);
  ASSERT_TRUE(model_->Predict(batch, ConstSpans(rows), absl::MakeSpan(probabilities)).ok());

  std::vector<std::vector<double>> rows_d;
  for (const std::vector<float>& r : rows) rows_d.push_back(ToDouble(r));
  const std::vector<double> logits =
      Reference(options_, model_->params(), *keys).Logits(batch, ToDouble(dense_), rows_d);
  for (int64_t i = 0; i < batch.size; ++i) {
    EXPECT_NEAR(probabilities[i], 1.0 / (1.0 + std::exp(-logits[i])), 1e-6) << "sample " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(PoolingsAndInteractions, CtrModelGradientTest,
                         ::testing::Combine(::testing::Values(BagPooling::kSum, BagPooling::kMean),
                                            ::testing::Values(CtrInteraction::kNone, CtrInteraction::kFm)),
                         [](const ::testing::TestParamInfo<std::tuple<BagPooling, CtrInteraction>>& info) {
                           return std::string(std::get<0>(info.param) == BagPooling::kSum ? "Sum" : "Mean") +
                                  (std::get<1>(info.param) == CtrInteraction::kFm ? "Fm" : "");
                         });

}  // namespace
}  // namespace model
}  // namespace pstrain
