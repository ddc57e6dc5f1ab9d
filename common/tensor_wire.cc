#include "common/tensor_wire.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

// Protobuf wire types and the field numbers this codec handles itself (proto/ps.proto).
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLen = 2;
constexpr int kFixed32 = 5;
constexpr int kPushChunksField = 7;   // PushRequest.chunks
constexpr int kPullChunksField = 2;   // PullResponse.chunks
constexpr int kChunkTensorIdField = 1;  // TensorChunk.tensor_id
constexpr int kChunkOffsetField = 2;    // TensorChunk.offset
constexpr int kChunkLengthField = 3;    // TensorChunk.length
constexpr int kChunkDataField = 4;      // TensorChunk.data
constexpr int kChunkEncodingField = 5;  // TensorChunk.encoding

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Reads a varint at `*pos` of a contiguous string (the encoder's own serialization).
uint64_t GetVarint(absl::string_view s, size_t* pos) {
  uint64_t v = 0;
  for (int shift = 0; *pos < s.size(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(s[(*pos)++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  return v;
}

// Skips the value of a field of `wire_type` in a contiguous, valid serialization.
void SkipValue(absl::string_view s, int wire_type, size_t* pos) {
  switch (wire_type) {
    case kVarint: GetVarint(s, pos); break;
    case kFixed64: *pos += 8; break;
    case kLen: *pos += GetVarint(s, pos); break;
    case kFixed32: *pos += 4; break;
    default: LOG(FATAL) << "wire type " << wire_type << " in our own serialization";
  }
}

// Serializes `header` (whose chunks carry no data) and splices each chunk's values in after its
// header fields: the chunk's length prefix grows by the data field, and the values follow as a
// slice of their own.
template <typename Message, typename BytesOf, typename MakeSlice>
void EncodeWithValues(const Message& header, int chunks_field, BytesOf bytes_of, MakeSlice make_slice,
                      grpc::ByteBuffer* out) {
  const std::string serialized = header.SerializeAsString();
  std::vector<grpc::Slice> slices;
  std::string pending;  // header bytes not yet in a slice
  int chunk = 0;
  size_t pos = 0;
  while (pos < serialized.size()) {
    const size_t field_start = pos;
    const uint64_t tag = GetVarint(serialized, &pos);
    const int field = static_cast<int>(tag >> 3);
    const int wire_type = static_cast<int>(tag & 7);
    if (field != chunks_field || wire_type != kLen) {
      SkipValue(serialized, wire_type, &pos);
      pending.append(serialized, field_start, pos - field_start);
      continue;
    }
    const uint64_t sub_size = GetVarint(serialized, &pos);
    const size_t bytes = bytes_of(chunk);
    const uint64_t data_field = (kChunkDataField << 3) | kLen;
    PutVarint(tag, &pending);
    // Empty data is left out, as protobuf does for an empty proto3 bytes field.
    PutVarint(bytes == 0 ? sub_size : sub_size + VarintSize(data_field) + VarintSize(bytes) + bytes, &pending);
    pending.append(serialized, pos, sub_size);
    if (bytes > 0) {
      PutVarint(data_field, &pending);
      PutVarint(bytes, &pending);
    }
    pos += sub_size;
    slices.emplace_back(pending.data(), pending.size());  // copies the few header bytes
    pending.clear();
    if (bytes > 0) slices.push_back(make_slice(chunk, bytes));
    ++chunk;
  }
  if (!pending.empty()) slices.emplace_back(pending.data(), pending.size());
  CHECK_EQ(chunk, header.chunks_size());
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  out->Swap(&buffer);
}

// Reads a received message over its slices, keeping track of the absolute byte position for
// error messages.
class Reader {
 public:
  Reader(const std::vector<grpc::Slice>& slices, absl::string_view what) : what_(what) {
    for (const grpc::Slice& s : slices) {
      if (s.size() > 0) runs_.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }

  bool done() const { return run_ == runs_.size(); }
  size_t position() const { return position_; }

  absl::Status Varint(uint64_t* v) {
    const size_t start = position_;
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) return Error(start, "truncated varint");
      const uint8_t b = static_cast<uint8_t>(runs_[run_][offset_]);
      Advance(1);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return absl::OkStatus();
    }
    return Error(start, "varint longer than 10 bytes");
  }

  // Takes the next n bytes as runs appended to `view` (no copy).
  absl::Status Take(uint64_t n, PayloadView* view) {
    const size_t start = position_;
    while (n > 0) {
      if (done()) return Error(start, absl::StrCat("field runs past the end of the message (", n, " bytes missing)"));
      const size_t here = std::min<uint64_t>(n, runs_[run_].size() - offset_);
      view->Append(runs_[run_].substr(offset_, here));
      Advance(here);
      n -= here;
    }
    return absl::OkStatus();
  }

  // Takes the next n bytes, copied onto `out`.
  absl::Status Copy(uint64_t n, std::string* out) {
    PayloadView view;
    RETURN_IF_ERROR(Take(n, &view));
    for (absl::string_view run : view.runs()) out->append(run.data(), run.size());
    return absl::OkStatus();
  }

  // Copies the value of a field of `wire_type` (its tag already read) onto `out`.
  absl::Status CopyValue(int wire_type, std::string* out) {
    const size_t start = position_;
    switch (wire_type) {
      case kVarint: {
        uint64_t v;
        RETURN_IF_ERROR(Varint(&v));
        PutVarint(v, out);
        return absl::OkStatus();
      }
      case kFixed64: return Copy(8, out);
      case kFixed32: return Copy(4, out);
      case kLen: {
        uint64_t n;
        RETURN_IF_ERROR(Varint(&n));
        PutVarint(n, out);
        return Copy(n, out);
      }
      default: return Error(start, absl::StrCat("unsupported wire type ", wire_type, " (groups are not used)"));
    }
  }

  absl::Status Error(size_t at, absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": malformed message at byte ", at, ": ", problem));
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    position_ += n;
    while (run_ < runs_.size() && offset_ == runs_[run_].size()) {
      ++run_;
      offset_ = 0;
    }
  }

  const absl::string_view what_;
  std::vector<absl::string_view> runs_;
  size_t run_ = 0;
  size_t offset_ = 0;
  size_t position_ = 0;
};

// Decodes one chunk of `size` bytes: its header fields go to `chunk`, its data to `view`.
absl::Status DecodeChunk(Reader& reader, uint64_t size, int index, TensorChunk* chunk, PayloadView* view) {
  const size_t start = reader.position();
  std::string fields;
  while (reader.position() - start < size) {
    const size_t field_start = reader.position();
    uint64_t tag;
    RETURN_IF_ERROR(reader.Varint(&tag));
    const int field = static_cast<int>(tag >> 3);
    const int wire_type = static_cast<int>(tag & 7);
    if (wire_type == kVarint &&
        ((field >= kChunkTensorIdField && field <= kChunkLengthField) || field == kChunkEncodingField)) {
      // The header fields of every chunk, set directly (no parse of a string per chunk).
      uint64_t v;
      RETURN_IF_ERROR(reader.Varint(&v));
      if (field == kChunkTensorIdField) chunk->set_tensor_id(static_cast<int32_t>(v));
      if (field == kChunkOffsetField) chunk->set_offset(static_cast<int64_t>(v));
      if (field == kChunkLengthField) chunk->set_length(static_cast<int64_t>(v));
      // An open enum, as in protobuf: an unknown value is kept for the server to refuse.
      if (field == kChunkEncodingField) chunk->set_encoding(static_cast<ValueEncoding>(static_cast<int32_t>(v)));
      continue;
    }
    if (field == kChunkDataField && wire_type == kLen) {
      uint64_t n;
      RETURN_IF_ERROR(reader.Varint(&n));
      if (reader.position() - start + n > size) {
        return reader.Error(field_start, absl::StrCat("chunk ", index, ": data of ", n, " bytes runs past the chunk"));
      }
      view->Clear();  // the last occurrence wins, as in protobuf
      RETURN_IF_ERROR(reader.Take(n, view));
      continue;
    }
    PutVarint(tag, &fields);
    RETURN_IF_ERROR(reader.CopyValue(wire_type, &fields));
  }
  if (reader.position() - start != size) {
    return reader.Error(start, absl::StrCat("chunk ", index, ": fields run past its length of ", size, " bytes"));
  }
  // Anything else (fields a newer peer may send) goes through protobuf.
  if (!fields.empty() && !chunk->MergeFromString(fields)) {
    return reader.Error(start, absl::StrCat("chunk ", index, ": not a valid TensorChunk"));
  }
  return absl::OkStatus();
}

// The received bytes of a decoded message: gRPC's slices, kept in the message's holder (reused
// from the last message decoded into it when that was one of ours).
struct GrpcSlices : ReceivedBytes {
  std::vector<grpc::Slice> slices;
};

std::vector<grpc::Slice>* SlicesOf(std::unique_ptr<ReceivedBytes>* bytes) {
  auto* held = dynamic_cast<GrpcSlices*>(bytes->get());
  if (held == nullptr) {
    auto fresh = std::make_unique<GrpcSlices>();
    held = fresh.get();
    *bytes = std::move(fresh);
  }
  return &held->slices;
}

template <typename Message>
absl::Status DecodeWithValues(const grpc::ByteBuffer& in, absl::string_view what, int chunks_field, Message* header,
                              std::vector<PayloadView>* values, std::vector<grpc::Slice>* slices) {
  header->Clear();
  values->clear();
  slices->clear();
  if (!in.Dump(slices).ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": unreadable message"));
  Reader reader(*slices, what);
  std::string rest;  // every field but the chunks, for protobuf to parse
  while (!reader.done()) {
    const size_t field_start = reader.position();
    uint64_t tag;
    RETURN_IF_ERROR(reader.Varint(&tag));
    const int field = static_cast<int>(tag >> 3);
    const int wire_type = static_cast<int>(tag & 7);
    if (field == 0) return reader.Error(field_start, "field number 0");
    if (field != chunks_field) {
      PutVarint(tag, &rest);
      RETURN_IF_ERROR(reader.CopyValue(wire_type, &rest));
      continue;
    }
    if (wire_type != kLen) {
      return reader.Error(field_start, absl::StrCat("chunks (field ", chunks_field, ") with wire type ", wire_type,
                                                    ", expected 2 (a message)"));
    }
    uint64_t size;
    RETURN_IF_ERROR(reader.Varint(&size));
    values->emplace_back();
    RETURN_IF_ERROR(DecodeChunk(reader, size, header->chunks_size(), header->add_chunks(), &values->back()));
  }
  // Chunks parsed above come first; protobuf merges the scalar fields in after.
  if (!header->MergeFromString(rest)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": malformed message: its scalar fields do not parse"));
  }
  return absl::OkStatus();
}

}  // namespace

