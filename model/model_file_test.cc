#include "model/model_file.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/mlp.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

using ::testing::HasSubstr;

std::string TempPath() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "model_file_test_" + info->name() + ".bin";
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath();
    params_ = MlpParamSpecs({5, 7, 3});
    values_ = testutil::RandomVector(TotalElements(params_), 3);
    ASSERT_TRUE(WriteModelFile(path_, params_, values_).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::string path_;
  std::vector<ParamSpec> params_;
  std::vector<float> values_;
};

TEST_F(ModelFileTest, RoundTripKeepsNamesShapesAndValues) {
  absl::StatusOr<ModelFile> file = ReadModelFile(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->params.size(), params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    EXPECT_EQ(file->params[i].name, params_[i].name);
    EXPECT_EQ(file->params[i].shape, params_[i].shape);
    EXPECT_EQ(file->params[i].num_elements, params_[i].num_elements);
    EXPECT_EQ(file->params[i].flat_offset, params_[i].flat_offset);
  }
  EXPECT_EQ(file->values, values_);
}

TEST_F(ModelFileTest, ByteLayoutIsAsDocumented) {
  const std::string bytes = ReadBytes(path_);
  // Header: magic, version, count, then per tensor 4 + name + 4 + 8 * ndim.
  size_t header = 8 + 4 + 4;
  for (const ParamSpec& p : params_) header += 4 + p.name.size() + 4 + 8 * p.shape.size();
  ASSERT_EQ(bytes.size(), header + 4 * values_.size() + 4);
  EXPECT_EQ(bytes.substr(0, 8), "PSTRAINM");
  EXPECT_EQ(bytes[8], 1);  // version, little-endian
  EXPECT_EQ(bytes[12], static_cast<char>(params_.size()));
  EXPECT_EQ(bytes[16], static_cast<char>(params_[0].name.size()));
  EXPECT_EQ(bytes.substr(20, params_[0].name.size()), "fc1.weight");
  float first;
  std::memcpy(&first, bytes.data() + header, 4);
  EXPECT_EQ(first, values_[0]);
}

TEST_F(ModelFileTest, CorruptedValueByteIsAChecksumError) {
  std::string bytes = ReadBytes(path_);
  bytes[bytes.size() - 20] ^= 0x01;
  WriteBytes(path_, bytes);
  const absl::Status status = ReadModelFile(path_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("checksum mismatch"));
  EXPECT_THAT(status.message(), HasSubstr(path_));
}

TEST_F(ModelFileTest, TruncatedFileIsRefused) {
  const std::string bytes = ReadBytes(path_);
  for (size_t keep : {bytes.size() - 1, bytes.size() - 100, size_t{30}, size_t{10}}) {
    WriteBytes(path_, bytes.substr(0, keep));
    const absl::Status status = ReadModelFile(path_).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << "kept " << keep;
    EXPECT_THAT(status.message(), HasSubstr("truncated")) << "kept " << keep;
  }
}

TEST_F(ModelFileTest, BadMagicIsRefused) {
  std::string bytes = ReadBytes(path_);
  bytes[0] = 'X';
  WriteBytes(path_, bytes);
  const absl::Status status = ReadModelFile(path_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("bad magic"));

  WriteBytes(path_, "PST");
  EXPECT_THAT(ReadModelFile(path_).status().message(), HasSubstr("bad magic"));
}

TEST_F(ModelFileTest, TrailingBytesAreRefused) {
  WriteBytes(path_, ReadBytes(path_) + "junk");
  EXPECT_EQ(ReadModelFile(path_).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ModelFileTest, NanOrInfWithAValidChecksumIsRefusedNamingTensorAndElement) {
  values_[params_[1].flat_offset + 2] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(WriteModelFile(path_, params_, values_).ok());
  absl::StatusOr<ModelFile> file = ReadModelFile(path_);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr(absl::StrCat("model file '", path_, "': tensor '", params_[1].name,
                                                              "' element 2 is nan, expected finite values")));
  values_[params_[1].flat_offset + 2] = 0;
  values_[5] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(WriteModelFile(path_, params_, values_).ok());
  EXPECT_THAT(ReadModelFile(path_).status().message(), HasSubstr("tensor '" + params_[0].name + "' element 5 is inf"));
}

