#include "scheduler/dashboard_assets.h"

#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include "gtest/gtest.h"

namespace pstrain::scheduler {
namespace {

// PSTRAIN_DASHBOARD_DIR: scheduler/dashboard/ of the source tree (set by CMake).
std::string ReadSource(const std::string& name) {
  std::ifstream in(std::string(PSTRAIN_DASHBOARD_DIR) + "/" + name, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const DashboardAsset* Find(const std::string& path) {
  for (const DashboardAsset& asset : DashboardAssets()) {
    if (path == asset.path) return &asset;
  }
  return nullptr;
}

TEST(DashboardAssetsTest, EveryFileIsServedVerbatimAtItsPath) {
  ASSERT_EQ(DashboardAssets().size(), 3u);
  for (const auto& [path, file, type] : {std::tuple{"/", "index.html", "text/html; charset=utf-8"},
                                         std::tuple{"/static/app.js", "app.js", "text/javascript; charset=utf-8"},
                                         std::tuple{"/static/style.css", "style.css", "text/css; charset=utf-8"}}) {
    const DashboardAsset* asset = Find(path);
    ASSERT_NE(asset, nullptr) << path;
    EXPECT_STREQ(asset->content_type, type);
    const std::string source = ReadSource(file);
    ASSERT_FALSE(source.empty()) << file;
    EXPECT_EQ(asset->body, source) << path << " differs from " << file;
  }
}

TEST(DashboardAssetsTest, PageLoadsItsFilesByTheirServedPaths) {
  const DashboardAsset* index = Find("/");
  ASSERT_NE(index, nullptr);
  EXPECT_NE(index->body.find("src=\"/static/app.js\""), std::string_view::npos);
  EXPECT_NE(index->body.find("href=\"/static/style.css\""), std::string_view::npos);
}

}  // namespace
}  // namespace pstrain::scheduler
