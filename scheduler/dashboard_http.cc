#include "scheduler/dashboard_http.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/metrics_endpoint.h"
#include "scheduler/dashboard_assets.h"

namespace pstrain {
namespace scheduler {
namespace {

HttpResponse Json(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.content_type = "application/json";
  response.body = std::move(body);
  // Every answer is a snapshot of a running job: a cached one is a wrong one.
  response.headers.push_back({"Cache-Control", "no-store"});
  return response;
}

HttpResponse Asset(const HttpRequest& request) {
  for (const DashboardAsset& asset : DashboardAssets()) {
    if (request.path == asset.path) {
      HttpResponse response;
      response.content_type = asset.content_type;
      response.body = std::string(asset.body);
      response.headers.push_back({"Cache-Control", "no-cache"});
      return response;
    }
  }
  HttpResponse missing;
  missing.status = 404;
  missing.body = absl::StrCat("no dashboard file at ", request.path, "\n");
  return missing;
}

}  // namespace

void DashboardApi::SetSelf(MemberStatus self) {
  absl::MutexLock lock(&mu_);
  self_ = std::move(self);
}

std::vector<HttpRoute> DashboardApi::Routes() {
  std::vector<HttpRoute> routes;
  routes.push_back({"/api/", true, [this](const HttpRequest& r) { return Api(r); }});
  routes.push_back({"/", false, Asset});
  routes.push_back({"/static/", true, Asset});
  if (registry_ != nullptr) routes.push_back(MetricsRoute(registry_));
  return routes;
}

HttpResponse DashboardApi::Api(const HttpRequest& request) const {
  if (request.path == "/api/status") return Status();
  if (request.path == "/api/targets") return Targets();
  if (request.path == "/api/timeline") {
    auto it = request.params.find("since");
    return Timeline(it == request.params.end() ? "" : it->second);
  }
  return Json(404, ErrorJson(absl::StrCat("no API at ", request.path,
                                          "; expected /api/status, /api/timeline or /api/targets")));
}

HttpResponse DashboardApi::Status() const {
  DashboardStatus status = scheduler_->DashboardStatus();
  {
    absl::MutexLock lock(&mu_);
    if (self_.has_value()) {
      MemberStatus self = *self_;
      self.last_heartbeat_seconds_ago = 0;  // It is answering.
      status.members.insert(status.members.begin(), std::move(self));
    }
  }
  return Json(200, StatusJson(status));
}

HttpResponse DashboardApi::Timeline(const std::string& since_text) const {
  int64_t since = 0;
  if (!since_text.empty() && !absl::SimpleAtoi(since_text, &since)) {
    return Json(400, ErrorJson(absl::StrCat("query parameter 'since' is '", since_text,
                                            "', expected an integer (the 'next' of the previous answer, or 0)")));
  }
  int64_t next = 0;
  const std::vector<TimelinePoint> points = scheduler_->TimelineSince(since, kMaxTimelinePoints, &next);
  return Json(200, TimelineJson(points, next));
}

HttpResponse DashboardApi::Targets() const {
  std::vector<MetricsTarget> targets;
  {
    absl::MutexLock lock(&mu_);
    if (self_.has_value() && !self_->metrics_address.empty()) {
      targets.push_back(MetricsTarget{self_->metrics_address, {{"role", "scheduler"}, {"rank", "0"}}});
    }
  }
  for (MetricsTarget& t : scheduler_->MetricsTargets()) targets.push_back(std::move(t));
  return Json(200, TargetsJson(targets));
}

}  // namespace scheduler
}  // namespace pstrain
