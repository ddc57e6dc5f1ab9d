#include "server/row_eviction.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/table_spec.h"
#include "server/le_bytes.h"
#include "server/table_format.h"

namespace pstrain::server {
namespace {

constexpr size_t kRowMetaBytes = kTableRowMetaBytes;  // server/table_format.h
constexpr size_t kTombstoneBytes = kTableTombstoneBytes;

}  // namespace

absl::StatusOr<std::unique_ptr<RowEviction>> RowEviction::Create(absl::string_view what, const EvictionSpec& spec,
                                                                 bool keep_tombstones) {
  if (absl::Status s = ValidateEviction(absl::StrCat(what, ".eviction"), spec); !s.ok()) return s;
  EvictionSpec effective = spec;
  ApplyEvictionDefaults(&effective);
  return std::unique_ptr<RowEviction>(new RowEviction(effective, keep_tombstones));
}

RowEviction::RowEviction(const EvictionSpec& spec, bool keep_tombstones)
    : spec_(spec), keep_tombstones_(keep_tombstones) {
  if (spec_.ttl_seconds() > 0) clock_ = std::make_unique<UpdateClock>(spec_.ttl_seconds() * 1000);
}

void RowEviction::Grow(uint32_t row) { meta_.GrowTo(row + size_t{1}, RowMeta{-1, 0}); }

void RowEviction::Created(uint32_t row, int64_t update) {
  Grow(row);
  meta_[row] = RowMeta{update, 0};
}

void RowEviction::Updated(uint32_t row, int64_t update) {
  Grow(row);
  RowMeta& m = meta_[row];
  m.last = update;
  if (m.count < std::numeric_limits<uint32_t>::max()) ++m.count;
}

RowEviction::OrderKey RowEviction::KeyOf(const Row& r) const {
  // Eviction order: LRU (last update, key) or LFU (count, last update, key), ascending.
  const RowMeta& m = meta_[r.second];
  return {spec_.order() == EvictionSpec::LFU ? m.count : 0, m.last, r.first};
}

bool RowEviction::Before(const Row& a, const Row& b) const { return KeyOf(a) < KeyOf(b); }

void RowEviction::SortInOrder(std::vector<Row>* rows) const {
  // Each row's order key read once, then sorted without touching the metadata again (a
  // comparison that read it would miss the cache about log n times a row).
  std::vector<std::pair<OrderKey, Row>> keyed;
  keyed.reserve(rows->size());
  for (const Row& r : *rows) keyed.emplace_back(KeyOf(r), r);
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < keyed.size(); ++i) (*rows)[i] = keyed[i].second;
}

