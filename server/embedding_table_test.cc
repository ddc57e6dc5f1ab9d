#include "server/embedding_table.h"

#include <malloc.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include "common/key_hash.h"
#include "server/embedding_table_test_util.h"

namespace pstrain::server {
namespace {

using Type = SparseOptimizerOptions::Type;
using ::testing::HasSubstr;
using namespace table_test;  // NOLINT: the shared helpers of the table tests

TableOptions Options(int dim, Type type = Type::kAdagrad) {
  TableOptions options;
  options.name = "user";
  options.id = 3;
  options.dim = dim;
  options.seed = 42;
  options.optimizer.type = type;
  return options;
}

std::vector<float> Pull(EmbeddingTable& table, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * table.dim());
  const absl::Status status = table.Pull(keys, absl::MakeSpan(out));
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

std::vector<float> Row(const EmbeddingTable& table, uint64_t key) {
  std::vector<float> row(table.dim());
  EXPECT_TRUE(table.Lookup(key, absl::MakeSpan(row))) << "key " << key;
  return row;
}

TEST(EmbeddingTableTest, InitialValuesDependOnlyOnSeedTableKeyAndElement) {
  auto a = MakeTable(Options(8));
  auto b = MakeTable(Options(8));
  Pull(*a, {1, 5, 9, 1000000007});
  Pull(*b, {1000000007});  // other order, other batches, fewer neighbours
  Pull(*b, {9});
  Pull(*b, {1, 5});
  for (uint64_t key : {1, 5, 9, 1000000007}) {
    const std::vector<float> row = Row(*a, key);
    EXPECT_EQ(row, Row(*b, key)) << "key " << key;
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(row[i], EmbeddingInitialValue(42, 3, key, i, a->init_bound()));
      EXPECT_LT(std::fabs(row[i]), 1.0f / std::sqrt(8.0f));
    }
  }
  EXPECT_FLOAT_EQ(a->init_bound(), 1.0f / std::sqrt(8.0f));
  EXPECT_NE(Row(*a, 1), Row(*a, 5));

