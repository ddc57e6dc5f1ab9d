#include "data/idx_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using Bytes = std::vector<unsigned char>;

void AppendBigEndian(Bytes* out, uint32_t v) {
  out->push_back(static_cast<unsigned char>(v >> 24));
  out->push_back(static_cast<unsigned char>(v >> 16));
  out->push_back(static_cast<unsigned char>(v >> 8));
  out->push_back(static_cast<unsigned char>(v));
}

// Pixel j of image i is (i * 31 + j * 7) % 256: distinct enough to catch mixed-up offsets.
unsigned char PixelAt(int64_t i, int64_t j) { return static_cast<unsigned char>((i * 31 + j * 7) % 256); }

Bytes ImageFile(uint32_t count, uint32_t rows, uint32_t cols) {
  Bytes b;
  AppendBigEndian(&b, kIdxImageMagic);
  AppendBigEndian(&b, count);
  AppendBigEndian(&b, rows);
  AppendBigEndian(&b, cols);
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t j = 0; j < int64_t{rows} * cols; ++j) b.push_back(PixelAt(i, j));
  }
  return b;
}

int32_t LabelAt(int64_t i) { return static_cast<int32_t>((i * 3) % 10); }

Bytes LabelFile(uint32_t count) {
  Bytes b;
  AppendBigEndian(&b, kIdxLabelMagic);
  AppendBigEndian(&b, count);
  for (int64_t i = 0; i < count; ++i) b.push_back(static_cast<unsigned char>(LabelAt(i)));
  return b;
}

float Normalized(unsigned char p) { return static_cast<float>((p / 255.0 - kPixelMean) / kPixelStd); }

std::string TempPath(const std::string& name) {
  std::string dir = testing::TempDir();
  if (dir.empty() || dir.back() != '/') dir += '/';
  return dir + name;
}

std::string WritePlain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << path;
  return path;
}

Bytes Gzip(const Bytes& bytes) {
  // deflateInit2 with windowBits 15 + 16 writes a gzip wrapper.
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&zs, bytes.size()) + 64);
  zs.next_in = const_cast<unsigned char*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string WriteGzip(const std::string& path, const Bytes& bytes) { return WritePlain(path, Gzip(bytes)); }

void ExpectSamples(const Dataset& data, int64_t n, int rows, int cols) {
  ASSERT_EQ(data.num_samples, n);
  ASSERT_EQ(data.rows, rows);
  ASSERT_EQ(data.cols, cols);
  EXPECT_EQ(data.num_classes, 10);
  ASSERT_EQ(data.images.size(), static_cast<size_t>(n * rows * cols));
  ASSERT_EQ(data.labels.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(data.labels[i], LabelAt(i)) << "sample " << i;
    for (int64_t j = 0; j < int64_t{rows} * cols; ++j) {
      ASSERT_EQ(data.images[i * rows * cols + j], Normalized(PixelAt(i, j))) << "sample " << i << " pixel " << j;
    }
  }
}

TEST(IdxReaderTest, ReadsPlainFiles) {
  const std::string images = WritePlain(TempPath("plain-images"), ImageFile(5, 3, 4));
  const std::string labels = WritePlain(TempPath("plain-labels"), LabelFile(5));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSamples(*data, 5, 3, 4);
}

TEST(IdxReaderTest, ReadsGzipFilesWhateverTheirName) {
  // Names without ".gz": the format is detected from the content.
  const std::string images = WriteGzip(TempPath("gz-images"), ImageFile(7, 2, 5));
  const std::string labels = WriteGzip(TempPath("gz-labels"), LabelFile(7));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, -1);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSamples(*data, 7, 2, 5);
}

TEST(IdxReaderTest, ReadsLargerThanOneBlock) {
  // 3000 samples of 28x28 = 2.35 MB of pixels: crosses the reader's 1 MiB block boundary.
  const std::string images = WriteGzip(TempPath("big-images.gz"), ImageFile(3000, 28, 28));
  const std::string labels = WritePlain(TempPath("big-labels"), LabelFile(3000));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSamples(*data, 3000, 28, 28);
}

