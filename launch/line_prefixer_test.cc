#include "launch/line_prefixer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pstrain {
namespace launch {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(LinePrefixerTest, PartialLineIsHeldUntilItsNewline) {
  LinePrefixer p("[worker 1] ");
  EXPECT_THAT(p.Add("epoch 1 lo"), IsEmpty());
  EXPECT_THAT(p.Add("ss 0.5"), IsEmpty());
  EXPECT_THAT(p.Add("\n"), ElementsAre("[worker 1] epoch 1 loss 0.5"));
  EXPECT_EQ(p.Flush(), std::nullopt);
}

TEST(LinePrefixerTest, SeveralLinesInOneReadComeOutInOrder) {
  LinePrefixer p("[server 0] ");
  EXPECT_THAT(p.Add("a\nbb\n\nccc\ndd"), ElementsAre("[server 0] a", "[server 0] bb", "[server 0] ", "[server 0] ccc"));
  EXPECT_THAT(p.Add("d\n"), ElementsAre("[server 0] ddd"));
}

TEST(LinePrefixerTest, FinalLineWithoutNewlineComesOutOnFlush) {
  LinePrefixer p("[scheduler] ");
  EXPECT_THAT(p.Add("done\nbye"), ElementsAre("[scheduler] done"));
  EXPECT_EQ(p.Flush(), "[scheduler] bye");
  EXPECT_EQ(p.Flush(), std::nullopt);
}

TEST(LinePrefixerTest, CarriageReturnBeforeNewlineIsDropped) {
  LinePrefixer p("> ");
  EXPECT_THAT(p.Add("dos\r\nunix\n"), ElementsAre("> dos", "> unix"));
}

TEST(LinePrefixerTest, OverlongLineIsCutIntoPieces) {
  LinePrefixer p("> ", /*max_line_bytes=*/4);
  EXPECT_THAT(p.Add("abcdefghij"), ElementsAre("> abcd", "> efgh"));
  EXPECT_EQ(p.Flush(), "> ij");
}

TEST(LinePrefixerTest, EmptyInputGivesNothing) {
  LinePrefixer p("> ");
  EXPECT_THAT(p.Add(""), IsEmpty());
  EXPECT_EQ(p.Flush(), std::nullopt);
}

}  // namespace
}  // namespace launch
}  // namespace pstrain