void EncodePush(const OutgoingPush& push, grpc::ByteBuffer* out) {
  CHECK_EQ(static_cast<int>(push.values.size()), push.header.chunks_size());
  EncodeWithValues(
      push.header, kPushChunksField, [&push](int chunk) { return push.values[chunk].size(); },
      [&push](int chunk, size_t bytes) {
        return grpc::Slice(push.values[chunk].data(), bytes, grpc::Slice::STATIC_SLICE);
      },
      out);
}

void EncodePull(const PullResponse& header, PooledBuffer values, grpc::ByteBuffer* out) {
  // One refcounted slice owns the buffer; every chunk is a sub-slice of it, so the buffer goes back
  // to the pool when the last of them is released.
  const size_t total = values.size();
  auto* owned = new PooledBuffer(std::move(values));
  grpc::Slice whole(owned->data(), total, [](void* p) { delete static_cast<PooledBuffer*>(p); }, owned);
  size_t offset = 0;
  EncodeWithValues(
      header, kPullChunksField, [&header](int chunk) { return 4 * static_cast<size_t>(header.chunks(chunk).length()); },
      [&whole, &offset](int, size_t bytes) {
        grpc::Slice s = whole.sub(offset, offset + bytes);
        offset += bytes;
        return s;
      },
      out);
  CHECK_LE(offset, total);
}

absl::Status DecodePush(const grpc::ByteBuffer& in, absl::string_view what, IncomingPush* out) {
  return DecodeWithValues(in, what, kPushChunksField, &out->header, &out->values, SlicesOf(&out->bytes));
}

absl::Status DecodePull(const grpc::ByteBuffer& in, absl::string_view what, IncomingPull* out) {
  return DecodeWithValues(in, what, kPullChunksField, &out->header, &out->values, SlicesOf(&out->bytes));
}

void EncodeMessage(const google::protobuf::MessageLite& message, grpc::ByteBuffer* out) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes.data(), bytes.size());
  grpc::ByteBuffer buffer(&slice, 1);
  out->Swap(&buffer);
}

absl::Status DecodeMessage(const grpc::ByteBuffer& in, absl::string_view what, google::protobuf::MessageLite* out) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (in.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    if (out->ParseFromString(bytes)) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(what, ": not a valid ", out->GetTypeName()));
}

}  // namespace pstrain
