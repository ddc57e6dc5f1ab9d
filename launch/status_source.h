// Where the launcher gets the job's progress from.
#ifndef PSTRAIN_LAUNCH_STATUS_SOURCE_H_
#define PSTRAIN_LAUNCH_STATUS_SOURCE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/transport_security.h"
#include "proto/scheduler.pb.h"

namespace pstrain {
namespace launch {

// A snapshot of the job's progress on demand. The launcher polls it every ~500 ms and treats a
// failed poll as "no news" (the scheduler may be starting or ending), so implementations need
// not retry. Tests substitute a fake.
//
// Not thread-safe; Get() blocks for at most the implementation's deadline.
class JobStatusSource {
 public:
  virtual ~JobStatusSource() = default;

  // The current status; UNAVAILABLE / DEADLINE_EXCEEDED (or any other code) when the scheduler
  // could not be asked.
  virtual absl::StatusOr<JobStatus> Get() = 0;
};

// Asks the scheduler at `address` ("host:port") with its GetJobStatus rpc; each call has
// `deadline` and fails fast when the scheduler is not listening. `security` secures the channel
// (null: plaintext).
std::unique_ptr<JobStatusSource> NewSchedulerStatusSource(const std::string& address, absl::Duration deadline,
                                                          std::shared_ptr<const TransportSecurity> security = nullptr);

}  // namespace launch
}  // namespace pstrain

#endif  // PSTRAIN_LAUNCH_STATUS_SOURCE_H_
