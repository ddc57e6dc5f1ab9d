// The zero-copy codec must produce and accept exactly the protobuf encoding of proto/ps.proto.
#include "transport/tensor_wire.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::vector<float> Ramp(int n, float start) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + 0.25f * i;
  return v;
}

// A push with every kind of header field set and chunks of several sizes (one empty).
OutgoingPush SamplePush(const std::vector<std::vector<float>>& values) {
  OutgoingPush push;
  push.header.set_worker_rank(3);
  push.header.set_membership_epoch(12);
  push.header.set_step(77);
  push.header.set_num_samples(64);
  push.header.set_request_id(0xfedcba9876543210ull);
  push.header.set_shard(1);
  push.header.set_partial(true);
  push.header.set_first_chunk(2);
  push.header.set_shard_map_version(5);  // field 29, after the chunks and rows
  for (size_t i = 0; i < values.size(); ++i) {
    TensorChunk* c = push.header.add_chunks();
    c->set_tensor_id(static_cast<int>(i));
    c->set_offset(1000 * static_cast<int64_t>(i));
    c->set_length(static_cast<int64_t>(values[i].size()));
    push.values.push_back(Floats(values[i].data(), static_cast<int64_t>(values[i].size())));
  }
  return push;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` as a ByteBuffer of slices of `piece` bytes each: receivers must not care where gRPC
// cut the message.
grpc::ByteBuffer Pieces(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(TensorWireTest, EncodedPushIsExactlyTheProtobufEncoding) {
  const std::vector<std::vector<float>> values = {Ramp(5, 1), {}, Ramp(300, -7), Ramp(1, 42)};
  const OutgoingPush push = SamplePush(values);
  grpc::ByteBuffer buffer;
  EncodePush(push, &buffer);
  // (EXPECT_TRUE: a mismatch would print kilobytes of bytes.)
  EXPECT_TRUE(Flatten(buffer) == Materialize(push).SerializeAsString());
}

TEST(TensorWireTest, EncodedPullIsExactlyTheProtobufEncodingAndReturnsItsBuffer) {
  BufferPool pool;
  PullResponse header;
  header.set_step(9);
  const std::vector<float> weights = Ramp(700, 3);
  for (int i = 0; i < 3; ++i) {
    TensorChunk* c = header.add_chunks();
    c->set_tensor_id(i);
    c->set_length(i == 1 ? 100 : 300);
  }
  PullResponse expected = header;
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t bytes = 4 * expected.chunks(i).length();
    expected.mutable_chunks(i)->set_data(reinterpret_cast<const char*>(weights.data()) + at, bytes);
    at += bytes;
  }
  for (int round = 0; round < 3; ++round) {
    PooledBuffer values = pool.Acquire(4 * weights.size());
    std::memcpy(values.data(), weights.data(), 4 * weights.size());
    grpc::ByteBuffer buffer;
    EncodePull(header, std::move(values), &buffer);
    EXPECT_TRUE(Flatten(buffer) == expected.SerializeAsString()) << round;
  }
  // Each round's buffer went back to the pool once its ByteBuffer was gone.
  EXPECT_EQ(pool.allocations(), 1);
}

TEST(TensorWireTest, DecodesWhereverTheMessageIsCut) {
  const std::vector<std::vector<float>> values = {Ramp(5, 1), {}, Ramp(37, -7)};
  const PushRequest full = Materialize(SamplePush(values));
  const std::string bytes = full.SerializeAsString();
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, size_t{64}, bytes.size()}) {
    IncomingPush in;
    ASSERT_TRUE(DecodePush(Pieces(bytes, piece), "push", &in).ok()) << piece;
    PushRequest header = full;
    for (TensorChunk& c : *header.mutable_chunks()) c.clear_data();
    EXPECT_EQ(in.header.SerializeAsString(), header.SerializeAsString()) << piece;
    ASSERT_EQ(in.values.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      std::vector<float> got(in.values[i].size() / 4);
      ASSERT_EQ(in.values[i].size(), 4 * values[i].size());
      in.values[i].CopyTo(got.data());
      EXPECT_EQ(got, values[i]) << "chunk " << i << ", pieces of " << piece;
    }
  }
}

TEST(TensorWireTest, PullRoundTripsThroughTheDecoder) {
  PullResponse response;
  response.set_step(4);
  TensorChunk* c = response.add_chunks();
  c->set_tensor_id(2);
  c->set_offset(8);
  c->set_length(3);
  const std::vector<float> v = {1.5f, -2, 1e-30f};
  c->set_data(reinterpret_cast<const char*>(v.data()), 12);
  IncomingPull in;
  ASSERT_TRUE(DecodePull(Pieces(response.SerializeAsString(), 5), "pull", &in).ok());
  EXPECT_EQ(Materialize(in).SerializeAsString(), response.SerializeAsString());
  EXPECT_EQ(in.header.chunks(0).data(), "");
}

TEST(TensorWireTest, ChunkFieldsUnknownToThisCodecStillReachTheHeader) {
  // A chunk with its header fields out of order, a negative tensor id, and a field this codec does
  // not handle itself (a newer peer's): each ends up where protobuf would put it.
  TensorChunk extra;
  extra.set_data(std::string(8, 'v'));
  std::string chunk_bytes = extra.SerializeAsString();
  TensorChunk fields;
  fields.set_length(2);
  fields.set_offset(40);
  fields.set_tensor_id(-3);
  chunk_bytes = fields.SerializeAsString() + chunk_bytes + std::string("\x2d\x01\x02\x03\x04", 5);  // field 5, fixed32
  std::string message = std::string("\x3a", 1) + static_cast<char>(chunk_bytes.size()) + chunk_bytes;
  IncomingPush in;
  ASSERT_TRUE(DecodePush(Pieces(message, 3), "push", &in).ok());
  ASSERT_EQ(in.header.chunks_size(), 1);
  EXPECT_EQ(in.header.chunks(0).tensor_id(), -3);
  EXPECT_EQ(in.header.chunks(0).offset(), 40);
  EXPECT_EQ(in.header.chunks(0).length(), 2);
  EXPECT_EQ(in.values[0].size(), 8u);
}

TEST(TensorWireTest, MalformedBytesGetAPreciseError) {
  PushRequest only_chunks;  // so that the message ends inside the chunk's data
  TensorChunk* chunk = only_chunks.add_chunks();
  chunk->set_length(4);
  chunk->set_data(std::string(16, 'x'));
  const std::string good = only_chunks.SerializeAsString();
  IncomingPush in;
  // Cut inside the chunk's data.
  absl::Status s = DecodePush(Pieces(good.substr(0, good.size() - 3), 4), "push from worker 3", &in);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("push from worker 3: malformed message at byte"));
  EXPECT_THAT(s.message(), HasSubstr("runs past"));
  // A truncated varint.
  s = DecodePush(Pieces(std::string("\x08\xff", 2), 1), "push", &in);
  EXPECT_THAT(s.message(), HasSubstr("truncated varint"));
  // Chunks (field 7) sent as a varint.
  s = DecodePush(Pieces(std::string("\x38\x01", 2), 1), "push", &in);
  EXPECT_THAT(s.message(), HasSubstr("chunks (field 7) with wire type 0"));
  // A group.
  s = DecodePush(Pieces(std::string("\x0b", 1), 1), "push", &in);
  EXPECT_THAT(s.message(), HasSubstr("unsupported wire type 3"));
  // A chunk whose own length is shorter than its fields.
  s = DecodePush(Pieces(std::string("\x3a\x02\x08\x96\x01", 5), 2), "push", &in);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(TensorWireTest, FindsNonFiniteValuesAcrossRunBoundaries) {
  std::vector<float> v = Ramp(3000, 0);
  v[2049] = std::numeric_limits<float>::quiet_NaN();
  v[2500] = -std::numeric_limits<float>::infinity();
  const std::string bytes(reinterpret_cast<const char*>(v.data()), 4 * v.size());
  for (size_t cut : {size_t{1}, size_t{2}, size_t{4099}, size_t{8197}, bytes.size()}) {
    PayloadView view;
    for (size_t at = 0; at < bytes.size(); at += cut) {
      view.Append(absl::string_view(bytes).substr(at, cut));
    }
    float bad = 0;
    EXPECT_EQ(view.FindNonFinite(&bad), 2049) << cut;
    EXPECT_TRUE(std::isnan(bad));
  }
  EXPECT_EQ(NonFiniteName(-std::numeric_limits<float>::infinity()), "-inf");
  // Unaligned bytes, and only the first n values are looked at.
  std::string shifted = "x" + bytes;
  EXPECT_EQ(FindNonFinite(shifted.data() + 1, 3000), 2049);
  EXPECT_EQ(FindNonFinite(shifted.data() + 1, 2049), -1);
  PayloadView clean(absl::string_view(bytes).substr(0, 4 * 2049));
  float bad = 0;
  EXPECT_EQ(clean.FindNonFinite(&bad), -1);
}

// ---------------------------------------------------------------------------------------------
// Embedding rows (SparseRows) outside protobuf.

std::string KeyBytes(const std::vector<uint64_t>& keys) {
  return std::string(reinterpret_cast<const char*>(keys.data()), 8 * keys.size());
}
std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size());
}
std::string Copy(const PayloadView& view) {
  std::string out(view.size(), '\0');
  view.CopyTo(out.data());
  return out;
}

TEST(TensorWireTest, EncodedPushWithRowsIsExactlyTheProtobufEncoding) {
  const std::vector<std::vector<float>> values = {Ramp(5, 1), Ramp(3, 2)};
  OutgoingPush push = SamplePush(values);
  push.header.set_partial(false);
  // An entry the header holds itself comes first, as it would in protobuf.
  SparseRows* own = push.header.add_sparse();
  own->set_table_id(4);
  own->set_keys(KeyBytes({1}));
  own->set_rows(FloatBytes({0.5f}));
  const std::string keys_a = KeyBytes({3, 9, 12});
  const std::string rows_a = FloatBytes(Ramp(6, -1));
  const std::string keys_b = KeyBytes({7});
  push.sparse.push_back({0, keys_a, rows_a});  // table 0: no table_id on the wire
  push.sparse.push_back({2, keys_b, ""});      // no rows: left out
  push.pull_sparse.push_back({1, keys_a, ""});
  grpc::ByteBuffer buffer;
  EncodePush(push, &buffer);
  EXPECT_TRUE(Flatten(buffer) == Materialize(push).SerializeAsString());
}

TEST(TensorWireTest, EncodedPullWithRowsIsExactlyTheProtobufEncodingAndReturnsItsBuffers) {
  BufferPool pool;
  PullResponse header;
  header.set_step(4);
  header.add_chunks()->set_length(3);
  const std::vector<float> weights = Ramp(3, 1);
  PooledBuffer values = pool.Acquire(12);
  std::memcpy(values.data(), weights.data(), 12);
  // Two tables' keys and rows back to back in one buffer, as SparseShard::Read lays them out.
  const std::string bytes = KeyBytes({5, 6}) + FloatBytes(Ramp(4, 9)) + KeyBytes({8}) + FloatBytes(Ramp(2, -3));
  OutgoingRowsAnswer rows;
  rows.bytes = pool.Acquire(bytes.size());
  std::memcpy(rows.bytes.data(), bytes.data(), bytes.size());
  rows.entries.push_back({1, 0, 16, 16, 16});
  rows.entries.push_back({0, 32, 8, 40, 8});
  grpc::ByteBuffer buffer;
  EncodePull(header, std::move(values), std::move(rows), &buffer);
  PullResponse expected = header;
  expected.mutable_chunks(0)->set_data(FloatBytes(weights));
  SparseRows* a = expected.add_sparse();
  a->set_table_id(1);
  a->set_keys(KeyBytes({5, 6}));
  a->set_rows(FloatBytes(Ramp(4, 9)));
  SparseRows* b = expected.add_sparse();
  b->set_keys(KeyBytes({8}));
  b->set_rows(FloatBytes(Ramp(2, -3)));
  EXPECT_TRUE(Flatten(buffer) == expected.SerializeAsString());
  buffer.Clear();
  // Both buffers went back to the pool: the same sizes come from it again without allocating.
  const int64_t allocated = pool.allocations();
  PooledBuffer again = pool.Acquire(12);
  PooledBuffer again_rows = pool.Acquire(bytes.size());
  EXPECT_EQ(pool.allocations(), allocated);
}

TEST(TensorWireTest, PushRowsRoundTripWhereverTheMessageIsCut) {
  const std::vector<std::vector<float>> values = {Ramp(4, 0)};  // the push points into them
  OutgoingPush push = SamplePush(values);
  push.header.set_partial(false);
  const std::string keys = KeyBytes({11, 13, 17});
  const std::string rows = FloatBytes(Ramp(12, 0.5f));
  push.sparse.push_back({3, keys, rows});
  push.pull_sparse.push_back({0, keys, ""});
  grpc::ByteBuffer buffer;
  EncodePush(push, &buffer);
  const std::string bytes = Flatten(buffer);
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, bytes.size()}) {
    IncomingPush in;
    ASSERT_TRUE(DecodePush(Pieces(bytes, piece), "push", &in).ok()) << piece;
    EXPECT_EQ(in.header.sparse_size(), 0);  // the rows are in `sparse`, not copied into the header
    EXPECT_EQ(in.header.num_samples(), 64);
    ASSERT_EQ(in.sparse.size(), 1u);
    EXPECT_EQ(in.sparse[0].table_id, 3);
    EXPECT_EQ(Copy(in.sparse[0].keys), keys);
    EXPECT_EQ(Copy(in.sparse[0].rows), rows);
    ASSERT_EQ(in.pull_sparse.size(), 1u);
    EXPECT_EQ(in.pull_sparse[0].table_id, 0);
    EXPECT_EQ(Copy(in.pull_sparse[0].keys), keys);
    EXPECT_EQ(in.pull_sparse[0].rows.size(), 0u);
    ASSERT_EQ(in.values.size(), 1u);
    EXPECT_EQ(in.values[0].size(), 16u);
  }
}

TEST(TensorWireTest, PullRequestKeysArriveAsViews) {
  PullRequest req;  // as any protobuf client (tests/py_client) sends it
  req.set_worker_rank(2);
  req.set_step(5);
  req.set_shard(1);
  req.set_rows_only(true);
  SparseRows* entry = req.add_sparse();
  entry->set_table_id(1);
  entry->set_keys(KeyBytes({1, 2, 3, 4}));
  const std::string bytes = req.SerializeAsString();
  for (size_t piece : {size_t{1}, size_t{5}, bytes.size()}) {
    IncomingPullRequest in;
    ASSERT_TRUE(DecodePullRequest(Pieces(bytes, piece), "pull", &in).ok()) << piece;
    EXPECT_EQ(in.header.worker_rank(), 2);
    EXPECT_EQ(in.header.step(), 5);
    EXPECT_EQ(in.header.shard(), 1);
    EXPECT_TRUE(in.header.rows_only());
    EXPECT_EQ(in.header.sparse_size(), 0);
    ASSERT_EQ(in.sparse.size(), 1u);
    EXPECT_EQ(in.sparse[0].table_id, 1);
    EXPECT_EQ(Copy(in.sparse[0].keys), KeyBytes({1, 2, 3, 4}));
  }
}

TEST(TensorWireTest, PulledRowsRoundTripAndMaterialize) {
  PullResponse answer;
  answer.set_step(3);
  SparseRows* entry = answer.add_sparse();
  entry->set_table_id(2);
  entry->set_keys(KeyBytes({40, 41}));
  entry->set_rows(FloatBytes(Ramp(6, 2)));
  const std::string bytes = answer.SerializeAsString();
  IncomingPull in;
  ASSERT_TRUE(DecodePull(Pieces(bytes, 6), "answer", &in).ok());
  EXPECT_EQ(in.header.sparse_size(), 0);
  ASSERT_EQ(in.sparse.size(), 1u);
  EXPECT_TRUE(Materialize(in).SerializeAsString() == bytes);
  // SparseOf gives the same views whichever place a transport put the rows in.
  ASSERT_EQ(SparseOf(in).size(), 1u);
  IncomingPull in_header;
  in_header.header = answer;
  ASSERT_EQ(SparseOf(in_header).size(), 1u);
  EXPECT_EQ(Copy(SparseOf(in_header)[0].rows), FloatBytes(Ramp(6, 2)));
}

TEST(TensorWireTest, MalformedSparseEntriesGetAPreciseError) {
  IncomingPush in;
  // Sparse entries (field 25, tag 0xca 0x01) sent as a varint.
  absl::Status s = DecodePush(Pieces(std::string("\xc8\x01\x01", 3), 1), "push from worker 1", &in);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("push from worker 1: malformed message at byte 0: sparse entries (field 25) "
                                     "with wire type 0"));
  // An entry of 4 bytes whose keys claim 8.
  s = DecodePush(Pieces(std::string("\xca\x01\x04\x12\x08\x01\x02", 7), 2), "push", &in);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sparse entry 0: keys of 8 bytes run past the entry"));
  // The message ends inside the rows.
  PullResponse answer;
  answer.add_sparse()->set_rows(FloatBytes(Ramp(4, 0)));
  const std::string good = answer.SerializeAsString();
  IncomingPull pull;
  s = DecodePull(Pieces(good.substr(0, good.size() - 5), 3), "answer", &pull);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("runs past the end of the message"));
  // table_id (field 1) as bytes.
  IncomingPullRequest req;
  s = DecodePullRequest(Pieces(std::string("\x5a\x03\x0a\x01\x00", 5), 1), "pull", &req);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sparse entry 0: field 1 with wire type 2 is not a field of SparseRows"));
  // Garbage: a truncated varint inside an entry.
  s = DecodePullRequest(Pieces(std::string("\x5a\x02\x08\xff", 4), 1), "pull", &req);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("truncated varint"));
  // A field a newer peer may add to SparseRows is skipped.
  s = DecodePullRequest(Pieces(std::string("\x5a\x04\x08\x02\x20\x07", 6), 1), "pull", &req);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(req.sparse.size(), 1u);
  EXPECT_EQ(req.sparse[0].table_id, 2);
}

}  // namespace
}  // namespace pstrain
