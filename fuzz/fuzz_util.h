// What the fuzz targets share: a scratch file for readers that take a path, and a reader of the
// small length-prefixed frames that the request-sequence targets split their input into.
// Test-only; every target is single-threaded, so none of this is thread-safe.
#ifndef PSTRAIN_FUZZ_FUZZ_UTIL_H_
#define PSTRAIN_FUZZ_FUZZ_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "absl/strings/string_view.h"
#include "glog/logging.h"
#include "zlib.h"

namespace pstrain::fuzz {

// The stores and the scheduler log their lifecycle at INFO; per input that is noise that costs
// executions. Errors and crashes still reach stderr.
inline const bool kQuietLogs = (FLAGS_minloglevel = google::GLOG_ERROR, true);

// A private folder for the process's scratch files, made on first use and removed at exit.
inline const std::string& ScratchDir() {
  static const std::string* dir = [] {
    std::string tmpl = "/tmp/pstrain-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    auto* d = new std::string(tmpl);
    std::atexit([] { std::system(("rm -rf '" + ScratchDir() + "'").c_str()); });
    return d;
  }();
  return *dir;
}

// Writes `bytes` to ScratchDir()/name, replacing it, and returns the path.
inline std::string WriteScratch(const std::string& name, absl::string_view bytes) {
  std::string path = ScratchDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

// The files with a trailing CRC-32 (checkpoints, model and state files) reject almost every
// mutation at the checksum. When `fix` is set the last 4 bytes are replaced by the CRC of the rest
// (zlib crc32, little-endian, as all those formats store it), so the fuzzer reaches the parsing
// behind the check; when not, the input is used as it is, so the check itself is fuzzed too.
inline std::string MaybeFixCrc(absl::string_view bytes, bool fix) {
  std::string out(bytes);
  if (!fix || out.size() < 4) return out;
  const uint32_t crc = static_cast<uint32_t>(
      crc32(crc32(0, Z_NULL, 0), reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size() - 4)));
  for (int i = 0; i < 4; ++i) out[out.size() - 4 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  return out;
}

// Frames: u8 tag, u16 little-endian length, then that many bytes (fewer at the end of the input).
// The seed generator writes the same layout (AppendFrame), so seeds start from valid requests.
class FrameReader {
 public:
  FrameReader(const uint8_t* data, size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}

  // False once fewer than 3 bytes are left.
  bool Next(uint8_t* tag, absl::string_view* body) {
    if (rest_.size() < 3) return false;
    *tag = static_cast<uint8_t>(rest_[0]);
    const size_t len = static_cast<uint8_t>(rest_[1]) | (size_t{static_cast<uint8_t>(rest_[2])} << 8);
    rest_.remove_prefix(3);
    *body = rest_.substr(0, len);
    rest_.remove_prefix(body->size());
    return true;
  }

 private:
  absl::string_view rest_;
};

inline void AppendFrame(uint8_t tag, absl::string_view body, std::string* out) {
  out->push_back(static_cast<char>(tag));
  out->push_back(static_cast<char>(body.size() & 0xff));
  out->push_back(static_cast<char>((body.size() >> 8) & 0xff));
  out->append(body.data(), body.size());
}

}  // namespace pstrain::fuzz

#endif  // PSTRAIN_FUZZ_FUZZ_UTIL_H_
