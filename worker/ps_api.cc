#include "worker/ps_api.h"

#include <utility>

#include "absl/synchronization/blocking_counter.h"

namespace pstrain::worker {

namespace {

// Waits for `calls` callbacks that write into `results`; the first error in `results` order.
class Gather {
 public:
  Gather(int slots, int calls) : results_(slots), pending_(calls) {}
  PsApi::Done Slot(int i) {
    return [this, i](absl::Status s) {
      results_[i] = std::move(s);
      pending_.DecrementCount();
    };
  }
  absl::Status Wait() {
    pending_.Wait();
    for (absl::Status& s : results_) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<absl::Status> results_;
  absl::BlockingCounter pending_;
};

}  // namespace

absl::Status PsApi::PullShards(const std::vector<ShardRoute>& routes, const std::vector<PullRequest>& requests,
                               std::vector<IncomingPull>* responses) {
  const int n = static_cast<int>(requests.size());
  responses->resize(n);
  Gather gather(n, n);
  for (int i = 0; i < n; ++i) PullAsync(routes[i].primary, &requests[i], &(*responses)[i], gather.Slot(i));
  return gather.Wait();
}

absl::Status PsApi::PushPullShards(const std::vector<ShardRoute>& routes, const std::vector<OutgoingPush>& requests,
                                   std::vector<IncomingPull>* responses) {
  const int n = static_cast<int>(requests.size());
  responses->resize(n);
  int calls = n;
  for (int i = 0; i < n; ++i) calls += routes[i].backup >= 0 ? 1 : 0;
  std::vector<PushResponse> backup_responses(n);
  Gather gather(2 * n, calls);
  // Both calls of a shard read the same request, so the gradient is not copied.
  for (int i = 0; i < n; ++i) {
    PushPullAsync(routes[i].primary, &requests[i], &(*responses)[i], gather.Slot(i));
    if (routes[i].backup >= 0) PushAsync(routes[i].backup, &requests[i], &backup_responses[i], gather.Slot(n + i));
  }
  return gather.Wait();
}

absl::Status PsApi::FinishEpochShards(const std::vector<ShardRoute>& routes,
                                      const std::vector<FinishEpochRequest>& requests) {
  const int n = static_cast<int>(requests.size());
  int calls = n;
  for (int i = 0; i < n; ++i) calls += routes[i].backup >= 0 ? 1 : 0;
  std::vector<FinishEpochResponse> responses(2 * n);
  Gather gather(2 * n, calls);
  for (int i = 0; i < n; ++i) {
    FinishEpochAsync(routes[i].primary, &requests[i], &responses[i], gather.Slot(i));
    if (routes[i].backup >= 0) FinishEpochAsync(routes[i].backup, &requests[i], &responses[n + i], gather.Slot(n + i));
  }
  return gather.Wait();
}

}  // namespace pstrain::worker
