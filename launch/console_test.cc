#include "launch/console.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace pstrain {
namespace launch {
namespace {

class ConsoleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = tmpfile();
    err_ = tmpfile();
  }
  void TearDown() override {
    fclose(out_);
    fclose(err_);
  }
  static std::string Contents(FILE* f) {
    std::string text;
    rewind(f);
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), f)) > 0) text.append(buffer, n);
    return text;
  }
  FILE* out_ = nullptr;
  FILE* err_ = nullptr;
};

TEST_F(ConsoleTest, LiveProgressIsErasedAndRedrawnAroundLines) {
  Console console(fileno(out_), fileno(err_), /*live_progress=*/true);
  console.Print(Stream::kStdout, "a");
  console.SetProgress("p1");
  console.Print(Stream::kStdout, "b");
  console.SetProgress("p2");
  console.SetProgress("p2");  // Unchanged: nothing written.
  console.Print(Stream::kStderr, "c");
  console.ClearProgress();
  console.Print(Stream::kStdout, "d");
  EXPECT_EQ(Contents(out_),
            "a\n"
            "\r\033[Kp1"
            "\r\033[Kb\np1"
            "\r\033[Kp2"
            "\r\033[K"  // Erased before "c" goes to stderr...
            "p2"        // ...and redrawn after it.
            "\r\033[K"
            "d\n");
  EXPECT_EQ(Contents(err_), "c\n");
}

TEST_F(ConsoleTest, WithoutLiveProgressOnlyLinesAreWritten) {
  Console console(fileno(out_), fileno(err_), /*live_progress=*/false);
  console.SetProgress("p1");
  console.Print(Stream::kStdout, "a");
  console.Print(Stream::kStderr, "b");
  console.ClearProgress();
  EXPECT_EQ(Contents(out_), "a\n");
  EXPECT_EQ(Contents(err_), "b\n");
}

}  // namespace
}  // namespace launch
}  // namespace pstrain
