#include "launch/child_process.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>

#include <string>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"

namespace pstrain {
namespace launch {
namespace {

std::unique_ptr<ChildProcess> Shell(const std::string& script) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn({{"/bin/sh", "-c", script}});
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

// Reads both streams until end of file (blocking in poll between reads).
void ReadAll(ChildProcess& child, std::string* out, std::string* err) {
  bool open[2] = {true, true};
  while (open[0] || open[1]) {
    pollfd fds[2];
    int n = 0;
    for (Stream s : {Stream::kStdout, Stream::kStderr}) {
      if (child.fd(s) >= 0) fds[n++] = {child.fd(s), POLLIN, 0};
    }
    poll(fds, n, 1000);
    absl::StatusOr<bool> o = child.Read(Stream::kStdout, out);
    absl::StatusOr<bool> e = child.Read(Stream::kStderr, err);
    ASSERT_TRUE(o.ok() && e.ok());
    open[0] = *o;
    open[1] = *e;
  }
}

TEST(ChildProcessTest, CapturesOutputAndExitStatus) {
  auto child = Shell("echo hi; echo oops >&2; exit 3");
  ASSERT_NE(child, nullptr);
  std::string out, err;
  ReadAll(*child, &out, &err);
  EXPECT_EQ(out, "hi\n");
  EXPECT_EQ(err, "oops\n");
  ExitStatus status = child->Wait();
  EXPECT_FALSE(status.signaled);
  EXPECT_EQ(status.code, 3);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.ToString(), "exited with status 3");
  EXPECT_EQ(child->fd(Stream::kStdout), -1);
}

TEST(ChildProcessTest, EnvAddsAndReplacesVariablesAndKeepsTheRest) {
  setenv("PSTRAIN_CHILD_TEST_KEPT", "kept", 1);
  setenv("PSTRAIN_CHILD_TEST_REPLACED", "old", 1);
  ChildProcess::Options options;
  options.argv = {"/bin/sh", "-c",
                  "echo \"$PSTRAIN_CHILD_TEST_KEPT $PSTRAIN_CHILD_TEST_REPLACED $PSTRAIN_CHILD_TEST_NEW\"; "
                  "env | grep -c '^PSTRAIN_CHILD_TEST_REPLACED='"};
  options.env = {{"PSTRAIN_CHILD_TEST_REPLACED", "new"}, {"PSTRAIN_CHILD_TEST_NEW", "a=b c"}};
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out, err;
  ReadAll(**child, &out, &err);
  EXPECT_EQ(out, "kept new a=b c\n1\n");
  EXPECT_TRUE((*child)->Wait().ok());

  options.env = {{"BAD=NAME", "x"}};
  EXPECT_EQ(ChildProcess::Spawn(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChildProcessTest, ZeroExitIsOk) {
  auto child = Shell("exit 0");
  ASSERT_NE(child, nullptr);
  EXPECT_TRUE(child->Wait().ok());
  // Poll after Wait keeps returning the same status.
  ASSERT_TRUE(child->Poll().has_value());
  EXPECT_TRUE(child->Poll()->ok());
}

TEST(ChildProcessTest, DeathBySignalIsReportedAsSuch) {
  auto child = Shell("kill -9 $$");
  ASSERT_NE(child, nullptr);
  ExitStatus status = child->Wait();
  EXPECT_TRUE(status.signaled);
  EXPECT_EQ(status.signal, SIGKILL);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.ToString(), "was killed by signal 9 (SIGKILL)");
}

TEST(ChildProcessTest, StopEndsASleepingChildWithSigterm) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn({{"/bin/sleep", "100"}});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_FALSE((*child)->Poll().has_value());
  ExitStatus status = (*child)->Stop(absl::Seconds(5));
  EXPECT_TRUE(status.signaled);
  EXPECT_EQ(status.signal, SIGTERM);
}

TEST(ChildProcessTest, StopKillsAChildThatIgnoresSigterm) {
  // The child says it is ready only once its trap is set, so SIGTERM cannot arrive before it.
  auto child = Shell("trap '' TERM; echo ready; while :; do sleep 1; done");
  ASSERT_NE(child, nullptr);
  std::string out;
  while (out.empty()) {
    pollfd fd = {child->fd(Stream::kStdout), POLLIN, 0};
    poll(&fd, 1, 1000);
    ASSERT_TRUE(child->Read(Stream::kStdout, &out).ok());
  }
  ExitStatus status = child->Stop(absl::Milliseconds(200));
  EXPECT_TRUE(status.signaled);
  EXPECT_EQ(status.signal, SIGKILL);
}

TEST(ChildProcessTest, ChildStartsWithSigtermUnblockedEvenIfParentBlocksIt) {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn({{"/bin/sleep", "100"}});
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE((*child)->Signal(SIGTERM).ok());
  ExitStatus status = (*child)->Wait();
  EXPECT_TRUE(status.signaled);
  EXPECT_EQ(status.signal, SIGTERM);
}

TEST(ChildProcessTest, MissingProgramIsNotFound) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn({{"/nonexistent/pstrain-nothing", "--flag"}});
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(child.status().message(), "/nonexistent/pstrain-nothing"));
}

TEST(ChildProcessTest, EmptyArgvIsInvalid) {
  EXPECT_EQ(ChildProcess::Spawn({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChildProcessTest, SignalAfterReapIsANoOp) {
  auto child = Shell("exit 0");
  ASSERT_NE(child, nullptr);
  child->Wait();
  EXPECT_TRUE(child->Signal(SIGKILL).ok());
}

}  // namespace
}  // namespace launch
}  // namespace pstrain
