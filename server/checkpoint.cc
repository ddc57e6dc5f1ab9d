#include "server/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace pstrain::server {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints store little-endian values");
static_assert(sizeof(float) == 4, "checkpoints store IEEE-754 float32");

constexpr size_t kMagicSize = 8;
constexpr size_t kFixedHeaderSize = 48;  // magic through chunk count
constexpr size_t kChunkEntrySize = 20;
constexpr uint32_t kMaxStateVectors = 16;  // Adam has 2; guards against garbage headers

template <typename T>
void Append(T v, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out->append(bytes, sizeof(T));
}

template <typename T>
T Load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint32_t Crc(uint32_t crc, const void* data, size_t size) {
  // zlib's crc32 takes a uInt length; feed large buffers in pieces.
  const auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = static_cast<uint32_t>(crc32(crc, p, piece));
    p += piece;
    size -= piece;
  }
  return crc;
}

uint32_t InitialCrc() { return static_cast<uint32_t>(crc32(0, Z_NULL, 0)); }

// Writes to an fd (retrying short writes and EINTR), or appends to a string when fd < 0, and
// keeps the CRC of what it wrote.
class CrcWriter {
 public:
  CrcWriter(int fd, const std::string& path) : fd_(fd), path_(path) {}
  explicit CrcWriter(std::string* out) : fd_(-1), path_(kNoPath), out_(out) {}

  absl::Status Write(const void* data, size_t size) {
    crc_ = Crc(crc_, data, size);
    return WriteRaw(data, size);
  }
  // The CRC of everything written so far, which ends the file.
  absl::Status WriteCrc() {
    std::string trailer;
    Append<uint32_t>(crc_, &trailer);
    return WriteRaw(trailer.data(), trailer.size());
  }

 private:
  absl::Status WriteRaw(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    if (out_ != nullptr) {
      out_->append(p, size);
      return absl::OkStatus();
    }
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, absl::StrCat("writing checkpoint '", path_, "'"));
      }
      p += n;
      size -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  static inline const std::string kNoPath;
  const int fd_;
  const std::string& path_;
  std::string* const out_ = nullptr;
  uint32_t crc_ = InitialCrc();
};

int64_t TotalLength(const ShardCheckpoint& ckpt) {
  int64_t total = 0;
  for (const ChunkSpec& c : ckpt.chunks) total += c.length();
  return total;
}

absl::Status CheckShape(const std::string& path, const ShardCheckpoint& ckpt) {
  const std::string where = absl::StrCat("checkpoint '", path, "'");
  int64_t total = 0;
  for (size_t i = 0; i < ckpt.chunks.size(); ++i) {
    if (ckpt.chunks[i].length() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": chunk ", i, " has length ", ckpt.chunks[i].length(), ", expected >= 0"));
    }
    total += ckpt.chunks[i].length();
  }
  if (static_cast<int64_t>(ckpt.weights.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": got ", ckpt.weights.size(), " weights, expected ", total,
                                                   " for ", ckpt.chunks.size(), " chunks"));
  }
  if (ckpt.num_state_vectors < 0 || static_cast<int>(ckpt.state.size()) != ckpt.num_state_vectors) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": got ", ckpt.state.size(),
                                                   " state vectors, num_state_vectors is ", ckpt.num_state_vectors));
  }
  for (size_t s = 0; s < ckpt.state.size(); ++s) {
    if (static_cast<int64_t>(ckpt.state[s].size()) != total) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": state vector ", s, " has ", ckpt.state[s].size(), " floats, expected ", total));
    }
  }
  return absl::OkStatus();
}

std::string EncodeHeader(const ShardCheckpoint& ckpt) {
  std::string header(kCheckpointMagic, kMagicSize);
  // Version 1 when there are no tables, so dense-only files stay what they always were.
  Append<uint32_t>(ckpt.base_step >= 0 ? kCheckpointVersionDelta
                                       : (ckpt.tables.empty() ? kCheckpointVersionDense : kCheckpointVersion),
                   &header);
  Append<int32_t>(ckpt.rank, &header);
  Append<int64_t>(ckpt.step, &header);
  Append<int32_t>(ckpt.mode, &header);
  Append<int64_t>(ckpt.membership_epoch, &header);
  Append<uint64_t>(ckpt.layout_fingerprint, &header);
  Append<uint32_t>(static_cast<uint32_t>(ckpt.chunks.size()), &header);
  for (const ChunkSpec& c : ckpt.chunks) {
    Append<int32_t>(c.tensor_id(), &header);
    Append<int64_t>(c.offset(), &header);
    Append<int64_t>(c.length(), &header);
  }
  Append<uint32_t>(static_cast<uint32_t>(ckpt.num_state_vectors), &header);
  return header;
}

