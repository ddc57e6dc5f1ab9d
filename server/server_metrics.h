// The parameter server's Prometheus metrics (common/metrics.h): which series exist, and the few
// calls that update them. Plain C++, no gRPC: the service (server/ps_service.h) meters its calls
// through ServerMetrics::Call, the store (server/parameter_store.h) times steps and checkpoints
// through StoreMetrics, and everything that is a state rather than an event (the step, parked
// calls, table rows, checkpoint age, bytes in flight) is read off the stores at scrape time by a
// collector, so it costs the request path nothing.
//
//   series (constant labels role="server", rank)            updated
//   pstrain_server_requests_total{method}                   handler start (1 atomic add)
//   pstrain_server_request_duration_seconds{method}         answer, OK or not (a parked call when
//                                                           it is released)
//   pstrain_server_received_bytes_total{shard}              when the call reaches a shard's store;
//   pstrain_server_sent_bytes_total{shard}                  shard="none": refused before that
//   pstrain_server_refused_requests_total{cause}            every non-OK answer, cause = the gRPC
//                                                           code in snake case
//   pstrain_server_step_wait_seconds{shard}                 SYNC step: first push to last push
//   pstrain_server_checkpoint_duration_seconds{shard}       each checkpoint file written
//   pstrain_server_checkpoints_written_total{shard}
//   pstrain_server_refused_pushes_total{reason,shard}       a push refused for what it holds:
//                                                           reason="grad_norm" (JobSpec.
//                                                           max_grad_norm_per_sample)
//   pstrain_server_step{shard,replica}                      scrape (collector)
//   pstrain_server_parked_calls{shard}                      scrape
//   pstrain_server_checkpoint_age_seconds{shard}            scrape; only after a first checkpoint
//   pstrain_server_last_checkpoint_timestamp_seconds{shard}
//   pstrain_server_table_rows{table,shard}                  scrape
//   pstrain_server_table_bytes{table,shard}                 scrape
//   pstrain_server_table_admitted_rows_total{table,shard}   scrape: rows created by updates
//   pstrain_server_table_refused_updates_total{table,shard} scrape: key updates dropped, the key
//                                                           not admitted (TableSpec.admission)
//   pstrain_server_table_evicted_rows_total{table,shard}    scrape: rows that left (eviction)
//   pstrain_server_table_tombstones{table,shard}            scrape: tombstones since the last checkpoint
//   pstrain_server_inflight_requests                        scrape: requests - answers
//   pstrain_server_inflight_bytes                           scrape: server/inflight_budget.h
//
// Bytes are the serialized sizes of the tensor methods' messages (Pull, Push, PushPull), counted
// at the same points as the service's TransportCounters (the log line "received N bytes ..."), so
// the sum over shards equals its totals. Replica lag is not a series: a server cannot see its
// peer's step, but both export pstrain_server_step for the shard, so a query can subtract them
// (max by (shard) (pstrain_server_step{replica="false"}) - on (shard) pstrain_server_step{replica="true"}).
//
// Thread safety: every method may be called from any thread. Updates are relaxed atomics on
// series cached at construction (SetShards for the shard series); no lock is taken per request.
#ifndef PSTRAIN_SERVER_SERVER_METRICS_H_
#define PSTRAIN_SERVER_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "proto/scheduler.pb.h"

namespace pstrain::server {

class ParameterStore;

// What a store updates itself; each pointer may be null (then that event is not recorded).
// Borrowed: the series live as long as their registry.
struct StoreMetrics {
  metrics::Histogram* step_wait = nullptr;            // SYNC: first push to last push of a step
  metrics::Histogram* checkpoint_duration = nullptr;  // writing one checkpoint file
  metrics::Counter* checkpoints_written = nullptr;
  metrics::Gauge* last_checkpoint_time = nullptr;  // Unix seconds of the newest file written
  metrics::Counter* refused_grad_norm = nullptr;   // pushes above max_grad_norm_per_sample
};

enum class RpcMethod { kPull = 0, kPush, kPushPull, kFinishEpoch };
inline constexpr int kNumRpcMethods = 4;

class ServerMetrics {
 public:
  // Where a call's bytes are counted: the server's own shard, the copy it holds, or no store
  // (refused before its shard was known).
  enum Slot { kOwn = 0, kReplica, kNone };

  // Adds the server's families and a collector to `registry`, which is borrowed and must outlive
  // this object; this object must outlive every Render of the registry (the collector reads it).
  explicit ServerMetrics(metrics::Registry* registry);
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  metrics::Registry* registry() const { return registry_; }

