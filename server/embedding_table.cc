#include "server/embedding_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/compression.h"
#include "common/key_hash.h"
#include "common/table_spec.h"

namespace pstrain::server {
namespace {

// The key of one table: every element hash starts from it.
inline uint64_t TableKey(uint64_t seed, int32_t table_id) {
  return MixKey64(MixKey64(seed) ^ (static_cast<uint64_t>(table_id) * 0xd6e8feb86659fd93ULL));
}

// Uniform in [-bound, bound) from the top 24 bits of the hash of (table key, row key, element).
inline float UniformValue(uint64_t table_key, uint64_t key, int element, float bound) {
  const uint64_t row_key = MixKey64(table_key ^ MixKey64(key));
  const uint64_t h = MixKey64(row_key ^ MixKey64(static_cast<uint64_t>(element)));
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return bound * (2.0f * u - 1.0f);
}

// How many keys ahead the loops below prefetch. A request's keys are random accesses into a table
// far larger than the cache, so each lookup and each row is a cache miss; issuing them this far
// ahead lets several misses overlap instead of paying them one after the other.
constexpr size_t kPrefetchAhead = 8;

inline void PrefetchRecord(const float* record) {
  __builtin_prefetch(record);
  __builtin_prefetch(reinterpret_cast<const char*>(record) + 64);
}

std::string Where(const TableOptions& options, const char* op) {
  return absl::StrCat("table '", options.name, "' ", op);
}

}  // namespace

float EmbeddingInitialValue(uint64_t seed, int32_t table_id, uint64_t key, int element, float bound) {
  if (bound == 0.0f) return 0.0f;
  return UniformValue(TableKey(seed, table_id), key, element, bound);
}

absl::Status CheckSortedUniqueKeys(absl::Span<const uint64_t> keys, absl::string_view what) {
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] > keys[i - 1]) continue;
    const std::string problem = keys[i] == keys[i - 1]
                                    ? std::string("repeats the key before it")
                                    : absl::StrCat("is less than the key before it (", keys[i - 1], ")");
    return absl::InvalidArgumentError(absl::StrCat(what, ": key ", keys[i], " at position ", i, " ", problem,
                                                   "; keys must be sorted ascending and unique"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(const TableOptions& options) {
  if (options.name.empty()) return absl::InvalidArgumentError("table name: empty");
  if (options.id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(Where(options, "id"), ": got ", options.id, ", expected >= 0"));
  }
  if (options.dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(Where(options, "dim"), ": got ", options.dim, ", expected > 0"));
  }
  if (options.init_bound.has_value() && !(*options.init_bound >= 0 && std::isfinite(*options.init_bound))) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(options, "init_bound"), ": got ", *options.init_bound, ", expected a finite value >= 0"));
  }
  if (absl::Status s = ValidateSparseOptimizer(options.optimizer); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("table '", options.name, "': ", s.message()));
  }
  std::unique_ptr<RowAdmission> admission;
  std::unique_ptr<RowEviction> eviction;
  if (absl::Status s = MakePolicies(options, &admission, &eviction); !s.ok()) return s;
  std::unique_ptr<EmbeddingTable> table(new EmbeddingTable(options));
  table->admission_ = std::move(admission);
  table->eviction_ = std::move(eviction);
  return table;
}

absl::Status EmbeddingTable::MakePolicies(const TableOptions& options, std::unique_ptr<RowAdmission>* admission,
                                          std::unique_ptr<RowEviction>* eviction) {
  const std::string what = absl::StrCat("table '", options.name, "'");
  // Validated even when off: a negative TTL is an error, not "no eviction".
  if (absl::Status s = ValidateEviction(absl::StrCat(what, ".eviction"), options.eviction); !s.ok()) return s;
  if (options.admission.policy() != AdmissionSpec::ALWAYS) {
    absl::StatusOr<std::unique_ptr<RowAdmission>> made =
        RowAdmission::Create(what, options.admission, options.seed, options.id);
    if (!made.ok()) return made.status();
    *admission = std::move(made).value();
  }
  if (EvictionOn(options.eviction) || options.track_rows) {
    absl::StatusOr<std::unique_ptr<RowEviction>> made =
        RowEviction::Create(what, options.eviction, options.keep_tombstones);
    if (!made.ok()) return made.status();
    *eviction = std::move(made).value();
  }
  return absl::OkStatus();
}

