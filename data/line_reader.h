// Streams the lines of a text file, plain or gzip, without holding more than one block of it.
//
// The format is detected from the gzip magic bytes, never the name (zlib's transparent mode reads
// anything else as is). Lines end at '\n'; a '\r' before it is dropped (files written on Windows);
// the last line may lack its '\n'. A file that ends with '\n' has no empty line after it.
//
// Record numbers: line i (0-based) is record i. The text readers built on this class
// (criteo_reader.h, libsvm_reader.h) count records the same way, so that a scheduler can hand out
// record ranges [first, first + count) of a file and every line is covered exactly once.
//
// Thread-compatible: one thread at a time. Every call may block on file I/O.
#ifndef PSTRAIN_DATA_LINE_READER_H_
#define PSTRAIN_DATA_LINE_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct gzFile_s;

namespace pstrain {
namespace data {

class LineReader {
 public:
  // A line longer than this is DATA_LOSS (a binary file, or a file with no newlines), so a bad
  // input cannot make the reader buffer it whole.
  static constexpr size_t kMaxLineBytes = size_t{16} << 20;

  // Opens `path` and skips its first `first_line` lines (a record range's start; a start past the
  // end gives a reader at the end, not an error). NOT_FOUND / PERMISSION_DENIED / ... (code from
  // errno) if it cannot be opened: "<path>: cannot open: <strerror>"; errors of Skip.
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(const std::string& path, int64_t first_line = 0);

  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line, without its '\n' (and '\r'), in `*line`: true; false at the end of the file.
  // `*line` stays valid until the next call. DATA_LOSS for a corrupt gzip stream (zlib's
  // message), a read error or a line longer than kMaxLineBytes, naming the file and line.
  absl::StatusOr<bool> Next(absl::string_view* line);

  // Skips up to `n` lines (counting them without looking at their contents); returns how many
  // were skipped: fewer than `n` only at the end of the file. Errors as for Next.
  absl::StatusOr<int64_t> Skip(int64_t n);

  // The number of lines returned or skipped so far; during a Next that returned true, the
  // 1-based number of the line returned, as error messages write it.
  int64_t lines() const { return lines_; }

  const std::string& path() const { return path_; }

 private:
  LineReader(std::string path, gzFile_s* file);

  // Appends what the file holds next to buf_[end_..]; sets eof_ at the end.
  absl::Status Fill();

  // Constant after construction.
  const std::string path_;
  gzFile_s* const file_;  // Owned; closed by the destructor.

  std::string buf_;  // Bytes read but not yet returned are buf_[pos_, end_).
  size_t pos_ = 0;
  size_t end_ = 0;
  bool eof_ = false;
  int64_t lines_ = 0;
};

// The number of lines (records) in `path`, read in one streaming pass. Errors as for LineReader.
absl::StatusOr<int64_t> CountLines(const std::string& path);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_LINE_READER_H_
