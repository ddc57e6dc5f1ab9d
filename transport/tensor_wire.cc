#include "transport/tensor_wire.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/container/inlined_vector.h"
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
constexpr int kPushChunksField = 7;          // PushRequest.chunks
constexpr int kPullChunksField = 2;          // PullResponse.chunks
constexpr int kChunkTensorIdField = 1;       // TensorChunk.tensor_id
constexpr int kChunkOffsetField = 2;         // TensorChunk.offset
constexpr int kChunkLengthField = 3;         // TensorChunk.length
constexpr int kChunkDataField = 4;           // TensorChunk.data
constexpr int kChunkEncodingField = 5;       // TensorChunk.encoding
constexpr int kPushSparseField = 25;         // PushRequest.sparse
constexpr int kPushPullSparseField = 26;     // PushRequest.pull_sparse
constexpr int kPullSparseField = 3;          // PullResponse.sparse
constexpr int kPullRequestSparseField = 11;  // PullRequest.sparse
constexpr int kRowsTableIdField = 1;         // SparseRows.table_id
constexpr int kRowsKeysField = 2;            // SparseRows.keys
constexpr int kRowsRowsField = 3;            // SparseRows.rows

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
    case kVarint:
      GetVarint(s, pos);
      break;
    case kFixed64:
      *pos += 8;
      break;
    case kLen:
      *pos += GetVarint(s, pos);
      break;
    case kFixed32:
      *pos += 4;
      break;
    default:
      LOG(FATAL) << "wire type " << wire_type << " in our own serialization";
  }
}

// Bytes the encoder sends without copying them into the message: a LEN field of an embedded
// message (a chunk's data, a sparse entry's keys or rows) whose value is one slice.
struct Tail {
  int field;
  grpc::Slice slice;
};
using Tails = absl::InlinedVector<Tail, 2>;

// A top-level LEN field the encoder adds after the serialized header: an embedded message whose
// scalar fields are `fields` (serialized) followed by `tails`.
struct Extra {
  int field;
  std::string fields;
  Tails tails;
};

// The encoded size of `tails` (empty ones are left out, as protobuf does for an empty proto3
// bytes field).
size_t TailsSize(const Tails& tails) {
  size_t n = 0;
  for (const Tail& t : tails) {
    if (t.slice.size() == 0) continue;
    n += VarintSize((t.field << 3) | kLen) + VarintSize(t.slice.size()) + t.slice.size();
  }
  return n;
}

// Builds a ByteBuffer from header bytes (copied, they are few) and tails (not copied).
class SliceList {
 public:
  std::string& pending() { return pending_; }
  void AddTails(Tails tails) {
    for (Tail& t : tails) {
      if (t.slice.size() == 0) continue;
      PutVarint((t.field << 3) | kLen, &pending_);
      PutVarint(t.slice.size(), &pending_);
      Flush();
      slices_.push_back(std::move(t.slice));
    }
  }
  void AddExtra(Extra extra) {
    PutVarint((extra.field << 3) | kLen, &pending_);
    PutVarint(extra.fields.size() + TailsSize(extra.tails), &pending_);
    pending_.append(extra.fields);
    AddTails(std::move(extra.tails));
  }
  void Finish(grpc::ByteBuffer* out) {
    Flush();
    grpc::ByteBuffer buffer(slices_.data(), slices_.size());
    out->Swap(&buffer);
  }

 private:
  void Flush() {
    if (pending_.empty()) return;
    slices_.emplace_back(pending_.data(), pending_.size());  // copies the few header bytes
    pending_.clear();
  }
  std::vector<grpc::Slice> slices_;
  std::string pending_;  // header bytes not yet in a slice
};

