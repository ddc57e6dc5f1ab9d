#include "scheduler/server_scaling.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace pstrain {
namespace scheduler {

std::string ServerScaling::Describe(int from, int to) { return absl::StrCat(from, " -> ", to, " servers"); }

absl::Status ServerScaling::Request(int to, int current, absl::Time now) {
  if (to < 1 || to > kMaxServers) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale to ", to, " servers: expected a count in [1, ", kMaxServers, "]"));
  }
  if (pending_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("scale to ", to, " servers: the change ", Describe(pending_->from, pending_->to),
                     " is still pending (one change at a time: ask again once it cut over)"));
  }
  if (to == current) {
    return absl::InvalidArgumentError(absl::StrCat("scale to ", to, " servers: the job has ", current, " already"));
  }
  pending_ = Pending{current, to, now, std::nullopt, std::nullopt, now};
  return absl::OkStatus();
}

void ServerScaling::Ready(int64_t newest_cut, absl::Time now) {
  if (!pending_.has_value() || pending_->after_cut.has_value()) return;
  pending_->after_cut = newest_cut;
  pending_->ready = now;
}

bool ServerScaling::DueAt(int64_t newest_cut) const {
  if (!pending_.has_value() || !pending_->after_cut.has_value()) return false;
  if (pending_->quiet_cut.has_value()) return newest_cut >= *pending_->quiet_cut;
  return newest_cut > *pending_->after_cut;
}

void ServerScaling::QuietCut(int64_t step) {
  if (!pending_.has_value() || !pending_->after_cut.has_value()) return;
  if (pending_->quiet_cut.has_value() && *pending_->quiet_cut >= step) return;
  pending_->quiet_cut = step;
}

void ServerScaling::CutOver(int64_t step, int64_t shard_map_version, absl::Time now) {
  done_.push_back(Done{pending_->from, pending_->to, step, shard_map_version, pending_->requested, now, {}});
  if (done_.size() > kMaxDone) done_.pop_front();
  pending_.reset();
}

bool ServerScaling::Resharded(int rank, const ReshardReport& report) {
  for (Done& d : done_) {
    if (d.shard_map_version != report.shard_map_version()) continue;
    if (rank < 0 || rank >= d.to) return false;
    ReshardReport kept = report;
    kept.set_server_rank(rank);
    return d.resharded.emplace(rank, std::move(kept)).second;
  }
  return false;
}

namespace {

absl::Status CheckCounts(absl::string_view what, int from, int to) {
  auto bad = [](int n) { return n < 1 || n > ServerScaling::kMaxServers; };
  if (bad(from) || bad(to) || from == to) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler state: ", what, " ", from, " -> ", to,
                                                   " servers; expected two different counts in [1, ",
                                                   ServerScaling::kMaxServers, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

void ServerScaling::Save(ServerScalingState* out) const {
  if (pending_.has_value()) {
    PendingScaleState* p = out->mutable_pending();
    p->set_from(pending_->from);
    p->set_to(pending_->to);
    p->set_requested_us(absl::ToUnixMicros(pending_->requested));
    if (pending_->after_cut.has_value()) p->set_after_cut(*pending_->after_cut);
    if (pending_->quiet_cut.has_value()) p->set_quiet_cut(*pending_->quiet_cut);
  }
  for (const Done& d : done_) {
    DoneScaleState* o = out->add_done();
    o->set_from(d.from);
    o->set_to(d.to);
    o->set_step(d.step);
    o->set_shard_map_version(d.shard_map_version);
    o->set_requested_us(absl::ToUnixMicros(d.requested));
    o->set_cut_over_us(absl::ToUnixMicros(d.cut_over));
    for (const auto& [rank, report] : d.resharded) *o->add_resharded() = report;
  }
}

absl::Status ServerScaling::Restore(const ServerScalingState& state) {
  std::optional<Pending> pending;
  if (state.has_pending()) {
    const PendingScaleState& p = state.pending();
    RETURN_IF_ERROR(CheckCounts("the pending change", p.from(), p.to()));
    const absl::Time requested = absl::FromUnixMicros(p.requested_us());
    pending = Pending{p.from(), p.to(), requested, std::nullopt, std::nullopt, requested};
    if (p.has_after_cut()) pending->after_cut = p.after_cut();
    if (p.has_after_cut() && p.has_quiet_cut()) {
      if (p.quiet_cut() <= p.after_cut()) {
        return absl::InvalidArgumentError(absl::StrCat("scheduler state: the pending change's quiet cut ",
                                                       p.quiet_cut(), " is not after the cut ", p.after_cut(),
                                                       " it was ready at"));
      }
      pending->quiet_cut = p.quiet_cut();
    }
  }
  std::deque<Done> done;
  for (const DoneScaleState& d : state.done()) {
    RETURN_IF_ERROR(CheckCounts("a change done", d.from(), d.to()));
    Done kept{d.from(),
              d.to(),
              d.step(),
              d.shard_map_version(),
              absl::FromUnixMicros(d.requested_us()),
              absl::FromUnixMicros(d.cut_over_us()),
              {}};
    for (const ReshardReport& r : d.resharded()) {
      if (r.server_rank() >= 0 && r.server_rank() < d.to()) kept.resharded.emplace(r.server_rank(), r);
    }
    done.push_back(std::move(kept));
    if (done.size() > kMaxDone) done.pop_front();
  }
  pending_ = pending;
  done_ = std::move(done);
  return absl::OkStatus();
}

}  // namespace scheduler
}  // namespace pstrain
