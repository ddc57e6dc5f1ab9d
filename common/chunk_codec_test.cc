#include "common/chunk_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The bytes as a network might deliver them: one byte off any alignment, in runs whose
// boundaries split values (sizes 3, 5, 7, ... bytes, then the rest).
class Received {
 public:
  explicit Received(const std::string& bytes) : storage_(" " + bytes) {
    size_t at = 1;
    for (size_t run = 3; at < storage_.size(); run += 2) {
      const size_t n = std::min(run < 64 ? run : storage_.size() - at, storage_.size() - at);
      view_.Append(absl::string_view(storage_).substr(at, n));
      at += n;
    }
  }
  const PayloadView& view() const { return view_; }

 private:
  std::string storage_;
  PayloadView view_;
};

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::string TopK(const std::vector<uint32_t>& indices, const std::vector<float>& values) {
  return Bytes(indices) + Bytes(values);
}

std::vector<float> Decode(ValueEncoding encoding, const std::string& bytes, int64_t length) {
  Received in(bytes);
  const absl::Status shape = CheckChunkShape(encoding, in.view(), length);
  EXPECT_TRUE(shape.ok()) << shape;
  std::vector<float> out(length, -7.0f);  // anything the decoder does not write shows
  DecodeChunkValues(encoding, in.view(), length, out.data());
  return out;
}

std::vector<uint16_t> Halves(const std::vector<float>& values, bool fp16) {
  std::vector<uint16_t> codes;
  for (float v : values) codes.push_back(fp16 ? FloatToFp16(v) : FloatToBf16(v));
  return codes;
}

TEST(ChunkCodecTest, DecodesEveryEncodingFromSplitUnalignedBytes) {
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 0.0f, -0.0f, 1024.0f, 0.375f};
  EXPECT_EQ(Decode(FLOAT32, Bytes(values), 7), values);
  EXPECT_EQ(Decode(FLOAT16, Bytes(Halves(values, true)), 7), values);
  EXPECT_EQ(Decode(BFLOAT16, Bytes(Halves(values, false)), 7), values);
  EXPECT_THAT(Decode(TOPK, TopK({1, 4}, {2.5f, -3.0f}), 6), ElementsAre(0, 2.5f, 0, 0, -3.0f, 0));
  EXPECT_THAT(Decode(TOPK, "", 3), ElementsAre(0, 0, 0));
}

TEST(ChunkCodecTest, DecodesLongChunksAcrossPieces) {
  // Longer than the decoder's stack buffer, so several pieces and run boundaries in between.
  std::vector<float> values(20000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) / 8;
  EXPECT_EQ(Decode(FLOAT16, Bytes(Halves(values, true)), 20000), values);
  std::vector<uint32_t> indices;
  std::vector<float> sparse;
  for (uint32_t i = 1; i < 20000; i += 3) {
    indices.push_back(i);
    sparse.push_back(values[i]);
  }
  const std::vector<float> got = Decode(TOPK, TopK(indices, sparse), 20000);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], i % 3 == 1 ? values[i] : 0.0f) << i;
}

absl::Status Shape(ValueEncoding encoding, const std::string& bytes, int64_t length) {
  return CheckChunkShape(encoding, Received(bytes).view(), length);
}

TEST(ChunkCodecTest, RefusesMalformedChunksSayingWhatIsWrong) {
  EXPECT_THAT(Shape(FLOAT32, std::string(19, 'x'), 5).message(), "got 19 bytes of data, expected 20 (5 floats)");
  EXPECT_THAT(Shape(FLOAT16, std::string(10, 'x'), 4).message(), "got 10 bytes of FLOAT16 data, expected 8 (4 values)");
  EXPECT_THAT(Shape(BFLOAT16, "", 1).message(), HasSubstr("got 0 bytes of BFLOAT16 data"));
  EXPECT_THAT(Shape(TOPK, std::string(12, 'x'), 4).message(), HasSubstr("expected 8 bytes per entry"));
  EXPECT_THAT(Shape(TOPK, TopK({0, 1, 2}, {1, 2, 3}), 2).message(), HasSubstr("at most 2 entries"));
  EXPECT_THAT(Shape(TOPK, TopK({0, 4}, {1, 2}), 4).message(), "top-k index 1 is 4, beyond the chunk's 4 values");
  EXPECT_THAT(Shape(TOPK, TopK({2, 2}, {1, 2}), 4).message(), "top-k index 1 is 2, not above the previous index 2");
  EXPECT_THAT(Shape(TOPK, TopK({3, 1}, {1, 2}), 4).message(), HasSubstr("not above the previous index 3"));
  const absl::Status unknown = Shape(static_cast<ValueEncoding>(9), "", 0);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("unknown value encoding 9"));
  EXPECT_TRUE(Shape(TOPK, TopK({0, 3}, {1, 2}), 4).ok());
}

int64_t NonFinite(ValueEncoding encoding, const std::string& bytes, int64_t length, float* bad) {
  Received in(bytes);
  EXPECT_TRUE(CheckChunkShape(encoding, in.view(), length).ok());
  return FindNonFiniteValue(encoding, in.view(), length, bad);
}

TEST(ChunkCodecTest, FindsTheFirstNonFiniteValue) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values(20000, 1.0f);
  float bad = 0;
  EXPECT_EQ(NonFinite(FLOAT16, Bytes(Halves(values, true)), 20000, &bad), -1);
  values[9000] = -inf;  // in the second piece
  values[12000] = std::nanf("");
  EXPECT_EQ(NonFinite(FLOAT16, Bytes(Halves(values, true)), 20000, &bad), 9000);
  EXPECT_EQ(bad, -inf);
  EXPECT_EQ(NonFinite(BFLOAT16, Bytes(Halves(values, false)), 20000, &bad), 9000);
  EXPECT_EQ(NonFinite(FLOAT32, Bytes(values), 20000, &bad), 9000);
  // Top-k reports the entry's index in the chunk, not its place in the list.
  EXPECT_EQ(NonFinite(TOPK, TopK({3, 17, 40}, {1, std::nanf(""), inf}), 50, &bad), 17);
  EXPECT_TRUE(std::isnan(bad));
  EXPECT_EQ(NonFinite(TOPK, TopK({3, 17}, {1, 2}), 50, &bad), -1);
}

TEST(ChunkCodecTest, EncodingsOfCompressionKinds) {
  EXPECT_EQ(EncodingOf(Compression::kNone), FLOAT32);
  EXPECT_EQ(EncodingOf(Compression::kFp16), FLOAT16);
  EXPECT_EQ(EncodingOf(Compression::kBf16), BFLOAT16);
  EXPECT_EQ(EncodingOf(Compression::kTopK), TOPK);
  EXPECT_EQ(EncodingName(TOPK), "TOPK");
  EXPECT_EQ(EncodingName(static_cast<ValueEncoding>(9)), "encoding 9");
}

}  // namespace
}  // namespace pstrain