// Serializes `header` and splices in what protobuf would not hold without a copy: inside the
// index-th occurrence of each top-level LEN field `field`, after the fields the header has there,
// tails_of(field, index); and `extras` (ascending by field) as more top-level fields, each before
// the first header field of a higher number, so the fields stay in protobuf's own order.
template <typename TailsOf>
void Splice(const google::protobuf::MessageLite& header, TailsOf tails_of, std::vector<Extra> extras,
            grpc::ByteBuffer* out) {
  const std::string serialized = header.SerializeAsString();
  SliceList list;
  size_t next_extra = 0;
  absl::InlinedVector<int, 32> seen;  // occurrences so far, by field number
  size_t pos = 0;
  while (pos < serialized.size()) {
    const size_t field_start = pos;
    const uint64_t tag = GetVarint(serialized, &pos);
    const int field = static_cast<int>(tag >> 3);
    const int wire_type = static_cast<int>(tag & 7);
    while (next_extra < extras.size() && extras[next_extra].field < field)
      list.AddExtra(std::move(extras[next_extra++]));
    if (wire_type != kLen) {
      SkipValue(serialized, wire_type, &pos);
      list.pending().append(serialized, field_start, pos - field_start);
      continue;
    }
    if (static_cast<size_t>(field) >= seen.size()) seen.resize(field + 1, 0);
    Tails tails = tails_of(field, seen[field]++);
    const uint64_t sub_size = GetVarint(serialized, &pos);
    PutVarint(tag, &list.pending());
    PutVarint(sub_size + TailsSize(tails), &list.pending());
    list.pending().append(serialized, pos, sub_size);
    pos += sub_size;
    list.AddTails(std::move(tails));
  }
  while (next_extra < extras.size()) list.AddExtra(std::move(extras[next_extra++]));
  list.Finish(out);
}

// A sparse entry as an Extra of top-level field `field`, its keys and rows in the given slices.
Extra SparseExtra(int field, int32_t table_id, grpc::Slice keys, grpc::Slice rows) {
  Extra extra{field, {}, {}};
  if (table_id != 0) {
    PutVarint((kRowsTableIdField << 3) | kVarint, &extra.fields);
    // int32 on the wire: a negative id is sign-extended to 64 bits, as protobuf does.
    PutVarint(static_cast<uint64_t>(static_cast<int64_t>(table_id)), &extra.fields);
  }
  extra.tails.push_back({kRowsKeysField, std::move(keys)});
  extra.tails.push_back({kRowsRowsField, std::move(rows)});
  return extra;
}

grpc::Slice Borrowed(absl::string_view bytes) {
  return grpc::Slice(bytes.data(), bytes.size(), grpc::Slice::STATIC_SLICE);
}