absl::Status WriteContents(CrcWriter& writer, const ShardCheckpoint& ckpt) {
  const std::string header = EncodeHeader(ckpt);
  RETURN_IF_ERROR(writer.Write(header.data(), header.size()));
  int64_t base = 0;
  for (const ChunkSpec& c : ckpt.chunks) {
    const size_t bytes = 4 * static_cast<size_t>(c.length());
    RETURN_IF_ERROR(writer.Write(ckpt.weights.data() + base, bytes));
    for (const std::vector<float>& s : ckpt.state) RETURN_IF_ERROR(writer.Write(s.data() + base, bytes));
    base += c.length();
  }
  if (!ckpt.tables.empty() || ckpt.base_step >= 0) {
    std::string count;
    Append<uint32_t>(static_cast<uint32_t>(ckpt.tables.size()), &count);
    RETURN_IF_ERROR(writer.Write(count.data(), count.size()));
    for (const std::string& table : ckpt.tables) {
      std::string length;
      Append<uint64_t>(table.size(), &length);
      RETURN_IF_ERROR(writer.Write(length.data(), length.size()));
      RETURN_IF_ERROR(writer.Write(table.data(), table.size()));
    }
  }
  if (ckpt.base_step >= 0) {
    std::string base_step;
    Append<int64_t>(ckpt.base_step, &base_step);
    RETURN_IF_ERROR(writer.Write(base_step.data(), base_step.size()));
  }
  return writer.WriteCrc();
}

// FNV-1a, 64 bits: simple, and unlike absl::Hash the same in every process.
class Fnv1a {
 public:
  template <typename T>
  void Add(T v) {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    AddBytes(bytes, sizeof(T));
  }
  void AddString(absl::string_view s) {
    Add<uint64_t>(s.size());
    AddBytes(s.data(), s.size());
  }
  uint64_t value() const { return h_; }

 private:
  void AddBytes(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace

uint64_t LayoutFingerprint(const ShardMap& map, int rank) {
  Fnv1a h;
  h.Add<uint64_t>(map.tensors_size());
  for (const TensorSpec& t : map.tensors()) {
    h.Add<int32_t>(t.id());
    h.AddString(t.name());
    h.Add<uint64_t>(t.shape_size());
    for (int64_t d : t.shape()) h.Add<int64_t>(d);
  }
  // An averaged tensor's chunks have another optimizer (and no state): a checkpoint of the same
  // tensors trained another way is another layout.
  std::vector<int32_t> averaged;
  for (const TensorSpec& t : map.tensors()) {
    if (t.averaged()) averaged.push_back(t.id());
  }
  if (!averaged.empty()) {
    h.Add<uint64_t>(averaged.size());
    for (int32_t id : averaged) h.Add<int32_t>(id);
  }
  std::vector<const ChunkSpec*> mine;
  for (const ChunkSpec& c : map.chunks()) {
    if (c.server_rank() == rank) mine.push_back(&c);
  }
  std::sort(mine.begin(), mine.end(), [](const ChunkSpec* a, const ChunkSpec* b) {
    return std::make_pair(a->tensor_id(), a->offset()) < std::make_pair(b->tensor_id(), b->offset());
  });
  h.Add<uint64_t>(mine.size());
  for (const ChunkSpec* c : mine) {
    h.Add<int32_t>(c->tensor_id());
    h.Add<int64_t>(c->offset());
    h.Add<int64_t>(c->length());
  }
  return h.value();
}

int64_t CheckpointFileSize(const ShardCheckpoint& ckpt) {
  int64_t tables = 0;
  if (!ckpt.tables.empty() || ckpt.base_step >= 0) {
    tables = 4;
    for (const std::string& t : ckpt.tables) tables += 8 + static_cast<int64_t>(t.size());
  }
  if (ckpt.base_step >= 0) tables += 8;
  return static_cast<int64_t>(kFixedHeaderSize + kChunkEntrySize * ckpt.chunks.size() + 4) +
         4 * TotalLength(ckpt) * (1 + ckpt.num_state_vectors) + tables + 4;
}

absl::Status WriteCheckpoint(const std::string& path, const ShardCheckpoint& ckpt, mode_t mode) {
  RETURN_IF_ERROR(CheckShape(path, ckpt));
  return WriteFileAtomically(
      path, "checkpoint",
      [&](int fd) {
        CrcWriter writer(fd, path);
        return WriteContents(writer, ckpt);
      },
      mode);
}

absl::StatusOr<std::string> EncodeCheckpoint(const ShardCheckpoint& ckpt) {
  RETURN_IF_ERROR(CheckShape("(in memory)", ckpt));
  std::string out;
  out.reserve(static_cast<size_t>(CheckpointFileSize(ckpt)));
  CrcWriter writer(&out);
  RETURN_IF_ERROR(WriteContents(writer, ckpt));
  return out;
}

absl::StatusOr<ShardCheckpoint> ReadCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string contents, ReadWholeFile(path, "checkpoint"));
  return DecodeCheckpoint(contents, absl::StrCat("checkpoint '", path, "'"));
}

