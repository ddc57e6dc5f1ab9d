#include "scheduler/server_scaling.h"

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace scheduler {

std::string ServerScaling::Describe(int from, int to) { return absl::StrCat(from, " -> ", to, " servers"); }

absl::Status ServerScaling::Request(int to, int current, absl::Time now) {
  if (to < 1 || to > kMaxServers) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale to ", to, " servers: expected a count in [1, ", kMaxServers, "]"));
  }
  if (pending_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "scale to ", to, " servers: the change ", Describe(pending_->from, pending_->to),
        " is still pending (one change at a time: ask again once it cut over)"));
  }
  if (to == current) {
    return absl::InvalidArgumentError(absl::StrCat("scale to ", to, " servers: the job has ", current, " already"));
  }
  pending_ = Pending{current, to, now, std::nullopt};
  return absl::OkStatus();
}

void ServerScaling::Ready(int64_t newest_cut) {
  if (!pending_.has_value() || pending_->after_cut.has_value()) return;
  pending_->after_cut = newest_cut;
}

bool ServerScaling::DueAt(int64_t newest_cut) const {
  return pending_.has_value() && pending_->after_cut.has_value() && newest_cut > *pending_->after_cut;
}

void ServerScaling::CutOver(int64_t step, int64_t shard_map_version, absl::Time now) {
  done_.push_back(Done{pending_->from, pending_->to, step, shard_map_version, pending_->requested, now});
  if (done_.size() > kMaxDone) done_.pop_front();
  pending_.reset();
}

}  // namespace scheduler
}  // namespace pstrain
