// EmbeddingTable with rows stored at half width (TableOptions.row_dtype FP16 / BF16): the value
// is rounded after each update exactly as an fp32 update followed by the rounding, the optimizer's
// state stays fp32, a key reads the same before and after it has a row, fp16 saturates instead of
// overflowing, the record is smaller, and checkpoints carry the dtype.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include "common/compression.h"
#include "common/table_spec.h"
#include "server/embedding_table.h"
#include "server/embedding_table_test_util.h"

namespace pstrain::server {
namespace {

using Type = SparseOptimizerOptions::Type;
using ::testing::HasSubstr;
using namespace table_test;  // NOLINT: the shared helpers of the table tests

TableOptions Options(int dim, TableSpec::RowDtype dtype, Type type = Type::kSgd) {
  TableOptions options;
  options.name = "user";
  options.id = 2;
  options.dim = dim;
  options.seed = 7;
  options.optimizer.type = type;
  options.row_dtype = dtype;
  return options;
}

float Round(float v, TableSpec::RowDtype dtype) {
  return dtype == TableSpec::FP16 ? Fp16ToFloat(FloatToFp16(v)) : Bf16ToFloat(FloatToBf16(v));
}

class RowDtypeTest : public ::testing::TestWithParam<TableSpec::RowDtype> {};

TEST_P(RowDtypeTest, AnUpdateIsTheFp32UpdateRoundedToTheDtype) {
  const TableSpec::RowDtype dtype = GetParam();
  // Odd dim: the last word is half padding.
  auto table = MakeTable(Options(3, dtype));
  const std::vector<float> before = ReadRows(*table, {11});
  for (float v : before) EXPECT_EQ(v, Round(v, dtype)) << "a key without a row reads its rounded initial value";
  const std::vector<float> g = {0.1f, -0.7f, 3.3f};
  std::vector<float> expected = before;
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(table->Apply({11}, g, 0.37f, step).ok());
    for (int i = 0; i < 3; ++i) expected[i] = Round(expected[i] - 0.37f * g[i], dtype);
  }
  EXPECT_EQ(ReadRows(*table, {11}), expected);
  std::vector<float> row(3);
  ASSERT_TRUE(table->Lookup(11, absl::MakeSpan(row)));
  EXPECT_EQ(row, expected);
}

TEST_P(RowDtypeTest, CreatingARowChangesNothingAKeyReads) {
  auto table = MakeTable(Options(16, GetParam(), Type::kAdagrad));
  const std::vector<uint64_t> keys = {1, 5, 900, 1u << 30};
  const std::vector<float> unread = ReadRows(*table, keys);
  std::vector<float> pulled(keys.size() * 16);
  ASSERT_TRUE(table->Pull(keys, absl::MakeSpan(pulled)).ok());  // creates the rows
  EXPECT_EQ(table->num_rows(), 4);
  EXPECT_EQ(pulled, unread);
  EXPECT_EQ(ReadRows(*table, keys), unread);
}

TEST_P(RowDtypeTest, TheOptimizersStateStaysFp32) {
  // Adagrad's accumulator G: 0.1 + g^2 over steps, which a 16-bit code could not hold exactly.
  const TableSpec::RowDtype dtype = GetParam();
  auto half = MakeTable(Options(4, dtype, Type::kAdagrad));
  auto full = MakeTable(Options(4, TableSpec::FP32, Type::kAdagrad));
  const std::vector<float> g = {1e-3f, 0.25f, -0.5f, 2.0f};
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(half->Apply({3}, g, 0.01f, step).ok());
    ASSERT_TRUE(full->Apply({3}, g, 0.01f, step).ok());
  }
  // The record: 8 value bytes, then 16 bytes of state equal to the fp32 table's (which does not
  // depend on w); rows are after the header and the key.
  const std::string a = Bytes(*half), b = Bytes(*full);
  uint32_t record_a = 0, record_b = 0, name_size = 0;
  std::memcpy(&record_a, a.data() + 24, 4);
  std::memcpy(&record_b, b.data() + 24, 4);
  std::memcpy(&name_size, a.data() + 28, 4);
  EXPECT_EQ(record_a, 8u + 16u);
  EXPECT_EQ(record_b, 16u + 16u);
  const size_t row = 32 + name_size + 8 + 8;
  EXPECT_EQ(a.substr(row + 8, 16), b.substr(row + 16, 16));
}

