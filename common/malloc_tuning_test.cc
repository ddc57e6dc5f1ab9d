#include "common/malloc_tuning.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

constexpr int64_t kMiB = 1 << 20;

// `n` blocks of 1 MiB, written in full so that they are resident: below KeepFreedMemoryForReuse's
// mmap threshold, so the heap serves them and keeps them when they are freed.
std::vector<std::unique_ptr<char[]>> WrittenBlocks(int n) {
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < n; ++i) {
    blocks.push_back(std::make_unique<char[]>(kMiB));
    for (int64_t j = 0; j < kMiB; j += 512) blocks.back()[j] = static_cast<char>(i + j);
  }
  return blocks;
}

class FreedMemoryBoundTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(KeepFreedMemoryForReuse()); }
};

TEST_F(FreedMemoryBoundTest, HandsBackFreedMemoryOnlyPastTheBound) {
  FreedMemoryBound bound(8 * kMiB);
  const int64_t before = KeptFreedBytes();
  WrittenBlocks(4);  // freed at once: 4 MiB kept, within the bound
  EXPECT_GE(KeptFreedBytes(), before + 3 * kMiB);
  EXPECT_FALSE(bound.Check());

  WrittenBlocks(64);  // reuses the 4, then 60 more: 64 MiB kept
  EXPECT_GE(KeptFreedBytes(), before + 60 * kMiB);
  EXPECT_TRUE(bound.Check());
  EXPECT_LT(KeptFreedBytes(), before + 2 * kMiB);
  EXPECT_FALSE(bound.Check());  // nothing freed since
}

TEST_F(FreedMemoryBoundTest, MemoryInUseIsNotKeptFreed) {
  FreedMemoryBound bound(8 * kMiB);
  const int64_t before = KeptFreedBytes();
  std::vector<std::unique_ptr<char[]>> held = WrittenBlocks(64);
  EXPECT_LT(KeptFreedBytes(), before + 2 * kMiB);
  EXPECT_FALSE(bound.Check());
  held.clear();  // now kept: the next check returns it
  EXPECT_TRUE(bound.Check());
}

}  // namespace
}  // namespace pstrain
