// The job spec (common/job_spec.h): a textproto file read, completed with its defaults and
// validated, as the launcher and the scheduler do with the --job file before anything starts.
// Validation must reject every bad job with INVALID_ARGUMENT, never crash on one.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      pstrain::fuzz::WriteScratch("job.textproto", absl::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<pstrain::JobSpec> job = pstrain::ReadJobSpecFile(path);
  if (!job.ok()) return 0;
  pstrain::ApplyJobDefaults(&*job);
  if (pstrain::ValidateJobSpec(*job).ok()) (void)pstrain::CheckpointsOn(*job);
  (void)pstrain::JobSpecToText(*job);
  return 0;
}
