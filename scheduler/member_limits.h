// What a member may send the scheduler: the length of every string and the size of every list a
// registered role's calls carry, checked when the call arrives, before anything is stored.
//
// Everything the scheduler keeps from its members ends up in its saved state, the run summary and
// /api/status, so each of those stays bounded by the job (its roles, epochs and steps), never by
// what a member chose to send. Two kinds of limit:
//
//   refused   identifiers: an address, an instance id, a metrics address, a barrier name
//             (scheduler/barrier_names.h), a table name in a heartbeat. Longer ones are answered
//             INVALID_ARGUMENT naming the field, its length and the limit; nothing changes.
//   cut       free text a role sends while it stops: a failure message, a leave reason. Refusing
//             them would lose the news that a member stopped, so they are kept to
//             kMaxReasonBytes (cut on a UTF-8 boundary, "... (N bytes cut)" appended).
//
// Lists a member can grow are capped where they are kept: the slow-step reports
// (Scheduler::kMaxSlowSteps), the stuck barriers (StuckBarrierLog), the workers' failure messages
// (kMaxFailureMessages) and the membership events (Membership::kMaxEvents).
//
// Thread-safe: plain functions of their arguments.
#ifndef PSTRAIN_SCHEDULER_MEMBER_LIMITS_H_
#define PSTRAIN_SCHEDULER_MEMBER_LIMITS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"
#include "proto/scheduler.pb.h"

namespace pstrain {
namespace scheduler {

// host:port, with room for a long DNS name (253 bytes) and a port.
inline constexpr size_t kMaxAddressBytes = 300;
// scheduler/client/scheduler_client.cc makes "host:pid:random", well below this.
inline constexpr size_t kMaxInstanceIdBytes = 300;
// A unix socket path (LocalEndpoint): the kernel's own limit is 108 bytes.
inline constexpr size_t kMaxSocketPathBytes = 300;
// Failure messages and leave reasons are cut to this many bytes.
inline constexpr size_t kMaxReasonBytes = 1024;
// The workers' failure messages kept for the log, the summary and a job failure that quotes them.
inline constexpr size_t kMaxFailureMessages = 8;
// A heartbeat's embedding-table usages (one per table and store) and a slow-step report's
// waiting_for list (INVALID_ARGUMENT beyond).
inline constexpr int kMaxTableUsages = 4096;
inline constexpr size_t kMaxTableNameBytes = 256;
inline constexpr int kMaxWaitingFor = 100000;
// A server's heartbeat confirms at most this many leases (AppliedLeases; servers send at most
// server/applied_batches.h's kMaxReportedLeases, the same number); the rest come next time.
inline constexpr int kMaxAppliedLeases = 4096;
// A server's checkpoint report (the steps it holds checkpoints of; servers keep a few).
inline constexpr int kMaxCheckpointSteps = 10000;

// INVALID_ARGUMENT when `value` is longer than `limit` bytes: "register worker: address is 1048576
// bytes, the limit is 300".
absl::Status CheckLength(absl::string_view what, absl::string_view field, absl::string_view value, size_t limit);

// How many workers may join a running job within a minute (Membership::Options::
// max_joins_per_minute): twice the most live workers it admits (JobSpec.max_workers, or
// num_workers), at least 10. Enough to replace every worker at once, twice.
int MaxWorkerJoinsPerMinute(const JobSpec& job);

// The strings of a registration: address, instance_id, metrics_address and the local endpoint.
absl::Status CheckRegisterRequest(const RegisterRequest& request);

// A heartbeat's table usages (count and names), applied leases (count) and re-cut report (counts
// >= 0, no more moved than held).
absl::Status CheckHeartbeatRequest(const HeartbeatRequest& request);

// `text` cut to kMaxReasonBytes (on a UTF-8 character boundary) with "... (N bytes cut)"
// appended; `text` itself when it fits.
std::string BoundedReason(absl::string_view text);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_MEMBER_LIMITS_H_