void RowEviction::AppendFirst(size_t over, const RowVisitor& for_each_row, const std::function<bool(uint32_t)>& skip,
                              std::vector<Row>* leaving) const {
  if (over == 0) return;
  auto before = [this](const Row& a, const Row& b) { return Before(a, b); };
  // The first `over` rows in order, kept in a heap whose top is the last of them so far.
  std::vector<Row> heap;
  heap.reserve(over + 1);
  for_each_row([&](uint64_t key, uint32_t row) {
    if (skip(row)) return;
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
  leaving->insert(leaving->end(), heap.begin(), heap.end());
}

std::vector<bool> RowEviction::ExpiredRows(int64_t update) const {
  // ttl_seconds as an update: rows last updated at or before it are at least the TTL old.
  const int64_t expired_through = clock_ != nullptr ? clock_->ExpiredThrough() : UpdateClock::kNone;
  const int64_t ttl = spec_.ttl_updates();
  std::vector<bool> expired;
  if (ttl <= 0 && expired_through == UpdateClock::kNone) return expired;
  // Last updated at or before `through`: by ttl_updates, update - last >= ttl.
  const int64_t through = std::max(ttl > 0 ? update - ttl : UpdateClock::kNone, expired_through);
  expired.resize(meta_.size());
  for (size_t row = 0; row < meta_.size(); ++row) expired[row] = meta_[row].last <= through;
  return expired;
}

std::vector<RowEviction::Row> RowEviction::Select(int64_t update, int64_t num_rows, const RowVisitor& for_each_row,
                                                  const std::function<double(uint32_t)>& norm) const {
  if (num_rows <= spec_.keep_rows()) return {};
  // The TTL rules first, by row number in row order, into a bitmap: the metadata is read
  // sequentially (in the index's order, each row's would be a cache miss), and the visit in the
  // index's order below reads one bit a row. Row numbers without a row (freed, or not yet used)
  // may get a bit; the visit never asks for them.
  const std::vector<bool> expired = ExpiredRows(update);
  auto picked = [&](uint32_t row) {
    if (!expired.empty() && expired[row]) return true;
    return spec_.min_l2_norm() > 0 && norm(row) < spec_.min_l2_norm();
  };
  // The rows the rules pick at once leave first, in order.
  std::vector<Row> leaving;
  for_each_row([&](uint64_t key, uint32_t row) {
    if (picked(row)) leaving.emplace_back(key, row);
  });
  SortInOrder(&leaving);
  // Past the cap, the first of the others in order.
  const int64_t remaining = num_rows - static_cast<int64_t>(leaving.size());
  if (spec_.max_rows() > 0 && remaining > spec_.max_rows()) {
    AppendFirst(static_cast<size_t>(remaining - spec_.max_rows()), for_each_row, picked, &leaving);
  }
  const int64_t most = num_rows - spec_.keep_rows();
  if (static_cast<int64_t>(leaving.size()) > most) leaving.resize(static_cast<size_t>(most));
  return leaving;
}

std::vector<RowEviction::Row> RowEviction::SelectPastCap(int64_t cap, int64_t num_rows,
                                                         const RowVisitor& for_each_row) const {
  const int64_t keep = std::max(cap, spec_.keep_rows());
  std::vector<Row> leaving;
  if (num_rows <= keep) return leaving;
  AppendFirst(
      static_cast<size_t>(num_rows - keep), for_each_row, [](uint32_t) { return false; }, &leaving);
  return leaving;
}

void RowEviction::Evicted(uint64_t key, int64_t update) {
  if (!keep_tombstones_) return;
  if (tombstones_.size() == kMaxTombstones) {
    tombstones_.pop_front();
    ++tombstones_lost_;
  }
  tombstones_.push_back({key, update});
}

void RowEviction::DropTombstones() {
  std::deque<Tombstone>().swap(tombstones_);  // hands the memory back, not only the elements
  tombstones_lost_ = 0;
}

int64_t RowEviction::bytes_used() const {
  return meta_.bytes_used() + static_cast<int64_t>(tombstones_.size() * sizeof(Tombstone)) +
         (clock_ != nullptr ? clock_->bytes_used() : 0);
}

void RowEviction::SerializeRows(const std::vector<uint32_t>& rows, std::string* out) const {
  out->reserve(out->size() + rows.size() * kRowMetaBytes);
  for (uint32_t row : rows) {
    const RowMeta m = row < meta_.size() ? meta_[row] : RowMeta{-1, 0};
    PutBytes<int64_t>(m.last, out);
    PutBytes<uint32_t>(m.count, out);
  }
}

void RowEviction::SerializeTombstones(std::string* out) const {
  for (const Tombstone& t : tombstones_) {
    PutBytes<uint64_t>(t.key, out);
    PutBytes<int64_t>(t.update, out);
  }
}

void RowEviction::SerializeTombstonesLost(std::string* out) const { PutBytes<uint64_t>(tombstones_lost_, out); }

void RowEviction::SerializeClock(std::string* out) const {
  if (clock_ != nullptr) clock_->Serialize(out);
}

absl::Status RowEviction::Restore(absl::string_view what, uint64_t num_rows, absl::string_view rows,
                                  absl::string_view tombstones, absl::string_view lost, absl::string_view clock,
                                  int64_t last_update) {
  if (!rows.empty() && rows.size() != num_rows * kRowMetaBytes) {
    return absl::DataLossError(absl::StrCat(what, ": eviction metadata of ", rows.size(), " bytes for ", num_rows,
                                            " rows, expected ", num_rows * kRowMetaBytes));
  }
  if (tombstones.size() % kTombstoneBytes != 0 || tombstones.size() / kTombstoneBytes > kMaxTombstones) {
    return absl::DataLossError(absl::StrCat(what, ": tombstones of ", tombstones.size(),
                                            " bytes, expected a multiple of ", kTombstoneBytes, " up to ",
                                            kMaxTombstones, " of them"));
  }
  constexpr uint64_t kMaxLost = std::numeric_limits<int64_t>::max();
  if (!lost.empty() && (lost.size() != sizeof(uint64_t) || GetBytes<uint64_t>(lost.data()) > kMaxLost)) {
    return absl::DataLossError(
        absl::StrCat(what, ": a count of lost tombstones of ", lost.size(), " bytes, expected one uint64 below 2^63"));
  }
  std::unique_ptr<UpdateClock> restored_clock;
  if (clock_ != nullptr) {
    restored_clock = std::make_unique<UpdateClock>(spec_.ttl_seconds() * 1000);
    if (!clock.empty()) {
      if (absl::Status s = restored_clock->Restore(what, clock); !s.ok()) return s;
    }
  }
  RowArray<RowMeta> meta;
  meta.GrowTo(num_rows, RowMeta{last_update, 0});
  for (uint64_t i = 0; i < num_rows && !rows.empty(); ++i) {
    meta[i] = RowMeta{GetBytes<int64_t>(rows.data() + i * kRowMetaBytes),
                      GetBytes<uint32_t>(rows.data() + i * kRowMetaBytes + sizeof(int64_t))};
  }
  std::deque<Tombstone> dead;
  for (size_t i = 0; i < tombstones.size(); i += kTombstoneBytes) {
    dead.push_back(
        {GetBytes<uint64_t>(tombstones.data() + i), GetBytes<int64_t>(tombstones.data() + i + sizeof(uint64_t))});
  }
  meta_ = std::move(meta);
  clock_ = std::move(restored_clock);
  tombstones_ = std::move(dead);
  tombstones_lost_ = lost.empty() ? 0 : static_cast<int64_t>(GetBytes<uint64_t>(lost.data()));
  return absl::OkStatus();
}

}  // namespace pstrain::server
