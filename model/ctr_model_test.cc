// The CTR model's surface on the CPU backend: options, tables and layout, the keys to pull, the
// errors of every method, the empty batch, and a short SGD run on a task it can learn. The numbers
// themselves are checked against a double-precision reference in ctr_model_gradient_test.cc.
#include "model/ctr_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/cpu_backend.h"
#include "model/ctr_test_util.h"

namespace pstrain {
namespace model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testutil::ConstSpans;
using testutil::HostTables;
using testutil::RandomBatch;
using testutil::RandomBatchOptions;
using testutil::SameShape;
using testutil::Spans;

CtrModelOptions SmallOptions() {
  CtrModelOptions options;
  options.num_fields = 3;
  options.num_dense = 2;
  options.dim = 4;
  options.hidden_sizes = {6, 5};
  return options;
}

class CtrModelTest : public ::testing::Test {
 protected:
  std::unique_ptr<CtrModel> MakeModel(const CtrModelOptions& options) {
    absl::StatusOr<std::unique_ptr<CtrModel>> model = CtrModel::Create(options, backend_.get());
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? std::move(*model) : nullptr;
  }

  std::unique_ptr<Backend> backend_ = NewCpuBackend();
};

// ---- Options, tables, layout ------------------------------------------------------------------

TEST_F(CtrModelTest, CreateRefusesBadOptions) {
  struct Case {
    void (*edit)(CtrModelOptions*);
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](CtrModelOptions* o) { o->num_fields = -1; }, "ctr model: num_fields is -1, expected >= 0"},
      {[](CtrModelOptions* o) { o->num_dense = -2; }, "ctr model: num_dense is -2, expected >= 0"},
      {[](CtrModelOptions* o) { o->dim = 0; }, "ctr model: dim is 0, expected > 0"},
      {[](CtrModelOptions* o) {
         o->hidden_sizes = {8, 0};
       },
       "ctr model hidden sizes [8, 0]: entry 1 is 0, expected > 0"},
      {[](CtrModelOptions* o) {
         o->num_fields = 0;
         o->num_dense = 0;
       },
       "ctr model: 0 dense features + 0 fields x dim 4 make an input of 0 floats, expected [1, "
       "2147483647]"},
  };
  for (const Case& c : cases) {
    CtrModelOptions options = SmallOptions();
    c.edit(&options);
    const absl::Status status = CtrModel::Create(options, backend_.get()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(status.message(), c.message);
  }
}

TEST_F(CtrModelTest, CriteoDefaultsNameTablesAndLayOutTheMlp) {
  std::unique_ptr<CtrModel> model = MakeModel(CtrModelOptions());
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->tables().size(), 26u);
  EXPECT_EQ(model->tables()[0].name, "C1");
  EXPECT_EQ(model->tables()[25].name, "C26");
  EXPECT_EQ(model->tables()[25].dim, 16);
  EXPECT_EQ(model->input_width(), 13 + 26 * 16);
  ASSERT_EQ(model->params().size(), 6u);
  EXPECT_EQ(model->params()[0].name, "fc1.weight");
  EXPECT_THAT(model->params()[0].shape, ElementsAre(429, 256));
  EXPECT_THAT(model->params()[4].shape, ElementsAre(128, 1));
  EXPECT_EQ(model->params()[4].init, InitKind::kGlorotUniform);
  EXPECT_EQ(model->num_parameters(), 429 * 256 + 256 + 256 * 128 + 128 + 128 + 1);
  // The same answers without a model, for roles that lay out the servers.
  EXPECT_EQ(CtrDenseParamSpecs(CtrModelOptions()).size(), 6u);
  EXPECT_EQ(CtrTableSpecs(CtrModelOptions())[3].name, "C4");
}

TEST_F(CtrModelTest, TableNamesComeFromThePrefix) {
  CtrModelOptions options = SmallOptions();
  options.table_prefix = "field";
  options.hidden_sizes = {};  // a logistic regression over the concatenated input
  std::unique_ptr<CtrModel> model = MakeModel(options);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->tables()[2].name, "field3");
  EXPECT_EQ(model->num_parameters(), 2 + 3 * 4 + 1);
}

