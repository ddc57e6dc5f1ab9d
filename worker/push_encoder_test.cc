#include "worker/push_encoder.h"

#include <cstring>
#include <vector>

#include "common/chunk_codec.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/layout_test_util.h"

namespace pstrain::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The two-tensor map, laid out.
struct Fixture : TwoTensorMap {
  ShardLayout layout;
  Fixture() : layout(*ShardLayout::Create(map, 2, params)) {}

  std::unique_ptr<PushEncoder> Encoder(const std::string& compression, absl::flat_hash_set<int> exact = {}) {
    absl::StatusOr<std::unique_ptr<PushEncoder>> encoder =
        PushEncoder::Create(*ParseCompression(compression), &layout, std::move(exact));
    CHECK(encoder.ok()) << encoder.status();
    return *std::move(encoder);
  }
};

// What a server makes of chunk i of `push`: its float32 values.
std::vector<float> Decoded(const OutgoingPush& push, int i) {
  const int64_t n = push.header.chunks(i).length();
  const PayloadView view(push.values[i]);
  EXPECT_TRUE(CheckChunkShape(push.header.chunks(i).encoding(), view, n).ok());
  std::vector<float> out(n);
  DecodeChunkValues(push.header.chunks(i).encoding(), view, n, out.data());
  return out;
}

TEST(PushEncoderTest, NoneLeavesThePushAlone) {
  Fixture f;
  std::vector<float> grad = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  OutgoingPush push;
  f.layout.FillPush(1, grad.data(), &push);
  ASSERT_TRUE(f.Encoder("none")->Encode(1, 0, &push).ok());
  EXPECT_EQ(push.header.chunks(0).encoding(), FLOAT32);
  EXPECT_EQ(push.values[0].data(), reinterpret_cast<const char*>(grad.data() + 4));
  EXPECT_EQ(push.values[1].data(), reinterpret_cast<const char*>(grad.data() + 6));
}

TEST(PushEncoderTest, HalfPrecisionSendsTwoBytesPerValue) {
  Fixture f;
  // Values exact in both fp16 and bf16, and one that only rounds.
  std::vector<float> grad = {0.5f, -1.25f, 3.0f, 1.0f / 3.0f, 0, 0, 0, 0, 0, 0};
  for (const char* kind : {"fp16", "bf16"}) {
    SCOPED_TRACE(kind);
    OutgoingPush push;
    f.layout.FillPush(0, grad.data(), &push);
    auto encoder = f.Encoder(kind);  // owns the encoded bytes
    ASSERT_TRUE(encoder->Encode(0, 0, &push).ok());
    EXPECT_EQ(push.header.chunks(0).encoding(), std::string(kind) == "fp16" ? FLOAT16 : BFLOAT16);
    EXPECT_EQ(push.values[0].size(), 8u);
    const std::vector<float> got = Decoded(push, 0);
    EXPECT_EQ(got[0], 0.5f);
    EXPECT_EQ(got[1], -1.25f);
    EXPECT_EQ(got[2], 3.0f);
    EXPECT_NEAR(got[3], 1.0f / 3.0f, std::string(kind) == "fp16" ? 1e-3 : 2e-3);
    EXPECT_NE(got[3], 1.0f / 3.0f);  // really rounded
  }
}

