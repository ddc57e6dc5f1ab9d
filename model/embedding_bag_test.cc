// Embedding bags on the CPU backend against naive loops over a key -> row map: the CSR pieces
// (CsrPack, its transpose, CsrMatMul, CopyMatrix), AppendBagMatrices' checks, and the layer's
// forward and backward with repeated keys, empty bags, weights, both poolings, column offsets and
// two fields sharing one table.
#include "model/embedding_bag.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend.h"
#include "model/cpu_backend.h"
#include "model/csr_pack.h"
#include "model/key_index.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testutil::Dot;
using testutil::RandomVector;
using testutil::ToBackend;
using testutil::ToHost;

// One field's bags, as data::CtrBatch holds them.
struct Bags {
  std::vector<int64_t> offsets = {0};
  std::vector<uint64_t> keys;
  std::vector<float> weights;  // empty or one per key

  int n() const { return static_cast<int>(offsets.size()) - 1; }
  void AddBag(std::vector<uint64_t> bag, std::vector<float> bag_weights = {}) {
    keys.insert(keys.end(), bag.begin(), bag.end());
    weights.insert(weights.end(), bag_weights.begin(), bag_weights.end());
    offsets.push_back(static_cast<int64_t>(keys.size()));
  }
};

// n bags of 0 to 4 keys from a vocabulary of 6, so keys repeat within and across bags; sample 1
// is always empty.
Bags RandomBags(int n, uint32_t seed, bool weighted) {
  std::mt19937 rng(seed);
  Bags bags;
  for (int i = 0; i < n; ++i) {
    const int length = i == 1 ? 0 : static_cast<int>(rng() % 5);
    std::vector<uint64_t> bag;
    std::vector<float> bag_weights;
    for (int j = 0; j < length; ++j) {
      bag.push_back(1000 + rng() % 6);
      if (weighted) bag_weights.push_back(0.25f + 0.25f * static_cast<float>(rng() % 8));
    }
    bags.AddBag(bag, bag_weights);
  }
  return bags;
}

using Table = std::map<uint64_t, std::vector<float>>;  // what the servers hold

// A row for every key of `bags`, reproducible.
void AddRows(const Bags& bags, int dim, Table* table) {
  for (uint64_t key : bags.keys) {
    if (table->count(key) == 0) (*table)[key] = RandomVector(dim, static_cast<uint32_t>(key));
  }
}

// What a worker pulls: the rows of `keys`, back to back.
std::vector<float> Pull(const Table& table, absl::Span<const uint64_t> keys) {
  std::vector<float> rows;
  for (uint64_t key : keys) rows.insert(rows.end(), table.at(key).begin(), table.at(key).end());
  return rows;
}

double Scale(const Bags& bags, int i, int64_t j, BagPooling pooling) {
  const double w = bags.weights.empty() ? 1.0 : bags.weights[j];
  const int64_t length = bags.offsets[i + 1] - bags.offsets[i];
  return pooling == BagPooling::kMean ? w / static_cast<double>(length) : w;
}

// Naive pooling: n x dim.
std::vector<double> ReferenceForward(const Bags& bags, const Table& table, int dim, BagPooling pooling) {
  std::vector<double> out(static_cast<size_t>(bags.n()) * dim, 0.0);
  for (int i = 0; i < bags.n(); ++i) {
    for (int64_t j = bags.offsets[i]; j < bags.offsets[i + 1]; ++j) {
      for (int d = 0; d < dim; ++d) {
        out[i * dim + d] += Scale(bags, i, j, pooling) * table.at(bags.keys[j])[d];
      }
    }
  }
  return out;
}

// Naive backward: adds d(out)/d(row) . dout (dout rows `stride` apart) to (*grads)[key].
void ReferenceBackward(const Bags& bags, const std::vector<float>& dout, int stride, int dim, BagPooling pooling,
                       std::map<uint64_t, std::vector<double>>* grads) {
  for (int i = 0; i < bags.n(); ++i) {
    for (int64_t j = bags.offsets[i]; j < bags.offsets[i + 1]; ++j) {
      std::vector<double>& g = (*grads)[bags.keys[j]];
      g.resize(dim, 0.0);
      for (int d = 0; d < dim; ++d) g[d] += Scale(bags, i, j, pooling) * dout[i * stride + d];
    }
  }
}

class EmbeddingBagTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = NewCpuBackend();
};

// ---- CSR pieces -----------------------------------------------------------------------------

TEST_F(EmbeddingBagTest, TransposeIsStableAndComplete) {
  CsrPack pack;
  // 3 x 4:  row 0 = {2: 1, 0: 2, 2: 3}, row 1 = {}, row 2 = {0: 4, 3: 5}
  const int m = pack.Append(3, 4, 5);
  const std::vector<int32_t> offsets = {0, 3, 3, 5}, indices = {2, 0, 2, 0, 3};
  const std::vector<float> values = {1, 2, 3, 4, 5};
  std::copy(offsets.begin(), offsets.end(), pack.offsets(m).begin());
  std::copy(indices.begin(), indices.end(), pack.indices(m).begin());
  std::copy(values.begin(), values.end(), pack.values(m).begin());
  const int t = pack.AppendTranspose(m);
  EXPECT_EQ(pack.layout(t).rows, 4);
  EXPECT_EQ(pack.layout(t).cols, 3);
  // Column 0 gets (row 0, 2) then (row 2, 4); column 2 keeps row 0's order: 1 then 3.
  EXPECT_THAT(pack.offsets(t), ElementsAre(0, 2, 2, 4, 5));
  EXPECT_THAT(pack.indices(t), ElementsAre(0, 2, 0, 0, 2));
  EXPECT_THAT(pack.values(t), ElementsAre(2, 4, 1, 3, 5));
  // The first matrix survived the second's append.
  EXPECT_THAT(pack.indices(m), ElementsAre(2, 0, 2, 0, 3));
  EXPECT_EQ(pack.ints().size(), 4u + 5u + 5u + 5u);
  EXPECT_EQ(pack.floats().size(), 10u);
}

TEST_F(EmbeddingBagTest, CsrMatMulMatchesNaiveProductWithStridesAndAccumulation) {
  CsrPack pack;
  const int m = pack.Append(3, 4, 5);
  const std::vector<int32_t> offsets = {0, 3, 3, 5}, indices = {2, 0, 2, 0, 3};
  const std::vector<float> values = {1, -2, 3, 0.5f, 5};
  std::copy(offsets.begin(), offsets.end(), pack.offsets(m).begin());
  std::copy(indices.begin(), indices.end(), pack.indices(m).begin());
  std::copy(values.begin(), values.end(), pack.values(m).begin());
  BackendCsrPack on_backend(backend_.get());
  ASSERT_TRUE(on_backend.Upload(pack).ok());
  const CsrMatrix a = on_backend.matrix(m);

  const int cols = 2, b_stride = 5, c_stride = 3;
  const std::vector<float> b = RandomVector(4 * b_stride, 11);
  const std::vector<float> c0 = RandomVector(3 * c_stride, 12);
  for (bool accumulate : {false, true}) {
    BackendBuffer<float> db = ToBackend(backend_.get(), b), dc = ToBackend(backend_.get(), c0);
    backend_->CsrMatMul(a, cols, db.data(), b_stride, accumulate, dc.data(), c_stride);
    const std::vector<float> c = ToHost(backend_.get(), dc, 3 * c_stride);
    for (int r = 0; r < 3; ++r) {
      for (int k = 0; k < c_stride; ++k) {
        double want = c0[r * c_stride + k];  // columns past `cols` are left alone
        if (k < cols) {
          if (!accumulate) want = 0;
          for (int j = offsets[r]; j < offsets[r + 1]; ++j) {
            want += values[j] * static_cast<double>(b[indices[j] * b_stride + k]);
          }
        }
        EXPECT_NEAR(c[r * c_stride + k], want, 1e-6) << "accumulate=" << accumulate << " r=" << r << " k=" << k;
      }
    }
  }
}