TEST(IdxReaderTest, NormalizationUsesFashionMnistMeanAndStd) {
  Bytes image_bytes = ImageFile(1, 1, 3);
  image_bytes[16] = 0;
  image_bytes[17] = 255;
  image_bytes[18] = 73;  // 73 / 255 = 0.2863, close to the mean.
  const std::string images = WritePlain(TempPath("norm-images"), image_bytes);
  const std::string labels = WritePlain(TempPath("norm-labels"), LabelFile(1));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_NEAR(data->images[0], -0.2860 / 0.3530, 1e-6);
  EXPECT_NEAR(data->images[1], (1.0 - 0.2860) / 0.3530, 1e-6);
  EXPECT_NEAR(data->images[2], 0.000867, 1e-4);
}

TEST(IdxReaderTest, LimitKeepsFirstSamples) {
  const std::string images = WriteGzip(TempPath("limit-images"), ImageFile(9, 2, 2));
  const std::string labels = WriteGzip(TempPath("limit-labels"), LabelFile(9));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 4);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSamples(*data, 4, 2, 2);

  absl::StatusOr<Dataset> more = ReadIdxPair(images, labels, 100);
  ASSERT_TRUE(more.ok()) << more.status();
  ExpectSamples(*more, 9, 2, 2);
}

TEST(IdxReaderTest, LimitDoesNotReadPastTheKeptSamples) {
  // The pixels of the samples beyond the limit are missing, which is fine: they are not read.
  Bytes image_bytes = ImageFile(6, 2, 2);
  image_bytes.resize(16 + 3 * 4);
  const std::string images = WritePlain(TempPath("limit-short-images"), image_bytes);
  const std::string labels = WritePlain(TempPath("limit-short-labels"), LabelFile(6));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 3);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSamples(*data, 3, 2, 2);
}

TEST(IdxReaderTest, MissingFileIsNotFound) {
  const std::string labels = WritePlain(TempPath("missing-labels"), LabelFile(1));
  const std::string images = TempPath("no-such-images.gz");
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(data.status().message()), absl::StrCat(images, ": cannot open: No such file or directory"));
}

TEST(IdxReaderTest, BadMagicIsDataLoss) {
  Bytes image_bytes = ImageFile(1, 2, 2);
  image_bytes[0] = 0x12;
  image_bytes[1] = 0x34;
  image_bytes[2] = 0x56;
  image_bytes[3] = 0x78;
  const std::string images = WritePlain(TempPath("magic-images"), image_bytes);
  const std::string labels = WritePlain(TempPath("magic-labels"), LabelFile(1));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(data.status().message()),
            absl::StrCat(images, ": not an IDX image file: magic 0x12345678, expected 0x00000803"));
}

TEST(IdxReaderTest, SwappedFilesAreDataLoss) {
  const std::string images = WritePlain(TempPath("swap-images"), ImageFile(2, 2, 2));
  const std::string labels = WritePlain(TempPath("swap-labels"), LabelFile(2));
  absl::StatusOr<Dataset> data = ReadIdxPair(labels, images, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(data.status().message()),
              AllOf(HasSubstr(labels), HasSubstr("magic 0x00000801, expected 0x00000803")));
}

TEST(IdxReaderTest, TruncatedHeaderIsDataLoss) {
  Bytes image_bytes = ImageFile(1, 2, 2);
  image_bytes.resize(10);
  const std::string images = WritePlain(TempPath("short-header-images"), image_bytes);
  const std::string labels = WritePlain(TempPath("short-header-labels"), LabelFile(1));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(data.status().message()),
            absl::StrCat(images, ": truncated: expected a 16-byte IDX image header, found 10 bytes"));
}

TEST(IdxReaderTest, ZeroSizedImagesAreDataLoss) {
  const std::string images = WritePlain(TempPath("zero-images"), ImageFile(1, 0, 28));
  const std::string labels = WritePlain(TempPath("zero-labels"), LabelFile(1));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(data.status().message()), AllOf(HasSubstr(images), HasSubstr("0x28")));
}

TEST(IdxReaderTest, TruncatedPixelsAreDataLoss) {
  Bytes image_bytes = ImageFile(4, 28, 28);
  image_bytes.resize(16 + 1234);
  const std::string images = WritePlain(TempPath("short-images"), image_bytes);
  const std::string labels = WritePlain(TempPath("short-labels"), LabelFile(4));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(data.status().message()),
            absl::StrCat(images,
                         ": truncated: header promises 4 images of 28x28 (3136 bytes of "
                         "pixels), found 1234"));
}

