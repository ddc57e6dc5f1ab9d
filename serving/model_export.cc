#include "serving/model_export.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <google/protobuf/text_format.h>

#include "absl/strings/str_cat.h"
#include "common/compression.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "common/table_spec.h"

namespace pstrain::serving {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the format is little-endian");

constexpr char kManifest[] = "manifest.textproto";
constexpr char kDenseFile[] = "dense.model";
constexpr char kRowsMagic[] = "PSTRAINR";  // 8 bytes, no terminator
constexpr uint32_t kRowsVersion = 1;
constexpr size_t kRowsHeader = 32;
constexpr int64_t kMaxManifestBytes = int64_t{16} << 20;

template <typename T>
void Put(T v, std::string* out) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
T Get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint32_t Crc32(const char* data, size_t size) {
  uint32_t crc = static_cast<uint32_t>(crc32(0, Z_NULL, 0));
  while (size > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(data), piece));
    data += piece;
    size -= piece;
  }
  return crc;
}

std::string RowsFileName(int32_t id) { return absl::StrCat("table-", id, ".rows"); }

absl::Status WriteInto(const ModelExport& e, const std::string& dir) {
  RETURN_IF_ERROR(model::WriteModelFile(dir + "/" + kDenseFile, e.dense.params, e.dense.values));
  ExportManifest manifest = e.manifest;
  manifest.set_format(kExportFormat);
  manifest.set_version(kExportVersion);
  manifest.set_dense_file(kDenseFile);
  for (int t = 0; t < manifest.tables_size(); ++t) {
    ExportedTable& table = *manifest.mutable_tables(t);
    const std::vector<uint64_t>& keys = e.tables[t].keys;
    const int64_t value_bytes = TableRowValueBytes(table.dim(), table.row_dtype());
    if (static_cast<int64_t>(e.stored_values[t].size()) != static_cast<int64_t>(keys.size()) * value_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("export of table '", table.name(), "': ", keys.size(),
                                                     " keys but ", e.stored_values[t].size(),
                                                     " bytes of values, expected ", value_bytes, " a key"));
    }
    for (size_t i = 1; i < keys.size(); ++i) {
      if (keys[i] <= keys[i - 1]) {
        return absl::InvalidArgumentError(absl::StrCat("export of table '", table.name(), "': key ", keys[i],
                                                       " at position ", i, " is not greater than the one before"));
      }
    }
    table.set_rows(static_cast<int64_t>(keys.size()));
    table.set_file(RowsFileName(table.id()));
    RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + table.file(), "table rows file",
                                        EncodeRowsFile(table.dim(), table.row_dtype(), keys, e.stored_values[t])));
  }
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(manifest, &text)) {
    return absl::InternalError("export manifest: cannot print it as text");
  }
  return WriteFileAtomically(dir + "/" + kManifest, "export manifest", text);
}

absl::StatusOr<TableRows> ReadRows(const std::string& path, const ExportedTable& table, std::string* stored) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadWholeFile(path, "table rows file"));
  return ParseRowsFile(bytes, table, absl::StrCat("table rows file '", path, "'"), stored);
}

}  // namespace