  // The shard series: `own` is the server's shard, `replica` the copy it holds, if any. Before
  // it every call counts as kNone. REQUIRES: the first call comes before any call is routed to kOwn
  // or kReplica (the service calls it before publishing its stores); a later one (the job changed
  // its server count) switches the slots to the new shards' series.
  void SetShards(int own, std::optional<int> replica);
  // The store-side series of `shard`.
  StoreMetrics ForShard(int shard);

  // The stores the collector reads at each scrape; `replica` may be null; `inflight_bytes` (may be
  // empty) says what calls hold. All borrowed until Unwatch, which the owner must call before
  // destroying them.
  void Watch(const ParameterStore* own, const ParameterStore* replica,
             std::function<int64_t()> inflight_bytes = nullptr);
  // Reads the stores a last time and forgets them: later scrapes show those final values.
  void Unwatch();

  // One call's accounting, from its handler to its answer. Copyable (a callback carries it); each
  // call must end in exactly one Answered or Refused.
  class Call {
   public:
    // Counts the request (requests_total) and starts its clock. `request_bytes` are counted for a
    // shard by Route, or for none by Refused before a Route.
    Call(ServerMetrics* metrics, RpcMethod method, int64_t request_bytes);
    // The request reached the store of `slot`.
    void Route(Slot slot);
    // Answered OK with a response of `response_bytes` (0 where none is counted).
    void Answered(int64_t response_bytes) const;
    // Answered with `code` (not OK).
    void Refused(absl::StatusCode code);

   private:
    ServerMetrics* metrics_;
    RpcMethod method_;
    int64_t request_bytes_;
    int64_t start_ns_;
    Slot slot_ = kNone;
    bool routed_ = false;
  };

  // A call the transport refused for its session before any handler ran (its request was not
  // read): counted under refused_requests_total only.
  void RefusedUnread(absl::StatusCode code);

  // What the heartbeat reports (HeartbeatRequest.traffic): the sums of the series above.
  ServerTraffic Traffic() const;

  // Series values, for tests and logs.
  double received_bytes(Slot slot) const { return ValueOf(received_[slot].load()); }
  double sent_bytes(Slot slot) const { return ValueOf(sent_[slot].load()); }
  double requests(RpcMethod method) const { return requests_[static_cast<int>(method)]->value(); }
  double refused(absl::StatusCode code) const;

 private:
  // The scrape-time series (see the file comment).
  void Collect();
  void CollectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  metrics::Registry* const registry_;

  static double ValueOf(const metrics::Counter* c) { return c == nullptr ? 0 : c->value(); }

  // Constant after construction.
  std::array<metrics::Counter*, kNumRpcMethods> requests_{};
  std::array<metrics::Histogram*, kNumRpcMethods> duration_{};
  // The shard slots: set by SetShards, again when the job changes its server count while calls
  // run (a server's copy then holds another shard).
  std::array<std::atomic<metrics::Counter*>, 3> received_{};
  std::array<std::atomic<metrics::Counter*>, 3> sent_{};
  // By absl::StatusCode value; [0] (OK) stays null.
  std::array<metrics::Counter*, 17> refused_{};
  metrics::CounterFamily* received_family_;
  metrics::CounterFamily* sent_family_;
  metrics::HistogramFamily* step_wait_;
  metrics::HistogramFamily* checkpoint_duration_;
  metrics::CounterFamily* checkpoints_written_;
  metrics::CounterFamily* refused_pushes_;
  metrics::GaugeFamily* last_checkpoint_time_;
  metrics::GaugeFamily* checkpoint_age_;
  metrics::GaugeFamily* step_;
  metrics::GaugeFamily* parked_;
  metrics::GaugeFamily* table_rows_;
  metrics::GaugeFamily* table_bytes_;
  metrics::CounterFamily* table_admitted_;
  metrics::CounterFamily* table_refused_;
  metrics::CounterFamily* table_evicted_;
  metrics::GaugeFamily* table_tombstones_;
  metrics::Gauge* inflight_requests_;
  metrics::Gauge* inflight_bytes_;

  absl::Mutex mu_;  // only the collector and Watch take it, never a request
  const ParameterStore* own_ ABSL_GUARDED_BY(mu_) = nullptr;
  const ParameterStore* replica_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::function<int64_t()> inflight_bytes_source_ ABSL_GUARDED_BY(mu_);
};

// "invalid_argument" for INVALID_ARGUMENT etc.: the `cause` label of a refused call.
std::string RefusalCause(absl::StatusCode code);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SERVER_METRICS_H_
