// Turns a child's raw output stream into whole, prefixed lines.
#ifndef PSTRAIN_LAUNCH_LINE_PREFIXER_H_
#define PSTRAIN_LAUNCH_LINE_PREFIXER_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace pstrain {
namespace launch {

// Splits a byte stream that arrives in arbitrary pieces into lines and puts `prefix` in front of
// each, e.g. "[worker 1] ". A line cut between two reads is held back until its newline arrives
// (or Flush() is called at end of stream), so output of several children never interleaves
// within a line.
//
// Returned lines carry no trailing newline; a "\r\n" ending loses its '\r' too. A partial line
// longer than `max_line_bytes` is emitted as it stands, so a child that never writes a newline
// cannot make the launcher hold unbounded memory.
//
// Not thread-safe: one prefixer per stream, used by one thread.
class LinePrefixer {
 public:
  static constexpr size_t kDefaultMaxLineBytes = 64 * 1024;

  explicit LinePrefixer(std::string prefix, size_t max_line_bytes = kDefaultMaxLineBytes);

  // Consumes `bytes` and returns the lines they complete, prefixed, in order (possibly none).
  std::vector<std::string> Add(absl::string_view bytes);

  // At end of stream: returns the held-back partial line, prefixed, or nothing if there is none.
  // The prefixer is empty afterwards and may be reused.
  std::optional<std::string> Flush();

  const std::string& prefix() const { return prefix_; }

 private:
  std::string MakeLine(absl::string_view text) const;

  const std::string prefix_;
  const size_t max_line_bytes_;
  std::string partial_;  // Bytes after the last newline seen.
};

}  // namespace launch
}  // namespace pstrain

#endif  // PSTRAIN_LAUNCH_LINE_PREFIXER_H_