float DefaultInitBound(int dim) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim))); }

EmbeddingTable::EmbeddingTable(const TableOptions& options)
    : options_(options),
      bound_(options.init_bound.has_value() ? *options.init_bound : DefaultInitBound(options.dim)),
      value_words_(static_cast<int>(TableRowValueBytes(options.dim, options.row_dtype) / 4)),
      state_floats_(StateFloatsPerElement(options.optimizer.type) * options.dim),
      has_step_(HasRowStepCount(options.optimizer.type)),
      record_floats_(value_words_ + state_floats_ + (has_step_ ? 1 : 0)) {
  static_assert(sizeof(float) == sizeof(uint32_t), "the step count shares a float's slot");
  if (options.row_dtype != TableSpec::FP32) scratch_.resize(options.dim);
}

void EmbeddingTable::ReadValue(const float* record, float* out) const {
  const int dim = options_.dim;
  if (options_.row_dtype == TableSpec::FP32) {
    std::memcpy(out, record, sizeof(float) * dim);
    return;
  }
  // The codes copied out first: the record is floats, not uint16 (no aliasing), and the span
  // decoders are vectorized (fp16 with F16C where the CPU has it).
  uint16_t codes[kMaxTableDim];
  std::memcpy(codes, record, sizeof(uint16_t) * dim);
  const absl::Span<const uint16_t> in(codes, dim);
  const absl::Status decoded = options_.row_dtype == TableSpec::FP16 ? DecodeFp16(in, absl::MakeSpan(out, dim))
                                                                     : DecodeBf16(in, absl::MakeSpan(out, dim));
  DCHECK(decoded.ok()) << decoded;  // sizes match
}

void EmbeddingTable::WriteValue(const float* value, float* record) const {
  const int dim = options_.dim;
  if (options_.row_dtype == TableSpec::FP32) {
    std::memcpy(record, value, sizeof(float) * dim);
    return;
  }
  // The largest finite values: a larger weight is kept at the largest rather than made Inf (which
  // the encoders refuse).
  const bool fp16 = options_.row_dtype == TableSpec::FP16;
  const float largest = fp16 ? 65504.0f : 3.38953139e38f;
  float clamped[kMaxTableDim];
  for (int i = 0; i < dim; ++i) clamped[i] = std::clamp(value[i], -largest, largest);
  uint16_t codes[kMaxTableDim + 1];
  codes[dim] = 0;  // the padding code of an odd dim
  const absl::Span<const float> in(clamped, dim);
  const absl::Status encoded =
      fp16 ? EncodeFp16(in, absl::MakeSpan(codes, dim)) : EncodeBf16(in, absl::MakeSpan(codes, dim));
  DCHECK(encoded.ok()) << encoded;  // sizes match, and nothing overflows once clamped
  std::memcpy(record, codes, sizeof(float) * value_words_);
}

void EmbeddingTable::UnroundedInitialValue(uint64_t key, float* out) const {
  const int dim = options_.dim;
  if (bound_ == 0.0f) {
    std::memset(out, 0, sizeof(float) * dim);
    return;
  }
  const uint64_t table_key = TableKey(options_.seed, options_.id);
  for (int i = 0; i < dim; ++i) out[i] = UniformValue(table_key, key, i, bound_);
}

void EmbeddingTable::InitialValue(uint64_t key, float* out) const {
  UnroundedInitialValue(key, out);
  if (options_.row_dtype == TableSpec::FP32) return;
  // Through the same rounding a row's value takes: stored, then read back.
  float words[kMaxTableDim];
  WriteValue(out, words);
  ReadValue(words, out);
}

