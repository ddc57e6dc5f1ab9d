#include "common/payload_view.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "glog/logging.h"

namespace pstrain {

void PayloadView::Append(absl::string_view run) {
  if (run.empty()) return;
  runs_.push_back(run);
  size_ += run.size();
}

void PayloadView::CopyTo(void* dst) const {
  char* out = static_cast<char*>(dst);
  for (absl::string_view run : runs_) {
    std::memcpy(out, run.data(), run.size());
    out += run.size();
  }
}

PayloadReader::PayloadReader(const PayloadView& view, size_t start) : view_(view), remaining_(view.size() - start) {
  CHECK_LE(start, view.size());
  while (run_ < view_.runs().size() && start >= view_.runs()[run_].size()) start -= view_.runs()[run_++].size();
  offset_ = start;
}

void PayloadReader::Read(size_t n, void* dst) {
  CHECK_LE(n, remaining_);
  remaining_ -= n;
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    const absl::string_view run = view_.runs()[run_];
    const size_t here = std::min(n, run.size() - offset_);
    std::memcpy(out, run.data() + offset_, here);
    out += here;
    n -= here;
    offset_ += here;
    if (offset_ == run.size()) {
      ++run_;
      offset_ = 0;
    }
  }
}

namespace {

constexpr uint32_t kExponentMask = 0x7f800000u;  // all ones: Inf or NaN

uint32_t Bits(const char* bytes, int64_t i) {
  uint32_t bits;
  std::memcpy(&bits, bytes + 4 * i, 4);
  return bits;
}

}  // namespace

int64_t FindNonFinite(const char* bytes, int64_t n) {
  // A branch-free pass first (vectorizes); the exact position is looked for only on failure.
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= static_cast<uint32_t>((Bits(bytes, i) & kExponentMask) == kExponentMask);
  if (any == 0) return -1;
  for (int64_t i = 0; i < n; ++i) {
    if ((Bits(bytes, i) & kExponentMask) == kExponentMask) return i;
  }
  return -1;
}

std::string NonFiniteName(float v) {
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

int64_t PayloadView::FindNonFinite(float* bad) const {
  // Whole floats are scanned where they lie; a float split between two runs is put together first.
  char carry[4];
  size_t carried = 0;
  int64_t index = 0;  // of the next float to look at
  for (absl::string_view run : runs_) {
    const char* p = run.data();
    size_t left = run.size();
    if (carried > 0) {
      const size_t take = std::min(4 - carried, left);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      left -= take;
      if (carried < 4) continue;
      carried = 0;
      if (pstrain::FindNonFinite(carry, 1) == 0) {
        std::memcpy(bad, carry, 4);
        return index;
      }
      ++index;
    }
    const int64_t n = static_cast<int64_t>(left / 4);
    if (const int64_t i = pstrain::FindNonFinite(p, n); i >= 0) {
      std::memcpy(bad, p + 4 * i, 4);
      return index + i;
    }
    index += n;
    std::memcpy(carry, p + 4 * n, left - 4 * n);
    carried = left - 4 * n;
  }
  return -1;
}

}  // namespace pstrain
