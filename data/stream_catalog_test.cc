// The catalog of a data stream (data/stream_catalog.h) on real files: ready files are taken in
// name order with their record counts and positions, files without a marker are not, new hours
// are added as they come, the end marker ends it, ranges are located across files; and a file
// out of order, a marker without its file, a file changed or gone before its records are trained
// are refused, naming the file, with nothing taken.
#include "data/stream_catalog.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace data {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string Folder(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/stream-" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A file of `lines` records, made ready (or not).
void Put(const std::string& dir, const std::string& name, int lines, bool ready = true) {
  std::ofstream out(dir + "/" + name);
  for (int i = 0; i < lines; ++i) out << "1\t" << i << "\n";
  out.close();
  if (ready) std::ofstream(dir + "/" + name + kStreamReadyMarker).close();
}

TEST(StreamCatalogTest, ReadyFilesAreTakenInNameOrderAsTheyComeUntilTheEnd) {
  const std::string dir = Folder("order");
  Put(dir, "part-00001.tsv", 5);
  Put(dir, "part-00000.tsv", 3);
  Put(dir, "part-00002.tsv", 7, /*ready=*/false);  // still being written
  StreamCatalog catalog(dir);
  absl::StatusOr<int> added = catalog.Refresh(0);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added, 2);
  ASSERT_EQ(catalog.files().size(), 2u);
  EXPECT_EQ(catalog.files()[0].name, "part-00000.tsv");
  EXPECT_EQ(catalog.files()[1].first, 3);
  EXPECT_EQ(catalog.records(), 8);
  EXPECT_FALSE(catalog.ended());
  // Nothing new: nothing added. Then the third is marked, and the stream ends.
  EXPECT_EQ(catalog.Refresh(0).value(), 0);
  std::ofstream(dir + "/part-00002.tsv" + kStreamReadyMarker).close();
  std::ofstream(dir + "/" + kStreamEndMarker).close();
  EXPECT_EQ(catalog.Refresh(0).value(), 1);
  EXPECT_EQ(catalog.records(), 15);
  EXPECT_TRUE(catalog.ended());
  // [2, 10) spans three files: lines 2-3 of the first, all of the second, 0-2 of the third.
  const std::vector<StreamPiece> pieces = catalog.Locate(2, 10);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].file, 0u);
  EXPECT_EQ(pieces[0].begin, 2);
  EXPECT_EQ(pieces[0].end, 3);
  EXPECT_EQ(pieces[1].begin, 0);
  EXPECT_EQ(pieces[1].end, 5);
  EXPECT_EQ(pieces[2].file, 2u);
  EXPECT_EQ(pieces[2].end, 2);
  EXPECT_TRUE(catalog.Locate(4, 4).empty());
  // A saved catalog goes on where it was.
  StreamCatalog restored(dir, catalog.files(), catalog.ended());
  EXPECT_EQ(restored.Refresh(0).value(), 0);
  EXPECT_EQ(restored.records(), 15);
}

TEST(StreamCatalogTest, OutOfOrderMissingChangedAndVanishedFilesAreRefusedNamingThem) {
  const std::string dir = Folder("bad");
  StreamCatalog missing(dir + "/nope");
  EXPECT_EQ(missing.Refresh(0).status().code(), absl::StatusCode::kNotFound);

  Put(dir, "part-00005.tsv", 4);
  StreamCatalog catalog(dir);
  ASSERT_TRUE(catalog.Refresh(0).ok());
  // A ready file that sorts before the last one taken.
  Put(dir, "part-00003.tsv", 2);
  absl::Status early = catalog.Refresh(0).status();
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.message()), HasSubstr("'part-00003.tsv' was made ready after 'part-00005.tsv'"));
  fs::remove(dir + "/part-00003.tsv" + kStreamReadyMarker);
  // A marker without its file.
  std::ofstream(dir + "/part-00009.tsv" + kStreamReadyMarker).close();
  absl::Status orphan = catalog.Refresh(0).status();
  EXPECT_EQ(orphan.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(orphan.message()), HasSubstr("'part-00009.tsv.ready' marks a file that is not there"));
  fs::remove(dir + "/part-00009.tsv" + kStreamReadyMarker);
  EXPECT_EQ(catalog.records(), 4) << "nothing taken by a refused refresh";
  // A file taken that is written again before its records are trained.
  std::ofstream(dir + "/part-00005.tsv", std::ios::app) << "1\t9\n";
  absl::Status changed = catalog.Refresh(2).status();
  EXPECT_EQ(changed.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(changed.message()), HasSubstr("'part-00005.tsv' changed after it was ready"));
  // Gone before its records were trained: refused; gone after: a writer's retention, fine.
  fs::remove(dir + "/part-00005.tsv");
  absl::Status gone = catalog.Refresh(3).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(gone.message()), HasSubstr("'part-00005.tsv' (records 0 to 4) disappeared"));
  EXPECT_TRUE(catalog.Refresh(4).ok());
  // After the end no file may come.
  std::ofstream(dir + "/" + kStreamEndMarker).close();
  ASSERT_TRUE(catalog.Refresh(4).ok());
  Put(dir, "part-00010.tsv", 1);
  EXPECT_THAT(std::string(catalog.Refresh(4).status().message()), HasSubstr("after the stream ended"));
}

}  // namespace
}  // namespace data
}  // namespace pstrain
