#include "common/utf8.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(Utf8Test, TellsWellFormedFromMalformed) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("fc1.weight"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9"));       // U+00E9
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));  // U+1F600
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // cut short
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(Utf8Test, EscapesOnlyWhatIsNotUtf8) {
  EXPECT_EQ(ToValidUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  const std::string escaped = ToValidUtf8("name '\xff'");
  EXPECT_EQ(escaped, "name \\'\\xff\\'");
  EXPECT_TRUE(IsValidUtf8(escaped));
}

}  // namespace
}  // namespace pstrain
