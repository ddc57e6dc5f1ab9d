#include "launch/line_prefixer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace launch {

LinePrefixer::LinePrefixer(std::string prefix, size_t max_line_bytes)
    : prefix_(std::move(prefix)), max_line_bytes_(max_line_bytes > 0 ? max_line_bytes : 1) {}

std::string LinePrefixer::MakeLine(absl::string_view text) const {
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  return absl::StrCat(prefix_, text);
}

std::vector<std::string> LinePrefixer::Add(absl::string_view bytes) {
  std::vector<std::string> lines;
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    if (newline == absl::string_view::npos) {
      partial_.append(bytes.data(), bytes.size());
      break;
    }
    if (partial_.empty()) {
      lines.push_back(MakeLine(bytes.substr(0, newline)));
    } else {
      partial_.append(bytes.data(), newline);
      lines.push_back(MakeLine(partial_));
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
  // A runaway line goes out in pieces of max_line_bytes_.
  while (partial_.size() >= max_line_bytes_) {
    lines.push_back(MakeLine(absl::string_view(partial_).substr(0, max_line_bytes_)));
    partial_.erase(0, max_line_bytes_);
  }
  return lines;
}

std::optional<std::string> LinePrefixer::Flush() {
  if (partial_.empty()) return std::nullopt;
  std::string line = MakeLine(partial_);
  partial_.clear();
  return line;
}

}  // namespace launch
}  // namespace pstrain