TEST_P(RowDtypeTest, HalvesTheValuesBytes) {
  auto half = MakeTable(Options(16, GetParam(), Type::kAdagrad));
  auto full = MakeTable(Options(16, TableSpec::FP32, Type::kAdagrad));
  std::vector<uint64_t> keys(5000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 7 + 1;
  std::vector<float> out(keys.size() * 16);
  ASSERT_TRUE(half->Pull(keys, absl::MakeSpan(out)).ok());
  ASSERT_TRUE(full->Pull(keys, absl::MakeSpan(out)).ok());
  // Records of 96 bytes instead of 128 (the index is the same).
  EXPECT_EQ(full->bytes_used() - half->bytes_used(), (128 - 96) * 5 * EmbeddingTable::kRowsPerBlock);
  TableSpec spec;
  spec.set_dim(16);
  spec.set_row_dtype(GetParam());
  EXPECT_EQ(TableRowFloorBytes(spec), 96);
}

TEST_P(RowDtypeTest, CheckpointsCarryTheDtypeAndRefuseAnother) {
  const TableSpec::RowDtype dtype = GetParam();
  auto table = MakeTable(Options(5, dtype, Type::kAdagrad));
  ASSERT_TRUE(table->Apply({1, 4, 9}, std::vector<float>(15, 0.3f), 0.1f, 0).ok());
  const std::string bytes = Bytes(*table);
  auto restored = MakeTable(Options(5, dtype, Type::kAdagrad));
  ASSERT_TRUE(restored->Restore(bytes).ok());
  EXPECT_EQ(Bytes(*restored), bytes);
  EXPECT_EQ(ReadRows(*restored, {1, 4, 9}), ReadRows(*table, {1, 4, 9}));
  // Another dtype's checkpoint, either way: FAILED_PRECONDITION naming both, nothing changed.
  auto fp32 = MakeTable(Options(5, TableSpec::FP32, Type::kAdagrad));
  ASSERT_TRUE(fp32->Apply({2}, std::vector<float>(5, 0.3f), 0.1f, 0).ok());
  const std::string fp32_bytes = Bytes(*fp32);
  absl::Status s = fp32->Restore(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("checkpoint row dtype ", RowDtypeName(dtype), ", table row dtype fp32")));
  EXPECT_EQ(Bytes(*fp32), fp32_bytes);
  s = restored->Restore(fp32_bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(Bytes(*restored), bytes);
}

TEST_P(RowDtypeTest, RestoreRefusesANonFiniteCode) {
  const TableSpec::RowDtype dtype = GetParam();
  auto table = MakeTable(Options(4, dtype, Type::kSgd));
  ASSERT_TRUE(table->Apply({1, 2}, std::vector<float>(8, 0.5f), 0.1f, 0).ok());
  std::string bad = Bytes(*table);
  uint32_t record_bytes = 0, name_size = 0;
  std::memcpy(&record_bytes, bad.data() + 24, 4);
  std::memcpy(&name_size, bad.data() + 28, 4);
  // Row 1's value element 3: a NaN code.
  const uint16_t nan = dtype == TableSpec::FP16 ? 0x7e00 : 0x7fc0;
  std::memcpy(bad.data() + 32 + name_size + 8 + (8 + record_bytes) + 8 + 2 * 3, &nan, 2);
  const uint32_t crc =
      static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bad.data()), bad.size() - 4));
  std::memcpy(bad.data() + bad.size() - 4, &crc, 4);
  auto restored = MakeTable(Options(4, dtype, Type::kSgd));
  const absl::Status s = restored->Restore(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("row 1 (key 2) value element 3 is nan"));
}

INSTANTIATE_TEST_SUITE_P(HalfWidth, RowDtypeTest, ::testing::Values(TableSpec::FP16, TableSpec::BF16),
                         [](const auto& info) { return RowDtypeName(info.param); });

TEST(RowDtypeTest, Fp16SaturatesAtItsLargestFiniteValue) {
  auto table = MakeTable(Options(2, TableSpec::FP16));
  ASSERT_TRUE(table->Apply({5}, {-1e6f, 1e6f}, 1.0f, 0).ok());
  EXPECT_EQ(ReadRows(*table, {5}), (std::vector<float>{65504.0f, -65504.0f}));
  // bf16 has fp32's range: the same update is only rounded.
  auto bf16 = MakeTable(Options(2, TableSpec::BF16));
  ASSERT_TRUE(bf16->Apply({5}, {-1e6f, 1e6f}, 1.0f, 0).ok());
  const std::vector<float> row = ReadRows(*bf16, {5});
  EXPECT_NEAR(row[0], 1e6f, 1e6f / 128);
  EXPECT_NEAR(row[1], -1e6f, 1e6f / 128);
}

}  // namespace
}  // namespace pstrain::server
