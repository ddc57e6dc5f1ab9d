// A stand-in for the generated dashboard assets: one page that points at the JSON API. The
// dashboard's own build step replaces this file.
#include "scheduler/dashboard_assets.h"

namespace pstrain {
namespace scheduler {

const std::vector<DashboardAsset>& DashboardAssets() {
  static const std::vector<DashboardAsset>* const assets = new std::vector<DashboardAsset>{
      {"/", "text/html; charset=utf-8",
       "<!doctype html><title>pstrain</title><p>pstrain scheduler: see <a href=\"/api/status\">/api/status</a>, "
       "<a href=\"/api/timeline\">/api/timeline</a>, <a href=\"/api/targets\">/api/targets</a> and "
       "<a href=\"/metrics\">/metrics</a>.</p>\n"},
  };
  return *assets;
}

}  // namespace scheduler
}  // namespace pstrain