int64_t EmbeddingTable::bytes_used() const {
  using Slot = KeyRow;
  const int64_t blocks =
      static_cast<int64_t>(blocks_.size()) * kRowsPerBlock * record_floats_ * static_cast<int64_t>(sizeof(float));
  const int64_t block_list = static_cast<int64_t>(blocks_.capacity() * sizeof(blocks_[0]));
  const int64_t capacity = static_cast<int64_t>(index_.capacity());
  // absl's raw_hash_set: one slot and one control byte per capacity, plus 16 cloned control
  // bytes for the SIMD group probe; nothing at all while empty.
  const int64_t map = capacity == 0 ? 0 : capacity * static_cast<int64_t>(sizeof(Slot) + 1) + 16;
  return blocks + block_list + map + (admission_ != nullptr ? admission_->bytes_used() : 0) +
         (eviction_ != nullptr ? eviction_->bytes_used() : 0) +
         static_cast<int64_t>(free_rows_.capacity() * sizeof(uint32_t) + changed_.capacity() * sizeof(uint64_t));
}

std::unique_ptr<float[]> EmbeddingTable::NewBlock() const {
  // Uninitialized on purpose: a record is written in full when its row is created.
  return std::unique_ptr<float[]>(new float[kRowsPerBlock * record_floats_]);
}

uint32_t EmbeddingTable::FindOrCreateRow(uint64_t key, int64_t update) {
  DCHECK_LT(index_.size(), size_t{kMaxRows});  // CheckRoomFor ran
  bool created = false;
  const auto it = index_.lazy_emplace(key, [&](const Index::constructor& construct) {
    // A record an evicted row left, or the next one.
    uint32_t row;
    if (!free_rows_.empty()) {
      row = free_rows_.back();
      free_rows_.pop_back();
    } else {
      row = num_records_++;
      if (row / kRowsPerBlock >= static_cast<int64_t>(blocks_.size())) blocks_.push_back(NewBlock());
    }
    construct(KeyRow{key, row});
    created = true;
  });
  const uint32_t row = it->row;
  if (!created) return row;
  MarkChanged(row);
  if (eviction_ != nullptr) eviction_->Created(row, update);
  float* record = Record(row);
  if (options_.row_dtype == TableSpec::FP32) {
    UnroundedInitialValue(key, record);
  } else {
    UnroundedInitialValue(key, scratch_.data());
    WriteValue(scratch_.data(), record);
  }
  uint32_t step = 0;
  InitRowState(options_.optimizer, options_.dim, State(record), &step);
  if (has_step_) std::memcpy(State(record) + state_floats_, &step, sizeof(step));
  return row;
}

absl::Status EmbeddingTable::CheckRoomFor(size_t num_keys, const char* op) const {
  if (index_.size() + num_keys <= size_t{kMaxRows}) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(Where(options_, op), ": ", index_.size(), " rows plus ", num_keys,
                                                   " keys could pass the shard's limit of ", kMaxRows, " rows"));
}

absl::Status EmbeddingTable::Pull(absl::Span<const uint64_t> keys, absl::Span<float> out) {
  const int dim = options_.dim;
  if (out.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat(Where(options_, "pull"), ": output holds ", out.size(),
                                                   " floats, expected ", keys.size(), " keys * dim ", dim));
  }
  if (absl::Status s = CheckSortedUniqueKeys(keys, Where(options_, "pull")); !s.ok()) return s;
  if (absl::Status s = CheckRoomFor(keys.size(), "pull"); !s.ok()) return s;
  float* dst = out.data();
  for (uint64_t key : keys) {
    ReadValue(Record(FindOrCreateRow(key, 0)), dst);
    dst += dim;
  }
  return absl::OkStatus();
}

