#include "model/model_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "common/utf8.h"
#include "common/status_macros.h"

namespace pstrain {
namespace model {
namespace {

static_assert(sizeof(float) == 4, "model files store IEEE-754 float32");
constexpr size_t kMagicSize = 8;
constexpr uint32_t kMaxDims = 32;  // no real tensor comes close; guards against garbage headers

constexpr bool kLittleEndianHost = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

void AppendU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void AppendI64(int64_t v, std::string* out) {
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

uint32_t LoadU32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

int64_t LoadI64(const unsigned char* p) {
  uint64_t u = 0;
  for (int i = 7; i >= 0; --i) u = (u << 8) | p[i];
  return static_cast<int64_t>(u);
}

uint32_t Crc(uint32_t crc, const void* data, size_t size) {
  // zlib's crc32 takes a uInt length; feed large buffers in pieces.
  const unsigned char* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = static_cast<uint32_t>(crc32(crc, p, piece));
    p += piece;
    size -= piece;
  }
  return crc;
}

// The header of a file holding `params` and `values`, after checking they fit together; `path`
// names the file in errors.
absl::StatusOr<std::string> Header(const std::string& path, const std::vector<ParamSpec>& params,
                                   absl::Span<const float> values) {
  std::string header(kModelFileMagic, kMagicSize);
  AppendU32(kModelFileVersion, &header);
  AppendU32(static_cast<uint32_t>(params.size()), &header);
  int64_t total = 0;
  for (const ParamSpec& p : params) {
    int64_t elements = 1;
    for (int64_t d : p.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("model file '", path, "': tensor '", p.name, "' has negative dimension ", d));
      }
      elements *= d;
    }
    if (elements != p.num_elements) {
      return absl::InvalidArgumentError(absl::StrCat("model file '", path, "': tensor '", p.name, "' shape holds ",
                                                     elements, " elements, but num_elements is ", p.num_elements));
    }
    AppendU32(static_cast<uint32_t>(p.name.size()), &header);
    header.append(p.name);
    AppendU32(static_cast<uint32_t>(p.shape.size()), &header);
    for (int64_t d : p.shape) AppendI64(d, &header);
    total += elements;
  }
  if (static_cast<int64_t>(values.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat("model file '", path, "': got ", values.size(), " values, expected ",
                                                   total, " for ", params.size(), " tensors"));
  }
  return header;
}

}  // namespace

namespace {

// The whole file: header, values (little-endian float32) and the checksum of both. `what` names
// the file in errors.
absl::StatusOr<std::string> Contents(const std::string& what, const std::vector<ParamSpec>& params,
                                     absl::Span<const float> values) {
  ASSIGN_OR_RETURN(std::string contents, Header(what, params, values));
  const size_t header_size = contents.size();
  if (kLittleEndianHost) {
    contents.resize(header_size + 4 * values.size());
    // An empty model's values may have no buffer at all, and memcpy's pointers must not be null.
    if (!values.empty()) std::memcpy(contents.data() + header_size, values.data(), 4 * values.size());
  } else {
    contents.reserve(header_size + 4 * values.size() + 4);
    for (float value : values) {
      uint32_t u;
      std::memcpy(&u, &value, 4);
      AppendU32(u, &contents);
    }
  }
  AppendU32(Crc(static_cast<uint32_t>(crc32(0, Z_NULL, 0)), contents.data(), contents.size()), &contents);
  return contents;
}

}  // namespace

absl::Status WriteModelFile(const std::string& path, const std::vector<ParamSpec>& params,
                            absl::Span<const float> values) {
  ASSIGN_OR_RETURN(const std::string contents, Contents(path, params, values));
  return WriteFileAtomically(path, "model file", contents);
}

absl::StatusOr<std::string> SerializeModelFile(const std::vector<ParamSpec>& params, absl::Span<const float> values) {
  return Contents("(in memory)", params, values);
}

absl::StatusOr<ModelFile> ReadModelFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string contents, ReadWholeFile(path, "model file", kMaxModelFileBytes));
  return ParseModelFile(contents, absl::StrCat("model file '", path, "'"));
}

