#include "scheduler/barrier_names.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/barriers.h"
#include "scheduler/membership.h"

namespace pstrain {
namespace scheduler {
namespace {

constexpr absl::string_view kEpochPrefix = "epoch-";
constexpr absl::string_view kEpochSuffix = "-trained";
// Long enough for "epoch-<any int32>-trained"; a name is quoted in messages up to this length.
constexpr size_t kMaxNameBytes = 64;

// The epoch N of "epoch-N-trained" in canonical decimal (no sign, no leading zero), or -1.
int EpochOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kEpochPrefix) || !absl::ConsumeSuffix(&name, kEpochSuffix)) return -1;
  if (name.empty() || name.size() > 9 || (name.size() > 1 && name[0] == '0')) return -1;
  for (char c : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
  }
  int epoch = -1;
  if (!absl::SimpleAtoi(name, &epoch)) return -1;
  return epoch;
}

}  // namespace

absl::Status CheckBarrierRequest(const BarrierRequest& request, int epochs) {
  const Role role = request.role() == ROLE_UNSPECIFIED ? WORKER : request.role();
  const BarrierRequest::Participants group =
      request.participants() == BarrierRequest::ALL ? BarrierRequest::ALL : BarrierRequest::WORKERS;
  const absl::string_view name = request.name();
  const std::string what = absl::StrCat("barrier from ", RoleName(role), " ", request.rank());
  const std::string known = absl::StrCat("the job's barriers are '", kServersReadyBarrier, "' (ALL) and '",
                                         kEpochPrefix, "<N>", kEpochSuffix, "' (WORKERS) for N in [0, ", epochs, ")");
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": barrier name of ", name.size(), " bytes (limit ", kMaxNameBytes, "); ", known));
  }
  if (name == kServersReadyBarrier) {
    if (group != BarrierRequest::ALL) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": barrier '", name, "' is for group ALL, got WORKERS; ", known));
    }
    return absl::OkStatus();
  }
  if (absl::StartsWith(name, kEpochPrefix) && absl::EndsWith(name, kEpochSuffix)) {
    const int epoch = EpochOf(name);
    if (epoch < 0 || epoch >= epochs) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": barrier '", name, "' names no epoch of the job; ", known));
    }
    if (group != BarrierRequest::WORKERS || role != WORKER) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": barrier '", name, "' is for workers only (group WORKERS), got ", RoleName(role),
                       " in group ", BarrierRequest::Participants_Name(group), "; ", known));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(what, ": unknown barrier name '", name, "'; ", known));
}

}  // namespace scheduler
}  // namespace pstrain
