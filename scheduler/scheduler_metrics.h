// The scheduler's Prometheus metrics, read off the Scheduler's state at each scrape:
//
//   pstrain_scheduler_job_state{state}                 1 for the job's state (WAITING, RUNNING,
//                                                      FINISHED, FAILED), 0 for the others
//   pstrain_scheduler_membership_epoch                 bumped by every change of the live set
//   pstrain_scheduler_shard_map_version                bumped by every change of the server count
//   pstrain_scheduler_map_servers                      servers in the shard map
//   pstrain_scheduler_server_count_changes_total       changes of the server count cut over
//   pstrain_scheduler_rows_moved_total, _bytes_moved_total  rows and bytes whose server those
//                                                      changes changed (as the servers reported)
//   pstrain_scheduler_last_change_pause_seconds        the longest pause a server reported for the
//                                                      newest change
//   pstrain_scheduler_live_members{member_role}        live servers and workers (not {role}: that
//                                                      is the constant label role="scheduler")
//   pstrain_scheduler_membership_events_total{kind}    joined / died / left since the job ran
//   pstrain_scheduler_leases_outstanding{kind}         training / evaluation leases out
//   pstrain_scheduler_epoch, _step, _total_steps       where training is
//   pstrain_scheduler_epoch_progress_ratio             0..1 within the current epoch (from steps)
//   pstrain_scheduler_train_loss                       mean loss of the latest reports
//   pstrain_scheduler_test_loss, _test_accuracy        of the last complete evaluated epoch
//   pstrain_scheduler_progressive_auc                  of the last complete epoch with training scores
//   pstrain_scheduler_samples_per_second               over the whole run
//   pstrain_scheduler_eta_seconds                      estimated time left
//   pstrain_scheduler_barriers_waiting                 barriers waiting for participants
//   pstrain_scheduler_barriers_stuck                   of those, waiting longer than expected
//   pstrain_scheduler_stream_records{kind}             a data stream's records: ready, trained
//   pstrain_scheduler_stream_lag_records, _lag_files   ready and not trained yet (and their files)
//   pstrain_scheduler_stream_files_ready               files taken in
//   pstrain_scheduler_stream_progressive_auc{over}     progressive AUC over the window of the
//                                                      newest files (over="window"), and of the
//                                                      newest file whose records are all trained
//                                                      (over="last_file")
//   pstrain_scheduler_stream_progressive_logloss{over}  the same, mean log loss
//
// Unknown values (no test loss yet) are not exported until known: the series is absent rather
// than NaN. Thread-safe.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_METRICS_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_METRICS_H_

#include <memory>

#include "common/metrics.h"
#include "scheduler/scheduler.h"
#include "scheduler/status_json.h"

namespace pstrain {
namespace scheduler {

class SchedulerMetrics {
 public:
  // Adds the families above and a collector to `registry`, which must outlive every scrape (the
  // collector stays in it; after this object is gone it does nothing and the gauges keep their
  // last values, so a scrape during the process's linger still reads the final numbers).
  explicit SchedulerMetrics(metrics::Registry* registry);
  ~SchedulerMetrics();
  SchedulerMetrics(const SchedulerMetrics&) = delete;
  SchedulerMetrics& operator=(const SchedulerMetrics&) = delete;

  // Reads `scheduler` at every scrape until Detach (or destruction); borrowed until then.
  void Attach(const Scheduler* scheduler);
  // Stops reading the scheduler after taking its numbers one last time. Idempotent.
  void Detach();

  // Sets the gauges from `status` (what a scrape does with the scheduler's status). For tests.
  void Update(const DashboardStatus& status);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_METRICS_H_
