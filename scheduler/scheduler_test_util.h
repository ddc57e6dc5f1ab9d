// Helpers shared by the unit tests of the scheduler core (scheduler_test, scheduler_replica_test,
// scheduler_restart_test): a job over a one-tensor model small enough to reason about, and the
// requests the tests send. Test-only.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_TEST_UTIL_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "proto/scheduler.pb.h"
#include "scheduler/scheduler.h"
#include "scheduler/shard_map.h"

namespace pstrain::scheduler::test_util {

// Options for `job` (after ApplyJobDefaults) over one tensor "w" of `elements` floats, split
// across job.num_servers() servers; a role is dead after 3 s of silence; time comes from `clock`.
inline Scheduler::Options TinyJobOptions(JobSpec job, int64_t elements, int64_t train_samples, int64_t test_samples,
                                         int64_t total_steps, std::function<absl::Time()> clock) {
  ApplyJobDefaults(&job);
  TensorSpec t;
  t.set_name("w");
  t.add_shape(elements);
  t.set_num_elements(elements);
  Scheduler::Options options;
  options.shard_map = *BuildShardMap({t}, job.num_servers(), 1024);
  options.job = std::move(job);
  options.train_samples = train_samples;
  options.test_samples = test_samples;
  options.total_steps = total_steps;
  options.dead_after = absl::Seconds(3);
  options.clock = std::move(clock);
  return options;
}

// Worker `rank`'s last report: it has finished the job.
inline ProgressReport DoneReport(int rank) {
  ProgressReport r;
  r.set_worker_rank(rank);
  r.set_done(true);
  return r;
}

inline RegisterRequest Reg(Role role, const std::string& address) {
  RegisterRequest r;
  r.set_role(role);
  r.set_address(address);
  return r;
}

inline HeartbeatRequest Hb(Role role, int rank) {
  HeartbeatRequest hb;
  hb.set_role(role);
  hb.set_rank(rank);
  return hb;
}

// Worker `rank`'s training lease request to `s` (ASYNC/SSP), expected OK; an empty answer otherwise.
inline LeaseResponse LeaseFor(Scheduler* s, int rank) {
  LeaseRequest r;
  r.set_worker_rank(rank);
  absl::StatusOr<LeaseResponse> lease = s->LeaseWork(r);
  EXPECT_TRUE(lease.ok()) << lease.status();
  return lease.value_or(LeaseResponse());
}

// Server `server_rank`'s heartbeat confirming that it applied the batches `report` says its
// worker pushed (what a server reports once an honest worker's pushes reached it).
inline HeartbeatRequest ConfirmedBy(int server_rank, const ProgressReport& report) {
  HeartbeatRequest hb = Hb(SERVER, server_rank);
  AppliedLeases* applied = hb.mutable_applied_leases();
  applied->set_data_epoch(report.epoch());
  for (const LeaseProgress& p : report.leases()) {
    applied->add_lease_ids(p.lease_id());
    applied->add_batches(p.batches_done());
  }
  return hb;
}

}  // namespace pstrain::scheduler::test_util

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_TEST_UTIL_H_