TEST_F(EmbeddingBagTest, CopyMatrixMovesABlockBetweenStrides) {
  const std::vector<float> src = {1, 2, 9, 3, 4, 9};  // 2 x 2 with stride 3
  BackendBuffer<float> dsrc = ToBackend(backend_.get(), src);
  BackendBuffer<float> ddst = ToBackend(backend_.get(), std::vector<float>(8, -1.0f));
  backend_->CopyMatrix(2, 2, dsrc.data(), 3, ddst.data() + 1, 4);
  EXPECT_THAT(ToHost(backend_.get(), ddst, 8), ElementsAre(-1, 1, 2, -1, -1, 3, 4, -1));
}

// ---- AppendBagMatrices' checks ----------------------------------------------------------------

TEST_F(EmbeddingBagTest, AppendBagMatricesRefusesBadBagsAndLeavesThePackAlone) {
  CsrPack pack;
  pack.Append(1, 1, 0);
  const std::vector<int32_t> indices = {0, 1, 0};
  struct Case {
    std::vector<int64_t> offsets;
    std::vector<float> weights;
    int num_rows;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{}, {}, 2, "field 3 (C4): no offsets, expected one per sample plus one"},
      {{1, 2, 3}, {}, 2, "field 3 (C4): offsets start at 1, expected 0"},
      {{0, 2, 1, 3}, {}, 2, "field 3 (C4): offsets decrease at sample 1 (2 then 1)"},
      {{0, 1, 2}, {}, 2, "field 3 (C4): last offset is 2, expected the key count 3"},
      {{0, 1, 3}, {1, 2}, 2, "field 3 (C4): 2 weights for 3 keys, expected 0 or 3"},
      {{0, 1, 3}, {}, 1, "field 3 (C4): key 1 has row index 1, expected [0, 1)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<BagMatrices> result =
        AppendBagMatrices("field 3 (C4)", c.offsets, indices, c.weights, c.num_rows, BagPooling::kSum, &pack);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(result.status().message(), c.message);
    EXPECT_EQ(pack.size(), 1);
  }
}

TEST_F(EmbeddingBagTest, AppendBagMatricesScalesByWeightAndBagLength) {
  CsrPack pack;
  Bags bags;
  bags.AddBag({5, 6}, {2.0f, 4.0f});
  bags.AddBag({}, {});
  bags.AddBag({5}, {3.0f});
  const std::vector<int32_t> indices = {0, 1, 0};
  absl::StatusOr<BagMatrices> mean =
      AppendBagMatrices("f", bags.offsets, indices, bags.weights, 2, BagPooling::kMean, &pack);
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_THAT(pack.offsets(mean->forward), ElementsAre(0, 2, 2, 3));
  EXPECT_THAT(pack.values(mean->forward), ElementsAre(1.0f, 2.0f, 3.0f));
  // P^T: row 0 (key 5) gets samples 0 and 2, row 1 (key 6) sample 0.
  EXPECT_THAT(pack.offsets(mean->backward), ElementsAre(0, 2, 3));
  EXPECT_THAT(pack.indices(mean->backward), ElementsAre(0, 2, 0));
  EXPECT_THAT(pack.values(mean->backward), ElementsAre(1.0f, 3.0f, 2.0f));
}

// ---- The layer against the naive reference ------------------------------------------------------

struct LayerCase {
  BagPooling pooling;
  bool weighted;
};

class EmbeddingBagLayerTest : public EmbeddingBagTest, public ::testing::WithParamInterface<LayerCase> {};