TEST(IdxReaderTest, TruncatedGzipStreamReportsCounts) {
  Bytes gz = Gzip(ImageFile(40, 28, 28));
  gz.resize(gz.size() / 2);
  const std::string images = WritePlain(TempPath("short-gz-images.gz"), gz);
  const std::string labels = WritePlain(TempPath("short-gz-labels"), LabelFile(40));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(data.status().message()),
              AllOf(HasSubstr(images), HasSubstr("truncated: header promises 40 images of 28x28 (31360 bytes")));
}

TEST(IdxReaderTest, TruncatedLabelsAreDataLoss) {
  Bytes label_bytes = LabelFile(5);
  label_bytes.resize(8 + 3);
  const std::string images = WritePlain(TempPath("tl-images"), ImageFile(5, 2, 2));
  const std::string labels = WritePlain(TempPath("tl-labels"), label_bytes);
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(data.status().message()),
            absl::StrCat(labels, ": truncated: header promises 5 labels (5 bytes), found 3"));
}

TEST(IdxReaderTest, CorruptGzipStreamIsDataLossWithZlibMessage) {
  Bytes gz = Gzip(ImageFile(3, 4, 4));
  // Byte 10 starts the deflate data; 0xff there is a final block of the invalid type 3.
  for (size_t i = 10; i < gz.size(); ++i) gz[i] = 0xff;
  const std::string images = WritePlain(TempPath("corrupt-images.gz"), gz);
  const std::string labels = WritePlain(TempPath("corrupt-labels"), LabelFile(3));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(data.status().message()), absl::StrCat(images, ": corrupt gzip stream: invalid block type"));
}

TEST(IdxReaderTest, CountMismatchNamesBothFiles) {
  const std::string images = WritePlain(TempPath("mm-images"), ImageFile(5, 2, 2));
  const std::string labels = WritePlain(TempPath("mm-labels"), LabelFile(4));
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(data.status().message()),
            absl::StrCat("image/label count mismatch: ", images, " holds 5 images but ", labels, " holds 4 labels"));
}

TEST(IdxReaderTest, LabelOutOfRangeNamesIndexAndValue) {
  Bytes label_bytes = LabelFile(5);
  label_bytes[8 + 3] = 12;
  const std::string images = WritePlain(TempPath("range-images"), ImageFile(5, 2, 2));
  const std::string labels = WritePlain(TempPath("range-labels"), label_bytes);
  absl::StatusOr<Dataset> data = ReadIdxPair(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(data.status().message()), absl::StrCat(labels, ": label 12 at index 3, expected [0, 10)"));
}

// A directory holding a split under the standard names, some files compressed and some not.
std::string MakeDataDir(const std::string& name, uint32_t train_n, uint32_t test_n) {
  const std::string dir = TempPath(name);
  mkdir(dir.c_str(), 0755);
  WriteGzip(dir + "/train-images-idx3-ubyte.gz", ImageFile(train_n, 3, 3));
  WritePlain(dir + "/train-labels-idx1-ubyte", LabelFile(train_n));
  WritePlain(dir + "/t10k-images-idx3-ubyte", ImageFile(test_n, 3, 3));
  WriteGzip(dir + "/t10k-labels-idx1-ubyte.gz", LabelFile(test_n));
  return dir;
}

TEST(LoadFashionMnistTest, FindsGzipAndPlainFilesByStandardName) {
  const std::string dir = MakeDataDir("mixed-dir", 11, 6);
  absl::StatusOr<Dataset> train = LoadFashionMnist(dir, Split::kTrain, 0);
  ASSERT_TRUE(train.ok()) << train.status();
  ExpectSamples(*train, 11, 3, 3);
  absl::StatusOr<Dataset> test = LoadFashionMnist(dir + "/", Split::kTest, 0);
  ASSERT_TRUE(test.ok()) << test.status();
  ExpectSamples(*test, 6, 3, 3);
}

