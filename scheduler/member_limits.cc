#include "scheduler/member_limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "scheduler/membership.h"

namespace pstrain {
namespace scheduler {

absl::Status CheckLength(absl::string_view what, absl::string_view field, absl::string_view value, size_t limit) {
  if (value.size() <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", field, " is ", value.size(), " bytes, the limit is ", limit));
}

absl::Status CheckRegisterRequest(const RegisterRequest& request) {
  const std::string what = absl::StrCat("register ", RoleName(request.role()));
  if (absl::Status s = CheckLength(what, "address", request.address(), kMaxAddressBytes); !s.ok()) return s;
  if (absl::Status s = CheckLength(what, "instance_id", request.instance_id(), kMaxInstanceIdBytes); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckLength(what, "metrics_address", request.metrics_address(), kMaxAddressBytes); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckLength(what, "local.unix_address", request.local().unix_address(), kMaxSocketPathBytes);
      !s.ok()) {
    return s;
  }
  return CheckLength(what, "local.host_id", request.local().host_id(), kMaxInstanceIdBytes);
}

absl::Status CheckHeartbeatRequest(const HeartbeatRequest& request) {
  const std::string what = absl::StrCat("heartbeat from ", RoleName(request.role()), " ", request.rank());
  if (request.tables_size() > kMaxTableUsages) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", request.tables_size(), " table usages, the limit is ", kMaxTableUsages));
  }
  for (const TableUsage& usage : request.tables()) {
    if (absl::Status s = CheckLength(what, "table name", usage.table(), kMaxTableNameBytes); !s.ok()) return s;
  }
  const AppliedLeases& applied = request.applied_leases();
  if (applied.lease_ids_size() > kMaxAppliedLeases || applied.lease_ids_size() != applied.batches_size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": applied leases: ", applied.lease_ids_size(), " ids and ",
                                                   applied.batches_size(),
                                                   " counts, expected as many of each, at most ", kMaxAppliedLeases));
  }
  if (request.has_step() && request.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": store step ", request.step(), ", expected >= 0"));
  }
  const ReshardReport& r = request.resharded();
  if (r.shard_map_version() < 0 || r.pause_ms() < 0 || r.rows() < 0 || r.rows_moved() < 0 || r.bytes() < 0 ||
      r.bytes_moved() < 0 || r.rows_moved() > r.rows() || r.bytes_moved() > r.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": re-cut report (shard map version ", r.shard_map_version(),
                                                   ", pause ", r.pause_ms(), " ms, ", r.rows_moved(), " of ", r.rows(),
                                                   " rows and ", r.bytes_moved(), " of ", r.bytes(),
                                                   " bytes moved): expected counts >= 0, and no more moved than held"));
  }
  return absl::OkStatus();
}

int MaxWorkerJoinsPerMinute(const JobSpec& job) {
  return std::max(10, 2 * std::max(job.max_workers(), job.num_workers()));
}

std::string BoundedReason(absl::string_view text) {
  if (text.size() <= kMaxReasonBytes) return std::string(text);
  size_t keep = kMaxReasonBytes;
  // Back off continuation bytes (10xxxxxx), so a multi-byte character is not split.
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(text.substr(0, keep), "... (", text.size() - keep, " bytes cut)");
}

}  // namespace scheduler
}  // namespace pstrain
