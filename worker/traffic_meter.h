// The worker's parameter traffic: bytes sent to and received from each server, bytes compression
// saved on pushes, and calls sent again after a refusal. Kept twice, as Prometheus counters (by
// server, by code) and as running totals that progress reports take deltas of
// (ProgressReport.traffic), so the scheduler's summary and a scrape agree exactly.
//
// The transport counts (worker/ps_client.h: the serialized size of each request it sends, each
// attempt included, and of each answer it decodes); the training session only reads totals().
//
// Thread-safe: gRPC threads add while the session reads. Each Add is two relaxed atomic adds.
#ifndef PSTRAIN_WORKER_TRAFFIC_METER_H_
#define PSTRAIN_WORKER_TRAFFIC_METER_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics.h"

namespace pstrain::worker {

class TrafficMeter {
 public:
  struct Totals {
    int64_t bytes_sent = 0;
    int64_t bytes_received = 0;
    int64_t compression_saved_bytes = 0;
  };

  // Registers the pstrain_worker_{sent,received}_bytes_total{server},
  // pstrain_worker_compression_saved_bytes_total and pstrain_worker_retries_total{code} families
  // on `registry` (borrowed; must outlive this meter). Servers 0 .. num_servers - 1 get their
  // series now; a higher rank (a view that grew) gets one on first use.
  TrafficMeter(metrics::Registry* registry, int num_servers);

  // A request of `bytes` sent to `server` (again, for a retry); `saved` bytes smaller than its
  // gradient would be as float32 (0 without compression).
  void Sent(int server, int64_t bytes, int64_t saved = 0);
  // An answer of `bytes` received from `server`.
  void Received(int server, int64_t bytes);
  // A call or a step sent again after the answer `code` (RESOURCE_EXHAUSTED backpressure, a
  // step refused by a membership change, ...).
  void Retried(absl::StatusCode code);

  Totals totals() const;

 private:
  metrics::Counter* ServerCounter(metrics::CounterFamily* family, const std::vector<metrics::Counter*>& cached,
                                  int server);

  metrics::CounterFamily* const sent_family_;
  metrics::CounterFamily* const received_family_;
  metrics::CounterFamily* const retries_family_;
  metrics::Counter* const saved_;
  // By server rank, filled at construction (read-only afterwards, so lock-free to read).
  std::vector<metrics::Counter*> sent_;
  std::vector<metrics::Counter*> received_;
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> bytes_received_{0};
  std::atomic<int64_t> saved_bytes_{0};
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_TRAFFIC_METER_H_