// One refcounted slice that owns `buffer`; sub-slices of it keep it alive, and it goes back to
// its pool when the last of them is released.
grpc::Slice Owning(PooledBuffer buffer) {
  const size_t size = buffer.size();
  auto* owned = new PooledBuffer(std::move(buffer));
  return grpc::Slice(
      owned->data(), size, [](void* p) { delete static_cast<PooledBuffer*>(p); }, owned);
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
      case kFixed64:
        return Copy(8, out);
      case kFixed32:
        return Copy(4, out);
      case kLen: {
        uint64_t n;
        RETURN_IF_ERROR(Varint(&n));
        PutVarint(n, out);
        return Copy(n, out);
      }
      default:
        return Error(start, absl::StrCat("unsupported wire type ", wire_type, " (groups are not used)"));
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

// Decodes one SparseRows of `size` bytes: its table id, and views of its keys and rows.
absl::Status DecodeRows(Reader& reader, uint64_t size, int index, IncomingRows* rows) {
  const size_t start = reader.position();
  std::string ignored;
  while (reader.position() - start < size) {
    const size_t field_start = reader.position();
    uint64_t tag;
    RETURN_IF_ERROR(reader.Varint(&tag));
    const int field = static_cast<int>(tag >> 3);
    const int wire_type = static_cast<int>(tag & 7);
    if (field == kRowsTableIdField && wire_type == kVarint) {
      uint64_t v;
      RETURN_IF_ERROR(reader.Varint(&v));
      rows->table_id = static_cast<int32_t>(v);
      continue;
    }
    if ((field == kRowsKeysField || field == kRowsRowsField) && wire_type == kLen) {
      uint64_t n;
      RETURN_IF_ERROR(reader.Varint(&n));
      if (reader.position() - start + n > size) {
        return reader.Error(
            field_start, absl::StrCat("sparse entry ", index, ": ", field == kRowsKeysField ? "keys" : "rows", " of ",
                                      n, " bytes run past the entry"));
      }
      PayloadView* view = field == kRowsKeysField ? &rows->keys : &rows->rows;
      view->Clear();  // the last occurrence wins, as in protobuf
      RETURN_IF_ERROR(reader.Take(n, view));
      continue;
    }
    if (field <= kRowsRowsField) {  // 0, or a field of SparseRows with another wire type
      return reader.Error(field_start, absl::StrCat("sparse entry ", index, ": field ", field, " with wire type ",
                                                    wire_type, " is not a field of SparseRows"));
    }
    // A field a newer peer may send: skipped (SparseRows has no room for it).
    ignored.clear();
    RETURN_IF_ERROR(reader.CopyValue(wire_type, &ignored));
  }
  if (reader.position() - start != size) {
    return reader.Error(start,
                        absl::StrCat("sparse entry ", index, ": fields run past its length of ", size, " bytes"));
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

// Where a message's raw fields go: its chunks (field `chunks_field`, 0: none) and the values of
// each, and up to two repeated SparseRows fields.
struct Routes {
  int chunks_field = 0;
  std::vector<PayloadView>* values = nullptr;
  int sparse_field[2] = {0, 0};
  std::vector<IncomingRows>* sparse[2] = {nullptr, nullptr};
};

// Adds the chunk fields of `header` when it has them (PullRequest has none).
template <typename Message>
TensorChunk* AddChunk(Message* header) {
  if constexpr (std::is_same_v<Message, PullRequest>) {
    LOG(FATAL) << "PullRequest has no chunks";
    return nullptr;
  } else {
    return header->add_chunks();
  }
}
template <typename Message>
int ChunksSize(const Message& header) {
  if constexpr (std::is_same_v<Message, PullRequest>) {
    return 0;
  } else {
    return header.chunks_size();
  }
}

template <typename Message>
absl::Status DecodeRaw(const grpc::ByteBuffer& in, absl::string_view what, const Routes& routes, Message* header,
                       std::vector<grpc::Slice>* slices) {
  header->Clear();
  if (routes.values != nullptr) routes.values->clear();
  for (std::vector<IncomingRows>* list : routes.sparse) {
    if (list != nullptr) list->clear();
  }
  slices->clear();
  if (!in.Dump(slices).ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": unreadable message"));
  Reader reader(*slices, what);
  std::string rest;  // every other field, for protobuf to parse
  while (!reader.done()) {
    const size_t field_start = reader.position();
    uint64_t tag;
    RETURN_IF_ERROR(reader.Varint(&tag));
    const int field = static_cast<int>(tag >> 3);
    const int wire_type = static_cast<int>(tag & 7);
    if (field == 0) return reader.Error(field_start, "field number 0");
    std::vector<IncomingRows>* sparse = nullptr;
    for (int i = 0; i < 2; ++i) {
      if (routes.sparse[i] != nullptr && field == routes.sparse_field[i]) sparse = routes.sparse[i];
    }
    const bool chunk = routes.chunks_field != 0 && field == routes.chunks_field;
    if (!chunk && sparse == nullptr) {
      PutVarint(tag, &rest);
      RETURN_IF_ERROR(reader.CopyValue(wire_type, &rest));
      continue;
    }
    if (wire_type != kLen) {
      return reader.Error(field_start, absl::StrCat(chunk ? "chunks" : "sparse entries", " (field ", field,
                                                    ") with wire type ", wire_type, ", expected 2 (a message)"));
    }
    uint64_t size;
    RETURN_IF_ERROR(reader.Varint(&size));
    if (chunk) {
      routes.values->emplace_back();
      RETURN_IF_ERROR(DecodeChunk(reader, size, ChunksSize(*header), AddChunk(header), &routes.values->back()));
    } else {
      const int index = static_cast<int>(sparse->size());
      RETURN_IF_ERROR(DecodeRows(reader, size, index, &sparse->emplace_back()));
    }
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
  std::vector<Extra> extras;
  for (const OutgoingRows& rows : push.sparse) {
    extras.push_back(SparseExtra(kPushSparseField, rows.table_id, Borrowed(rows.keys), Borrowed(rows.rows)));
  }
  for (const OutgoingRows& rows : push.pull_sparse) {
    extras.push_back(SparseExtra(kPushPullSparseField, rows.table_id, Borrowed(rows.keys), Borrowed(rows.rows)));
  }
  Splice(
      push.header,
      [&push](int field, int index) {
        Tails tails;
        if (field == kPushChunksField) tails.push_back({kChunkDataField, Borrowed(push.values[index])});
        return tails;
      },
      std::move(extras), out);
}

void EncodePull(const PullResponse& header, PooledBuffer values, grpc::ByteBuffer* out) {
  EncodePull(header, std::move(values), OutgoingRowsAnswer(), out);
}

void EncodePull(const PullResponse& header, PooledBuffer values, OutgoingRowsAnswer rows, grpc::ByteBuffer* out) {
  const size_t total = values.size();
  grpc::Slice whole = Owning(std::move(values));
  size_t offset = 0;
  std::vector<Extra> extras;
  if (!rows.entries.empty()) {
    const size_t rows_total = rows.bytes.size();
    grpc::Slice all_rows = Owning(std::move(rows.bytes));
    for (const OutgoingRowsAnswer::Entry& e : rows.entries) {
      CHECK_LE(e.keys_offset + e.keys_size, rows_total);
      CHECK_LE(e.rows_offset + e.rows_size, rows_total);
      extras.push_back(SparseExtra(kPullSparseField, e.table_id,
                                   all_rows.sub(e.keys_offset, e.keys_offset + e.keys_size),
                                   all_rows.sub(e.rows_offset, e.rows_offset + e.rows_size)));
    }
  }
  Splice(
      header,
      [&](int field, int index) {
        Tails tails;
        if (field != kPullChunksField) return tails;
        const size_t bytes = 4 * static_cast<size_t>(header.chunks(index).length());
        CHECK_LE(offset + bytes, total);
        tails.push_back({kChunkDataField, whole.sub(offset, offset + bytes)});
        offset += bytes;
        return tails;
      },
      std::move(extras), out);
}

absl::Status DecodePush(const grpc::ByteBuffer& in, absl::string_view what, IncomingPush* out) {
  Routes routes;
  routes.chunks_field = kPushChunksField;
  routes.values = &out->values;
  routes.sparse_field[0] = kPushSparseField;
  routes.sparse[0] = &out->sparse;
  routes.sparse_field[1] = kPushPullSparseField;
  routes.sparse[1] = &out->pull_sparse;
  return DecodeRaw(in, what, routes, &out->header, SlicesOf(&out->bytes));
}

absl::Status DecodePull(const grpc::ByteBuffer& in, absl::string_view what, IncomingPull* out) {
  Routes routes;
  routes.chunks_field = kPullChunksField;
  routes.values = &out->values;
  routes.sparse_field[0] = kPullSparseField;
  routes.sparse[0] = &out->sparse;
  return DecodeRaw(in, what, routes, &out->header, SlicesOf(&out->bytes));
}

absl::Status DecodePullRequest(const grpc::ByteBuffer& in, absl::string_view what, IncomingPullRequest* out) {
  Routes routes;
  routes.sparse_field[0] = kPullRequestSparseField;
  routes.sparse[0] = &out->sparse;
  return DecodeRaw(in, what, routes, &out->header, SlicesOf(&out->bytes));
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