TEST(LoadFashionMnistTest, PrefersGzipWhenBothExist) {
  const std::string dir = MakeDataDir("both-dir", 4, 2);
  // A broken plain copy must be ignored in favour of the .gz.
  WritePlain(dir + "/train-images-idx3-ubyte", Bytes{1, 2, 3});
  absl::StatusOr<Dataset> train = LoadFashionMnist(dir, Split::kTrain, 0);
  ASSERT_TRUE(train.ok()) << train.status();
  ExpectSamples(*train, 4, 3, 3);
}

TEST(LoadFashionMnistTest, MissingFilesNameTheGzipPath) {
  const std::string dir = TempPath("empty-dir");
  mkdir(dir.c_str(), 0755);
  absl::StatusOr<Dataset> data = LoadFashionMnist(dir, Split::kTrain, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(data.status().message()),
              HasSubstr(dir + "/train-images-idx3-ubyte.gz: cannot open: No such file or directory"));
  absl::StatusOr<DatasetInfo> info = ReadDatasetInfo(dir, Split::kTest, 0);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("t10k-images-idx3-ubyte.gz"));
}

TEST(ReadDatasetInfoTest, MatchesLoadedDataset) {
  const std::string dir = MakeDataDir("info-dir", 13, 5);
  for (Split split : {Split::kTrain, Split::kTest}) {
    for (int64_t limit : {0, 3, 100}) {
      absl::StatusOr<DatasetInfo> info = ReadDatasetInfo(dir, split, limit);
      absl::StatusOr<Dataset> data = LoadFashionMnist(dir, split, limit);
      ASSERT_TRUE(info.ok()) << info.status();
      ASSERT_TRUE(data.ok()) << data.status();
      EXPECT_EQ(info->num_samples, data->num_samples) << SplitName(split) << " limit " << limit;
      EXPECT_EQ(info->rows, data->rows);
      EXPECT_EQ(info->cols, data->cols);
      EXPECT_EQ(info->num_classes, data->num_classes);
    }
  }
  absl::StatusOr<DatasetInfo> info = ReadDatasetInfo(dir, Split::kTrain, 3);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_samples, 3);
  EXPECT_EQ(info->features(), 9);
}

TEST(ReadDatasetInfoTest, ReportsCountMismatch) {
  const std::string dir = MakeDataDir("info-mismatch-dir", 13, 5);
  WriteGzip(dir + "/t10k-labels-idx1-ubyte.gz", LabelFile(4));
  absl::StatusOr<DatasetInfo> info = ReadDatasetInfo(dir, Split::kTest, 0);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("holds 5 images but"));
}

// The Debian package dataset-fashion-mnist installs the real files here.
constexpr char kRealDataDir[] = "/usr/share/datasets/fashion-mnist";

TEST(RealFashionMnistTest, TestSplitHasTenBalancedClasses) {
  struct stat st;
  if (stat(kRealDataDir, &st) != 0) {
    GTEST_SKIP() << kRealDataDir << " is absent (install dataset-fashion-mnist to run this test)";
  }
  absl::StatusOr<Dataset> data = LoadFashionMnist(kRealDataDir, Split::kTest, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples, 10000);
  EXPECT_EQ(data->rows, 28);
  EXPECT_EQ(data->cols, 28);
  ASSERT_EQ(data->images.size(), 10000u * 28 * 28);
  ASSERT_EQ(data->labels.size(), 10000u);
  std::vector<int> per_class(10, 0);
  for (int32_t label : data->labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[label];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 1000) << "class " << c;
  // The published order starts ankle boot, pullover, trouser.
  EXPECT_EQ(data->labels[0], 9);
  EXPECT_EQ(data->labels[1], 2);
  EXPECT_EQ(data->labels[2], 1);
  // Every normalized pixel maps back to a byte value.
  EXPECT_NEAR(*std::min_element(data->images.begin(), data->images.end()), Normalized(0), 1e-6);
  EXPECT_NEAR(*std::max_element(data->images.begin(), data->images.end()), Normalized(255), 1e-6);

  absl::StatusOr<DatasetInfo> info = ReadDatasetInfo(kRealDataDir, Split::kTrain, 0);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_samples, 60000);
}

}  // namespace
}  // namespace data
}  // namespace pstrain
