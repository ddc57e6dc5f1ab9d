// Compressed pushes (TensorChunk.encoding: FLOAT16, BFLOAT16, TOPK) against the store: decoded
// into float32 and summed like any push, and refused with nothing changed when malformed.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/compression.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace pstrain::server::store_test {
namespace {

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Re-encodes chunk `i` of `req` (float32 data) as `encoding`; for TOPK keeps the entries whose
// index is in `keep`.
void Encode(PushRequest* req, int i, ValueEncoding encoding, const std::vector<uint32_t>& keep = {}) {
  TensorChunk* chunk = req->mutable_chunks(i);
  const std::vector<float> values = Floats(chunk->data());
  chunk->set_encoding(encoding);
  if (encoding == TOPK) {
    std::vector<float> kept;
    for (uint32_t index : keep) kept.push_back(values[index]);
    chunk->set_data(RawBytes(keep) + RawBytes(kept));
    return;
  }
  std::vector<uint16_t> codes;
  for (float v : values) codes.push_back(encoding == FLOAT16 ? FloatToFp16(v) : FloatToBf16(v));
  chunk->set_data(RawBytes(codes));
}

// The float32 values a server takes `req`'s chunks for (what the encoding kept of them).
std::vector<float> Kept(const PushRequest& req, const std::vector<float>& grad) {
  std::vector<float> out;
  int64_t base = 0;
  for (const TensorChunk& chunk : req.chunks()) {
    for (int64_t j = 0; j < chunk.length(); ++j) {
      const float v = grad[base + j];
      switch (chunk.encoding()) {
        case FLOAT16:
          out.push_back(Fp16ToFloat(FloatToFp16(v)));
          break;
        case BFLOAT16:
          out.push_back(Bf16ToFloat(FloatToBf16(v)));
          break;
        default:
          out.push_back(v);
          break;
      }
    }
    if (chunk.encoding() == TOPK) {
      std::vector<float> dense(chunk.length(), 0.0f);
      const std::string& data = chunk.data();
      const size_t k = data.size() / 8;
      for (size_t e = 0; e < k; ++e) {
        uint32_t index;
        std::memcpy(&index, data.data() + 4 * e, 4);
        std::memcpy(&dense[index], data.data() + 4 * (k + e), 4);
      }
      std::copy(dense.begin(), dense.end(), out.end() - chunk.length());
    }
    base += chunk.length();
  }
  return out;
}

TEST(ParameterStoreEncodingTest, CompressedPushesAreSummedInFloat32) {
  // The same step twice: once with compressed pushes, once with the float32 values they carry.
  auto compressed = MakeStore(MakeOptions(SYNC, 2));
  auto plain = MakeStore(MakeOptions(SYNC, 2));
  const std::vector<float> g0 = WorkerGradient(0, 0);
  const std::vector<float> g1 = WorkerGradient(1, 0);
  PushRequest p0 = MakePush(0, 0, 1, g0);
  Encode(&p0, 0, FLOAT16);
  Encode(&p0, 1, BFLOAT16);
  PushRequest p1 = MakePush(1, 0, 3, g1);
  Encode(&p1, 0, TOPK, {2, 7, 19});
  Encode(&p1, 1, TOPK, {});
  ASSERT_TRUE(PushNow(*compressed, p0).ok());
  ASSERT_TRUE(PushNow(*compressed, p1).ok());
  ASSERT_TRUE(PushNow(*plain, MakePush(0, 0, 1, Kept(p0, g0))).ok());
  ASSERT_TRUE(PushNow(*plain, MakePush(1, 0, 3, Kept(p1, g1))).ok());
  EXPECT_EQ(compressed->step(), 1);
  EXPECT_EQ(Flat(compressed->Snapshot()), Flat(plain->Snapshot()));
  // And the encodings really dropped something: the weights differ from an exact step's.
  auto exact = MakeStore(MakeOptions(SYNC, 2));
  ASSERT_TRUE(PushNow(*exact, MakePush(0, 0, 1, g0)).ok());
  ASSERT_TRUE(PushNow(*exact, MakePush(1, 0, 3, g1)).ok());
  EXPECT_NE(Flat(compressed->Snapshot()), Flat(exact->Snapshot()));
}

TEST(ParameterStoreEncodingTest, AsyncTopKMovesOnlyTheEntriesSent) {
  auto store = MakeStore(MakeOptions(ASYNC, 1));
  const std::vector<float> before = Flat(store->Snapshot());
  PushRequest push = MakePush(0, 0, 1, std::vector<float>(25, 2.0f));
  Encode(&push, 0, TOPK, {0, 13});
  Encode(&push, 1, TOPK, {4});
  ASSERT_TRUE(PushNow(*store, push).ok());
  const std::vector<float> after = Flat(store->Snapshot());
  for (int i = 0; i < 25; ++i) {
    const bool sent = i == 0 || i == 13 || i == 24;
    EXPECT_EQ(after[i], sent ? before[i] - kLr * 2.0f : before[i]) << i;
  }
}

struct BadCase {
  const char* name;
  std::function<void(PushRequest*)> mutate;
  std::string message;
};

TEST(ParameterStoreEncodingTest, MalformedCompressedPushesAreRefusedAndChangeNothing) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<BadCase> cases = {
      {"fp16 short",
       [](PushRequest* r) {
         Encode(r, 0, FLOAT16);
         r->mutable_chunks(0)->mutable_data()->resize(38);
       },
       "push from worker 1 for tensor 'fc1.weight' chunk at offset 0: got 38 bytes of FLOAT16 data, expected 40 "
       "(20 values)"},
      {"fp16 inf",
       [&](PushRequest* r) {
         std::vector<float> v = Floats(r->chunks(1).data());
         v[3] = inf;
         r->mutable_chunks(1)->set_data(Bytes(v));
         Encode(r, 1, FLOAT16);
       },
       "push from worker 1 for tensor 'fc1.bias': element 3 is inf"},
      {"bf16 nan",
       [](PushRequest* r) {
         Encode(r, 0, BFLOAT16);
         const uint16_t nan = 0x7fc0;
         std::memcpy(r->mutable_chunks(0)->mutable_data()->data() + 2 * 11, &nan, 2);
       },
       "push from worker 1 for tensor 'fc1.weight': element 11 is nan"},
      {"top-k index beyond",
       [](PushRequest* r) {
         Encode(r, 1, TOPK, {1, 2});
         const uint32_t beyond = 5;
         std::memcpy(r->mutable_chunks(1)->mutable_data()->data() + 4, &beyond, 4);
       },
       "push from worker 1 for tensor 'fc1.bias' chunk at offset 0: top-k index 1 is 5, beyond the chunk's 5 values"},
      {"top-k unsorted",
       [](PushRequest* r) {
         Encode(r, 0, TOPK, {9, 3});
       },
       "top-k index 1 is 3, not above the previous index 9"},
      {"top-k nan value",
       [](PushRequest* r) {
         Encode(r, 0, TOPK, {4, 6});
         const float nan = std::numeric_limits<float>::quiet_NaN();
         std::memcpy(r->mutable_chunks(0)->mutable_data()->data() + 12, &nan, 4);
       },
       "push from worker 1 for tensor 'fc1.weight': element 6 is nan"},
      {"top-k ragged",
       [](PushRequest* r) {
         Encode(r, 0, TOPK, {4, 6});
         r->mutable_chunks(0)->mutable_data()->pop_back();
       },
       "got 15 bytes of TOPK data"},
      {"unknown encoding", [](PushRequest* r) { r->mutable_chunks(1)->set_encoding(static_cast<ValueEncoding>(12)); },
       "push from worker 1 for tensor 'fc1.bias' chunk at offset 0: unknown value encoding 12"},
  };
  const std::vector<float> grad = Filled(1.0f, 0.5f);
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    PushRequest req = MakePush(1, 0, 1, grad);
    c.mutate(&req);
    ExpectBadPushChangesNothing(req, absl::StatusCode::kInvalidArgument, c.message, grad);
  }
}

}  // namespace
}  // namespace pstrain::server::store_test
