// The CUDA backend against the CPU backend (the oracle) for the sparse and CTR pieces: CsrMatMul,
// CopyMatrix, the sigmoid kernels, embedding bags and the whole CTR model. Skips without a CUDA
// device, so it passes (as skipped) on machines and builds without one.
//
// Tolerances: CsrMatMul, CopyMatrix and so the embedding bags must match exactly (the GPU adds in
// the CPU's order, without FMA); the sigmoid and the loss within float rounding (CUDA's exp and
// log1p may differ from the C library's in the last bit of a double); the CTR model, whose GEMMs
// sum in other orders, within 1e-5 relative on the loss and 1e-3 relative (L2) per gradient
// tensor and table.
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend.h"
#include "model/cpu_backend.h"
#include "model/csr_pack.h"
#include "model/ctr_model.h"
#include "model/ctr_test_util.h"
#include "model/cuda/cuda_backend.h"
#include "model/embedding_bag.h"
#include "model/key_index.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

using testutil::ConstSpans;
using testutil::HostTables;
using testutil::RandomBatch;
using testutil::RandomBatchOptions;
using testutil::RandomVector;
using testutil::SameShape;
using testutil::Spans;
using testutil::ToBackend;
using testutil::ToHost;

// ||got - want|| <= tolerance * ||want||.
void ExpectCloseInL2(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  EXPECT_LE(std::sqrt(diff), tolerance * std::sqrt(norm)) << what;
}

// A random rows x cols CSR matrix: 0 to 6 entries a row (so some rows are empty), columns may
// repeat within a row.
int AppendRandomCsr(int rows, int cols, uint32_t seed, CsrPack* pack) {
  std::mt19937 rng(seed);
  std::vector<int> lengths(rows);
  int64_t nnz = 0;
  for (int& length : lengths) nnz += (length = static_cast<int>(rng() % 7));
  const int m = pack->Append(rows, cols, nnz);
  const std::vector<float> values = RandomVector(nnz, seed + 1);
  for (int r = 0; r < rows; ++r) pack->offsets(m)[r + 1] = pack->offsets(m)[r] + lengths[r];
  for (int64_t j = 0; j < nnz; ++j) {
    pack->indices(m)[j] = static_cast<int32_t>(rng() % cols);
    pack->values(m)[j] = values[j];
  }
  return m;
}

class CudaSparseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::unique_ptr<Backend>> gpu = NewCudaBackend(CudaOptions());
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }

  void TearDown() override {
    if (gpu_ != nullptr) {
      EXPECT_TRUE(gpu_->Synchronize().ok());
    }
  }

  // Runs `run` on both backends; the results must be identical.
  void CompareExactly(const std::function<std::vector<float>(Backend*)>& run, const std::string& what) {
    const std::vector<float> want = run(cpu_.get());
    EXPECT_EQ(run(gpu_.get()), want) << what;
  }

  std::unique_ptr<Backend> cpu_ = NewCpuBackend();
  std::unique_ptr<Backend> gpu_;
};

TEST_F(CudaSparseTest, CsrMatMulMatchesExactlyWithStridesAndAccumulation) {
  CsrPack pack;
  const int a = AppendRandomCsr(300, 57, 1, &pack);
  const int t = pack.AppendTranspose(a);
  const std::vector<float> b = RandomVector(300 * 40, 2);  // read as 57 x 33 or 300 x 33, stride 40
  const std::vector<float> c0 = RandomVector(300 * 35, 3);
  for (int m : {a, t}) {
    for (bool accumulate : {false, true}) {
      CompareExactly(
          [&](Backend* backend) {
            BackendCsrPack matrices(backend);
            EXPECT_TRUE(matrices.Upload(pack).ok());
            BackendBuffer<float> db = ToBackend(backend, b), dc = ToBackend(backend, c0);
            backend->CsrMatMul(matrices.matrix(m), 33, db.data() + 2, 40, accumulate, dc.data() + 1, 35);
            return ToHost(backend, dc, 300 * 35);
          },
          "matrix " + std::to_string(m) + " accumulate " + std::to_string(accumulate));
    }
  }
}