absl::StatusOr<TableRows> ParseRowsFile(absl::string_view bytes, const ExportedTable& table, const std::string& where,
                                        std::string* stored) {
  if (table.dim() < 1 || table.dim() > kMaxTableDim || table.rows() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the manifest's table has dim ", table.dim(), " and ",
                                                   table.rows(), " rows; expected a dim in [1, ", kMaxTableDim, "]"));
  }
  if (bytes.size() < kRowsHeader + 4 || std::memcmp(bytes.data(), kRowsMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(where, ": too short or bad magic, not a rows file"));
  }
  const uint32_t crc = Crc32(bytes.data(), bytes.size() - 4);
  if (Get<uint32_t>(bytes.data() + bytes.size() - 4) != crc) {
    return absl::DataLossError(absl::StrCat(where, ": checksum mismatch"));
  }
  const uint32_t version = Get<uint32_t>(bytes.data() + 8);
  const int32_t dim = Get<int32_t>(bytes.data() + 12);
  const uint32_t dtype = Get<uint32_t>(bytes.data() + 16);
  const uint32_t value_bytes = Get<uint32_t>(bytes.data() + 20);
  const uint64_t rows = Get<uint64_t>(bytes.data() + 24);
  if (version != kRowsVersion) {
    return absl::DataLossError(absl::StrCat(where, ": version ", version, ", expected ", kRowsVersion));
  }
  if (dim != table.dim() || dtype != static_cast<uint32_t>(table.row_dtype()) ||
      static_cast<int64_t>(rows) != table.rows() ||
      static_cast<int64_t>(value_bytes) != TableRowValueBytes(table.dim(), table.row_dtype())) {
    return absl::DataLossError(absl::StrCat(where, ": dim ", dim, ", dtype ", dtype, ", ", rows, " rows of ",
                                            value_bytes, " value bytes; the manifest says dim ", table.dim(),
                                            ", dtype ", static_cast<int>(table.row_dtype()), ", ", table.rows(),
                                            " rows"));
  }
  const uint64_t row_bytes = 8 + uint64_t{value_bytes};
  const uint64_t body = bytes.size() - kRowsHeader - 4;
  if (body % row_bytes != 0 || body / row_bytes != rows) {  // no product: a crafted count cannot overflow
    return absl::DataLossError(
        absl::StrCat(where, ": ", rows, " rows of ", row_bytes, " bytes do not fill its ", bytes.size(), " bytes"));
  }
  TableRows out;
  out.keys.resize(rows);
  stored->resize(rows * value_bytes);
  for (uint64_t r = 0; r < rows; ++r) {
    const char* p = bytes.data() + kRowsHeader + r * row_bytes;
    out.keys[r] = Get<uint64_t>(p);
    if (r > 0 && out.keys[r] <= out.keys[r - 1]) {
      return absl::DataLossError(
          absl::StrCat(where, ": row ", r, " key ", out.keys[r], " is not greater than the key before it"));
    }
    std::memcpy(stored->data() + r * value_bytes, p + 8, value_bytes);
  }
  ASSIGN_OR_RETURN(out.values, DecodeStoredValues(*stored, dim, table.row_dtype()));
  for (size_t i = 0; i < out.values.size(); ++i) {
    if (!std::isfinite(out.values[i])) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": row ", i / dim, " (key ", out.keys[i / dim],
                                                     ") element ", i % dim, " is ", out.values[i],
                                                     ", expected finite values"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<float>> DecodeStoredValues(absl::string_view stored, int32_t dim,
                                                      TableSpec::RowDtype dtype) {
  const int64_t value_bytes = TableRowValueBytes(dim, dtype);
  if (dim < 1 || static_cast<int64_t>(stored.size()) % value_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(stored.size(), " bytes of values are not whole rows of ", value_bytes, " bytes (dim ", dim, ")"));
  }
  const int64_t rows = static_cast<int64_t>(stored.size()) / value_bytes;
  std::vector<float> out(static_cast<size_t>(rows * dim));
  std::vector<uint16_t> codes(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const char* v = stored.data() + r * value_bytes;
    float* dst = out.data() + r * dim;
    if (dtype == TableSpec::FP32) {
      std::memcpy(dst, v, sizeof(float) * dim);
      continue;
    }
    std::memcpy(codes.data(), v, sizeof(uint16_t) * dim);
    RETURN_IF_ERROR(dtype == TableSpec::FP16 ? DecodeFp16(codes, absl::MakeSpan(dst, dim))
                                             : DecodeBf16(codes, absl::MakeSpan(dst, dim)));
  }
  return out;
}

