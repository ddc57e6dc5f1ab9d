// The scheduler's components to and from their persistent form (proto/scheduler_state.proto):
// Membership, BarrierSet, LeasePool, EvalPool and Progress. Each Restore checks what it reads
// before it changes anything, so a state that does not fit gives INVALID_ARGUMENT and leaves the
// component as it was. The Scheduler's own fields are in scheduler/scheduler_state.cc.
#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "scheduler/barrier.h"
#include "scheduler/eval_pool.h"
#include "scheduler/lease_pool.h"
#include "scheduler/membership.h"
#include "scheduler/progress.h"

namespace pstrain {
namespace scheduler {
namespace {

absl::Status Bad(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("scheduler state, ", where, ": ", what));
}

MemberChange ToProto(ChangeKind kind) {
  switch (kind) {
    case ChangeKind::kJoined:
      return MEMBER_JOINED;
    case ChangeKind::kDied:
      return MEMBER_DIED;
    case ChangeKind::kLeft:
      return MEMBER_LEFT;
  }
  return MEMBER_CHANGE_UNSPECIFIED;
}

absl::StatusOr<ChangeKind> FromProto(MemberChange kind, absl::string_view where) {
  switch (kind) {
    case MEMBER_JOINED:
      return ChangeKind::kJoined;
    case MEMBER_DIED:
      return ChangeKind::kDied;
    case MEMBER_LEFT:
      return ChangeKind::kLeft;
    default:
      return Bad(where, absl::StrCat("change kind ", static_cast<int>(kind), ", expected joined, died or left"));
  }
}

// Bools packed one per byte, for the counted steps and leases.
std::string PackBools(const std::vector<bool>& bits) {
  std::string out(bits.size(), '\0');
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bits[i] ? 1 : 0;
  return out;
}

std::vector<bool> UnpackBools(const std::string& bytes) {
  std::vector<bool> bits(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) bits[i] = bytes[i] != 0;
  return bits;
}

}  // namespace

// --- Membership ---

MembershipState Membership::ToProto() const {
  MembershipState state;
  state.set_epoch(epoch_);
  state.set_running(running_);
  state.set_next_worker_rank(next_worker_rank_);
  state.set_forgotten_workers(forgotten_workers_);
  for (Role role : {SERVER, WORKER}) {
    for (const auto& [rank, m] : *MembersOf(role)) {
      MemberState* out = role == SERVER ? state.add_servers() : state.add_workers();
      out->set_rank(rank);
      out->set_address(m.address);
      out->set_instance_id(m.instance_id);
      *out->mutable_local() = m.local;
      out->set_metrics_address(m.metrics_address);
      out->set_registered_us(absl::ToUnixMicros(m.registered));
      out->set_heard(m.heard);
      out->set_live(m.live);
      out->set_removed(scheduler::ToProto(m.removed));
    }
  }
  for (const MembershipEvent& e : events_) {
    MembershipEventState* out = state.add_events();
    out->set_at_us(absl::ToUnixMicros(e.at));
    out->set_role(e.role);
    out->set_rank(e.rank);
    out->set_kind(scheduler::ToProto(e.kind));
    out->set_epoch(e.epoch);
  }
  *state.mutable_shard_map() = options_.shard_map;
  return state;
}

absl::Status Membership::Restore(const MembershipState& state, absl::Time now) {
  if (state.epoch() < 1) return Bad("membership", absl::StrCat("epoch ", state.epoch(), ", expected >= 1"));
  // States written before MemberState.rank index their members by rank.
  const bool ranked = state.next_worker_rank() > 0;
  std::map<int, Member> members[2];
  for (Role role : {SERVER, WORKER}) {
    const auto& in = role == SERVER ? state.servers() : state.workers();
    for (int i = 0; i < in.size(); ++i) {
      const MemberState& m = in[i];
      const int rank = ranked ? m.rank() : i;
      const std::string where = absl::StrCat("membership, ", RoleName(role), " ", rank);
      if (rank < 0) return Bad(where, "negative rank, expected >= 0");
      if (members[role == SERVER ? 0 : 1].count(rank) > 0) return Bad(where, "the rank is listed twice");
      if (role == WORKER && ranked && rank >= state.next_worker_rank()) {
        return Bad(where, absl::StrCat("rank not handed out yet (next_worker_rank ", state.next_worker_rank(), ")"));
      }
      Member member;
      member.address = m.address();
      member.instance_id = m.instance_id();
      member.local = m.local();
      member.metrics_address = m.metrics_address();
      member.registered = absl::FromUnixMicros(m.registered_us());
      // Heartbeat times are not kept: a member that was watched gets dead_after from now.
      member.last_heartbeat = now;
      member.heard = m.heard();
      member.live = m.live();
      if (!m.live()) {
        absl::StatusOr<ChangeKind> kind = FromProto(m.removed(), where);
        if (!kind.ok()) return kind.status();
        member.removed = *kind;
      }
      members[role == SERVER ? 0 : 1][rank] = std::move(member);
    }
  }
  std::vector<MembershipEvent> events;
  for (int i = 0; i < state.events_size(); ++i) {
    const MembershipEventState& e = state.events(i);
    absl::StatusOr<ChangeKind> kind = FromProto(e.kind(), absl::StrCat("membership event ", i));
    if (!kind.ok()) return kind.status();
    events.push_back(MembershipEvent{absl::FromUnixMicros(e.at_us()), e.role(), e.rank(), *kind, e.epoch()});
  }
  servers_ = std::move(members[0]);
  workers_ = std::move(members[1]);
  next_worker_rank_ = ranked ? state.next_worker_rank() : state.workers_size();
  forgotten_workers_ = state.forgotten_workers();
  events_ = std::move(events);
  epoch_ = state.epoch();
  running_ = state.running();
  return absl::OkStatus();
}

// --- BarrierSet ---

std::vector<BarrierState> BarrierSet::Released() const {
  std::vector<BarrierState> released;
  for (const auto& [name, barrier] : barriers_) {
    if (!barrier.released) continue;
    BarrierState state;
    state.set_name(name);
    state.set_group(barrier.group);
    released.push_back(std::move(state));
  }
  std::sort(released.begin(), released.end(),
            [](const BarrierState& a, const BarrierState& b) { return a.name() < b.name(); });
  return released;
}

void BarrierSet::RestoreReleased(const std::vector<BarrierState>& released) {
  barriers_.clear();
  for (const BarrierState& state : released) {
    Barrier& barrier = barriers_[state.name()];
    barrier.group = state.group() == BarrierRequest::ALL ? BarrierRequest::ALL : BarrierRequest::WORKERS;
    barrier.released = true;
  }
}

// --- LeasePool ---

LeasePoolState LeasePool::ToProto() const {
  LeasePoolState state;
  state.set_epoch(epoch_);
  state.set_next_position(next_position_);
  state.set_batches_leased(batches_leased_);
  state.set_epoch_first(EpochFirstKept() - first_id_);
  state.set_first_lease_id(first_id_);
  for (int64_t upto : reports_count_upto_) state.add_reports_count_upto(upto);
  for (const auto& [rank, batches] : handed_) {
    HandedBatches* out = state.add_handed();
    out->set_worker_rank(rank);
    out->set_batches(batches);
  }
  for (const LeaseRecord& r : leases_) {
    LeaseState* out = state.add_leases();
    out->set_id(r.id);
    out->set_epoch(r.epoch);
    out->set_begin(r.begin);
    out->set_end(r.end);
    out->set_batches(r.batches);
    out->set_batches_done(r.batches_done);
    out->set_holder(r.holder);
    for (int h : r.holders) out->add_holders(h);
    for (int64_t a : r.applied) out->add_applied(a);
    out->set_done(r.done);
  }
  return state;
}

absl::Status LeasePool::Restore(const LeasePoolState& state) {
  if (state.epoch() < 0 || state.epoch() >= options_.epochs) {
    return Bad("lease pool", absl::StrCat("epoch ", state.epoch(), ", expected 0..", options_.epochs - 1));
  }
  if (state.next_position() < 0 || state.next_position() > train_samples_) {
    return Bad("lease pool", absl::StrCat("next position ", state.next_position(), ", expected 0..", train_samples_));
  }
  if (state.first_lease_id() < 0) {
    return Bad("lease pool", absl::StrCat("first lease id ", state.first_lease_id(), ", expected 1 or more"));
  }
  const int64_t first_id = std::max<int64_t>(1, state.first_lease_id());
  if (state.epoch_first() < 0 || state.epoch_first() > state.leases_size()) {
    return Bad("lease pool", absl::StrCat("current epoch starts at lease index ", state.epoch_first(), ", expected 0..",
                                          state.leases_size()));
  }
  std::deque<LeaseRecord> leases;
  int64_t incomplete = 0;
  std::set<int64_t> remainders;
  std::map<int, int64_t> handed;
  for (int i = 0; i < state.leases_size(); ++i) {
    const LeaseState& l = state.leases(i);
    const std::string where = absl::StrCat("lease pool, lease ", l.id());
    if (l.id() != first_id + i) return Bad(where, absl::StrCat("at index ", i, ", expected id ", first_id + i));
    if (l.epoch() < 0 || l.epoch() > state.epoch() || l.begin() < 0 || l.end() < l.begin() ||
        l.end() > train_samples_ || l.batches_done() < 0 || l.batches_done() > l.batches()) {
      return Bad(where, absl::StrCat("epoch ", l.epoch(), ", positions [", l.begin(), ", ", l.end(), "), ",
                                     l.batches_done(), " of ", l.batches(),
                                     " batches done: does not fit the job or the pool's epoch ", state.epoch()));
    }
    LeaseRecord r;
    r.id = l.id();
    r.epoch = l.epoch();
    r.begin = l.begin();
    r.end = l.end();
    r.batches = l.batches();
    r.batches_done = l.batches_done();
    r.holder = l.holder();
    r.holders.assign(l.holders().begin(), l.holders().end());
    if (l.applied_size() == 0) {
      // Written before servers confirmed leases: the workers' reports were what completed them.
      r.applied.assign(static_cast<size_t>(num_servers_), l.batches_done());
      r.done = l.batches_done() == l.batches();
    } else if (l.applied_size() != num_servers_) {
      return Bad(where,
                 absl::StrCat(l.applied_size(), " servers' confirmations, the job has ", num_servers_, " servers"));
    } else {
      for (int64_t a : l.applied()) {
        if (a < 0 || a > l.batches()) {
          return Bad(where, absl::StrCat(a, " batches applied on a server, expected 0..", l.batches()));
        }
      }
      r.applied.assign(l.applied().begin(), l.applied().end());
      r.done = l.done();
    }
    if (i >= state.epoch_first() && !r.complete()) {
      ++incomplete;
      if (r.holder < 0) remainders.insert(r.id);
    }
    if (state.first_lease_id() == 0) {
      for (int holder : r.holders) handed[holder] += r.batches;
    }
    leases.push_back(std::move(r));
  }
  for (const HandedBatches& h : state.handed()) {
    if (state.first_lease_id() == 0) break;
    if (h.batches() < 0) {
      return Bad("lease pool",
                 absl::StrCat(h.batches(), " batches handed to worker ", h.worker_rank(), ", expected 0 or more"));
    }
    handed[h.worker_rank()] = h.batches();
  }
  epoch_ = state.epoch();
  next_position_ = state.next_position();
  batches_leased_ = state.batches_leased();
  leases_ = std::move(leases);
  first_id_ = first_id;
  epoch_first_id_ = first_id + state.epoch_first();
  incomplete_ = incomplete;
  remainders_ = std::move(remainders);
  handed_ = std::move(handed);
  report_from_.assign(static_cast<size_t>(num_servers_), 1);
  counts_.assign(static_cast<size_t>(num_servers_), true);  // The Scheduler sets the dead ones'.
  reports_count_upto_.assign(state.reports_count_upto().begin(), state.reports_count_upto().end());
  reports_count_upto_.resize(static_cast<size_t>(num_servers_), 0);
  return absl::OkStatus();
}

// --- EvalPool ---

EvalPoolState EvalPool::ToProto() const {
  EvalPoolState state;
  for (const Slot& slot : slots_) {
    EvalSlotState* out = state.add_slots();
    out->set_epoch(slot.epoch);
    out->set_begin(slot.begin);
    out->set_end(slot.end);
    out->set_status(slot.state == State::kFree  ? EVAL_SLOT_FREE
                    : slot.state == State::kOut ? EVAL_SLOT_OUT
                                                : EVAL_SLOT_REPORTED);
    out->set_holder(slot.holder);
    if (slot.state == State::kReported) *out->mutable_result() = slot.result;
  }
  for (const auto& [epoch, pool] : epochs_) {
    EvalEpochState* out = state.add_epochs();
    out->set_epoch(epoch);
    out->set_first(static_cast<int64_t>(pool.first));
    out->set_count(static_cast<int64_t>(pool.count));
    *out->mutable_scores() = pool.scores.ToProto();
  }
  return state;
}

absl::Status EvalPool::Restore(const EvalPoolState& state) {
  std::vector<Slot> slots;
  for (const EvalSlotState& s : state.slots()) {
    Slot slot;
    slot.epoch = s.epoch();
    slot.begin = s.begin();
    slot.end = s.end();
    slot.state = s.status() == EVAL_SLOT_OUT        ? State::kOut
                 : s.status() == EVAL_SLOT_REPORTED ? State::kReported
                                                    : State::kFree;
    slot.holder = s.holder();
    slot.result = s.result();
    slots.push_back(std::move(slot));
  }
  std::map<int, EpochPool> epochs;
  for (const EvalEpochState& e : state.epochs()) {
    if (e.epoch() < 0 || e.epoch() >= options_.epochs || e.first() < 0 || e.count() < 0 ||
        e.first() + e.count() > static_cast<int64_t>(slots.size())) {
      return Bad("evaluation pool", absl::StrCat("epoch ", e.epoch(), " has slots [", e.first(), ", ",
                                                 e.first() + e.count(), "), expected an epoch below ", options_.epochs,
                                                 " and slots within the ", slots.size(), " kept"));
    }
    EpochPool pool;
    pool.first = static_cast<size_t>(e.first());
    pool.count = static_cast<size_t>(e.count());
    for (size_t i = pool.first; i < pool.first + pool.count; ++i) {
      pool.reported += slots[i].state == State::kReported ? 1 : 0;
    }
    if (absl::Status s = pool.scores.Restore(e.scores()); !s.ok()) return s;
    epochs[e.epoch()] = std::move(pool);
  }
  slots_ = std::move(slots);
  epochs_ = std::move(epochs);
  return absl::OkStatus();
}

// --- Progress ---

ProgressState Progress::ToProto() const {
  ProgressState state;
  if (start_.has_value()) state.set_start_us(absl::ToUnixMicros(*start_));
  state.set_last_epoch_end_us(absl::ToUnixMicros(last_epoch_end_));
  if (finished_at_.has_value()) state.set_finished_at_us(absl::ToUnixMicros(*finished_at_));
  for (const auto& [epoch, data] : epochs_) {
    ProgressEpochState* out = state.add_epochs();
    out->set_epoch(epoch);
    out->set_train_loss_sum(data.train_loss_sum);
    out->set_train_samples(data.train_samples);
    out->set_applied_samples(data.applied_samples);
    out->set_complete(data.complete);
    out->set_seconds(data.seconds);
    *out->mutable_step_times() = data.step_times;
    if (data.complete) out->set_end_us(absl::ToUnixMicros(data.end));
  }
  state.set_counted_steps(PackBools(counted_steps_));
  state.set_counted_leases(PackBools(counted_leases_));
  *state.mutable_eval() = eval_.ToProto();
  for (const auto& [rank, worker] : workers_) {
    ProgressWorkerState* out = state.add_workers();
    out->set_rank(rank);
    out->set_samples(worker.samples);
    out->set_done(worker.done);
    out->set_step(worker.step);
    *out->mutable_traffic() = worker.traffic;
    *out->mutable_staleness() = worker.staleness;
  }
  state.set_forgotten_workers(forgotten_workers_);
  if (forgotten_workers_ > 0) {
    ProgressWorkerState* out = state.mutable_forgotten();
    out->set_samples(forgotten_.samples);
    *out->mutable_traffic() = forgotten_.traffic;
    *out->mutable_staleness() = forgotten_.staleness;
  }
  state.set_max_epoch(max_epoch_);
  state.set_max_step(max_step_);
  state.set_batches(batches_);
  for (const auto& [loss_sum, samples] : recent_) {
    RecentLoss* out = state.add_recent();
    out->set_loss_sum(loss_sum);
    out->set_samples(samples);
  }
  return state;
}

absl::Status Progress::Restore(const ProgressState& state) {
  std::map<int, Epoch> epochs;
  for (const ProgressEpochState& e : state.epochs()) {
    if (e.epoch() < 0 || e.epoch() >= job().epochs()) {
      return Bad("progress", absl::StrCat("epoch ", e.epoch(), ", expected 0..", job().epochs() - 1));
    }
    Epoch& data = epochs[e.epoch()];
    data.train_loss_sum = e.train_loss_sum();
    data.train_samples = e.train_samples();
    data.applied_samples = e.applied_samples();
    data.complete = e.complete();
    data.seconds = e.seconds();
    data.step_times = e.step_times();
    if (e.has_end_us()) data.end = absl::FromUnixMicros(e.end_us());
  }
  std::map<int, Worker> workers;
  for (const ProgressWorkerState& w : state.workers()) {
    if (w.rank() < 0) return Bad("progress", absl::StrCat("worker rank ", w.rank(), ", expected >= 0"));
    Worker& worker = workers[w.rank()];
    worker.samples = w.samples();
    worker.done = w.done();
    worker.step = w.step();
    worker.traffic = w.traffic();
    worker.staleness = w.staleness();
  }
  // The evaluation pool last: its Restore changes nothing when it fails, and nothing fails after it.
  if (absl::Status s = eval_.Restore(state.eval()); !s.ok()) return s;
  start_.reset();
  if (state.has_start_us()) start_ = absl::FromUnixMicros(state.start_us());
  last_epoch_end_ = absl::FromUnixMicros(state.last_epoch_end_us());
  finished_at_.reset();
  if (state.has_finished_at_us()) finished_at_ = absl::FromUnixMicros(state.finished_at_us());
  epochs_ = std::move(epochs);
  counted_steps_ = UnpackBools(state.counted_steps());
  counted_leases_ = UnpackBools(state.counted_leases());
  workers_ = std::move(workers);
  forgotten_workers_ = state.forgotten_workers();
  forgotten_ = Worker();
  forgotten_.samples = state.forgotten().samples();
  forgotten_.traffic = state.forgotten().traffic();
  forgotten_.staleness = state.forgotten().staleness();
  max_epoch_ = state.max_epoch();
  max_step_ = state.max_step();
  batches_ = state.batches();
  recent_.clear();
  for (const RecentLoss& r : state.recent()) recent_.emplace_back(r.loss_sum(), r.samples());
  return absl::OkStatus();
}

}  // namespace scheduler
}  // namespace pstrain
