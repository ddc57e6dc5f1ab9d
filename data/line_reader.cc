#include "data/line_reader.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/zlib_file.h"

namespace pstrain {
namespace data {
namespace {

// zlib is drained in blocks this large: per-call overhead vanishes, memory stays small.
constexpr size_t kBlockBytes = size_t{1} << 20;

// zlib prefixes its messages with "<fd:3>: " after gzdopen; our messages name the file.
absl::string_view StripZlibPrefix(absl::string_view message) {
  if (absl::StartsWith(message, "<fd:")) {
    const size_t colon = message.find(">: ");
    if (colon != absl::string_view::npos) message.remove_prefix(colon + 3);
  }
  return message;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(const std::string& path, int64_t first_line) {
  ASSIGN_OR_RETURN(gzFile file, OpenThroughZlib(path, kBlockBytes));
  std::unique_ptr<LineReader> reader(new LineReader(path, file));
  if (first_line > 0) {
    ASSIGN_OR_RETURN(const int64_t skipped, reader->Skip(first_line));
    (void)skipped;  // A start past the end gives an empty reader, not an error.
  }
  return reader;
}

LineReader::LineReader(std::string path, gzFile_s* file)
    : path_(std::move(path)), file_(file), buf_(kBlockBytes, '\0') {}

LineReader::~LineReader() { gzclose(file_); }

absl::Status LineReader::Fill() {
  // Keep the unreturned bytes, moved to the front; grow only for a line longer than a block.
  if (pos_ > 0) {
    std::memmove(&buf_[0], buf_.data() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
  }
  if (end_ == buf_.size()) {
    if (buf_.size() >= kMaxLineBytes) {
      return absl::DataLossError(
          absl::StrCat(path_, ":", lines_ + 1, ": line longer than ", kMaxLineBytes, " bytes, expected a text file"));
    }
    buf_.resize(buf_.size() * 2);
  }
  const int n = gzread(file_, &buf_[end_], static_cast<unsigned>(buf_.size() - end_));
  if (n > 0) {
    end_ += static_cast<size_t>(n);
    return absl::OkStatus();
  }
  int errnum = Z_OK;
  const char* message = gzerror(file_, &errnum);
  if (errnum == Z_OK) {
    eof_ = true;
    return absl::OkStatus();
  }
  if (errnum == Z_ERRNO) {
    const int err = errno;
    return absl::DataLossError(absl::StrCat(path_, ": read error: ", std::strerror(err)));
  }
  // Z_BUF_ERROR is zlib's "unexpected end of file": a gzip stream cut off.
  return absl::DataLossError(absl::StrCat(path_, ":", lines_ + 1, ": corrupt gzip stream: ", StripZlibPrefix(message)));
}

absl::StatusOr<bool> LineReader::Next(absl::string_view* line) {
  size_t scanned = pos_;  // Bytes before this hold no '\n'.
  while (true) {
    const void* nl = std::memchr(buf_.data() + scanned, '\n', end_ - scanned);
    if (nl != nullptr) {
      const size_t at = static_cast<const char*>(nl) - buf_.data();
      *line = absl::string_view(buf_.data() + pos_, at - pos_);
      pos_ = at + 1;
      break;
    }
    if (eof_) {
      if (pos_ == end_) return false;
      *line = absl::string_view(buf_.data() + pos_, end_ - pos_);
      pos_ = end_;
      break;
    }
    const size_t offset = scanned - pos_;
    RETURN_IF_ERROR(Fill());
    scanned = pos_ + offset;
    scanned = end_ > scanned ? scanned : end_;
  }
  if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
  ++lines_;
  return true;
}

absl::StatusOr<int64_t> LineReader::Skip(int64_t n) {
  int64_t skipped = 0;
  absl::string_view line;
  while (skipped < n) {
    ASSIGN_OR_RETURN(const bool more, Next(&line));
    if (!more) break;
    ++skipped;
  }
  return skipped;
}

absl::StatusOr<int64_t> CountLines(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<LineReader> reader, LineReader::Open(path));
  return reader->Skip(INT64_MAX);
}

}  // namespace data
}  // namespace pstrain
