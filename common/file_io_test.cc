#include "common/file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/file_io_test-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(ReadRegularFileTest, ReadsARegularFileWithinItsLimit) {
  const std::string path = FreshDir("read") + "/a.txt";
  std::ofstream(path) << "twelve bytes";
  absl::StatusOr<std::string> got = ReadRegularFile(path, "--thing", 12);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "twelve bytes");
}

TEST(ReadRegularFileTest, RefusesAFileOverItsLimitBeforeReading) {
  const std::string path = FreshDir("big") + "/a.txt";
  std::ofstream(path) << "thirteen byte";
  absl::StatusOr<std::string> got = ReadRegularFile(path, "--thing", 12);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got.status().message(), HasSubstr("--thing: '" + path + "' is 13 bytes, expected at most 12"));
}

TEST(ReadRegularFileTest, RefusesFifosDevicesAndFoldersWithoutBlocking) {
  const std::string dir = FreshDir("types");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A FIFO with no writer: a blocking open would wait forever.
  EXPECT_THAT(ReadWholeFile(fifo, "--config").status().message(),
              HasSubstr("--config: '" + fifo + "' is a FIFO, expected a regular file"));
  EXPECT_THAT(ReadWholeFile("/dev/zero", "--tls_cert").status().message(),
              HasSubstr("--tls_cert: '/dev/zero' is a character device, expected a regular file"));
  absl::StatusOr<std::string> folder = ReadWholeFile(dir, "model file");
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(folder.status().message(), HasSubstr("is a folder, expected a regular file"));
}

TEST(ReadRegularFileTest, MissingFileIsNotFound) {
  const std::string path = FreshDir("missing") + "/none";
  absl::StatusOr<std::string> got = ReadWholeFile(path, "--config");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr(path));
}

TEST(WriteFileAtomicallyTest, WritesForTheOwnerOnlyUnlessGivenAMode) {
  const std::string dir = FreshDir("modes");
  ASSERT_TRUE(WriteFileAtomically(dir + "/private", "test file", "x").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/shared", "test file", "x", OutputMode(0640)).ok());
  struct stat st;
  ASSERT_EQ(::stat((dir + "/private").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir + "/shared").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(OutputMode(0), kDefaultOutputMode);
}

TEST(CheckWritableFilePathTest, AcceptsAFileInAnExistingFolder) {
  const std::string dir = FreshDir("writable");
  EXPECT_TRUE(CheckWritableFilePath(dir + "/model.bin", "--final_model").ok());
  EXPECT_TRUE(CheckWritableFilePath("model.bin", "--final_model").ok());  // the current folder
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the check creates nothing";
}

TEST(CheckWritableFilePathTest, RefusesMissingFoldersFilesAsFoldersAndFolders) {
  const std::string dir = FreshDir("unwritable");
  std::ofstream(dir + "/plain") << "x";
  EXPECT_THAT(CheckWritableFilePath(dir + "/missing/model.bin", "--final_model").message(),
              HasSubstr("--final_model: the folder '" + dir + "/missing' of '" + dir + "/missing/model.bin'"));
  EXPECT_THAT(CheckWritableFilePath(dir + "/plain/model.bin", "--final_model").message(),
              HasSubstr("is a regular file, expected a folder"));
  EXPECT_THAT(CheckWritableFilePath(dir, "--final_model").message(),
              HasSubstr("is a folder, expected the path of a file"));
  EXPECT_THAT(CheckWritableFilePath(dir + "/", "--final_model").message(), HasSubstr("expected the path of a file"));
  if (::geteuid() != 0) {  // root may write anywhere
    std::filesystem::create_directory(dir + "/locked");
    std::filesystem::permissions(dir + "/locked",
                                 std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    EXPECT_THAT(CheckWritableFilePath(dir + "/locked/model.bin", "--final_model").message(),
                HasSubstr("cannot create files in the folder"));
  }
}

}  // namespace
}  // namespace pstrain
