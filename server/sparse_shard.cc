#include "server/sparse_shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include <glog/logging.h>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/payload_view.h"
#include "common/key_hash.h"
#include "common/table_spec.h"

namespace pstrain::server {
namespace {

SparseOptimizerOptions OptimizerOf(const SparseOptimizerSpec& spec) {
  SparseOptimizerOptions o;
  switch (spec.type()) {
    case SparseOptimizerSpec::SGD:
      o.type = SparseOptimizerOptions::Type::kSgd;
      break;
    case SparseOptimizerSpec::LAZY_ADAM:
      o.type = SparseOptimizerOptions::Type::kLazyAdam;
      break;
    case SparseOptimizerSpec::FTRL:
      o.type = SparseOptimizerOptions::Type::kFtrl;
      break;
    default:
      o.type = SparseOptimizerOptions::Type::kAdagrad;
      break;
  }
  o.initial_accumulator = spec.initial_accumulator();
  o.epsilon = spec.epsilon();
  o.beta1 = spec.beta1();
  o.beta2 = spec.beta2();
  o.ftrl_beta = spec.ftrl_beta();
  o.l1 = spec.l1();
  o.l2 = spec.l2();
  return o;
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<EmbeddingTable>>> MakeJobTables(const JobSpec& job) {
  std::vector<std::unique_ptr<EmbeddingTable>> tables;
  for (int t = 0; t < job.tables_size(); ++t) {
    const TableSpec& spec = job.tables(t);
    TableOptions options;
    options.name = spec.name();
    options.id = t;
    options.dim = spec.dim();
    options.seed = job.seed();
    if (spec.has_init_bound()) options.init_bound = spec.init_bound();
    options.optimizer = OptimizerOf(spec.optimizer());
    options.admission = spec.admission();
    options.eviction = spec.eviction();
    options.row_dtype = RowDtypeOf(spec);
    options.track_rows = job.table_memory_budget() > 0;
    // A checkpoint (the only reader of tombstones today) may be cut: asked by the workers or on a
    // clock, either only with a folder.
    options.keep_tombstones = !job.checkpoint_dir().empty();
    // Delta checkpoints: the rows changed since the last cut.
    options.track_changes = !job.checkpoint_dir().empty() && job.full_checkpoint_every() > 1;
    absl::StatusOr<std::unique_ptr<EmbeddingTable>> table = EmbeddingTable::Create(options);
    if (!table.ok()) return table.status();
    tables.push_back(std::move(table).value());
  }
  return tables;
}

const SparseRows* FindTable(const SparseList& list, int table) {
  for (const SparseRows& rows : list) {
    if (rows.table_id() == table) return &rows;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<SparseShard>> SparseShard::Create(const JobSpec& job, int shard, int num_shards) {
  if (job.tables_size() > 0 && (num_shards < 1 || shard < 0 || shard >= num_shards)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse shard ", shard, " of ", num_shards, ": expected 0 <= shard < num_shards"));
  }
  absl::StatusOr<std::vector<std::unique_ptr<EmbeddingTable>>> tables = MakeJobTables(job);
  if (!tables.ok()) return tables.status();
  return std::unique_ptr<SparseShard>(new SparseShard(job, shard, num_shards, std::move(tables).value()));
}

SparseShard::SparseShard(const JobSpec& job, int shard, int num_shards,
                         std::vector<std::unique_ptr<EmbeddingTable>> tables)
    : job_(job), shard_(shard), num_shards_(num_shards), tables_(std::move(tables)) {
  for (const TableSpec& spec : job_.tables()) {
    lr_.push_back(spec.optimizer().lr());
    budgeted_.push_back({0, TableBudgetRowBytes(spec), TableBudgetFixedBytes(spec)});
  }
}

absl::Status SparseShard::Check(absl::string_view what, absl::Span<const IncomingRows> list, Expect expect,
                                bool allow_nonfinite, SparseGradient* out) const {
  out->clear();
  absl::InlinedVector<bool, 8> seen(tables_.size(), false);
  for (size_t i = 0; i < list.size(); ++i) {
    const IncomingRows& entry = list[i];
    const int t = entry.table_id;
    if (t < 0 || t >= num_tables()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": sparse entry ", i, " names table ", t, ", expected a table id in [0, ", num_tables(),
                       ") (the job's tables", num_tables() == 0 ? "; this job has none" : "", ")"));
    }
    const auto where = [&] { return absl::StrCat(what, ": table '", tables_[t]->name(), "' (id ", t, ")"); };
    if (seen[t])
      return absl::InvalidArgumentError(absl::StrCat(where(), " appears twice, expected one entry per table"));
    seen[t] = true;
    if (entry.keys.size() % 8 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": keys hold ", entry.keys.size(), " bytes, expected a multiple of 8 (uint64 keys)"));
    }
    TableGradient& g = out->emplace_back();
    g.table = t;
    g.num_keys = static_cast<int64_t>(entry.keys.size() / 8);
    // The one copy of the keys: out of the received bytes (any alignment) into aligned memory.
    g.key_bytes = BufferPool::Default().Acquire(entry.keys.size());
    entry.keys.CopyTo(g.key_bytes.data());
    const absl::Span<const uint64_t> keys = g.keys();
    // Order first, then owners, as before; the message is the tables' own.
    for (size_t k = 1; k < keys.size(); ++k) {
      if (keys[k] <= keys[k - 1]) return CheckSortedUniqueKeys(keys, where());
    }
    // One shard owns every key (jump hash of one bucket); more: each key's owner, hashed.
    for (size_t k = 0; num_shards_ > 1 && k < keys.size(); ++k) {
      const int owner = ServerOfKey(keys[k], num_shards_);
      if (owner != shard_) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": key ", keys[k], " at position ", k,
                                                       " belongs to shard ", owner, ", not to shard ", shard_,
                                                       " (ServerOfKey(key, ", num_shards_, "))"));
      }
    }
    const int dim = tables_[t]->dim();
    if (expect == Expect::kKeys) {
      if (entry.rows.size() != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": a request of keys carries ", entry.rows.size(), " bytes of rows, expected none"));
      }
      continue;
    }
    const size_t expected = keys.size() * dim * sizeof(float);
    if (entry.rows.size() != expected) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": rows hold ", entry.rows.size(), " bytes, expected ",
                                                     keys.size(), " keys x dim ", dim, " x 4 = ", expected));
    }
    // The one copy of the rows, straight from the received bytes to where the update reads them.
    g.row_bytes = BufferPool::Default().Acquire(expected);
    entry.rows.CopyTo(g.row_bytes.data());
    if (allow_nonfinite) continue;
    const int64_t e = FindNonFinite(g.row_bytes.data(), static_cast<int64_t>(keys.size()) * dim);
    if (e >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": gradient of key ", keys[e / dim], " (position ",
                                                     e / dim, ") element ", e % dim, " is ", g.rows()[e],
                                                     ", expected finite values"));
    }
  }
  return absl::OkStatus();
}

