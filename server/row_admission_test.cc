// RowAdmission (server/row_admission.h): count:N admits at the N-th update (never later, earlier
// only through the sketch's collisions, at a rate measured here against the count-min bound),
// probability:p is a seeded coin that repeats, and the sketch survives Serialize / Restore.
#include "server/row_admission.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;

AdmissionSpec Count(int n, int64_t sketch_bytes) {
  AdmissionSpec spec;
  spec.set_policy(AdmissionSpec::COUNT);
  spec.set_min_count(n);
  spec.set_sketch_bytes(sketch_bytes);
  return spec;
}

AdmissionSpec Probability(float p) {
  AdmissionSpec spec;
  spec.set_policy(AdmissionSpec::PROBABILITY);
  spec.set_probability(p);
  return spec;
}

std::unique_ptr<RowAdmission> Make(const AdmissionSpec& spec, uint64_t seed = 7, int32_t table = 0) {
  absl::StatusOr<std::unique_ptr<RowAdmission>> made = RowAdmission::Create("table 'user'", spec, seed, table);
  EXPECT_TRUE(made.ok()) << made.status();
  return std::move(made).value();
}

TEST(RowAdmissionTest, CountAdmitsAtTheNthUpdateWhenKeysDoNotCollide) {
  // 1 MiB for 200 keys: collisions are (about 1e-5 per key) too rare to matter here.
  std::unique_ptr<RowAdmission> admission = Make(Count(3, 1 << 20));
  for (uint64_t key = 1000; key < 1200; ++key) {
    EXPECT_FALSE(admission->Admit(key, 0)) << key;
    EXPECT_FALSE(admission->Admit(key, 1)) << key;
    EXPECT_TRUE(admission->Admit(key, 2)) << key;
  }
}

TEST(RowAdmissionTest, CountNeverAdmitsLateEvenInASmallSketch) {
  // 4 KiB (1024 counters a row) for 20,000 keys, each seen up to 4 times: many collisions, yet no
  // key's estimate is below its true count, so every key is admitted by its 4th update.
  std::unique_ptr<RowAdmission> admission = Make(Count(4, 4096));
  int admitted = 0;
  for (uint64_t key = 0; key < 20000; ++key) {
    bool in = false;
    for (int seen = 1; seen <= 4 && !in; ++seen) in = admission->Admit(key * 7919, seen);
    admitted += in ? 1 : 0;
  }
  EXPECT_EQ(admitted, 20000);
}

TEST(RowAdmissionTest, FalseAdmissionsOfCountTwoStayWithinTheCountMinBound) {
  // n distinct keys, each updated once, into a sketch of width w and depth d: a key's d counters
  // all hold another key with probability at most (1 - e^(-n/w))^d for a plain count-min sketch;
  // conservative update only lowers it. Measured for one key per n keys already counted.
  constexpr int64_t kBytes = 64 << 10;
  const double width = static_cast<double>(kBytes) / RowAdmission::kDepth;
  for (const double load : {0.25, 1.0, 4.0}) {
    std::unique_ptr<RowAdmission> admission = Make(Count(2, kBytes));
    const auto n = static_cast<uint64_t>(load * width);
    for (uint64_t key = 0; key < n; ++key) admission->Admit(key, 0);
    // A fresh key's first update admits it exactly when its estimate is already >= 1 (the update
    // raises the smallest counters by one): probed without counting the probes.
    int early = 0;
    constexpr int kProbes = 20000;
    for (uint64_t probe = 0; probe < kProbes; ++probe) early += admission->Estimate(n + 1 + probe) >= 1 ? 1 : 0;
    const double rate = static_cast<double>(early) / kProbes;
    const double bound = std::pow(1 - std::exp(-load), RowAdmission::kDepth);
    std::printf("count:2, %lld-byte sketch, %.2f keys per counter: false admissions %.4f (bound %.4f)\n",
                static_cast<long long>(kBytes), load, rate, bound);
    EXPECT_LE(rate, bound + 0.01) << "load " << load;
  }
}

TEST(RowAdmissionTest, ProbabilityIsASeededCoinThatRepeats) {
  std::unique_ptr<RowAdmission> a = Make(Probability(0.25f));
  std::unique_ptr<RowAdmission> b = Make(Probability(0.25f));
  std::unique_ptr<RowAdmission> other_seed = Make(Probability(0.25f), /*seed=*/8);
  int admitted = 0, same_as_other_seed = 0;
  constexpr int kKeys = 100000;
  for (uint64_t key = 0; key < kKeys; ++key) {
    const bool in = a->Admit(key, 17);
    EXPECT_EQ(in, b->Admit(key, 17));
    admitted += in ? 1 : 0;
    same_as_other_seed += in == other_seed->Admit(key, 17) ? 1 : 0;
  }
  EXPECT_NEAR(admitted / double{kKeys}, 0.25, 0.01);
  // Another seed decides independently: agreement 0.25^2 + 0.75^2 = 0.625.
  EXPECT_NEAR(same_as_other_seed / double{kKeys}, 0.625, 0.01);
  // Every key is eventually admitted: a new coin at every update.
  for (uint64_t key = 0; key < 100; ++key) {
    bool in = false;
    for (int64_t step = 0; step < 200 && !in; ++step) in = a->Admit(key, step);
    EXPECT_TRUE(in) << key;
  }
  std::unique_ptr<RowAdmission> all = Make(Probability(1.0f));
  for (uint64_t key = 0; key < 1000; ++key) EXPECT_TRUE(all->Admit(key, 3));
}

TEST(RowAdmissionTest, TheSketchSurvivesSerializeAndRestore) {
  std::unique_ptr<RowAdmission> original = Make(Count(2, 4096));
  for (uint64_t key = 0; key < 3000; ++key) original->Admit(key, 0);
  std::string bytes;
  original->Serialize(&bytes);
  EXPECT_EQ(bytes.size(), 4096u);
  std::unique_ptr<RowAdmission> restored = Make(Count(2, 4096));
  ASSERT_TRUE(restored->Restore("restore", bytes).ok());
  for (uint64_t key = 2000; key < 6000; ++key) EXPECT_EQ(original->Admit(key, 1), restored->Admit(key, 1)) << key;

  std::unique_ptr<RowAdmission> bigger = Make(Count(2, 8192));
  const absl::Status wrong = bigger->Restore("restore of table 'user'", bytes);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(wrong.message(), HasSubstr("the admission sketch holds 4096 bytes, expected 8192"));
  std::string none;
  Make(Probability(0.5f))->Serialize(&none);
  EXPECT_TRUE(none.empty());
}

TEST(RowAdmissionTest, BadPoliciesAreRefusedNamingTheField) {
  struct Case {
    AdmissionSpec spec;
    const char* message;
  } cases[] = {
      {Count(0, 0), "table 'user'.admission.min_count: got 0, expected in [1, 255] for count:N"},
      {Count(256, 0), "table 'user'.admission.min_count: got 256"},
      {Probability(0), "table 'user'.admission.probability: got 0, expected in (0, 1]"},
      {Probability(1.5f), "table 'user'.admission.probability: got 1.5"},
      {Count(2, 100), "table 'user'.admission.sketch_bytes: got 100, expected 0 (the default, 1048576) or in [4096"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<RowAdmission>> made = RowAdmission::Create("table 'user'", c.spec, 7, 0);
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(made.status().message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace pstrain::server
