// The scheduler's HTTP routes (--http_port): the dashboard's pages, its JSON API and /metrics.
//
//   GET /                       the dashboard (index.html), /static/... its other files
//   GET /api/status             the job at a glance (StatusJson)
//   GET /api/timeline?since=N   worker reports with seq >= N, oldest first, at most
//                               kMaxTimelinePoints per answer (TimelineJson)
//   GET /api/targets            Prometheus HTTP service discovery: every live role serving
//                               metrics, and the scheduler itself (TargetsJson)
//   GET /metrics                the scheduler's metrics in Prometheus' text format
//
// API answers are application/json with Cache-Control: no-store. Unknown /api/ paths get 404 and
// a bad `since` 400, each with {"error": "..."}.
//
// Thread-safe: handlers run on the HTTP server's threads; each takes the Scheduler's mutex only to
// copy state (Scheduler::DashboardStatus etc.) and formats outside it.
#ifndef PSTRAIN_SCHEDULER_DASHBOARD_HTTP_H_
#define PSTRAIN_SCHEDULER_DASHBOARD_HTTP_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "scheduler/scheduler.h"
#include "scheduler/status_json.h"

namespace pstrain {
namespace scheduler {

class DashboardApi {
 public:
  static constexpr size_t kMaxTimelinePoints = 5000;

  // Borrows `scheduler` and `registry` (may be null: no /metrics) for as long as the routes are
  // served; both must outlive the HTTP server.
  DashboardApi(const Scheduler* scheduler, const metrics::Registry* registry)
      : scheduler_(scheduler), registry_(registry) {}
  DashboardApi(const DashboardApi&) = delete;
  DashboardApi& operator=(const DashboardApi&) = delete;

  // The scheduler's own row in "members" (role "scheduler") and, when its metrics_address is not
  // empty, its own scrape target; set once its listeners are up. None before.
  void SetSelf(MemberStatus self);

  // The routes above; they borrow this object.
  std::vector<HttpRoute> Routes();

  HttpResponse Status() const;
  // `since`: the query parameter's text, empty when absent (0).
  HttpResponse Timeline(const std::string& since) const;
  HttpResponse Targets() const;

 private:
  HttpResponse Api(const HttpRequest& request) const;

  const Scheduler* const scheduler_;
  const metrics::Registry* const registry_;
  mutable absl::Mutex mu_;
  std::optional<MemberStatus> self_ ABSL_GUARDED_BY(mu_);
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_DASHBOARD_HTTP_H_