  TableOptions other_table = Options(8);
  other_table.id = 4;
  auto c = MakeTable(other_table);
  Pull(*c, {1});
  EXPECT_NE(Row(*c, 1), Row(*a, 1));
}

TEST(EmbeddingTableTest, InitialValuesAreUniformInTheBound) {
  double sum = 0, sum_sq = 0;
  const float bound = 0.5f;
  int n = 0;
  for (uint64_t key = 0; key < 2000; ++key) {
    for (int i = 0; i < 16; ++i, ++n) {
      const float v = EmbeddingInitialValue(7, 0, key, i, bound);
      ASSERT_GE(v, -bound);
      ASSERT_LT(v, bound);
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, bound * bound / 3.0, 0.005);  // variance of U(-b, b)
  EXPECT_EQ(EmbeddingInitialValue(7, 0, 123, 0, 0.0f), 0.0f);
}

TEST(EmbeddingTableTest, ZeroBoundStartsFromZeros) {
  TableOptions options = Options(4, Type::kFtrl);
  options.init_bound = 0.0f;
  auto table = MakeTable(options);
  EXPECT_EQ(Pull(*table, {10, 20}), std::vector<float>(8, 0.0f));
}

TEST(EmbeddingTableTest, ReadGivesPullsValuesWithoutCreatingRows) {
  auto read = MakeTable(Options(3));
  auto pulled = MakeTable(Options(3));
  ASSERT_TRUE(read->Apply({5}, std::vector<float>{1.0f, 1.0f, 1.0f}, 0.1f).ok());
  ASSERT_TRUE(pulled->Apply({5}, std::vector<float>{1.0f, 1.0f, 1.0f}, 0.1f).ok());
  std::vector<float> out(9);
  ASSERT_TRUE(read->Read({1, 5, 9}, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, Pull(*pulled, {1, 5, 9}));
  EXPECT_EQ(read->num_rows(), 1);  // the written row only
  EXPECT_THAT(read->Read({9, 1}, absl::MakeSpan(out).subspan(0, 6)).message(), HasSubstr("sorted ascending"));
  EXPECT_THAT(read->Read({1}, absl::MakeSpan(out)).message(), HasSubstr("expected 1 keys * dim 3"));
}

TEST(EmbeddingTableTest, ApplyCreatesAMissingRowFromItsInitialValue) {
  TableOptions options = Options(2, Type::kSgd);
  auto pulled = MakeTable(options);
  auto fresh = MakeTable(options);
  Pull(*pulled, {77});
  const std::vector<float> init = Row(*pulled, 77);
  const std::vector<float> grad = {1.0f, -2.0f};
  ASSERT_TRUE(pulled->Apply({77}, grad, 0.5f).ok());
  ASSERT_TRUE(fresh->Apply({77}, grad, 0.5f).ok());
  EXPECT_EQ(Row(*fresh, 77), Row(*pulled, 77));
  EXPECT_EQ(Row(*fresh, 77), (std::vector<float>{init[0] - 0.5f, init[1] + 1.0f}));
}

TEST(EmbeddingTableTest, ApplyGivesEachRowAsReadGaveItJustBefore) {
  for (TableSpec::RowDtype dtype : {TableSpec::FP32, TableSpec::FP16}) {
    TableOptions options = Options(3);
    options.row_dtype = dtype;
    auto table = MakeTable(options);
    ASSERT_TRUE(table->Apply({5}, std::vector<float>{1.0f, 1.0f, 1.0f}, 0.1f).ok());
    // Key 5 has a row, 1 and 9 get theirs in this update.
    const std::vector<float> read = ReadRows(*table, {1, 5, 9});
    std::vector<float> before(9, -7.0f);
    ASSERT_TRUE(table->Apply({1, 5, 9}, std::vector<float>(9, 0.5f), 0.1f, 0, absl::MakeSpan(before)).ok());
    EXPECT_EQ(before, read) << TableSpec::RowDtype_Name(dtype);
    EXPECT_NE(ReadRows(*table, {1, 5, 9}), read);
    EXPECT_THAT(table->Apply({1}, std::vector<float>(3, 0.5f), 0.1f, 0, absl::MakeSpan(before)).message(),
                HasSubstr("values_before holds 9 floats, expected 1 keys * dim 3"));
  }
}

TEST(EmbeddingTableTest, AdagradRowsMatchTheHandComputedReference) {
  TableOptions options = Options(2);
  options.init_bound = 0.0f;
  auto table = MakeTable(options);
  // From w = 0, G = 0.1, lr 0.1: G = 1.1, 4.1; w = -0.1 g / sqrt(G).
  ASSERT_TRUE(table->Apply({4}, std::vector<float>{1.0f, -2.0f}, 0.1f).ok());
  EXPECT_NEAR(Row(*table, 4)[0], -0.0953462589f, 1e-7);
  EXPECT_NEAR(Row(*table, 4)[1], 0.0987729597f, 1e-7);
}

TEST(EmbeddingTableTest, LazyAdamAdvancesOnlyTheRowsItTouches) {
  TableOptions options = Options(2, Type::kLazyAdam);
  options.init_bound = 0.0f;
  auto interleaved = MakeTable(options);
  auto alone = MakeTable(options);
  const std::vector<float> g = {1.0f, -2.0f}, g2 = {2.0f, 0.5f, 0.3f, 0.3f};
  // Key 1 is updated twice, with key 2's updates in between; then once more with key 2.
  ASSERT_TRUE(interleaved->Apply({1, 2}, std::vector<float>{1.0f, -2.0f, 0.3f, 0.3f}, 0.01f).ok());
  ASSERT_TRUE(interleaved->Apply({2}, std::vector<float>{0.3f, 0.3f}, 0.01f).ok());
  ASSERT_TRUE(interleaved->Apply({2}, std::vector<float>{0.3f, 0.3f}, 0.01f).ok());
  ASSERT_TRUE(interleaved->Apply({1, 2}, g2, 0.01f).ok());
  ASSERT_TRUE(alone->Apply({1}, g, 0.01f).ok());
  ASSERT_TRUE(alone->Apply({1}, std::vector<float>{2.0f, 0.5f}, 0.01f).ok());
  // Row 1 saw steps t = 1, 2 whatever key 2 did (t = 4 would give other values).
  EXPECT_EQ(Row(*interleaved, 1), Row(*alone, 1));
  EXPECT_NEAR(Row(*alone, 1)[0], 1.0f - 1.01965182f, 2e-6);    // the 2-step reference from w = 1,
  EXPECT_NEAR(Row(*alone, 1)[1], -0.5f + 0.514694682f, 2e-6);  // shifted to w = 0
}

TEST(EmbeddingTableTest, FtrlRowsHoldExactZerosUnderL1) {
  TableOptions options = Options(2, Type::kFtrl);
  options.init_bound = 0.0f;
  options.optimizer.initial_accumulator = 0.0f;
  options.optimizer.l1 = 1.0f;
  options.optimizer.l2 = 0.5f;
  auto table = MakeTable(options);
  ASSERT_TRUE(table->Apply({9}, std::vector<float>{0.4f, -3.0f}, 0.5f).ok());
  EXPECT_EQ(Row(*table, 9)[0], 0.0f);
  EXPECT_NEAR(Row(*table, 9)[1], 0.235294118f, 1e-7);
}

TEST(EmbeddingTableTest, BadRequestsChangeNothing) {
  auto table = MakeTable(Options(2, Type::kLazyAdam));
  Pull(*table, {1, 2, 3});
  ASSERT_TRUE(table->Apply({1, 3}, std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}, 0.01f).ok());
  const std::string before = Bytes(*table);
  std::vector<float> out(6);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();

  struct Case {
    absl::Status status;
    const char* expected;
  } cases[] = {
      {table->Pull({4, 8, 5}, absl::MakeSpan(out)), "key 5 at position 2 is less than the key before it (8)"},
      {table->Pull({4, 4, 5}, absl::MakeSpan(out)), "key 4 at position 1 repeats the key before it"},
      {table->Pull({4, 5}, absl::MakeSpan(out)), "output holds 6 floats, expected 2 keys * dim 2"},
      {table->Apply({7, 6}, std::vector<float>(4, 0.1f), 0.01f), "key 6 at position 1 is less"},
      {table->Apply({6, 6}, std::vector<float>(4, 0.1f), 0.01f), "repeats the key before it"},
      {table->Apply({6, 7}, std::vector<float>{0.1f, 0.1f, 0.1f, nan}, 0.01f),
       "gradient of key 7 (position 1) element 1 is nan"},
      {table->Apply({6, 7}, std::vector<float>{-inf, 0.1f, 0.1f, 0.1f}, 0.01f),
       "gradient of key 6 (position 0) element 0 is -inf"},
      {table->Apply({6, 7}, std::vector<float>(3, 0.1f), 0.01f), "got 3 gradient floats, expected 2 keys * dim 2"},
      {table->Apply({6, 7}, std::vector<float>(4, 0.1f), 0.0f), "lr 0, expected a finite value > 0"},
      {table->Apply({6, 7}, std::vector<float>(4, 0.1f), nan), "lr nan"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument) << c.status;
    EXPECT_THAT(c.status.message(), HasSubstr(c.expected));
    EXPECT_THAT(c.status.message(), HasSubstr("table 'user'"));
  }
  EXPECT_EQ(table->num_rows(), 3);
  EXPECT_EQ(Bytes(*table), before);
}

TEST(EmbeddingTableTest, CreateNamesTheBadOption) {
  TableOptions options = Options(0);
  EXPECT_THAT(EmbeddingTable::Create(options).status().message(), HasSubstr("dim: got 0"));
  options = Options(4);
  options.init_bound = -1.0f;
  EXPECT_THAT(EmbeddingTable::Create(options).status().message(), HasSubstr("init_bound: got -1"));
  options = Options(4);
  options.name = "";
  EXPECT_EQ(EmbeddingTable::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = Options(4, Type::kLazyAdam);
  options.optimizer.beta1 = 2.0f;
  EXPECT_THAT(EmbeddingTable::Create(options).status().message(),
              HasSubstr("table 'user': sparse optimizer beta1: got 2"));
}

// Rows in several blocks, each with state that a restore must bring back bit for bit.
std::unique_ptr<EmbeddingTable> TrainedTable(const TableOptions& options) {
  auto table = MakeTable(options);
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 3000; ++i) keys.push_back(i * 7919);
  Pull(*table, keys);
  std::vector<float> grads(keys.size() * options.dim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(static_cast<float>(i));
  EXPECT_TRUE(table->Apply(keys, grads, 0.05f).ok());
  keys.resize(100);  // a second step on a few rows only (lazy Adam's t differs per row)
  grads.resize(keys.size() * options.dim);
  EXPECT_TRUE(table->Apply(keys, grads, 0.05f).ok());
  return table;
}

TEST(EmbeddingTableTest, SerializeRestoreRoundTripIsBitwiseForEveryOptimizer) {
  for (Type type : {Type::kAdagrad, Type::kSgd, Type::kLazyAdam, Type::kFtrl}) {
    SCOPED_TRACE(SparseOptimizerName(type));
    const TableOptions options = Options(5, type);
    auto original = TrainedTable(options);
    const std::string bytes = Bytes(*original);
    auto restored = MakeTable(options);
    Pull(*restored, {123456789});  // replaced by the restore
    ASSERT_TRUE(restored->Restore(bytes).ok());
    EXPECT_EQ(restored->num_rows(), 3000);
    EXPECT_EQ(Bytes(*restored), bytes);
    std::vector<float> row(5);
    EXPECT_FALSE(restored->Lookup(123456789, absl::MakeSpan(row)));
    // The optimizer state came back too: one more identical step keeps them identical.
    const std::vector<uint64_t> keys = {0, 7919, 5 * 7919};
    const std::vector<float> grads(15, 0.25f);
    ASSERT_TRUE(original->Apply(keys, grads, 0.05f).ok());
    ASSERT_TRUE(restored->Apply(keys, grads, 0.05f).ok());
    EXPECT_EQ(Bytes(*restored), Bytes(*original));
  }
}

TEST(EmbeddingTableTest, SerializedBytesDoNotDependOnInsertionOrder) {
  auto a = MakeTable(Options(3));
  auto b = MakeTable(Options(3));
  Pull(*a, {1, 2, 3});
  Pull(*b, {3});
  Pull(*b, {1, 2});
  EXPECT_EQ(Bytes(*a), Bytes(*b));
}

TEST(EmbeddingTableTest, RestoreRefusesOtherTablesAndCorruptBytesAndChangesNothing) {
  const std::string bytes = Bytes(*TrainedTable(Options(5, Type::kLazyAdam)));
  auto table = MakeTable(Options(5, Type::kLazyAdam));
  Pull(*table, {1, 2});
  const std::string before = Bytes(*table);

  auto other_dim = MakeTable(Options(6, Type::kLazyAdam));
  absl::Status s = other_dim->Restore(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("checkpoint dim 5, table dim 6"));

  auto other_optimizer = MakeTable(Options(5, Type::kAdagrad));
  s = other_optimizer->Restore(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("checkpoint optimizer lazy_adam (2), table optimizer adagrad"));

  TableOptions renamed = Options(5, Type::kLazyAdam);
  renamed.name = "item";
  s = MakeTable(renamed)->Restore(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("the checkpoint is of table 'user' (id 3)"));

  std::string corrupt = bytes;
  corrupt[corrupt.size() / 2] ^= 0x10;
  s = table->Restore(corrupt);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("checksum mismatch"));
  EXPECT_EQ(table->Restore(bytes.substr(0, bytes.size() - 9)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(table->Restore("PSTRAINE").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(table->Restore(std::string(100, 'x')).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Bytes(*table), before);
}

// A checkpoint of NaN rows with a valid checksum is refused on restore, naming the row, key and
// element, and changes nothing (what a checksum cannot catch: the bytes were written that way).
TEST(EmbeddingTableTest, RestoreRefusesNonFiniteRowsWithAValidChecksum) {
  const std::string bytes = Bytes(*TrainedTable(Options(5, Type::kAdagrad)));
  auto table = MakeTable(Options(5, Type::kAdagrad));
  Pull(*table, {1, 2});
  const std::string before = Bytes(*table);
  uint32_t record_bytes = 0, name_size = 0;
  std::memcpy(&record_bytes, bytes.data() + 24, 4);
  std::memcpy(&name_size, bytes.data() + 28, 4);
  const size_t first_row = 32 + name_size + 8;
  struct Case {
    int row;
    int element;  // within the record: value elements first, then optimizer state
    float value;
    const char* says;
  };
  for (const Case& c : {Case{1, 2, std::nanf(""), "row 1 (key "},
                        Case{2, 6, std::numeric_limits<float>::infinity(), "optimizer state element 1 is inf"},
                        Case{0, 0, -std::numeric_limits<float>::infinity(), "value element 0 is -inf"}}) {
    std::string bad = bytes;
    std::memcpy(bad.data() + first_row + c.row * (8 + record_bytes) + 8 + 4 * c.element, &c.value, 4);
    const uint32_t crc =
        static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bad.data()), bad.size() - 4));
    std::memcpy(bad.data() + bad.size() - 4, &crc, 4);
    const absl::Status s = table->Restore(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.says));
    EXPECT_THAT(s.message(), HasSubstr("expected finite values"));
  }
  EXPECT_EQ(Bytes(*table), before);
}

int64_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

// The memory target: per-row bytes near the floor (value + Adagrad's accumulator).
TEST(EmbeddingTableTest, BytesPerRowAtOneMillionRowsStayNearTheFloor) {
  constexpr int kDim = 16;
  constexpr int64_t kRows = 1000000;
  constexpr double kFloor = kDim * 4 * 2;  // 128 bytes: w and G
  const int64_t heap_before = HeapInUse();
  auto table = MakeTable(Options(kDim));
  std::vector<uint64_t> keys;
  std::vector<float> out;
  for (int64_t start = 0; start < kRows; start += 100000) {
    keys.clear();
    for (int64_t i = start; i < start + 100000; ++i) keys.push_back(MixKey64(i));
    std::sort(keys.begin(), keys.end());
    out.resize(keys.size() * kDim);
    ASSERT_TRUE(table->Pull(keys, absl::MakeSpan(out)).ok());
  }
  keys = {};
  out = {};
  ASSERT_EQ(table->num_rows(), kRows);
  const double reported = static_cast<double>(table->bytes_used()) / kRows;
  const double measured = static_cast<double>(HeapInUse() - heap_before) / kRows;
  std::printf(
      "embedding table, %lld rows x dim %d, Adagrad: bytes_used %.1f bytes/row, heap "
      "%.1f bytes/row, floor %.0f bytes/row (%.2fx)\n",
      static_cast<long long>(kRows), kDim, reported, measured, kFloor, measured / kFloor);
  EXPECT_LE(reported, 1.5 * kFloor + 16);
  EXPECT_LE(measured, 1.5 * kFloor + 16);
  // The estimate leaves out the allocator's headers and page rounding (a few bytes per row).
  EXPECT_NEAR(measured, reported, 0.1 * reported);
}

}  // namespace
}  // namespace pstrain::server