// Forward into columns [col, col + dim) of a wider matrix, leaving the other columns alone, and
// backward from the same columns, both against the naive loops.
TEST_P(EmbeddingBagLayerTest, ForwardAndBackwardMatchNaiveLoops) {
  const LayerCase param = GetParam();
  const int n = 17, dim = 5, stride = 13, col = 4;
  const Bags bags = RandomBags(n, 3, param.weighted);
  Table table;
  AddRows(bags, dim, &table);

  KeyIndex index;
  index.Add(bags.keys);
  ASSERT_TRUE(index.Build().ok());
  const int num_rows = static_cast<int>(index.unique_keys().size());
  CsrPack pack;
  absl::StatusOr<BagMatrices> m =
      AppendBagMatrices("bags", bags.offsets, index.indices(0), bags.weights, num_rows, param.pooling, &pack);
  ASSERT_TRUE(m.ok()) << m.status();
  BackendCsrPack matrices(backend_.get());
  ASSERT_TRUE(matrices.Upload(pack).ok());

  const EmbeddingBag layer(dim);
  BackendBuffer<float> rows = ToBackend(backend_.get(), Pull(table, index.unique_keys()));
  BackendBuffer<float> out = ToBackend(backend_.get(), std::vector<float>(n * stride, 99.0f));
  layer.Forward(backend_.get(), matrices.matrix(m->forward), rows.data(), out.data() + col, stride);
  const std::vector<float> got = ToHost(backend_.get(), out, n * stride);
  const std::vector<double> want = ReferenceForward(bags, table, dim, param.pooling);
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < stride; ++k) {
      if (k >= col && k < col + dim) {
        EXPECT_NEAR(got[i * stride + k], want[i * dim + k - col], 1e-5) << "sample " << i;
      } else {
        EXPECT_EQ(got[i * stride + k], 99.0f) << "sample " << i << " column " << k;
      }
    }
  }
  // Sample 1's bag is empty.
  for (int d = 0; d < dim; ++d) EXPECT_EQ(got[1 * stride + col + d], 0.0f);

  const std::vector<float> dout = RandomVector(n * stride, 5);
  BackendBuffer<float> ddout = ToBackend(backend_.get(), dout);
  BackendBuffer<float> drows = ToBackend(backend_.get(), std::vector<float>(num_rows * dim, 99.0f));  // overwritten
  layer.Backward(backend_.get(), matrices.matrix(m->backward), ddout.data() + col, stride,
                 /*accumulate=*/false, drows.data());
  const std::vector<float> grads = ToHost(backend_.get(), drows, num_rows * dim);
  std::map<uint64_t, std::vector<double>> want_grads;
  ReferenceBackward(bags, std::vector<float>(dout.begin() + col, dout.end()), stride, dim, param.pooling, &want_grads);
  ASSERT_EQ(want_grads.size(), static_cast<size_t>(num_rows));
  for (int r = 0; r < num_rows; ++r) {
    const std::vector<double>& g = want_grads.at(index.unique_keys()[r]);
    for (int d = 0; d < dim; ++d) {
      EXPECT_NEAR(grads[r * dim + d], g[d], 1e-5) << "row " << r << " (key " << index.unique_keys()[r] << ")";
    }
  }
}

// Backward is the adjoint of forward: <P rows, dout> == <rows, P^T dout>.
TEST_P(EmbeddingBagLayerTest, BackwardIsTheAdjointOfForward) {
  const LayerCase param = GetParam();
  const int n = 40, dim = 3;
  const Bags bags = RandomBags(n, 9, param.weighted);
  KeyIndex index;
  index.Add(bags.keys);
  ASSERT_TRUE(index.Build().ok());
  const int num_rows = static_cast<int>(index.unique_keys().size());
  CsrPack pack;
  absl::StatusOr<BagMatrices> m =
      AppendBagMatrices("bags", bags.offsets, index.indices(0), bags.weights, num_rows, param.pooling, &pack);
  ASSERT_TRUE(m.ok());
  BackendCsrPack matrices(backend_.get());
  ASSERT_TRUE(matrices.Upload(pack).ok());
  const EmbeddingBag layer(dim);
  const std::vector<float> rows = RandomVector(num_rows * dim, 1);
  const std::vector<float> dout = RandomVector(n * dim, 2);
  BackendBuffer<float> drows_in = ToBackend(backend_.get(), rows);
  BackendBuffer<float> ddout = ToBackend(backend_.get(), dout);
  BackendBuffer<float> out(backend_.get()), drows(backend_.get());
  ASSERT_TRUE(out.Reserve(n * dim).ok());
  ASSERT_TRUE(drows.Reserve(num_rows * dim).ok());
  layer.Forward(backend_.get(), matrices.matrix(m->forward), drows_in.data(), out.data(), dim);
  layer.Backward(backend_.get(), matrices.matrix(m->backward), ddout.data(), dim, false, drows.data());
  EXPECT_NEAR(Dot(ToHost(backend_.get(), out, n * dim), dout), Dot(rows, ToHost(backend_.get(), drows, num_rows * dim)),
              1e-4);
}