TEST_F(CudaSparseTest, CopyMatrixMatchesExactly) {
  const std::vector<float> src = RandomVector(100 * 13, 4);
  CompareExactly(
      [&](Backend* backend) {
        BackendBuffer<float> dsrc = ToBackend(backend, src);
        BackendBuffer<float> ddst = ToBackend(backend, std::vector<float>(100 * 429, -1.0f));
        backend->CopyMatrix(100, 13, dsrc.data(), 13, ddst.data() + 5, 429);
        return ToHost(backend, ddst, 100 * 429);
      },
      "CopyMatrix");
}

TEST_F(CudaSparseTest, SigmoidCrossEntropyAndSigmoidMatchCpu) {
  // More rows than the kernel has threads, large logits, hard and soft labels.
  const int n = 3001;
  std::vector<float> logits = RandomVector(n, 5, -20.0f, 20.0f);
  logits[0] = 100.0f;
  logits[1] = -100.0f;
  logits[2] = 0.0f;
  std::vector<float> labels = RandomVector(n, 6, 0.0f, 1.0f);
  for (int i = 0; i < n; i += 2) labels[i] = std::round(labels[i]);
  struct Run {
    XentResult result;
    std::vector<float> dlogits, in_place, probabilities;
  };
  auto run = [&](Backend* backend) {
    Run r;
    BackendBuffer<float> z = ToBackend(backend, logits), y = ToBackend(backend, labels);
    BackendBuffer<float> dz(backend);
    EXPECT_TRUE(dz.Reserve(n).ok());
    r.result = backend->SigmoidCrossEntropy(n, z.data(), y.data(), 1.0f / n, dz.data());
    r.dlogits = ToHost(backend, dz, n);
    backend->Sigmoid(n, z.data(), dz.data());
    r.probabilities = ToHost(backend, dz, n);
    backend->SigmoidCrossEntropy(n, z.data(), y.data(), 1.0f / n, z.data());
    r.in_place = ToHost(backend, z, n);
    return r;
  };
  const Run want = run(cpu_.get());
  const Run got = run(gpu_.get());
  EXPECT_NEAR(got.result.loss_sum, want.result.loss_sum, 1e-12 * want.result.loss_sum);
  EXPECT_EQ(got.result.correct, want.result.correct);
  for (int i = 0; i < n; ++i) {
    // At most an ulp of float apart.
    ASSERT_NEAR(got.dlogits[i], want.dlogits[i], 2e-7 * std::fabs(want.dlogits[i])) << i;
    ASSERT_NEAR(got.in_place[i], want.in_place[i], 2e-7 * std::fabs(want.in_place[i])) << i;
    ASSERT_NEAR(got.probabilities[i], want.probabilities[i], 1e-7) << "sample " << i;
  }
}

TEST_F(CudaSparseTest, EmbeddingBagMatchesExactly) {
  // A libsvm-like field: up to 8 keys a sample from 200, with weights, pooled by the mean.
  RandomBatchOptions options;
  options.size = 500;
  options.num_fields = 2;
  options.vocabulary = 200;
  options.max_bag = 8;
  const data::CtrBatch batch = RandomBatch(options, 7);
  KeyIndex index;
  index.Add(batch.keys[1]);
  ASSERT_TRUE(index.Build().ok());
  const int num_rows = static_cast<int>(index.unique_keys().size());
  CsrPack pack;
  absl::StatusOr<BagMatrices> m = AppendBagMatrices("field 1", batch.offsets[1], index.indices(0), batch.weights[1],
                                                    num_rows, BagPooling::kMean, &pack);
  ASSERT_TRUE(m.ok()) << m.status();
  const int dim = 16, stride = 3 * dim;
  const std::vector<float> rows = RandomVector(num_rows * dim, 8);
  const std::vector<float> dout = RandomVector(options.size * stride, 9);
  const EmbeddingBag layer(dim);
  CompareExactly(
      [&](Backend* backend) {
        BackendCsrPack matrices(backend);
        EXPECT_TRUE(matrices.Upload(pack).ok());
        BackendBuffer<float> drows_in = ToBackend(backend, rows);
        BackendBuffer<float> out = ToBackend(backend, std::vector<float>(options.size * stride));
        layer.Forward(backend, matrices.matrix(m->forward), drows_in.data(), out.data() + dim, stride);
        BackendBuffer<float> ddout = ToBackend(backend, dout);
        BackendBuffer<float> drows(backend);
        EXPECT_TRUE(drows.Reserve(num_rows * dim).ok());
        layer.Backward(backend, matrices.matrix(m->backward), ddout.data() + dim, stride, false, drows.data());
        std::vector<float> result = ToHost(backend, out, options.size * stride);
        const std::vector<float> grads = ToHost(backend, drows, num_rows * dim);
        result.insert(result.end(), grads.begin(), grads.end());
        return result;
      },
      "embedding bag forward and backward");
}

