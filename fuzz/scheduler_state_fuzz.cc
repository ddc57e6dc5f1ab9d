// The scheduler's state file (scheduler/state_file.h): decoded and verified, then handed to
// Scheduler::Restore for a small job, as a restarted scheduler does with --state_dir. A state whose
// parts do not fit together or belong to another job must be refused with an error.
//
// Input: byte 0 bit 0 set: fix up the trailing CRC (fuzz_util.h MaybeFixCrc); the rest is the file.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_util.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"
#include "scheduler/state_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes =
      pstrain::fuzz::MaybeFixCrc(absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1), data[0] & 1);
  absl::StatusOr<pstrain::SchedulerState> state = pstrain::scheduler::DecodeSchedulerState(bytes, "fuzz");
  if (!state.ok()) return 0;
  pstrain::JobSpec job;
  job.set_num_workers(2);
  job.set_num_servers(2);
  job.set_mode(state->job().mode() == pstrain::ASYNC ? pstrain::ASYNC : pstrain::SYNC);
  const absl::Time now = absl::FromUnixSeconds(1000);
  auto options = pstrain::scheduler::test_util::TinyJobOptions(job, 64, 1000, 100, 40, [now] { return now; });
  auto restored = pstrain::scheduler::Scheduler::Restore(std::move(options), *state);
  if (restored.ok()) (void)(*restored)->Snapshot();
  return 0;
}