absl::Status EmbeddingTable::Read(absl::Span<const uint64_t> keys, absl::Span<float> out) const {
  const int dim = options_.dim;
  if (out.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat(Where(options_, "read"), ": output holds ", out.size(),
                                                   " floats, expected ", keys.size(), " keys * dim ", dim));
  }
  if (absl::Status s = CheckSortedUniqueKeys(keys, Where(options_, "read")); !s.ok()) return s;
  // First every key's row number (kNoRow: none), the map's buckets prefetched ahead; then the
  // rows, prefetched ahead too.
  constexpr uint32_t kNoRow = kMaxRows;
  std::vector<uint32_t> rows(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kPrefetchAhead < keys.size()) index_.prefetch(keys[i + kPrefetchAhead]);
    auto it = index_.find(keys[i]);
    rows[i] = it == index_.end() ? kNoRow : it->row;
  }
  float* dst = out.data();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kPrefetchAhead < keys.size() && rows[i + kPrefetchAhead] != kNoRow) {
      PrefetchRecord(Record(rows[i + kPrefetchAhead]));
    }
    if (rows[i] != kNoRow) {
      ReadValue(Record(rows[i]), dst);
    } else {
      InitialValue(keys[i], dst);
    }
    dst += dim;
  }
  return absl::OkStatus();
}

absl::Status EmbeddingTable::Apply(absl::Span<const uint64_t> keys, absl::Span<const float> grads, float lr,
                                   int64_t step, absl::Span<float> values_before) {
  const int dim = options_.dim;
  if (!(lr > 0 && std::isfinite(lr))) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(options_, "apply"), ": lr ", lr, ", expected a finite value > 0"));
  }
  if (grads.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat(Where(options_, "apply"), ": got ", grads.size(),
                                                   " gradient floats, expected ", keys.size(), " keys * dim ", dim));
  }
  if (!values_before.empty() && values_before.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat(Where(options_, "apply"), ": values_before holds ",
                                                   values_before.size(), " floats, expected ", keys.size(),
                                                   " keys * dim ", dim));
  }
  if (absl::Status s = CheckSortedUniqueKeys(keys, Where(options_, "apply")); !s.ok()) return s;
  if (absl::Status s = CheckRoomFor(keys.size(), "apply"); !s.ok()) return s;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!std::isfinite(grads[i])) {
      const size_t pos = i / dim;
      return absl::InvalidArgumentError(absl::StrCat(Where(options_, "apply"), ": gradient of key ", keys[pos],
                                                     " (position ", pos, ") element ", i % dim, " is ", grads[i],
                                                     "; expected finite values"));
    }
  }
  // Rows first (found, or created if admitted; the map prefetched ahead), then the updates (rows
  // prefetched ahead); see kPrefetchAhead. Admission is asked in key order, so its decisions
  // depend only on the sequence of updates.
  constexpr uint32_t kNoRow = kMaxRows;
  std::vector<uint32_t> rows(keys.size());
  const size_t before = index_.size();
  for (size_t k = 0; k < keys.size(); ++k) {
    if (k + kPrefetchAhead < keys.size()) index_.prefetch(keys[k + kPrefetchAhead]);
    if (admission_ != nullptr) {
      // One lookup for a key with a row; a new key asks admission first.
      if (auto it = index_.find(keys[k]); it != index_.end()) {
        rows[k] = it->row;
        continue;
      }
      if (!admission_->Admit(keys[k], step)) {
        rows[k] = kNoRow;
        ++counters_.refused;
        continue;
      }
    }
    rows[k] = FindOrCreateRow(keys[k], step);
  }
  counters_.admitted += static_cast<int64_t>(index_.size() - before);
  // Under a half-width dtype the update runs on the value decoded into scratch_, then rounded back.
  const bool half = options_.row_dtype != TableSpec::FP32;
  for (size_t k = 0; k < keys.size(); ++k) {
    if (k + kPrefetchAhead < keys.size() && rows[k + kPrefetchAhead] != kNoRow) {
      PrefetchRecord(Record(rows[k + kPrefetchAhead]));
      if (eviction_ != nullptr) eviction_->Prefetch(rows[k + kPrefetchAhead]);
    }
    if (rows[k] == kNoRow) {
      if (!values_before.empty()) InitialValue(keys[k], values_before.data() + k * dim);  // as Read gives it
      continue;
    }
    MarkChanged(rows[k]);
    if (eviction_ != nullptr) eviction_->Updated(rows[k], step);
    float* record = Record(rows[k]);
    float* state = State(record);
    float* w = half ? scratch_.data() : record;
    if (half) ReadValue(record, w);
    if (!values_before.empty()) std::memcpy(values_before.data() + k * dim, w, dim * sizeof(float));
    if (has_step_) {
      uint32_t row_step;
      std::memcpy(&row_step, state + state_floats_, sizeof(row_step));
      ApplyRowUpdate(options_.optimizer, dim, lr, grads.data() + k * dim, w, state, &row_step);
      std::memcpy(state + state_floats_, &row_step, sizeof(row_step));
    } else {
      ApplyRowUpdate(options_.optimizer, dim, lr, grads.data() + k * dim, w, state, nullptr);
    }
    if (half) WriteValue(w, record);
  }
  return absl::OkStatus();
}

