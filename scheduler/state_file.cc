#include "scheduler/state_file.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"

namespace pstrain {
namespace scheduler {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'T', 'R', 'A', 'I', 'N', 'S'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 8;
constexpr size_t kCrcBytes = 4;
constexpr char kFileName[] = "scheduler.state";
constexpr char kDeclaredModelFileName[] = "declared_model.bin";

uint32_t Crc(absl::string_view bytes) {
  uint32_t crc = static_cast<uint32_t>(crc32(0, Z_NULL, 0));
  // zlib's crc32 takes a uInt length; feed large buffers in pieces.
  while (!bytes.empty()) {
    const size_t piece = std::min<size_t>(bytes.size(), 1u << 30);
    crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(piece)));
    bytes.remove_prefix(piece);
  }
  return crc;
}

template <typename T>
void Put(T value, std::string* out) {
  for (size_t i = 0; i < sizeof(T); ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

template <typename T>
T Get(absl::string_view bytes, size_t offset) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return value;
}

}  // namespace

std::string EncodeSchedulerState(const SchedulerState& state) {
  std::string payload;
  state.SerializeToString(&payload);
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(kFormatVersion, &out);
  Put<uint64_t>(payload.size(), &out);
  out += payload;
  Put<uint32_t>(Crc(out), &out);
  return out;
}

absl::StatusOr<SchedulerState> DecodeSchedulerState(absl::string_view bytes, absl::string_view path) {
  const std::string where = absl::StrCat("scheduler state file '", path, "'");
  if (bytes.size() < kHeaderBytes + kCrcBytes) {
    return absl::DataLossError(absl::StrCat(where, ": ", bytes.size(), " bytes, expected at least ",
                                            kHeaderBytes + kCrcBytes, " (header and checksum)"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(where, ": bad magic at offset 0, expected \"PSTRAINS\""));
  }
  const uint32_t version = Get<uint32_t>(bytes, 8);
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": format version ", version, " at offset 8, expected ", kFormatVersion));
  }
  const uint64_t size = Get<uint64_t>(bytes, 12);
  if (size != bytes.size() - kHeaderBytes - kCrcBytes) {
    return absl::DataLossError(absl::StrCat(where, ": payload size ", size, " at offset 12, but the file holds ",
                                            bytes.size() - kHeaderBytes - kCrcBytes,
                                            " payload bytes: the file is truncated or damaged"));
  }
  const uint32_t stored = Get<uint32_t>(bytes, bytes.size() - kCrcBytes);
  const uint32_t computed = Crc(bytes.substr(0, bytes.size() - kCrcBytes));
  if (stored != computed) {
    return absl::DataLossError(absl::StrFormat("%s: checksum 0x%08x at offset %u, computed 0x%08x: the file is damaged",
                                               where, stored, bytes.size() - kCrcBytes, computed));
  }
  SchedulerState state;
  if (!state.ParseFromArray(bytes.data() + kHeaderBytes, static_cast<int>(size))) {
    return absl::DataLossError(absl::StrCat(where, ": the ", size, " payload bytes do not parse as a SchedulerState"));
  }
  return state;
}

absl::StatusOr<std::unique_ptr<StateFile>> StateFile::Open(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("--state_dir: empty, expected a folder");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoStatus(ec.value(), absl::StrCat("creating the state folder '", dir, "'"));
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat("--state_dir '", dir, "': not a folder"));
  }
  return std::unique_ptr<StateFile>(new StateFile((std::filesystem::path(dir) / kFileName).string(),
                                                  (std::filesystem::path(dir) / kDeclaredModelFileName).string()));
}

absl::StatusOr<std::optional<SchedulerState>> StateFile::Load() const {
  absl::StatusOr<std::string> bytes = ReadWholeFile(path_, "scheduler state file");
  if (absl::IsNotFound(bytes.status())) return std::optional<SchedulerState>();
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<SchedulerState> state = DecodeSchedulerState(*bytes, path_);
  if (!state.ok()) return state.status();
  return std::optional<SchedulerState>(*std::move(state));
}

absl::Status StateFile::Save(int64_t version, const SchedulerState& state) {
  absl::MutexLock lock(&mu_);
  if (version <= saved_version_) return absl::OkStatus();
  std::string bytes = EncodeSchedulerState(state);
  if (bytes == saved_bytes_) {
    saved_version_ = version;
    return absl::OkStatus();
  }
  // 0600: the state holds the scheduler's session signing key.
  if (absl::Status s = WriteFileAtomically(path_, "scheduler state file", bytes, 0600); !s.ok()) return s;
  saved_version_ = version;
  saved_bytes_ = std::move(bytes);
  ++writes_;
  return absl::OkStatus();
}

absl::Status StateFile::SaveDeclaredModel(absl::string_view model_file) {
  return WriteFileAtomically(declared_model_path_, "declared model file", model_file);
}

absl::StatusOr<std::string> StateFile::LoadDeclaredModel() const {
  return ReadWholeFile(declared_model_path_, "declared model file");
}

int64_t StateFile::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

}  // namespace scheduler
}  // namespace pstrain