absl::StatusOr<ShardCheckpoint> DecodeCheckpoint(absl::string_view contents, absl::string_view what) {
  const auto* data = reinterpret_cast<const unsigned char*>(contents.data());
  const size_t size = contents.size();
  const std::string where(what);

  if (std::memcmp(data, kCheckpointMagic, std::min(size, kMagicSize)) != 0) {
    return absl::DataLossError(
        absl::StrCat(where, ": bad magic, expected \"", kCheckpointMagic, "\" (not a checkpoint file)"));
  }
  // The header is parsed before the checksum is checked, so a short file reports "truncated";
  // every read goes through `need`, so garbage never reads past the end.
  size_t pos = 0;
  auto need = [&](size_t bytes, absl::string_view field) -> absl::Status {
    if (size - pos < bytes) {
      return absl::DataLossError(
          absl::StrCat(where, ": truncated at byte ", pos, " reading ", field, " (file has ", size, " bytes)"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(need(kFixedHeaderSize, "the header"));
  const uint32_t version = Load<uint32_t>(data + 8);
  if (version != kCheckpointVersion && version != kCheckpointVersionDense && version != kCheckpointVersionDelta) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": version ", version, ", expected ", kCheckpointVersionDense,
                                                   " to ", kCheckpointVersionDelta));
  }
  ShardCheckpoint ckpt;
  ckpt.rank = Load<int32_t>(data + 12);
  ckpt.step = Load<int64_t>(data + 16);
  ckpt.mode = static_cast<Mode>(Load<int32_t>(data + 24));
  ckpt.membership_epoch = Load<int64_t>(data + 28);
  ckpt.layout_fingerprint = Load<uint64_t>(data + 36);
  const uint32_t num_chunks = Load<uint32_t>(data + 44);
  pos = kFixedHeaderSize;

  RETURN_IF_ERROR(need(kChunkEntrySize * static_cast<size_t>(num_chunks), "the chunk list"));
  int64_t total = 0;
  ckpt.chunks.resize(num_chunks);
  for (uint32_t i = 0; i < num_chunks; ++i) {
    ChunkSpec& c = ckpt.chunks[i];
    c.set_tensor_id(Load<int32_t>(data + pos));
    c.set_offset(Load<int64_t>(data + pos + 4));
    c.set_length(Load<int64_t>(data + pos + 12));
    c.set_server_rank(ckpt.rank);
    pos += kChunkEntrySize;
    // Bounding the running total by the file size keeps the arithmetic below from overflowing.
    if (c.length() < 0 || c.length() > static_cast<int64_t>(size) - total) {
      return absl::DataLossError(absl::StrCat(where, ": chunk ", i, " has length ", c.length(),
                                              ", impossible for a file of ", size, " bytes"));
    }
    total += c.length();
  }
  RETURN_IF_ERROR(need(4, "the state-vector count"));
  const uint32_t num_state = Load<uint32_t>(data + pos);
  pos += 4;
  if (num_state > kMaxStateVectors) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", num_state, " state vectors, expected at most ", kMaxStateVectors));
  }
  ckpt.num_state_vectors = static_cast<int>(num_state);

  const size_t dense_end = pos + 4 * static_cast<size_t>(total) * (1 + num_state);
  if (size < dense_end + 4) {
    return absl::DataLossError(
        absl::StrCat(where, ": truncated: the header describes ", dense_end + 4, " bytes, the file has ", size));
  }
  // Version 2: the embedding tables after the dense values, each a length and its bytes.
  std::vector<std::pair<size_t, size_t>> table_spans;  // (offset, size)
  size_t expected = dense_end + 4;
  if (version == kCheckpointVersion || version == kCheckpointVersionDelta) {
    size_t p = dense_end;
    auto fits = [&](size_t bytes) { return size - 4 >= p && size - 4 - p >= bytes; };
    if (!fits(4))
      return absl::DataLossError(absl::StrCat(where, ": truncated at byte ", p, " reading the table count"));
    const uint32_t num_tables = Load<uint32_t>(data + p);
    p += 4;
    for (uint32_t t = 0; t < num_tables; ++t) {
      if (!fits(8)) {
        return absl::DataLossError(absl::StrCat(where, ": truncated at byte ", p, " reading table ", t, "'s length"));
      }
      const uint64_t length = Load<uint64_t>(data + p);
      p += 8;
      if (!fits(length)) {
        return absl::DataLossError(absl::StrCat(where, ": table ", t, " of ", length, " bytes runs past the end"));
      }
      table_spans.emplace_back(p, static_cast<size_t>(length));
      p += static_cast<size_t>(length);
    }
    if (version == kCheckpointVersionDelta) {
      if (!fits(8))
        return absl::DataLossError(absl::StrCat(where, ": truncated at byte ", p, " reading the base step"));
      ckpt.base_step = Load<int64_t>(data + p);
      p += 8;
    }
    expected = p + 4;
  }
  if (size < expected) {
    return absl::DataLossError(
        absl::StrCat(where, ": truncated: the header describes ", expected, " bytes, the file has ", size));
  }
  if (size > expected) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", size - expected, " trailing bytes after the expected ", expected));
  }
  const uint32_t stored_crc = Load<uint32_t>(data + size - 4);
  const uint32_t actual_crc = Crc(InitialCrc(), data, size - 4);
  if (stored_crc != actual_crc) {
    return absl::DataLossError(absl::StrCat(where, ": checksum mismatch (stored ", stored_crc, ", computed ",
                                            actual_crc, "): file is corrupt"));
  }

  ckpt.weights.resize(static_cast<size_t>(total));
  ckpt.state.assign(num_state, std::vector<float>(static_cast<size_t>(total)));
  int64_t base = 0;
  for (const ChunkSpec& c : ckpt.chunks) {
    const size_t bytes = 4 * static_cast<size_t>(c.length());
    std::memcpy(ckpt.weights.data() + base, data + pos, bytes);
    pos += bytes;
    for (std::vector<float>& s : ckpt.state) {
      std::memcpy(s.data() + base, data + pos, bytes);
      pos += bytes;
    }
    base += c.length();
  }
  // The checksum only proves the bytes are the ones written: a shard of NaN would train to
  // nothing, so it is refused, naming where the first bad value is.
  base = 0;
  for (size_t i = 0; i < ckpt.chunks.size(); ++i) {
    const ChunkSpec& c = ckpt.chunks[i];
    for (int v = -1; v < static_cast<int>(num_state); ++v) {
      const float* values = (v < 0 ? ckpt.weights.data() : ckpt.state[v].data()) + base;
      for (int64_t k = 0; k < c.length(); ++k) {
        if (std::isfinite(values[k])) continue;
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": chunk ", i, " (tensor id ", c.tensor_id(), " at offset ", c.offset(), "): ",
            v < 0 ? std::string("weight") : absl::StrCat("optimizer state vector ", v), " element ", c.offset() + k,
            " is ", std::isnan(values[k]) ? "nan" : (values[k] > 0 ? "inf" : "-inf"), ", expected finite values"));
      }
    }
    base += c.length();
  }
  if (version == kCheckpointVersionDelta && !(ckpt.base_step >= 0 && ckpt.base_step < ckpt.step)) {
    return absl::DataLossError(absl::StrCat(where, ": a delta of step ", ckpt.step, " on base step ", ckpt.base_step,
                                            ", expected a base step in [0, ", ckpt.step, ")"));
  }
  for (const auto& [offset, length] : table_spans) {
    ckpt.tables.emplace_back(reinterpret_cast<const char*>(data) + offset, length);
  }
  return ckpt;
}

}  // namespace pstrain::server