void EmbeddingTable::AfterUpdate(int64_t update) {
  if (eviction_ != nullptr && eviction_->Due(update)) Evict(update);
}

RowEviction::RowVisitor EmbeddingTable::EveryRow() const {
  return [this](const std::function<void(uint64_t, uint32_t)>& visit) {
    for (const KeyRow& s : index_) visit(s.key, s.row);
  };
}

void EmbeddingTable::Evict(int64_t update) {
  const int dim = options_.dim;
  std::vector<float> decoded(options_.row_dtype == TableSpec::FP32 ? 0 : dim);
  Remove(eviction_->Select(update, num_rows(), EveryRow(),
                           [&](uint32_t row) {
                             const float* w = Record(row);
                             if (!decoded.empty()) {
                               ReadValue(w, decoded.data());
                               w = decoded.data();
                             }
                             double sum = 0;
                             for (int i = 0; i < dim; ++i) sum += static_cast<double>(w[i]) * w[i];
                             return std::sqrt(sum);
                           }),
         update);
}

void EmbeddingTable::EvictToCap(int64_t cap, int64_t update) {
  CHECK(eviction_ != nullptr) << "table '" << name() << "': EvictToCap without track_rows";
  Remove(eviction_->SelectPastCap(cap, num_rows(), EveryRow()), update);
}

int64_t EmbeddingTable::num_tombstones() const {
  return eviction_ != nullptr ? static_cast<int64_t>(eviction_->tombstones().size()) : 0;
}

void EmbeddingTable::Remove(const std::vector<RowEviction::Row>& leaving, int64_t update) {
  for (const auto& [key, row] : leaving) {
    index_.erase(key);
    free_rows_.push_back(row);
    eviction_->Evicted(key, update);
  }
  counters_.evicted += static_cast<int64_t>(leaving.size());
}

int64_t EmbeddingTable::tombstones_lost() const { return eviction_ != nullptr ? eviction_->tombstones_lost() : 0; }

void EmbeddingTable::DropTombstones() {
  if (eviction_ != nullptr) eviction_->DropTombstones();
}

std::vector<Tombstone> EmbeddingTable::Tombstones() const {
  if (eviction_ == nullptr) return {};
  return {eviction_->tombstones().begin(), eviction_->tombstones().end()};
}

bool EmbeddingTable::Lookup(uint64_t key, absl::Span<float> out) const {
  CHECK_EQ(out.size(), static_cast<size_t>(options_.dim));
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  ReadValue(Record(it->row), out.data());
  return true;
}

}  // namespace pstrain::server
