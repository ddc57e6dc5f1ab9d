// UpdateClock (server/update_clock.h): the largest time seen, samples at its resolution, which
// updates are surely older than the TTL, bounded memory, and checkpoints.
#include "server/update_clock.h"

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kTtl = 6400;              // ms; resolution 100 ms
constexpr int64_t kT0 = 1'800'000'000'000;  // a Unix time in ms

TEST(UpdateClockTest, NothingExpiresBeforeTheTtlHasPassed) {
  UpdateClock clock(kTtl);
  EXPECT_EQ(clock.ExpiredThrough(), UpdateClock::kNone);
  clock.Advance(0, kT0);
  clock.Advance(1, kT0 + kTtl - 1);
  EXPECT_EQ(clock.now_ms(), kT0 + kTtl - 1);
  EXPECT_EQ(clock.ExpiredThrough(), UpdateClock::kNone);
  clock.Advance(2, kT0 + kTtl);
  // Update 0 ran at kT0, exactly the TTL ago: rows it last updated have expired. Those of update 1
  // (at kT0 + kTtl - 1) have not.
  EXPECT_EQ(clock.ExpiredThrough(), 0);
}

TEST(UpdateClockTest, RowsLastUpdatedThroughAnExpiredSampleAreAtLeastTheTtlOld) {
  UpdateClock clock(kTtl);
  // Updates 0..199 at 50 ms apart (9.95 s, past the 6.4 s TTL): a sample every other update (the
  // 100 ms resolution).
  for (int64_t u = 0; u < 200; ++u) clock.Advance(u, kT0 + 50 * u);
  const int64_t now = clock.now_ms();
  const int64_t through = clock.ExpiredThrough();
  ASSERT_NE(through, UpdateClock::kNone);
  // Every update through `through` ran at least the TTL ago...
  EXPECT_LE(kT0 + 50 * through, now - kTtl);
  // ...and those after it that did are fewer than the resolution's worth (100 ms: 2 updates).
  EXPECT_GT(kT0 + 50 * (through + 2), now - kTtl);
}

TEST(UpdateClockTest, TheClockNeverRunsBackward) {
  UpdateClock clock(kTtl);
  clock.Advance(0, kT0 + 5000);
  clock.Advance(1, kT0);  // an older lease's push, applied later
  clock.Advance(2, 0);    // a push without a time
  EXPECT_EQ(clock.now_ms(), kT0 + 5000);
  EXPECT_EQ(clock.num_samples(), 1u);
}

TEST(UpdateClockTest, HoldsAFewSamplesWhateverTheRunsLength) {
  UpdateClock clock(kTtl);
  for (int64_t u = 0; u < 1'000'000; ++u) clock.Advance(u, kT0 + u);
  EXPECT_LE(clock.num_samples(), 66u);
  EXPECT_NE(clock.ExpiredThrough(), UpdateClock::kNone);
}

TEST(UpdateClockTest, ARestoredClockDecidesAsTheOriginal) {
  UpdateClock clock(kTtl);
  for (int64_t u = 0; u < 500; ++u) clock.Advance(u, kT0 + 37 * u);
  std::string saved;
  clock.Serialize(&saved);
  UpdateClock restored(kTtl);
  ASSERT_TRUE(restored.Restore("table 'user'", saved).ok());
  EXPECT_EQ(restored.now_ms(), clock.now_ms());
  EXPECT_EQ(restored.ExpiredThrough(), clock.ExpiredThrough());
  for (int64_t u = 500; u < 700; ++u) {
    clock.Advance(u, kT0 + 37 * u);
    restored.Advance(u, kT0 + 37 * u);
    ASSERT_EQ(restored.ExpiredThrough(), clock.ExpiredThrough()) << "update " << u;
  }
}

TEST(UpdateClockTest, ACorruptCheckpointChangesNothing) {
  UpdateClock clock(kTtl);
  clock.Advance(0, kT0);
  clock.Advance(7, kT0 + 1000);
  std::string saved;
  clock.Serialize(&saved);
  UpdateClock target(kTtl);
  target.Advance(3, kT0 + 9);
  // Truncated, and with its two samples swapped.
  absl::Status truncated = target.Restore("table 'user'", saved.substr(0, saved.size() - 1));
  EXPECT_EQ(truncated.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(truncated.message(), HasSubstr("table 'user': an eviction clock of 47 bytes"));
  std::string swapped = saved.substr(0, 16) + saved.substr(32, 16) + saved.substr(16, 16);
  absl::Status disorder = target.Restore("table 'user'", swapped);
  EXPECT_EQ(disorder.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(disorder.message(), HasSubstr("sample 1 (update 0"));
  std::string negative(16, '\0');  // no samples, a clock of -1 ms
  std::memset(negative.data(), 0xff, 8);
  absl::Status before_epoch = target.Restore("table 'user'", negative);
  EXPECT_EQ(before_epoch.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(before_epoch.message(), HasSubstr("table 'user': an eviction clock at -1 ms, expected >= 0"));
  EXPECT_EQ(target.now_ms(), kT0 + 9);
  EXPECT_EQ(target.num_samples(), 1u);
}

}  // namespace
}  // namespace pstrain::server