absl::StatusOr<ModelFile> ParseModelFile(absl::string_view contents, absl::string_view where) {
  const auto* data = reinterpret_cast<const unsigned char*>(contents.data());
  const size_t size = contents.size();

  if (size < kMagicSize || std::memcmp(data, kModelFileMagic, kMagicSize) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": bad magic, expected \"PSTRAINM\" (not a model file)"));
  }
  size_t pos = kMagicSize;
  // Every header read goes through `need`, so a short or garbled header reports "truncated"
  // rather than reading past the end.
  auto need = [&](size_t bytes, absl::string_view field) -> absl::Status {
    if (size - pos < bytes) {
      return absl::DataLossError(
          absl::StrCat(where, ": truncated at byte ", pos, " reading ", field, " (file has ", size, " bytes)"));
    }
    return absl::OkStatus();
  };

  RETURN_IF_ERROR(need(8, "version and tensor count"));
  const uint32_t version = LoadU32(data + pos);
  const uint32_t num_tensors = LoadU32(data + pos + 4);
  pos += 8;
  if (version != kModelFileVersion) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": version ", version, ", expected ", kModelFileVersion));
  }

  ModelFile file;
  int64_t total = 0;
  for (uint32_t t = 0; t < num_tensors; ++t) {
    const std::string field = absl::StrCat("tensor ", t);
    RETURN_IF_ERROR(need(4, field + " name length"));
    const uint32_t name_length = LoadU32(data + pos);
    pos += 4;
    RETURN_IF_ERROR(need(name_length, field + " name"));
    ParamSpec spec;
    spec.name.assign(reinterpret_cast<const char*>(data + pos), name_length);
    pos += name_length;
    // Names end up in proto3 strings (the shard map, error messages the scheduler persists),
    // which refuse to parse anything but UTF-8; and they are quoted in the messages below.
    if (!IsValidUtf8(spec.name)) {
      return absl::DataLossError(absl::StrCat(where, ": ", field, " name is not valid UTF-8"));
    }
    RETURN_IF_ERROR(need(4, field + " ndim"));
    const uint32_t ndim = LoadU32(data + pos);
    pos += 4;
    if (ndim > kMaxDims) {
      return absl::DataLossError(
          absl::StrCat(where, ": tensor '", spec.name, "' has ", ndim, " dimensions, expected at most ", kMaxDims));
    }
    RETURN_IF_ERROR(need(8 * static_cast<size_t>(ndim), field + " dims"));
    int64_t elements = 1;
    for (uint32_t d = 0; d < ndim; ++d) {
      const int64_t dim = LoadI64(data + pos);
      pos += 8;
      // Bounding every product by the file size keeps the arithmetic from overflowing.
      if (dim < 0 || (dim > 0 && elements > static_cast<int64_t>(size) / dim)) {
        return absl::DataLossError(absl::StrCat(where, ": tensor '", spec.name, "' dimension ", d, " is ", dim,
                                                ", impossible for a file of ", size, " bytes"));
      }
      elements *= dim;
      spec.shape.push_back(dim);
    }
    spec.num_elements = elements;
    spec.flat_offset = total;
    total += elements;
    if (total > static_cast<int64_t>(size)) {
      return absl::DataLossError(
          absl::StrCat(where, ": tensors hold ", total, " values, more than a file of ", size, " bytes can"));
    }
    file.params.push_back(std::move(spec));
  }

  const size_t expected = pos + 4 * static_cast<size_t>(total) + 4;
  if (size < expected) {
    return absl::DataLossError(
        absl::StrCat(where, ": truncated: the header describes ", expected, " bytes, the file has ", size));
  }
  if (size > expected) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", size - expected, " trailing bytes after the expected ", expected));
  }
  const uint32_t stored_crc = LoadU32(data + size - 4);
  const uint32_t actual_crc = Crc(static_cast<uint32_t>(crc32(0, Z_NULL, 0)), data, size - 4);
  if (stored_crc != actual_crc) {
    return absl::DataLossError(absl::StrCat(where, ": checksum mismatch (stored ", stored_crc, ", computed ",
                                            actual_crc, "): file is corrupt"));
  }

  file.values.resize(static_cast<size_t>(total));
  const unsigned char* v = data + pos;
  if (kLittleEndianHost) {
    // Not for a model without values: memcpy from or to a null pointer is undefined even for 0 bytes.
    if (!file.values.empty()) std::memcpy(file.values.data(), v, file.values.size() * 4);
  } else {
    for (size_t i = 0; i < file.values.size(); ++i) {
      const uint32_t u = LoadU32(v + 4 * i);
      std::memcpy(&file.values[i], &u, 4);
    }
  }
  // The checksum only proves the bytes are the ones written; a model of NaN is still useless.
  for (const ParamSpec& spec : file.params) {
    for (int64_t i = 0; i < spec.num_elements; ++i) {
      const float value = file.values[static_cast<size_t>(spec.flat_offset + i)];
      if (!std::isfinite(value)) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": tensor '", spec.name, "' element ", i, " is ",
                                                       std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf"),
                                                       ", expected finite values"));
      }
    }
  }
  return file;
}

}  // namespace model
}  // namespace pstrain
