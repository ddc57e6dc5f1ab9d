#include "server/update_clock.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/le_bytes.h"

namespace pstrain::server {
namespace {

constexpr size_t kHeaderBytes = sizeof(int64_t) + sizeof(uint64_t);
constexpr size_t kSampleBytes = 2 * sizeof(int64_t);

}  // namespace

UpdateClock::UpdateClock(int64_t ttl_ms) : ttl_ms_(ttl_ms), resolution_ms_(std::max<int64_t>(1, ttl_ms / 64)) {}

void UpdateClock::Advance(int64_t update, int64_t unix_ms) {
  if (unix_ms <= now_ms_) return;
  now_ms_ = unix_ms;
  if (samples_.empty() || now_ms_ >= samples_.back().unix_ms + resolution_ms_) {
    samples_.push_back({update, now_ms_});
    Prune();
  }
}

void UpdateClock::Prune() {
  // Keep the newest sample at or past the TTL (the one ExpiredThrough answers with) and those after.
  const int64_t cutoff = now_ms_ - ttl_ms_;
  while (samples_.size() >= 2 && samples_[1].unix_ms <= cutoff) samples_.pop_front();
}

int64_t UpdateClock::ExpiredThrough() const {
  if (samples_.empty() || samples_.front().unix_ms > now_ms_ - ttl_ms_) return kNone;
  return samples_.front().update;
}

void UpdateClock::Serialize(std::string* out) const {
  PutBytes<int64_t>(now_ms_, out);
  PutBytes<uint64_t>(samples_.size(), out);
  for (const Sample& s : samples_) {
    PutBytes<int64_t>(s.update, out);
    PutBytes<int64_t>(s.unix_ms, out);
  }
}

absl::Status UpdateClock::Restore(absl::string_view what, absl::string_view data) {
  if (data.size() < kHeaderBytes || (data.size() - kHeaderBytes) % kSampleBytes != 0 ||
      GetBytes<uint64_t>(data.data() + sizeof(int64_t)) != (data.size() - kHeaderBytes) / kSampleBytes) {
    return absl::DataLossError(absl::StrCat(what, ": an eviction clock of ", data.size(),
                                            " bytes, expected 16 plus 16 a sample as its count says"));
  }
  const int64_t now = GetBytes<int64_t>(data.data());
  if (now < 0) return absl::DataLossError(absl::StrCat(what, ": an eviction clock at ", now, " ms, expected >= 0"));
  std::deque<Sample> samples;
  for (size_t at = kHeaderBytes; at < data.size(); at += kSampleBytes) {
    const Sample s{GetBytes<int64_t>(data.data() + at), GetBytes<int64_t>(data.data() + at + sizeof(int64_t))};
    if (s.unix_ms <= 0 || s.unix_ms > now ||
        (!samples.empty() && (s.update < samples.back().update || s.unix_ms <= samples.back().unix_ms))) {
      return absl::DataLossError(absl::StrCat(what, ": eviction clock sample ", samples.size(), " (update ", s.update,
                                              " at ", s.unix_ms, " ms) is out of order or past the clock (", now,
                                              " ms)"));
    }
    samples.push_back(s);
  }
  now_ms_ = now;
  samples_ = std::move(samples);
  return absl::OkStatus();
}

}  // namespace pstrain::server