TEST_F(ModelFileTest, OnlyRegularFilesAreRead) {
  for (const std::string& path : {std::string("/dev/zero"), ::testing::TempDir()}) {
    absl::StatusOr<ModelFile> file = ReadModelFile(path);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kFailedPrecondition) << path;
    EXPECT_THAT(file.status().message(), HasSubstr("expected a regular file")) << path;
  }
}

TEST_F(ModelFileTest, WrittenForTheOwnerOnly) {
  struct stat st;
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(ModelFileTest, MissingFileIsNotFound) {
  std::remove(path_.c_str());
  const absl::Status status = ReadModelFile(path_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(path_));
}

TEST_F(ModelFileTest, WriteRefusesWrongValueCount) {
  values_.pop_back();
  EXPECT_EQ(WriteModelFile(path_, params_, values_).code(), absl::StatusCode::kInvalidArgument);
  // The earlier file is untouched.
  EXPECT_TRUE(ReadModelFile(path_).ok());
}

TEST_F(ModelFileTest, OverwriteReplacesTheFile) {
  std::vector<float> other(values_.size(), 0.5f);
  ASSERT_TRUE(WriteModelFile(path_, params_, other).ok());
  absl::StatusOr<ModelFile> file = ReadModelFile(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->values, other);
}

TEST_F(ModelFileTest, EmptyModelRoundTrips) {
  ASSERT_TRUE(WriteModelFile(path_, {}, {}).ok());
  absl::StatusOr<ModelFile> file = ReadModelFile(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->params.empty());
  EXPECT_TRUE(file->values.empty());
}

// Found by model_file_fuzz (fuzz/corpus/model_file_fuzz/crash-c1ab1f70...): a model without
// tensors was parsed with memcpy(nullptr, ..., 0), undefined behaviour that UBSan stops at; the
// fuzz build replays that input, this checks the outcome.
TEST(ParseModelFileTest, ModelWithoutTensorsParsesToNothing) {
  absl::StatusOr<std::string> bytes = SerializeModelFile({}, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_EQ(bytes->size(), 20u);  // magic, version, tensor count 0, CRC
  absl::StatusOr<ModelFile> file = ParseModelFile(*bytes, "empty");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->params.empty());
  EXPECT_TRUE(file->values.empty());
}

// Found by scheduler_request_fuzz (fuzz/corpus/scheduler_request_fuzz/crash-3f694cf0...): a final
// model whose tensor name was the byte 0xff was refused with a message quoting the name; the
// scheduler failed the job with it, and its persisted state, whose failure is a proto3 string,
// no longer parsed, so a restarted scheduler could not read its own state file.
TEST(ParseModelFileTest, NameThatIsNotUtf8IsDataLossWithoutQuotingIt) {
  std::vector<ParamSpec> params(1);
  params[0].name = "\xff";
  params[0].shape = {2};
  params[0].num_elements = 2;
  absl::StatusOr<std::string> bytes = SerializeModelFile(params, std::vector<float>{1, 2});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<ModelFile> file = ParseModelFile(*bytes, "sent model");
  ASSERT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << file.status();
  EXPECT_THAT(file.status().message(), HasSubstr("sent model: tensor 0 name is not valid UTF-8"));
  EXPECT_EQ(std::string(file.status().message()).find('\xff'), std::string::npos);

  params[0].name = "caf\xc3\xa9.w";  // UTF-8 beyond ASCII is fine
  bytes = SerializeModelFile(params, std::vector<float>{1, 2});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  file = ParseModelFile(*bytes, "sent model");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->params[0].name, "caf\xc3\xa9.w");
}

}  // namespace
}  // namespace model
}  // namespace pstrain
