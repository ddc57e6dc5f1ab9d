// StopSignals with real signals sent to this process: forwarded to the stop function while a
// Forwarding lives, the default action outside one, blocked in the threads started after it, and
// taken promptly while every other thread sleeps on a lock (under ThreadSanitizer a signal that
// landed on such a thread waited for it to wake: from seconds to never).
#include "common/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

bool Blocked(int signal) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal) == 1;
}

TEST(StopSignalsTest, ForwardsEachSignalToTheStopWhileTheMainThreadSleepsOnALock) {
  StopSignals signals;
  std::atomic<int> stops{0};
  absl::Notification first, second;
  {
    StopSignals::Forwarding forwarding(&signals, [&] {
      if (++stops == 1) {
        first.Notify();
      } else {
        second.Notify();
      }
    });
    // Sent from another thread while this one waits on an absl lock (a futex, not a call any
    // sanitizer knows to block), as a role's main thread waits in Run().
    std::thread sender([] { kill(getpid(), SIGTERM); });
    EXPECT_TRUE(first.WaitForNotificationWithTimeout(absl::Seconds(30)));
    sender.join();
    kill(getpid(), SIGINT);
    EXPECT_TRUE(second.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  EXPECT_EQ(stops.load(), 2);
}

TEST(StopSignalsTest, BlocksBothSignalsInTheThreadsStartedAfterItAndUnblocksOnDestruction) {
  ASSERT_FALSE(Blocked(SIGTERM));
  {
    StopSignals signals;
    EXPECT_TRUE(Blocked(SIGTERM));
    EXPECT_TRUE(Blocked(SIGINT));
    bool blocked_in_new_thread = false;
    std::thread later([&] { blocked_in_new_thread = Blocked(SIGTERM) && Blocked(SIGINT); });
    later.join();
    EXPECT_TRUE(blocked_in_new_thread);
  }
  EXPECT_FALSE(Blocked(SIGTERM));
  EXPECT_FALSE(Blocked(SIGINT));
}

TEST(StopSignalsDeathTest, OutsideAForwardingASignalTakesItsDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StopSignals signals;
        kill(getpid(), SIGTERM);
        sleep(60);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "signal 15 .* with no role running: the default action");
  // After a Forwarding ended (the role returned and lingers): the default action again.
  EXPECT_EXIT(
      {
        StopSignals signals;
        {
          StopSignals::Forwarding forwarding(&signals, [] { _exit(3); });
        }
        kill(getpid(), SIGINT);
        sleep(60);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "signal 2 .* with no role running: the default action");
}

}  // namespace
}  // namespace pstrain