TEST_F(CtrModelTest, ParametersRoundTripAndInitializationIsDeterministic) {
  std::unique_ptr<CtrModel> model = MakeModel(SmallOptions());
  ASSERT_NE(model, nullptr);
  std::vector<float> a(model->num_parameters()), b(model->num_parameters());
  ASSERT_TRUE(model->InitializeParameters(3).ok());
  ASSERT_TRUE(model->GetParameters(absl::MakeSpan(a)).ok());
  ASSERT_TRUE(model->SetParameters(std::vector<float>(a.size(), 0.5f)).ok());
  ASSERT_TRUE(model->GetParameters(absl::MakeSpan(b)).ok());
  EXPECT_EQ(b, std::vector<float>(a.size(), 0.5f));
  ASSERT_TRUE(model->InitializeParameters(3).ok());
  ASSERT_TRUE(model->GetParameters(absl::MakeSpan(b)).ok());
  EXPECT_EQ(a, b);
  const ParamSpec& w1 = model->params()[0];
  EXPECT_NE(a[w1.flat_offset], 0.0f);
  EXPECT_LE(std::fabs(a[w1.flat_offset]), std::sqrt(6.0f / w1.fan_in));

  const absl::Status status = model->SetParameters(std::vector<float>(3));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "ctr SetParameters: got 3 floats, expected " + std::to_string(model->num_parameters()));
}

// ---- Keys -------------------------------------------------------------------------------------

TEST_F(CtrModelTest, TableKeysAreEachFieldsDistinctKeysAscending) {
  std::unique_ptr<CtrModel> model = MakeModel(SmallOptions());
  ASSERT_NE(model, nullptr);
  data::CtrBatch batch = RandomBatch(RandomBatchOptions(), 1);
  batch.keys[2] = {9, 4, 9, 4, 1};
  batch.offsets[2] = {0, 1, 2, 2, 3, 3, 4, 5, 5};
  batch.weights[2].clear();
  absl::StatusOr<std::vector<absl::Span<const uint64_t>>> keys = model->TableKeys(batch);
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 3u);
  EXPECT_THAT((*keys)[2], ElementsAre(1, 4, 9));
  for (int f = 0; f < 2; ++f) {
    std::vector<uint64_t> want = batch.keys[f];
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    EXPECT_EQ(std::vector<uint64_t>((*keys)[f].begin(), (*keys)[f].end()), want) << "field " << f;
  }
}

// ---- Errors -----------------------------------------------------------------------------------