void SparseShard::Read(const SparseGradient& keys, OutgoingRowsAnswer* out, ReadAt at) const {
  size_t total = 0;
  for (const TableGradient& entry : keys) {
    total += entry.num_keys * (sizeof(uint64_t) + tables_[entry.table]->dim() * sizeof(float));
  }
  out->entries.clear();
  // Written in full below, so never zeroed first; a reused buffer is not even touched twice.
  out->bytes = BufferPool::Default().Acquire(total);
  size_t offset = 0;
  for (const TableGradient& entry : keys) {
    const EmbeddingTable& table = *tables_[entry.table];
    OutgoingRowsAnswer::Entry& e = out->entries.emplace_back();
    e.table_id = entry.table;
    e.keys_offset = offset;
    e.keys_size = entry.num_keys * sizeof(uint64_t);
    std::memcpy(out->bytes.data() + offset, entry.key_bytes.data(), e.keys_size);
    offset += e.keys_size;
    e.rows_offset = offset;
    e.rows_size = entry.num_keys * table.dim() * sizeof(float);
    // Pool buffers are 64-byte aligned and every offset here is a multiple of 4.
    ReadRows(entry, at,
             absl::MakeSpan(reinterpret_cast<float*>(out->bytes.data() + offset), e.rows_size / sizeof(float)));
    offset += e.rows_size;
  }
}

