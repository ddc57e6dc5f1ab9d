#include "server/row_eviction.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/table_spec.h"

namespace pstrain::server {
namespace {

template <typename T>
void Put(T value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T Get(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

constexpr size_t kRowMetaBytes = sizeof(int64_t) + sizeof(uint32_t);
constexpr size_t kTombstoneBytes = sizeof(uint64_t) + sizeof(int64_t);

}  // namespace

absl::StatusOr<std::unique_ptr<RowEviction>> RowEviction::Create(absl::string_view what, const EvictionSpec& spec) {
  if (absl::Status s = ValidateEviction(absl::StrCat(what, ".eviction"), spec); !s.ok()) return s;
  EvictionSpec effective = spec;
  ApplyEvictionDefaults(&effective);
  return std::unique_ptr<RowEviction>(new RowEviction(effective));
}

void RowEviction::Grow(uint32_t row) {
  if (row < last_.size()) return;
  const size_t size = std::max<size_t>(row + size_t{1}, last_.size() * 2);
  last_.resize(size, -1);
  count_.resize(size, 0);
}

void RowEviction::Created(uint32_t row, int64_t update) {
  Grow(row);
  last_[row] = update;
  count_[row] = 0;
}

void RowEviction::Updated(uint32_t row, int64_t update) {
  Grow(row);
  last_[row] = update;
  if (count_[row] < std::numeric_limits<uint32_t>::max()) ++count_[row];
}

std::vector<std::pair<uint64_t, uint32_t>> RowEviction::Select(int64_t update, int64_t num_rows,
                                                               const RowVisitor& for_each_row,
                                                               const std::function<double(uint32_t)>& norm) const {
  using Row = std::pair<uint64_t, uint32_t>;
  if (num_rows <= spec_.keep_rows()) return {};
  // Eviction order: LRU (last update, key) or LFU (count, last update, key), ascending.
  const bool lfu = spec_.order() == EvictionSpec::LFU;
  auto before = [&](const Row& a, const Row& b) {
    const uint32_t ca = lfu ? count_[a.second] : 0, cb = lfu ? count_[b.second] : 0;
    return std::tie(ca, last_[a.second], a.first) < std::tie(cb, last_[b.second], b.first);
  };
  auto picked = [&](uint32_t row) {
    if (spec_.ttl_updates() > 0 && update - last_[row] >= spec_.ttl_updates()) return true;
    return spec_.min_l2_norm() > 0 && norm(row) < spec_.min_l2_norm();
  };
  // The rows the rules pick at once leave first, in order.
  std::vector<Row> leaving;
  for_each_row([&](uint64_t key, uint32_t row) {
    if (picked(row)) leaving.emplace_back(key, row);
  });
  std::sort(leaving.begin(), leaving.end(), before);
  // Past the cap, the first `over` of the others in order, kept in a heap whose top is the last
  // of them so far.
  const int64_t remaining = num_rows - static_cast<int64_t>(leaving.size());
  if (spec_.max_rows() > 0 && remaining > spec_.max_rows()) {
    const auto over = static_cast<size_t>(remaining - spec_.max_rows());
    std::vector<Row> heap;
    heap.reserve(over + 1);
    for_each_row([&](uint64_t key, uint32_t row) {
      if (picked(row)) return;
      const Row r{key, row};
      if (heap.size() == over && !before(r, heap.front())) return;
      heap.push_back(r);
      std::push_heap(heap.begin(), heap.end(), before);
      if (heap.size() > over) {
        std::pop_heap(heap.begin(), heap.end(), before);
        heap.pop_back();
      }
    });
    std::sort_heap(heap.begin(), heap.end(), before);
    leaving.insert(leaving.end(), heap.begin(), heap.end());
  }
  const int64_t most = num_rows - spec_.keep_rows();
  if (static_cast<int64_t>(leaving.size()) > most) leaving.resize(static_cast<size_t>(most));
  return leaving;
}

void RowEviction::Evicted(uint64_t key, int64_t update) {
  if (tombstones_.size() == kMaxTombstones) tombstones_.pop_front();
  tombstones_.push_back({key, update});
}

int64_t RowEviction::bytes_used() const {
  return static_cast<int64_t>(last_.capacity() * sizeof(int64_t) + count_.capacity() * sizeof(uint32_t) +
                              tombstones_.size() * sizeof(Tombstone));
}

void RowEviction::SerializeRows(const std::vector<uint32_t>& rows, std::string* out) const {
  out->reserve(out->size() + rows.size() * kRowMetaBytes);
  for (uint32_t row : rows) {
    Put<int64_t>(row < last_.size() ? last_[row] : -1, out);
    Put<uint32_t>(row < count_.size() ? count_[row] : 0, out);
  }
}

void RowEviction::SerializeTombstones(std::string* out) const {
  for (const Tombstone& t : tombstones_) {
    Put<uint64_t>(t.key, out);
    Put<int64_t>(t.update, out);
  }
}

absl::Status RowEviction::Restore(absl::string_view what, uint64_t num_rows, absl::string_view rows,
                                  absl::string_view tombstones, int64_t last_update) {
  if (!rows.empty() && rows.size() != num_rows * kRowMetaBytes) {
    return absl::DataLossError(absl::StrCat(what, ": eviction metadata of ", rows.size(), " bytes for ", num_rows,
                                            " rows, expected ", num_rows * kRowMetaBytes));
  }
  if (tombstones.size() % kTombstoneBytes != 0 || tombstones.size() / kTombstoneBytes > kMaxTombstones) {
    return absl::DataLossError(absl::StrCat(what, ": tombstones of ", tombstones.size(), " bytes, expected a multiple of ",
                                            kTombstoneBytes, " up to ", kMaxTombstones, " of them"));
  }
  std::vector<int64_t> last(num_rows, last_update);
  std::vector<uint32_t> count(num_rows, 0);
  for (uint64_t i = 0; i < num_rows && !rows.empty(); ++i) {
    last[i] = Get<int64_t>(rows.data() + i * kRowMetaBytes);
    count[i] = Get<uint32_t>(rows.data() + i * kRowMetaBytes + sizeof(int64_t));
  }
  std::deque<Tombstone> dead;
  for (size_t i = 0; i < tombstones.size(); i += kTombstoneBytes) {
    dead.push_back({Get<uint64_t>(tombstones.data() + i), Get<int64_t>(tombstones.data() + i + sizeof(uint64_t))});
  }
  last_ = std::move(last);
  count_ = std::move(count);
  tombstones_ = std::move(dead);
  return absl::OkStatus();
}

}  // namespace pstrain::server