TEST(PushEncoderTest, AveragedTensorsGoAsFloat32WhateverTheCompression) {
  Fixture f;
  std::vector<float> grad = {0.5f, -1.25f, 3.0f, 1.0f / 3.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  for (const char* kind : {"fp16", "topk:0.5"}) {
    SCOPED_TRACE(kind);
    OutgoingPush push;
    f.layout.FillPush(1, grad.data(), &push);  // server 1: the rest of tensor 0, then tensor 1
    auto encoder = f.Encoder(kind, /*exact=*/{1});
    ASSERT_TRUE(encoder->Encode(1, 0, &push).ok());
    EXPECT_NE(push.header.chunks(0).encoding(), FLOAT32);  // tensor 0: compressed
    EXPECT_EQ(push.header.chunks(1).encoding(), FLOAT32);  // tensor 1: as it is
    EXPECT_EQ(push.values[1].data(), reinterpret_cast<const char*>(grad.data() + 6));
  }
}

TEST(PushEncoderTest, AChunkBeyondFp16sRangeGoesAsFloat32) {
  Fixture f;
  std::vector<float> grad = {0, 0, 0, 0, 1e6f, 1, 0.25f, 2, 3, 4};
  OutgoingPush push;
  f.layout.FillPush(1, grad.data(), &push);
  auto encoder = f.Encoder("fp16");
  ASSERT_TRUE(encoder->Encode(1, 0, &push).ok());
  EXPECT_EQ(push.header.chunks(0).encoding(), FLOAT32);  // a[4..6) holds 1e6
  EXPECT_THAT(Decoded(push, 0), ElementsAre(1e6f, 1.0f));
  EXPECT_EQ(push.header.chunks(1).encoding(), FLOAT16);  // b is fine
  EXPECT_THAT(Decoded(push, 1), ElementsAre(0.25f, 2.0f, 3.0f, 4.0f));
}

TEST(PushEncoderTest, TopKSendsTheLargestAndFeedsTheRestBack) {
  Fixture f;
  auto encoder = f.Encoder("topk:0.5");  // 2 of server 0's 4 values
  std::vector<float> grad = {1, -2, 3, 4, 0, 0, 0, 0, 0, 0};
  OutgoingPush push;
  auto step = [&](int64_t t) {
    f.layout.FillPush(0, grad.data(), &push);
    push.header.set_step(t);
    EXPECT_TRUE(encoder->Encode(0, 0, &push).ok());
    EXPECT_EQ(push.header.chunks(0).encoding(), TOPK);
    EXPECT_EQ(push.values[0].size(), 16u);  // 2 x (index, value)
    return Decoded(push, 0);
  };
  EXPECT_THAT(step(0), ElementsAre(0, 0, 3, 4));
  // The residual is now {1, -2, 0, 0}; with the gradient again: {2, -4, 3, 4}. Equal magnitudes
  // go in index order.
  EXPECT_THAT(step(1), ElementsAre(0, -4, 0, 4));
  // The same step again (a retry) sends the same values and leaves the residual as it was.
  EXPECT_THAT(step(1), ElementsAre(0, -4, 0, 4));
  // Residual {2, 0, 3, 0} + gradient: {3, -2, 6, 4}.
  EXPECT_THAT(step(2), ElementsAre(0, 0, 6, 4));
  // Over the three steps: sent {0, -4, 9, 12} + residual {3, -2, 0, 0} = 3 x gradient.
  // After a rollback the residual is gone and step 2 is compressed afresh.
  encoder->Reset();
  EXPECT_THAT(step(2), ElementsAre(0, 0, 3, 4));
}

TEST(PushEncoderTest, PartialPushesEncodeTheirOwnChunks) {
  Fixture f;
  auto encoder = f.Encoder("topk:0.25");  // 1 of b's 4 values, 1 of a[4..6)
  std::vector<float> grad = {0, 0, 0, 0, 0, 0, 1, -5, 2, 3};
  OutgoingPush push;
  f.layout.FillPartialPush(1, {/*first=*/1, /*count=*/1}, grad.data(), &push);
  ASSERT_TRUE(encoder->Encode(1, 1, &push).ok());
  ASSERT_EQ(push.header.chunks_size(), 1);
  EXPECT_EQ(push.header.chunks(0).tensor_id(), 1);
  EXPECT_THAT(Decoded(push, 0), ElementsAre(0, -5, 0, 0));
}

TEST(PushEncoderTest, TopKRefusesANonFiniteGradient) {
  Fixture f;
  auto encoder = f.Encoder("topk:0.5");
  std::vector<float> grad = {0, 0, 0, 0, 0, 0, 1, std::nanf(""), 2, 3};
  OutgoingPush push;
  f.layout.FillPush(1, grad.data(), &push);
  absl::Status status = encoder->Encode(1, 0, &push);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("push for tensor 'b' chunk at offset 0"));
  EXPECT_THAT(status.message(), HasSubstr("element 1"));
}

}  // namespace
}  // namespace pstrain::worker