void SparseShard::Read(const SparseGradient& keys, SparseList* out, ReadAt at) const {
  for (const TableGradient& entry : keys) {
    SparseRows* answer = out->Add();
    answer->set_table_id(entry.table);
    answer->set_keys(entry.key_bytes.data(), entry.num_keys * sizeof(uint64_t));
    const EmbeddingTable& table = *tables_[entry.table];
    std::string* rows = answer->mutable_rows();
    rows->resize(entry.num_keys * table.dim() * sizeof(float));
    // A std::string's buffer comes from operator new, aligned for any scalar type.
    ReadRows(entry, at, absl::MakeSpan(reinterpret_cast<float*>(rows->data()), entry.num_keys * table.dim()));
  }
}

void SparseShard::ReadRows(const TableGradient& entry, ReadAt at, absl::Span<float> out) const {
  const absl::Status s = tables_[entry.table]->Read(entry.keys(), out);
  CHECK(s.ok()) << "checked keys failed to read: " << s;
  if (at == ReadAt::kBeforeLastUpdate) before_.Overlay(entry.table, entry.keys(), out);
}

void SparseShard::ApplyKeepingRowsBefore(const SparseGradient& grad, int64_t step) {
  before_.Clear();
  ApplyRecording(grad, step, &before_);
}

void SparseShard::Apply(const SparseGradient& grad, int64_t step) { ApplyRecording(grad, step, nullptr); }

void SparseShard::ApplyRecording(const SparseGradient& grad, int64_t step, RowsBeforeUpdate* before) {
  for (const TableGradient& g : grad) {
    const absl::Span<float> values_before =
        before == nullptr ? absl::Span<float>() : before->Add(g.table, g.keys(), tables_[g.table]->dim());
    const absl::Status s = tables_[g.table]->Apply(g.keys(), g.rows(), lr_[g.table], step, values_before);
    // Validation ran before anything changed; what is left is a table past kMaxRows rows.
    LOG_IF(ERROR, !s.ok()) << "shard " << shard_ << ": " << s;
    if (!s.ok() && before != nullptr) before->Forget(g.table);
  }
  // Every table's eviction clock moves, whether or not the update brought it keys.
  for (const auto& table : tables_) table->AfterUpdate(step);
  KeepWithinBudget(step);
}

void SparseShard::KeepWithinBudget(int64_t step) {
  const int64_t budget = job_.table_memory_budget();
  if (budget <= 0) return;
  for (size_t t = 0; t < tables_.size(); ++t) budgeted_[t].rows = tables_[t]->num_rows();
  const std::vector<int64_t> caps = BudgetCaps(budget, budgeted_);
  for (size_t t = 0; t < caps.size(); ++t) {
    if (caps[t] < budgeted_[t].rows) tables_[t]->EvictToCap(caps[t], step);
  }
}

std::vector<std::string> SparseShard::Save() const {
  std::vector<std::string> out(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) tables_[t]->Serialize(&out[t]);
  return out;
}

void SparseShard::AdvanceClock(int64_t step, int64_t unix_ms) {
  for (const auto& table : tables_) table->AdvanceClock(step, unix_ms);
}

std::vector<std::string> SparseShard::SaveDelta() const {
  std::vector<std::string> out(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) tables_[t]->SerializeDelta(&out[t]);
  return out;
}

bool SparseShard::CanSaveDelta() const {
  for (const auto& table : tables_) {
    if (!table->options().track_changes || table->tombstones_lost() > 0) return false;
  }
  return true;
}

