// The dashboard's static files (HTML, JavaScript, CSS), compiled into the scheduler binary from
// scheduler/dashboard/ so that it serves them without files on disk.
#ifndef PSTRAIN_SCHEDULER_DASHBOARD_ASSETS_H_
#define PSTRAIN_SCHEDULER_DASHBOARD_ASSETS_H_

#include <string_view>
#include <vector>

namespace pstrain {
namespace scheduler {

struct DashboardAsset {
  // The URL path it is served at: "/" for index.html, "/static/..." for the rest.
  const char* path;
  const char* content_type;
  std::string_view body;
};

// Every asset; built once, never changed (safe from any thread).
const std::vector<DashboardAsset>& DashboardAssets();

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_DASHBOARD_ASSETS_H_