TEST_F(CtrModelTest, TableKeysRefusesBatchesOfAnotherShape) {
  std::unique_ptr<CtrModel> model = MakeModel(SmallOptions());
  ASSERT_NE(model, nullptr);
  struct Case {
    void (*edit)(data::CtrBatch*);
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](data::CtrBatch* b) {
         b->keys.pop_back();
         b->offsets.pop_back();
         b->weights.pop_back();
       },
       "ctr batch: 2 categorical fields, expected 3"},
      {[](data::CtrBatch* b) { b->offsets.pop_back(); },
       "ctr batch: 2 offset lists for 3 fields, expected one per field"},
      {[](data::CtrBatch* b) { b->weights.resize(2); },
       "ctr batch: 2 weight lists for 3 fields, expected none or one per field"},
      {[](data::CtrBatch* b) { b->num_dense = 3; }, "ctr batch: 3 dense features per sample, expected 2"},
      {[](data::CtrBatch* b) { b->labels.pop_back(); }, "ctr batch of 8 samples: 7 labels, expected 8"},
      {[](data::CtrBatch* b) { b->dense.push_back(0); },
       "ctr batch of 8 samples: 17 dense floats, expected 16 (8 x 2)"},
      {[](data::CtrBatch* b) { b->labels[5] = 2; }, "ctr batch: sample 5 has label 2, expected a value in [0, 1]"},
      {[](data::CtrBatch* b) { b->dense[7] = NAN; },
       "ctr batch: sample 3 dense feature 1 is nan, expected a finite value"},
      {[](data::CtrBatch* b) { b->offsets[1].pop_back(); },
       "ctr batch field 1 (C2): 8 offsets, expected 9 (samples + 1)"},
      {[](data::CtrBatch* b) { b->offsets[2].back() += 1; },
       "ctr batch field 2 (C3): last offset is " /* key count + 1 */},
      {[](data::CtrBatch* b) { b->weights[1].pop_back(); }, "ctr batch field 1 (C2): "},
      {[](data::CtrBatch* b) { b->size = -1; }, "ctr batch: size -1, expected [0, 2147483647]"},
  };
  const data::CtrBatch good = RandomBatch(RandomBatchOptions(), 2);
  ASSERT_TRUE(model->TableKeys(good).ok());
  for (const Case& c : cases) {
    data::CtrBatch batch = good;
    c.edit(&batch);
    const absl::Status status = model->TableKeys(batch).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(status.message()), ::testing::StartsWith(c.message));
  }
  // A failed TableKeys forgets the batch it had indexed before.
  ASSERT_TRUE(model->TableKeys(good).ok());
  data::CtrBatch bad = good;
  bad.num_dense = 5;
  ASSERT_FALSE(model->TableKeys(bad).ok());
  std::vector<float> probabilities(good.size);
  const std::vector<std::vector<float>> rows(3);
  EXPECT_EQ(model->Predict(good, ConstSpans(rows), absl::MakeSpan(probabilities)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CtrModelTest, ComputeGradientRefusesWrongBuffersNamingTheTable) {
  std::unique_ptr<CtrModel> model = MakeModel(SmallOptions());
  ASSERT_NE(model, nullptr);
  const data::CtrBatch batch = RandomBatch(RandomBatchOptions(), 3);
  absl::StatusOr<std::vector<absl::Span<const uint64_t>>> keys = model->TableKeys(batch);
  ASSERT_TRUE(keys.ok());
  HostTables tables(3, 4, 0.1f);
  const std::vector<std::vector<float>> rows = tables.Pull(*keys);
  std::vector<float> dense_grad(model->num_parameters());
  std::vector<std::vector<float>> row_grads = SameShape(rows);
  ASSERT_TRUE(
      model->ComputeGradient(batch, ConstSpans(rows), absl::MakeSpan(dense_grad), Spans(&row_grads), nullptr).ok());
  const std::string k1 = std::to_string((*keys)[1].size());
  const std::string floats1 = std::to_string((*keys)[1].size() * 4);

  std::vector<std::vector<float>> short_rows = rows;
  short_rows[1].pop_back();
  absl::Status status =
      model->ComputeGradient(batch, ConstSpans(short_rows), absl::MakeSpan(dense_grad), Spans(&row_grads), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "ctr ComputeGradient: table 1 (C2) rows: got " + std::to_string(rows[1].size() - 1) +
                                  " floats, expected " + floats1 + " (" + k1 + " keys x dim 4)");

  const std::vector<std::vector<float>> two_tables(rows.begin(), rows.begin() + 2);
  status =
      model->ComputeGradient(batch, ConstSpans(two_tables), absl::MakeSpan(dense_grad), Spans(&row_grads), nullptr);
  EXPECT_EQ(status.message(), "ctr ComputeGradient: 2 row buffers, expected 3 (one per table)");

  std::vector<float> short_dense(model->num_parameters() - 1);
  status = model->ComputeGradient(batch, ConstSpans(rows), absl::MakeSpan(short_dense), Spans(&row_grads), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("dense gradient has room for"));

  std::vector<std::vector<float>> short_grads = SameShape(rows);
  short_grads[2].resize(1);
  status = model->ComputeGradient(batch, ConstSpans(rows), absl::MakeSpan(dense_grad), Spans(&short_grads), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "ctr ComputeGradient: table 2 (C3) row gradient has room for 1 "
            "floats, expected " +
                std::to_string(rows[2].size()) + " (as many as its rows)");

  std::vector<float> probabilities(batch.size + 1);
  status = model->Predict(batch, ConstSpans(rows), absl::MakeSpan(probabilities));
  EXPECT_EQ(status.message(), "ctr Predict: room for 9 probabilities, expected 8 (one per sample)");
}

TEST_F(CtrModelTest, ComputeGradientRefusesABatchThatTableKeysDidNotIndex) {
  std::unique_ptr<CtrModel> model = MakeModel(SmallOptions());
  ASSERT_NE(model, nullptr);
  const data::CtrBatch first = RandomBatch(RandomBatchOptions(), 4);
  const data::CtrBatch second = first;  // same contents, another object
  std::vector<float> dense_grad(model->num_parameters());
  const std::vector<std::vector<float>> rows(3);
  std::vector<std::vector<float>> row_grads(3);
  // Before any TableKeys.
  absl::Status status =
      model->ComputeGradient(first, ConstSpans(rows), absl::MakeSpan(dense_grad), Spans(&row_grads), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("call TableKeys(batch) first"));
  ASSERT_TRUE(model->TableKeys(first).ok());
  status = model->ComputeGradient(second, ConstSpans(rows), absl::MakeSpan(dense_grad), Spans(&row_grads), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CtrModelTest, EmptyBatchGivesZeroGradients) {
  std::unique_ptr<CtrModel> model = MakeModel(SmallOptions());
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->InitializeParameters(1).ok());
  RandomBatchOptions options;
  options.size = 0;
  const data::CtrBatch batch = RandomBatch(options, 5);
  absl::StatusOr<std::vector<absl::Span<const uint64_t>>> keys = model->TableKeys(batch);
  ASSERT_TRUE(keys.ok()) << keys.status();
  for (const auto& k : *keys) EXPECT_TRUE(k.empty());
  std::vector<float> dense_grad(model->num_parameters(), 7.0f);
  const std::vector<std::vector<float>> rows(3);
  std::vector<std::vector<float>> row_grads(3);
  BatchStats stats;
  ASSERT_TRUE(
      model->ComputeGradient(batch, ConstSpans(rows), absl::MakeSpan(dense_grad), Spans(&row_grads), &stats).ok());
  EXPECT_EQ(dense_grad, std::vector<float>(model->num_parameters(), 0.0f));
  EXPECT_EQ(stats.samples, 0);
  EXPECT_EQ(stats.loss_sum, 0.0);
}

// ---- Training -----------------------------------------------------------------------------------

// Field 0's key decides the click (even keys click), field 1 is noise, the dense feature is
// noise: the model must learn field 0's embedding rows. Plain SGD on the host, as a worker and
// its servers would apply it.
data::CtrBatch SeparableBatch(int n, std::mt19937* rng) {
  data::CtrBatch batch;
  batch.size = n;
  batch.num_dense = 1;
  batch.keys.resize(2);
  batch.offsets.assign(2, {0});
  batch.weights.resize(2);
  for (int i = 0; i < n; ++i) {
    const uint64_t key = (*rng)() % 20;
    batch.keys[0].push_back(key);
    batch.keys[1].push_back(100 + (*rng)() % 20);
    for (auto& offsets : batch.offsets) offsets.push_back(i + 1);
    batch.labels.push_back(key % 2 == 0 ? 1.0f : 0.0f);
    batch.dense.push_back(static_cast<float>((*rng)() % 1000) / 1000.0f - 0.5f);
  }
  return batch;
}

TEST_F(CtrModelTest, SgdLearnsASeparableTask) {
  CtrModelOptions options;
  options.num_fields = 2;
  options.num_dense = 1;
  options.dim = 4;
  options.hidden_sizes = {8};
  std::unique_ptr<CtrModel> model = MakeModel(options);
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->InitializeParameters(11).ok());
  std::vector<float> dense(model->num_parameters()), dense_grad(model->num_parameters());
  ASSERT_TRUE(model->GetParameters(absl::MakeSpan(dense)).ok());
  // Rows start nearly equal, so the MLP cannot tell keys apart until SGD has moved their rows.
  HostTables tables(2, options.dim, 0.01f);
  std::mt19937 rng(12);
  const float lr = 0.2f;
  // A row sees only the samples with its key (1 in 20), so its mean gradient is small: rows learn
  // at a larger rate, as per-row optimizers would let them.
  const float row_lr = 4.0f;

  std::vector<double> losses, accuracies;
  for (int step = 0; step < 100; ++step) {
    const data::CtrBatch batch = SeparableBatch(64, &rng);
    absl::StatusOr<std::vector<absl::Span<const uint64_t>>> keys = model->TableKeys(batch);
    ASSERT_TRUE(keys.ok()) << keys.status();
    const std::vector<std::vector<float>> rows = tables.Pull(*keys);
    std::vector<std::vector<float>> row_grads = SameShape(rows);
    BatchStats stats;
    ASSERT_TRUE(
        model->ComputeGradient(batch, ConstSpans(rows), absl::MakeSpan(dense_grad), Spans(&row_grads), &stats).ok());
    losses.push_back(stats.loss_sum / stats.samples);
    accuracies.push_back(static_cast<double>(stats.correct) / stats.samples);
    for (size_t i = 0; i < dense.size(); ++i) dense[i] -= lr * dense_grad[i];
    ASSERT_TRUE(model->SetParameters(dense).ok());
    tables.Sgd(*keys, row_grads, row_lr);
  }
  auto mean_of = [](const std::vector<double>& v, size_t begin, size_t end) {
    double sum = 0;
    for (size_t i = begin; i < end; ++i) sum += v[i];
    return sum / static_cast<double>(end - begin);
  };
  const double first = losses[0], last = mean_of(losses, 90, 100);
  EXPECT_NEAR(first, std::log(2.0), 0.05);  // a coin flip
  EXPECT_LT(last, 0.1) << "first " << first;
  EXPECT_GT(mean_of(accuracies, 90, 100), 0.99);
}

}  // namespace
}  // namespace model
}  // namespace pstrain