void SparseShard::AfterCut() {
  for (const auto& table : tables_) {
    table->DropTombstones();
    table->ForgetChanges();
  }
}

absl::StatusOr<std::unique_ptr<SparseShard::Prepared>> SparseShard::Prepare(const std::vector<std::string>& tables,
                                                                            int64_t step) const {
  if (tables.size() != tables_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint holds ", tables.size(), " embedding tables, the job has ", tables_.size()));
  }
  absl::StatusOr<std::vector<std::unique_ptr<EmbeddingTable>>> fresh = MakeJobTables(job_);
  if (!fresh.ok()) return fresh.status();
  for (size_t t = 0; t < tables.size(); ++t) {
    if (absl::Status s = (*fresh)[t]->Restore(tables[t], step - 1); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("embedding table '", tables_[t]->name(), "': ", s.message()));
    }
  }
  return std::make_unique<Prepared>(std::move(fresh).value());
}

void SparseShard::Install(std::unique_ptr<Prepared> prepared) {
  CHECK_EQ(prepared->tables.size(), tables_.size());
  tables_ = std::move(prepared->tables);
  before_.Clear();  // no update came before a restored cut
}

std::vector<SparseShard::TableStats> SparseShard::Stats() const {
  std::vector<TableStats> stats;
  for (int t = 0; t < num_tables(); ++t) {
    const TableCounters& counters = tables_[t]->counters();
    stats.push_back({tables_[t]->name(), tables_[t]->num_rows(), tables_[t]->bytes_used(),
                     TableRowFloorBytes(job_.tables(t)), counters.admitted, counters.refused, counters.evicted,
                     tables_[t]->num_tombstones()});
  }
  return stats;
}

SparseSum::SparseSum(std::vector<int> dims) : dims_(std::move(dims)), tables_(dims_.size()) {}

void SparseSum::Add(const SparseGradient& grad, float weight) {
  for (const TableGradient& g : grad) {
    Table& t = tables_[g.table];
    const int dim = dims_[g.table];
    const absl::Span<const uint64_t> keys = g.keys();
    const float* rows = g.rows().data();
    for (size_t k = 0; k < keys.size(); ++k) {
      auto [it, inserted] = t.index.try_emplace(keys[k], static_cast<uint32_t>(t.keys.size()));
      if (inserted) {
        t.keys.push_back(keys[k]);
        t.sum.resize(t.sum.size() + dim, 0.0f);
      }
      float* dst = t.sum.data() + size_t{it->second} * dim;
      const float* src = rows + k * dim;
      for (int e = 0; e < dim; ++e) dst[e] += weight * src[e];
    }
  }
}

SparseGradient SparseSum::Take() {
  SparseGradient out;
  for (size_t id = 0; id < tables_.size(); ++id) {
    Table& t = tables_[id];
    if (t.keys.empty()) continue;
    const int dim = dims_[id];
    std::vector<uint32_t>& order = t.order;
    order.resize(t.keys.size());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&t](uint32_t a, uint32_t b) { return t.keys[a] < t.keys[b]; });
    TableGradient& g = out.emplace_back();
    g.table = static_cast<int>(id);
    g.num_keys = static_cast<int64_t>(order.size());
    g.key_bytes = BufferPool::Default().Acquire(order.size() * sizeof(uint64_t));
    g.row_bytes = BufferPool::Default().Acquire(order.size() * dim * sizeof(float));
    auto* keys = reinterpret_cast<uint64_t*>(g.key_bytes.data());
    float* rows = g.row_bytes.floats();
    for (size_t i = 0; i < order.size(); ++i) {
      keys[i] = t.keys[order[i]];
      std::memcpy(rows + i * dim, t.sum.data() + size_t{order[i]} * dim, sizeof(float) * dim);
    }
    t.index.clear();
    t.keys.clear();
    t.sum.clear();
  }
  return out;
}

}  // namespace pstrain::server