std::string EncodeRowsFile(int32_t dim, TableSpec::RowDtype dtype, const std::vector<uint64_t>& keys,
                           const std::string& stored_values) {
  const int64_t value_bytes = TableRowValueBytes(dim, dtype);
  std::string out;
  out.reserve(kRowsHeader + keys.size() * (8 + value_bytes) + 4);
  out.append(kRowsMagic, 8);
  Put<uint32_t>(kRowsVersion, &out);
  Put<int32_t>(dim, &out);
  Put<uint32_t>(static_cast<uint32_t>(dtype), &out);
  Put<uint32_t>(static_cast<uint32_t>(value_bytes), &out);
  Put<uint64_t>(keys.size(), &out);
  for (size_t i = 0; i < keys.size(); ++i) {
    Put<uint64_t>(keys[i], &out);
    out.append(stored_values, i * value_bytes, value_bytes);
  }
  Put<uint32_t>(Crc32(out.data(), out.size()), &out);
  return out;
}

absl::Status WriteModelExport(const ModelExport& e, const std::string& dir) {
  if (e.tables.size() != static_cast<size_t>(e.manifest.tables_size()) || e.stored_values.size() != e.tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat("export to '", dir, "': ", e.manifest.tables_size(),
                                                   " tables described, ", e.tables.size(), " with keys and ",
                                                   e.stored_values.size(), " with values"));
  }
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("export to '", dir, "': it exists; an export is written once, to a new folder"));
  }
  // Written aside, then renamed into place: a reader sees all of it or nothing.
  const std::string tmp = absl::StrCat(dir, ".tmp-", getpid());
  std::filesystem::remove_all(tmp, ec);
  if (!std::filesystem::create_directories(tmp, ec)) {
    return absl::Status(absl::StatusCode::kFailedPrecondition,
                        absl::StrCat("export to '", dir, "': cannot create '", tmp, "': ", ec.message()));
  }
  if (absl::Status s = WriteInto(e, tmp); !s.ok()) {
    std::filesystem::remove_all(tmp, ec);
    return s;
  }
  if (std::rename(tmp.c_str(), dir.c_str()) != 0) {
    const absl::Status s = ErrnoStatus(errno, absl::StrCat("export: renaming '", tmp, "' to '", dir, "'"));
    std::filesystem::remove_all(tmp, ec);
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelExport> ReadModelExport(const std::string& dir) {
  const std::string manifest_path = dir + "/" + kManifest;
  ASSIGN_OR_RETURN(const std::string text, ReadRegularFile(manifest_path, "export manifest", kMaxManifestBytes));
  ModelExport e;
  if (!google::protobuf::TextFormat::ParseFromString(text, &e.manifest)) {
    return absl::InvalidArgumentError(
        absl::StrCat("export manifest '", manifest_path, "': does not parse as an ExportManifest"));
  }
  if (e.manifest.format() != kExportFormat || e.manifest.version() != kExportVersion) {
    return absl::InvalidArgumentError(absl::StrCat("export manifest '", manifest_path, "': format '",
                                                   e.manifest.format(), "' version ", e.manifest.version(),
                                                   ", expected '", kExportFormat, "' version ", kExportVersion));
  }
  if (e.manifest.dense_file().empty() || e.manifest.dense_file().find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("export manifest '", manifest_path, "': dense_file '",
                                                   e.manifest.dense_file(), "', expected a file in the folder"));
  }
  ASSIGN_OR_RETURN(e.dense, model::ReadModelFile(dir + "/" + e.manifest.dense_file()));
  for (const ExportedTable& table : e.manifest.tables()) {
    if (table.dim() < 1 || table.dim() > kMaxTableDim || table.file().empty() ||
        table.file().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "export manifest '", manifest_path, "': table '", table.name(), "' has dim ", table.dim(), " and file '",
          table.file(), "'; expected a dim in [1, ", kMaxTableDim, "] and a file in the folder"));
    }
    e.stored_values.emplace_back();
    ASSIGN_OR_RETURN(TableRows rows, ReadRows(dir + "/" + table.file(), table, &e.stored_values.back()));
    e.tables.push_back(std::move(rows));
  }
  return e;
}

}  // namespace pstrain::serving