// One ComputeGradient and one Predict of the Criteo-shaped model on each backend.
struct CtrRun {
  BatchStats stats;
  std::vector<float> dense_grad;
  std::vector<std::vector<float>> row_grads;
  std::vector<float> probabilities;
};

CtrRun RunCtrModel(Backend* backend, const data::CtrBatch& batch) {
  CtrRun run;
  absl::StatusOr<std::unique_ptr<CtrModel>> model = CtrModel::Create(CtrModelOptions(), backend);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return run;
  EXPECT_TRUE((*model)->InitializeParameters(5).ok());
  absl::StatusOr<std::vector<absl::Span<const uint64_t>>> keys = (*model)->TableKeys(batch);
  EXPECT_TRUE(keys.ok()) << keys.status();
  if (!keys.ok()) return run;
  HostTables tables(26, 16, 0.25f);
  const std::vector<std::vector<float>> rows = tables.Pull(*keys);
  run.dense_grad.resize((*model)->num_parameters());
  run.row_grads = SameShape(rows);
  run.probabilities.resize(batch.size);
  EXPECT_TRUE(
      (*model)
          ->ComputeGradient(batch, ConstSpans(rows), absl::MakeSpan(run.dense_grad), Spans(&run.row_grads), &run.stats)
          .ok());
  EXPECT_TRUE((*model)->Predict(batch, ConstSpans(rows), absl::MakeSpan(run.probabilities)).ok());
  return run;
}

TEST_F(CudaSparseTest, CtrModelMatchesCpuAndRepeatsItselfBitForBit) {
  RandomBatchOptions options;
  options.size = 512;
  options.num_fields = 26;
  options.num_dense = 13;
  options.vocabulary = 300;
  options.max_bag = 2;
  const data::CtrBatch batch = RandomBatch(options, 10);
  const CtrRun want = RunCtrModel(cpu_.get(), batch);
  const CtrRun got = RunCtrModel(gpu_.get(), batch);
  EXPECT_NEAR(got.stats.loss_sum, want.stats.loss_sum, 1e-5 * want.stats.loss_sum);
  EXPECT_NEAR(got.stats.correct, want.stats.correct, 2);  // a logit near 0 may change sides
  EXPECT_EQ(got.stats.samples, 512);
  const std::vector<ParamSpec> params = CtrDenseParamSpecs(CtrModelOptions());
  for (const ParamSpec& p : params) {
    ExpectCloseInL2(std::vector<float>(got.dense_grad.begin() + p.flat_offset,
                                       got.dense_grad.begin() + p.flat_offset + p.num_elements),
                    std::vector<float>(want.dense_grad.begin() + p.flat_offset,
                                       want.dense_grad.begin() + p.flat_offset + p.num_elements),
                    1e-3, p.name);
  }
  ASSERT_EQ(got.row_grads.size(), want.row_grads.size());
  for (size_t t = 0; t < want.row_grads.size(); ++t) {
    ExpectCloseInL2(got.row_grads[t], want.row_grads[t], 1e-3, "table " + std::to_string(t));
  }
  ExpectCloseInL2(got.probabilities, want.probabilities, 1e-5, "probabilities");

  // No atomics anywhere: a second run on the GPU gives the same bits.
  const CtrRun again = RunCtrModel(gpu_.get(), batch);
  EXPECT_EQ(again.dense_grad, got.dense_grad);
  EXPECT_EQ(again.row_grads, got.row_grads);
}

}  // namespace
}  // namespace model
}  // namespace pstrain