INSTANTIATE_TEST_SUITE_P(Poolings, EmbeddingBagLayerTest,
                         ::testing::Values(LayerCase{BagPooling::kSum, false}, LayerCase{BagPooling::kSum, true},
                                           LayerCase{BagPooling::kMean, false}, LayerCase{BagPooling::kMean, true}),
                         [](const ::testing::TestParamInfo<LayerCase>& info) {
                           return std::string(info.param.pooling == BagPooling::kSum ? "Sum" : "Mean") +
                                  (info.param.weighted ? "Weighted" : "Unweighted");
                         });

// Two fields looking up one table: one key index over both, each field's bags into its own
// columns, and one row gradient that sums both fields' contributions.
TEST_F(EmbeddingBagTest, FieldsSharingATableAddIntoOneRowGradient) {
  const int n = 9, dim = 4, stride = 2 * dim;
  const Bags a = RandomBags(n, 21, false), b = RandomBags(n, 22, true);
  Table table;
  AddRows(a, dim, &table);
  AddRows(b, dim, &table);
  KeyIndex index;
  const int part_a = index.Add(a.keys), part_b = index.Add(b.keys);
  ASSERT_TRUE(index.Build().ok());
  const int num_rows = static_cast<int>(index.unique_keys().size());
  CsrPack pack;
  absl::StatusOr<BagMatrices> ma =
      AppendBagMatrices("a", a.offsets, index.indices(part_a), a.weights, num_rows, BagPooling::kSum, &pack);
  absl::StatusOr<BagMatrices> mb =
      AppendBagMatrices("b", b.offsets, index.indices(part_b), b.weights, num_rows, BagPooling::kMean, &pack);
  ASSERT_TRUE(ma.ok() && mb.ok());
  BackendCsrPack matrices(backend_.get());
  ASSERT_TRUE(matrices.Upload(pack).ok());

  const EmbeddingBag layer(dim);
  BackendBuffer<float> rows = ToBackend(backend_.get(), Pull(table, index.unique_keys()));
  BackendBuffer<float> out(backend_.get());
  ASSERT_TRUE(out.Reserve(n * stride).ok());
  layer.Forward(backend_.get(), matrices.matrix(ma->forward), rows.data(), out.data(), stride);
  layer.Forward(backend_.get(), matrices.matrix(mb->forward), rows.data(), out.data() + dim, stride);
  const std::vector<float> got = ToHost(backend_.get(), out, n * stride);
  const std::vector<double> want_a = ReferenceForward(a, table, dim, BagPooling::kSum);
  const std::vector<double> want_b = ReferenceForward(b, table, dim, BagPooling::kMean);
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < dim; ++d) {
      EXPECT_NEAR(got[i * stride + d], want_a[i * dim + d], 1e-5);
      EXPECT_NEAR(got[i * stride + dim + d], want_b[i * dim + d], 1e-5);
    }
  }

  const std::vector<float> dout = RandomVector(n * stride, 23);
  BackendBuffer<float> ddout = ToBackend(backend_.get(), dout);
  BackendBuffer<float> drows(backend_.get());
  ASSERT_TRUE(drows.Reserve(num_rows * dim).ok());
  layer.Backward(backend_.get(), matrices.matrix(ma->backward), ddout.data(), stride, false, drows.data());
  layer.Backward(backend_.get(), matrices.matrix(mb->backward), ddout.data() + dim, stride, true, drows.data());
  const std::vector<float> grads = ToHost(backend_.get(), drows, num_rows * dim);
  std::map<uint64_t, std::vector<double>> want;
  ReferenceBackward(a, dout, stride, dim, BagPooling::kSum, &want);
  ReferenceBackward(b, std::vector<float>(dout.begin() + dim, dout.end()), stride, dim, BagPooling::kMean, &want);
  for (int r = 0; r < num_rows; ++r) {
    for (int d = 0; d < dim; ++d) {
      EXPECT_NEAR(grads[r * dim + d], want.at(index.unique_keys()[r])[d], 1e-5) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace model
}  // namespace pstrain
