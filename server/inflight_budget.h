// How much memory the calls a parameter server holds may take, and the check each call passes
// before the server works on it. Plain C++: server/ps_service.h asks it at the start of every
// tensor call and turns its answers into gRPC statuses.
//
// Two bounds, both derived from the job (RequestLimitsForJob), so that no legitimate request of
// the job is ever refused while a caller with valid credentials cannot make the server hold
// more than a job's worth of bytes:
//
//   a request of N bytes        N > max_request_bytes          -> INVALID_ARGUMENT, never retried
//   a call holding B bytes      in flight + B > max_inflight   -> RESOURCE_EXHAUSTED, retry after
//   (its request, the answer     (and something is in flight)     retry_after; nothing changed
//    buffer it will fill)        else                          -> admitted: a Ticket holds B until
//                                                                 the call is finished
//
// A call is always admitted when nothing else is in flight, so a bound set too low can slow a job
// down but never stall it. Calls that only read (pulls) may together hold at most half the bound:
// SYNC pulls park until a step's pushes arrive, so pulls alone must never keep out the pushes that
// would release them.
//
// Until SetLimits no bound applies (the server learns the job only after it listens; until then
// its calls are refused as not ready anyway).
//
// Thread safety: every method may be called from any thread; Admit and the Tickets' release use
// atomics only and never block.
#ifndef PSTRAIN_SERVER_INFLIGHT_BUDGET_H_
#define PSTRAIN_SERVER_INFLIGHT_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"

namespace pstrain::server {

struct RequestLimits {
  // The largest request (serialized bytes) a call may carry; 0: no limit.
  int64_t max_request_bytes = 0;
  // The bytes all admitted calls together may hold; 0: no limit.
  int64_t max_inflight_bytes = 0;
  // A usual push: as max_request_bytes, but with one embedding key per sample per table (a Criteo
  // record's) instead of the allowance. What a server keeps of freed memory for reuse is bounded by
  // it (server_runner.cc): the worst case of a sparse job is far above what it sends (308 MB
  // against 4 MB for the default CTR job), and would let a server keep that much.
  int64_t typical_request_bytes = 0;
};

// Embedding keys one sample may bring to one table, in the allowance for sparse rows: a Criteo
// sample has one key per table, a libsvm line as many as it has features. A push whose rows
// exceed it is refused only if the whole message also exceeds the dense part's limit.
inline constexpr int64_t kKeysPerSampleAllowance = 64;
// Bytes added to every request limit: the scalar fields, chunk headers' slack, a pull's keys.
inline constexpr int64_t kRequestHeadroomBytes = 1 << 20;

// The limits for a server hosting `shards` (its own; with JobSpec.replicas = 2 also the copy of
// the shard before it) of `job` (defaults applied) laid out by `shard_map`:
// - max_request_bytes: the largest push the job's workers can send to one of these shards: every
//   float of the shard at the job's compression's worst case (float32; top-k's index + value
//   pairs when they take more), plus the embedding rows one push can carry (the push's samples,
//   SYNC the global batch, x kKeysPerSampleAllowance keys x (key + row + the key asked back) per
//   table), plus 1/8 and kRequestHeadroomBytes.
// - typical_request_bytes: the same with one key per sample per table; equal without tables.
// - max_inflight_bytes: every worker the job may admit (JobSpec.max_workers, plus one evaluator)
//   holding two such requests and a whole answer per hosted shard at once: a SYNC step's pushes
//   parked together, with a retry or a backup push beside each.
RequestLimits RequestLimitsForJob(const JobSpec& job, const ShardMap& shard_map, const std::vector<int>& shards);

class InflightBudget {
 public:
  // Holds an admitted call's bytes until destroyed (when the call is finished). Movable.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket();
    int64_t bytes() const { return bytes_; }

   private:
    friend class InflightBudget;
    Ticket(InflightBudget* budget, int64_t bytes, bool reading) : budget_(budget), bytes_(bytes), reading_(reading) {}
    void Release();
    InflightBudget* budget_ = nullptr;  // borrowed: the budget outlives its tickets
    int64_t bytes_ = 0;
    bool reading_ = false;
  };

  // `retry_after` is the delay refused callers are told to wait.
  explicit InflightBudget(absl::Duration retry_after = absl::Milliseconds(100)) : retry_after_(retry_after) {}
  InflightBudget(const InflightBudget&) = delete;
  InflightBudget& operator=(const InflightBudget&) = delete;

  // Sets the bounds; calls admitted before keep their tickets.
  void SetLimits(const RequestLimits& limits);

  // OK when a request of `request_bytes` is within max_request_bytes; else INVALID_ARGUMENT
  // "<what>: request of N bytes exceeds this job's limit of M bytes".
  absl::Status CheckSize(absl::string_view what, int64_t request_bytes);

  // Admits a call that holds `bytes` (its request and its answer buffer) or refuses it with
  // RESOURCE_EXHAUSTED "<what>: N bytes would exceed the server's bound of M bytes in flight
  // (K held); retry after T ms" (for a `reading` call M is half the bound and K what reading calls
  // hold).
  absl::StatusOr<Ticket> Admit(absl::string_view what, int64_t bytes, bool reading = false);

  // How long a refused caller should wait before trying again.
  absl::Duration retry_after() const { return retry_after_; }
  // Bytes held by admitted calls now.
  int64_t inflight_bytes() const { return inflight_.load(std::memory_order_relaxed); }
  RequestLimits limits() const;

 private:
  const absl::Duration retry_after_;
  std::atomic<int64_t> max_request_{0};
  std::atomic<int64_t> max_inflight_{0};
  std::atomic<int64_t> inflight_{0};
  std::atomic<int64_t> reading_{0};  // the part of inflight_ that reading calls hold
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_INFLIGHT_BUDGET_H_
