#include "common/server_counts.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/checkpoint_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {

bool operator==(const ServerCountEra& a, const ServerCountEra& b) {
  return a.from_step == b.from_step && a.num_servers == b.num_servers;
}

namespace {

using ::testing::HasSubstr;

std::string NewDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/server_counts_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void Touch(const std::string& path, const std::string& text = "") { std::ofstream(path) << text; }

TEST(ServerCountsTest, ServersAtTakesTheLastEraBeforeTheStep) {
  const std::vector<ServerCountEra> eras = {{0, 2}, {300, 3}, {500, 1}};
  EXPECT_EQ(ServersAt(eras, 0), 2);
  EXPECT_EQ(ServersAt(eras, 300), 2);  // the resumed cut itself is the old count's
  EXPECT_EQ(ServersAt(eras, 301), 3);
  EXPECT_EQ(ServersAt(eras, 500), 3);
  EXPECT_EQ(ServersAt(eras, 525), 1);
}

TEST(ServerCountsTest, AFolderWithoutTheFileHasTheManifestsCount) {
  const std::string dir = NewDir("missing");
  absl::StatusOr<std::vector<ServerCountEra>> eras = ReadServerCounts(dir, 4);
  ASSERT_TRUE(eras.ok()) << eras.status();
  EXPECT_EQ(*eras, (std::vector<ServerCountEra>{{0, 4}}));
}

TEST(ServerCountsTest, WrittenErasReadBack) {
  const std::string dir = NewDir("roundtrip");
  const std::vector<ServerCountEra> eras = {{0, 2}, {300, 3}};
  ASSERT_TRUE(WriteServerCounts(dir, eras, 0600).ok());
  absl::StatusOr<std::vector<ServerCountEra>> read = ReadServerCounts(dir, 7);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, eras);
}

TEST(ServerCountsTest, BadFilesAreRefusedWithThePathAndTheEra) {
  const std::string dir = NewDir("bad");
  const std::string path = dir + "/" + kServerCountsName;
  struct Case {
    std::string text;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"eras { from_step: ", absl::StatusCode::kDataLoss, "not a ServerCountHistory textproto"},
      {"", absl::StatusCode::kInvalidArgument, "no eras"},
      {"eras { from_step: 0 num_servers: 0 }", absl::StatusCode::kInvalidArgument, "era 0 (from step 0, 0 servers)"},
      {"eras { from_step: 5 num_servers: 2 }", absl::StatusCode::kInvalidArgument, "the first era from step 0"},
      {"eras { from_step: 0 num_servers: 2 } eras { from_step: 0 num_servers: 3 }", absl::StatusCode::kInvalidArgument,
       "above the previous era's 0"},
  };
  for (const Case& c : cases) {
    Touch(path, c.text);
    absl::StatusOr<std::vector<ServerCountEra>> eras = ReadServerCounts(dir, 2);
    EXPECT_EQ(eras.status().code(), c.code) << c.text;
    EXPECT_THAT(std::string(eras.status().message()), HasSubstr(c.message)) << c.text;
    EXPECT_THAT(std::string(eras.status().message()), HasSubstr(path)) << c.text;
  }
}

TEST(ServerCountsTest, ContinuingDropsAbandonedErasAndStartsOneForANewCount) {
  const std::vector<ServerCountEra> eras = {{0, 2}, {300, 3}, {500, 1}};
  // Same count as the cut's: nothing new.
  EXPECT_EQ(ContinueFrom(eras, 400, 3), (std::vector<ServerCountEra>{{0, 2}, {300, 3}}));
  // Another count: an era from the cut. The era of 500 was abandoned.
  EXPECT_EQ(ContinueFrom(eras, 400, 2), (std::vector<ServerCountEra>{{0, 2}, {300, 3}, {400, 2}}));
  // The cut 300 is the first era's (2 servers): the era from 300 on 3 is abandoned, then made again.
  EXPECT_EQ(ContinueFrom(eras, 300, 3), (std::vector<ServerCountEra>{{0, 2}, {300, 3}}));
  EXPECT_EQ(ContinueFrom(eras, 300, 2), (std::vector<ServerCountEra>{{0, 2}}));
  EXPECT_EQ(ContinueFrom(eras, 0, 5), (std::vector<ServerCountEra>{{0, 5}}));
}

TEST(ServerCountsTest, TheNewestCutHasEveryRankOfItsOwnCount) {
  const std::string dir = NewDir("cuts");
  // Steps up to 300 on 2 servers, after 300 on 3. Step 350 lacks server 2 (killed before it
  // wrote); a stale server-2 file of step 200 (an earlier 3-server run) is ignored.
  for (int rank : {0, 1}) {
    for (int64_t step : {100, 200, 300}) Touch(CheckpointPath(dir, rank, step));
  }
  Touch(CheckpointPath(dir, 2, 200));
  for (int rank : {0, 1}) Touch(CheckpointPath(dir, rank, 350));
  const std::vector<ServerCountEra> eras = {{0, 2}, {300, 3}};
  absl::StatusOr<ConsistentCut> cut = LatestConsistentCut(dir, eras);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->step, 300);
  EXPECT_EQ(cut->num_servers, 2);

  Touch(CheckpointPath(dir, 2, 350));
  cut = LatestConsistentCut(dir, eras);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->step, 350);
  EXPECT_EQ(cut->num_servers, 3);

  // A 3 -> 1 history: 350's server 0 file alone makes a cut of 1.
  Touch(CheckpointPath(dir, 0, 400));
  cut = LatestConsistentCut(dir, {{0, 2}, {300, 3}, {350, 1}});
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->step, 400);
  EXPECT_EQ(cut->num_servers, 1);

  EXPECT_EQ(LatestConsistentCut(dir, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LatestConsistentCut(dir, {{0, 0}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LatestConsistentCut(dir + "/none", eras).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestConsistentCut(dir, {{0, 5}}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pstrain
