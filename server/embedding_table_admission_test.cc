// EmbeddingTable with admission (TableOptions.admission, server/row_admission.h): an update of a
// key that is not admitted creates nothing, is counted, and leaves the key reading as its initial
// value; an admitted key's row starts from its initial value, as without admission; the sketch
// travels in the table's checkpoint, so a restored table decides as the original.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/embedding_table.h"
#include "server/embedding_table_test_util.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;
using namespace table_test;  // NOLINT: the shared helpers of the table tests

TableOptions Options(AdmissionSpec admission) {
  TableOptions options;
  options.name = "user";
  options.id = 3;
  options.dim = 2;
  options.seed = 42;
  options.optimizer.type = SparseOptimizerOptions::Type::kAdagrad;
  options.admission = std::move(admission);
  return options;
}

AdmissionSpec Count(int n) {
  AdmissionSpec spec;
  spec.set_policy(AdmissionSpec::COUNT);
  spec.set_min_count(n);
  spec.set_sketch_bytes(4096);
  return spec;
}

std::unique_ptr<EmbeddingTable> Make(const AdmissionSpec& admission) { return MakeTable(Options(admission)); }

uint32_t VersionOf(const std::string& bytes) {
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, sizeof(version));
  return version;
}

TEST(EmbeddingTableAdmissionTest, CountTwoDropsTheFirstUpdateAndStartsTheRowAtTheSecond) {
  std::unique_ptr<EmbeddingTable> table = Make(Count(2));
  std::unique_ptr<EmbeddingTable> always = Make(AdmissionSpec());
  const std::vector<float> initial = ReadRows(*table, {5});
  ASSERT_TRUE(table->Apply({5}, std::vector<float>{1.0f, -1.0f}, 0.1f, 0).ok());
  EXPECT_EQ(table->num_rows(), 0);
  EXPECT_EQ(ReadRows(*table, {5}), initial);  // not admitted: the initial value, nothing stored
  EXPECT_EQ(table->counters().refused, 1);
  EXPECT_EQ(table->counters().admitted, 0);

  // The second update admits the key: its row is the initial value updated by this gradient
  // alone, as in a table that admits every key and saw only this update.
  ASSERT_TRUE(table->Apply({5}, std::vector<float>{0.5f, 2.0f}, 0.1f, 1).ok());
  ASSERT_TRUE(always->Apply({5}, std::vector<float>{0.5f, 2.0f}, 0.1f, 1).ok());
  EXPECT_EQ(table->num_rows(), 1);
  EXPECT_EQ(ReadRows(*table, {5}), ReadRows(*always, {5}));
  EXPECT_EQ(table->counters().admitted, 1);

  // In one update, keys with rows are updated and new ones counted: key 5 moves, 6 and 7 wait.
  const std::vector<float> before = ReadRows(*table, {5, 6, 7});
  ASSERT_TRUE(table->Apply({5, 6, 7}, std::vector<float>(6, 1.0f), 0.1f, 2).ok());
  const std::vector<float> after = ReadRows(*table, {5, 6, 7});
  EXPECT_NE(after[0], before[0]);
  EXPECT_EQ(std::vector<float>(after.begin() + 2, after.end()), std::vector<float>(before.begin() + 2, before.end()));
  EXPECT_EQ(table->counters().refused, 3);
  EXPECT_EQ(table->num_rows(), 1);
}

TEST(EmbeddingTableAdmissionTest, ARestoredTableAdmitsWhatTheOriginalWould) {
  std::unique_ptr<EmbeddingTable> original = Make(Count(3));
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 500; ++k) keys.push_back(k * 3);
  const std::vector<float> grads(keys.size() * 2, 0.25f);
  for (int64_t step = 0; step < 2; ++step) ASSERT_TRUE(original->Apply(keys, grads, 0.1f, step).ok());
  const std::string saved = Bytes(*original);
  EXPECT_EQ(VersionOf(saved), 2u);  // rows and the sketch

  std::unique_ptr<EmbeddingTable> restored = Make(Count(3));
  ASSERT_TRUE(restored->Restore(saved).ok());
  EXPECT_EQ(Bytes(*restored), saved);
  // The third update admits every key on both; a table restored without the sketch would not.
  ASSERT_TRUE(original->Apply(keys, grads, 0.1f, 2).ok());
  ASSERT_TRUE(restored->Apply(keys, grads, 0.1f, 2).ok());
  EXPECT_EQ(original->num_rows(), 500);
  EXPECT_EQ(Bytes(*restored), Bytes(*original));
}

TEST(EmbeddingTableAdmissionTest, CheckpointsOfTablesWithoutSketchKeepVersionOne) {
  std::unique_ptr<EmbeddingTable> always = Make(AdmissionSpec());
  ASSERT_TRUE(always->Apply({1, 2}, std::vector<float>(4, 1.0f), 0.1f, 0).ok());
  const std::string v1 = Bytes(*always);
  EXPECT_EQ(VersionOf(v1), 1u);
  AdmissionSpec coin;
  coin.set_policy(AdmissionSpec::PROBABILITY);
  coin.set_probability(0.5f);
  EXPECT_EQ(VersionOf(Bytes(*Make(coin))), 1u);  // a coin keeps no state

  // Rows of a table that admitted every key restore into one that counts, with an empty sketch.
  std::unique_ptr<EmbeddingTable> counting = Make(Count(2));
  ASSERT_TRUE(counting->Restore(v1).ok());
  EXPECT_EQ(counting->num_rows(), 2);
  // The other way, the sketch has nowhere to go.
  const absl::Status refused = always->Restore(Bytes(*counting));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("carries an admission sketch of 4096 bytes; the table admits every key"));
  EXPECT_EQ(Bytes(*always), v1);  // unchanged
}

TEST(EmbeddingTableAdmissionTest, ProbabilityDecidesTheSameInTwoTablesOfTheSameSeed) {
  AdmissionSpec coin;
  coin.set_policy(AdmissionSpec::PROBABILITY);
  coin.set_probability(0.3f);
  std::unique_ptr<EmbeddingTable> a = Make(coin);
  std::unique_ptr<EmbeddingTable> b = Make(coin);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 2000; ++k) keys.push_back(k);
  const std::vector<float> grads(keys.size() * 2, 0.5f);
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(a->Apply(keys, grads, 0.1f, step).ok());
    ASSERT_TRUE(b->Apply(keys, grads, 0.1f, step).ok());
  }
  EXPECT_EQ(Bytes(*a), Bytes(*b));
  // 1 - 0.7^3 = 0.657 of the keys were admitted by one of three coins.
  EXPECT_NEAR(a->num_rows() / 2000.0, 0.657, 0.03);
  EXPECT_EQ(a->counters().admitted + 0, a->num_rows());
}

TEST(EmbeddingTableAdmissionTest, ABadPolicyIsRefusedNamingTheTableAndField) {
  AdmissionSpec bad = Count(0);
  absl::StatusOr<std::unique_ptr<EmbeddingTable>> table = EmbeddingTable::Create(Options(bad));
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(table.status().message(), HasSubstr("table 'user'.admission.min_count: got 0"));
}

}  // namespace
}  // namespace pstrain::server
