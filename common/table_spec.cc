#include "common/table_spec.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view got, absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": got ", got, ", expected ", expected));
}

bool ValidName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

// The categorical fields of each text format (data/criteo_reader.h, data/libsvm_reader.h).
int CtrFieldsOf(absl::string_view format) { return format == "libsvm" ? 1 : 26; }

absl::Status ValidateSparseOptimizer(absl::string_view field, const SparseOptimizerSpec& o) {
  if (o.type() == SparseOptimizerSpec::TYPE_UNSPECIFIED || !SparseOptimizerSpec::Type_IsValid(o.type())) {
    return Invalid(absl::StrCat(field, ".type"), absl::StrCat(static_cast<int>(o.type())),
                   "adagrad, sgd, lazy_adam or ftrl");
  }
  auto positive = [&](const char* name, float v) -> absl::Status {
    if (v > 0 && std::isfinite(v)) return absl::OkStatus();
    return Invalid(absl::StrCat(field, ".", name), absl::StrCat(v), "a finite value > 0");
  };
  auto non_negative = [&](const char* name, float v) -> absl::Status {
    if (v >= 0 && std::isfinite(v)) return absl::OkStatus();
    return Invalid(absl::StrCat(field, ".", name), absl::StrCat(v), "a finite value >= 0");
  };
  auto unit = [&](const char* name, float v) -> absl::Status {
    if (v >= 0 && v < 1) return absl::OkStatus();
    return Invalid(absl::StrCat(field, ".", name), absl::StrCat(v), "in [0, 1)");
  };
  for (absl::Status s :
       {positive("lr", o.lr()), non_negative("initial_accumulator", o.initial_accumulator()),
        positive("epsilon", o.epsilon()), unit("beta1", o.beta1()), unit("beta2", o.beta2()),
        non_negative("ftrl_beta", o.ftrl_beta()), non_negative("l1", o.l1()), non_negative("l2", o.l2())}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

void ApplySparseOptimizerDefaults(SparseOptimizerSpec* o) {
  if (o->type() == SparseOptimizerSpec::TYPE_UNSPECIFIED) o->set_type(SparseOptimizerSpec::ADAGRAD);
  if (!o->has_lr()) o->set_lr(o->type() == SparseOptimizerSpec::LAZY_ADAM ? 0.001f : 0.05f);
  if (!o->has_initial_accumulator()) o->set_initial_accumulator(0.1f);
  if (!o->has_epsilon()) o->set_epsilon(1e-8f);
  if (!o->has_beta1()) o->set_beta1(0.9f);
  if (!o->has_beta2()) o->set_beta2(0.999f);
  if (!o->has_ftrl_beta()) o->set_ftrl_beta(1.0f);
}

void ApplyTableDefaults(JobSpec* job) {
  if (job->embedding_dim() == 0) job->set_embedding_dim(16);
  SparseOptimizerSpec* table_opt = job->mutable_table_optimizer();
  const bool adagrad =
      table_opt->type() == SparseOptimizerSpec::TYPE_UNSPECIFIED || table_opt->type() == SparseOptimizerSpec::ADAGRAD;
  // Model ctr's rows learn best with a large Adagrad rate: on the generator's default data, 3
  // epochs reach test AUC 0.8567 at 0.2, 0.8623 at 0.5, 0.8646 at 1, 0.8657 at 2 and 0.8659 at 4
  // (planted model: 0.8741).
  // DeepFM's rows, which its pairwise term multiplies with each other, at 2.0 and 1/sqrt(dim):
  // 0.8378; at 0.3 and +-0.01 (kCtrFm*): 0.8663, and 0.8658 with the MLP alone.
  const bool fm = job->ctr_interaction() == JobSpec::CTR_INTERACTION_FM;
  if (job->model() == kCtrModel && adagrad && !table_opt->has_lr()) {
    table_opt->set_lr(fm ? kCtrFmAdagradLr : kCtrAdagradLr);
  }
  ApplySparseOptimizerDefaults(table_opt);
  if (job->model() == kCtrModel && job->tables().empty()) {
    const int fields = CtrFieldsOf(job->data().format());
    for (int f = 0; f < fields; ++f) {
      TableSpec* table = job->add_tables();
      table->set_name(fields == 1 ? "features" : absl::StrCat("C", f + 1));
      table->set_dim(job->embedding_dim());
      *table->mutable_optimizer() = job->table_optimizer();
      if (job->has_table_admission()) *table->mutable_admission() = job->table_admission();
      if (job->has_table_eviction()) *table->mutable_eviction() = job->table_eviction();
      if (job->table_row_dtype() != TableSpec::FP32) table->set_row_dtype(job->table_row_dtype());
      // A stream predicts each new id with its initial row before training on it: zeros add no noise.
      if (job->has_table_init_bound()) {
        table->set_init_bound(job->table_init_bound());
      } else if (!job->data().stream_dir().empty()) {
        table->set_init_bound(0);
      } else if (fm) {
        table->set_init_bound(kCtrFmInitBound);
      }
    }
  }
  for (TableSpec& table : *job->mutable_tables()) {
    ApplySparseOptimizerDefaults(table.mutable_optimizer());
    if (table.has_admission()) ApplyAdmissionDefaults(table.mutable_admission());
    if (table.has_eviction()) ApplyEvictionDefaults(table.mutable_eviction());
  }
}

bool EvictionOn(const EvictionSpec& spec) {
  return spec.ttl_updates() > 0 || spec.ttl_seconds() > 0 || spec.max_rows() > 0 || spec.min_l2_norm() > 0;
}

void ApplyEvictionDefaults(EvictionSpec* spec) {
  if (!EvictionOn(*spec) || spec->every_updates() != 0) return;
  int64_t every = kDefaultEvictEveryUpdates;
  if (spec->ttl_updates() > 0) every = std::min(every, std::max<int64_t>(1, spec->ttl_updates() / 10));
  spec->set_every_updates(every);
}

absl::Status ValidateEviction(absl::string_view field, const EvictionSpec& spec) {
  auto non_negative = [&](const char* name, int64_t v) -> absl::Status {
    if (v >= 0) return absl::OkStatus();
    return Invalid(absl::StrCat(field, ".", name), absl::StrCat(v), ">= 0 (0: off)");
  };
  for (absl::Status s : {non_negative("ttl_updates", spec.ttl_updates()), non_negative("max_rows", spec.max_rows()),
                         non_negative("keep_rows", spec.keep_rows())}) {
    if (!s.ok()) return s;
  }
  if (spec.ttl_seconds() < 0 || spec.ttl_seconds() > kMaxTtlSeconds) {
    return Invalid(absl::StrCat(field, ".ttl_seconds"), absl::StrCat(spec.ttl_seconds()),
                   absl::StrCat("in [0, ", kMaxTtlSeconds, "] (0: off)"));
  }
  if (!(spec.min_l2_norm() >= 0 && std::isfinite(spec.min_l2_norm()))) {
    return Invalid(absl::StrCat(field, ".min_l2_norm"), absl::StrCat(spec.min_l2_norm()),
                   "a finite value >= 0 (0: off)");
  }
  if (!EvictionSpec::Order_IsValid(spec.order())) {
    return Invalid(absl::StrCat(field, ".order"), absl::StrCat(static_cast<int>(spec.order())), "LRU or LFU");
  }
  if (spec.max_rows() > 0 && spec.keep_rows() > spec.max_rows()) {
    return Invalid(absl::StrCat(field, ".max_rows"), absl::StrCat(spec.max_rows()),
                   absl::StrCat("at least keep_rows = ", spec.keep_rows(), " (a cap below the keep-floor)"));
  }
  if (spec.every_updates() < 0 || spec.every_updates() > kMaxEvictEveryUpdates) {
    return Invalid(absl::StrCat(field, ".every_updates"), absl::StrCat(spec.every_updates()),
                   absl::StrCat("0 (the default: ", kDefaultEvictEveryUpdates,
                                ", or ttl_updates / 10 when smaller) or in [1, ", kMaxEvictEveryUpdates, "]"));
  }
  return absl::OkStatus();
}

void ApplyAdmissionDefaults(AdmissionSpec* spec) {
  if (spec->policy() == AdmissionSpec::COUNT && spec->sketch_bytes() == 0) spec->set_sketch_bytes(kDefaultSketchBytes);
}

absl::Status ValidateMemoryBudget(const JobSpec& job) {
  const int64_t budget = job.table_memory_budget();
  if (budget == 0) return absl::OkStatus();
  if (budget < 0) return Invalid("table_memory_budget", absl::StrCat(budget), ">= 0 bytes (0: no budget)");
  if (job.tables_size() == 0) {
    // An external model's tables come with its declaration, which is checked then.
    if (job.model() == kExternalModel) return absl::OkStatus();
    return Invalid("table_memory_budget", absl::StrCat(budget), "0 for a job without embedding tables");
  }
  int64_t least = 0;
  for (const TableSpec& t : job.tables()) least += TableBudgetFixedBytes(t) + TableBudgetRowBytes(t);
  if (budget < least) {
    return Invalid(
        "table_memory_budget", absl::StrCat(budget, " bytes"),
        absl::StrCat(
            "at least ", least, " bytes a server: for each of the ", job.tables_size(), " tables a block of ",
            kTableRowsPerBlock,
            " rows, admission's sketch, the tombstones eviction keeps and one row (docs/guides/sparse-models.md)"));
  }
  return absl::OkStatus();
}

namespace {

// ttl_seconds runs on the lease times of ASYNC/SSP pushes (server/update_clock.h): a SYNC job's
// pushes have no leases, and its clock is its steps.
absl::Status CheckTtlSecondsMode(const JobSpec& job, absl::string_view field, const EvictionSpec& spec) {
  if (spec.ttl_seconds() == 0 || job.mode() == ASYNC || job.mode() == SSP) return absl::OkStatus();
  return Invalid(absl::StrCat(field, ".ttl_seconds"), absl::StrCat(spec.ttl_seconds()),
                 absl::StrCat("0 in a ", Mode_Name(job.mode() == MODE_UNSPECIFIED ? SYNC : job.mode()),
                              " job (its clock is its steps: use ttl_updates; ttl_seconds needs mode ASYNC or SSP)"));
}

}  // namespace

absl::Status ValidateTables(const JobSpec& job) {
  if (job.embedding_dim() < 1 || job.embedding_dim() > kMaxTableDim) {
    return Invalid("embedding_dim", absl::StrCat(job.embedding_dim()), absl::StrCat("in [1, ", kMaxTableDim, "]"));
  }
  if (absl::Status s = ValidateSparseOptimizer("table_optimizer", job.table_optimizer()); !s.ok()) return s;
  if (absl::Status s = ValidateAdmission("table_admission", job.table_admission()); !s.ok()) return s;
  if (absl::Status s = ValidateEviction("table_eviction", job.table_eviction()); !s.ok()) return s;
  if (absl::Status s = CheckTtlSecondsMode(job, "table_eviction", job.table_eviction()); !s.ok()) return s;
  if (job.has_table_init_bound() && !(job.table_init_bound() >= 0 && std::isfinite(job.table_init_bound()))) {
    return Invalid("table_init_bound", absl::StrCat(job.table_init_bound()), "a finite value >= 0");
  }
  if (!TableSpec::RowDtype_IsValid(job.table_row_dtype())) {
    return Invalid("table_row_dtype", RowDtypeName(job.table_row_dtype()), "FP32, FP16 or BF16");
  }
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < job.tables_size(); ++i) {
    const TableSpec& t = job.tables(i);
    const std::string field = absl::StrCat("tables[", i, "]");
    if (!ValidName(t.name())) {
      return Invalid(absl::StrCat(field, ".name"), absl::StrCat("'", t.name(), "'"), "a name of [A-Za-z0-9_.-]+");
    }
    if (!names.insert(t.name()).second) {
      return Invalid(absl::StrCat(field, ".name"), absl::StrCat("'", t.name(), "'"), "a name no other table has");
    }
    if (t.dim() < 1 || t.dim() > kMaxTableDim) {
      return Invalid(absl::StrCat(field, ".dim"), absl::StrCat(t.dim()), absl::StrCat("in [1, ", kMaxTableDim, "]"));
    }
    if (t.has_init_bound() && !(t.init_bound() >= 0 && std::isfinite(t.init_bound()))) {
      return Invalid(absl::StrCat(field, ".init_bound"), absl::StrCat(t.init_bound()), "a finite value >= 0");
    }
    if (absl::Status s = ValidateSparseOptimizer(absl::StrCat(field, ".optimizer"), t.optimizer()); !s.ok()) return s;
    if (absl::Status s = ValidateAdmission(absl::StrCat(field, ".admission"), t.admission()); !s.ok()) return s;
    if (absl::Status s = ValidateEviction(absl::StrCat(field, ".eviction"), t.eviction()); !s.ok()) return s;
    if (absl::Status s = CheckTtlSecondsMode(job, absl::StrCat(field, ".eviction"), t.eviction()); !s.ok()) return s;
    if (!TableSpec::RowDtype_IsValid(RowDtypeOf(t))) {
      return Invalid(absl::StrCat(field, ".row_dtype"), RowDtypeName(RowDtypeOf(t)), "FP32, FP16 or BF16");
    }
    if (job.model() == kCtrModel && t.dim() != job.embedding_dim()) {
      return Invalid(absl::StrCat(field, ".dim"), absl::StrCat(t.dim()),
                     absl::StrCat("embedding_dim = ", job.embedding_dim(), " (model 'ctr' pools every field alike)"));
    }
  }
  if (job.model() == kCtrModel && job.tables_size() != CtrFieldsOf(job.data().format())) {
    return Invalid("tables", absl::StrCat(job.tables_size(), " tables"),
                   absl::StrCat(CtrFieldsOf(job.data().format()), " for model 'ctr' on ", job.data().format(),
                                " data (one per categorical field)"));
  }
  return ValidateMemoryBudget(job);
}

absl::StatusOr<AdmissionSpec> ParseAdmission(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  const absl::string_view expected = "always, count:N (N in [1, 255]) or probability:P (P in (0, 1])";
  AdmissionSpec spec;
  if (t.empty() || t == "always") return spec;
  const size_t colon = t.find(':');
  const std::string policy = t.substr(0, colon);
  const std::string value = colon == std::string::npos ? "" : t.substr(colon + 1);
  if (policy == "count") {
    int count = 0;
    if (!absl::SimpleAtoi(value, &count)) return Invalid("admission", absl::StrCat("'", text, "'"), expected);
    spec.set_policy(AdmissionSpec::COUNT);
    spec.set_min_count(count);
    return spec;
  }
  if (policy == "probability") {
    float p = 0;
    if (!absl::SimpleAtof(value, &p)) return Invalid("admission", absl::StrCat("'", text, "'"), expected);
    spec.set_policy(AdmissionSpec::PROBABILITY);
    spec.set_probability(p);
    return spec;
  }
  return Invalid("admission", absl::StrCat("'", text, "'"), expected);
}

std::string AdmissionName(const AdmissionSpec& spec) {
  switch (spec.policy()) {
    case AdmissionSpec::COUNT:
      return absl::StrCat("count:", spec.min_count());
    case AdmissionSpec::PROBABILITY:
      return absl::StrCat("probability:", spec.probability());
    default:
      return "always";
  }
}

absl::Status ValidateAdmission(absl::string_view field, const AdmissionSpec& spec) {
  if (!AdmissionSpec::Policy_IsValid(spec.policy())) {
    return Invalid(absl::StrCat(field, ".policy"), absl::StrCat(static_cast<int>(spec.policy())),
                   "ALWAYS, COUNT or PROBABILITY");
  }
  const bool count = spec.policy() == AdmissionSpec::COUNT;
  const bool probability = spec.policy() == AdmissionSpec::PROBABILITY;
  if (count && (spec.min_count() < 1 || spec.min_count() > kMaxAdmissionCount)) {
    return Invalid(absl::StrCat(field, ".min_count"), absl::StrCat(spec.min_count()),
                   absl::StrCat("in [1, ", kMaxAdmissionCount, "] for count:N"));
  }
  if (!count && spec.min_count() != 0) {
    return Invalid(absl::StrCat(field, ".min_count"), absl::StrCat(spec.min_count()),
                   absl::StrCat("0: the policy is ", AdmissionName(spec), ", not count:N"));
  }
  if (probability && !(spec.probability() > 0 && spec.probability() <= 1)) {
    return Invalid(absl::StrCat(field, ".probability"), absl::StrCat(spec.probability()),
                   "in (0, 1] for probability:P");
  }
  if (!probability && spec.probability() != 0) {
    return Invalid(absl::StrCat(field, ".probability"), absl::StrCat(spec.probability()),
                   absl::StrCat("0: the policy is ", AdmissionName(spec), ", not probability:P"));
  }
  if (spec.sketch_bytes() != 0 &&
      (!count || spec.sketch_bytes() < kMinSketchBytes || spec.sketch_bytes() > kMaxSketchBytes)) {
    return Invalid(absl::StrCat(field, ".sketch_bytes"), absl::StrCat(spec.sketch_bytes()),
                   count ? absl::StrCat("0 (the default, ", kDefaultSketchBytes, ") or in [", kMinSketchBytes, ", ",
                                        kMaxSketchBytes, "]")
                         : absl::StrCat("0: only count:N keeps a sketch, the policy is ", AdmissionName(spec)));
  }
  return absl::OkStatus();
}

absl::StatusOr<SparseOptimizerSpec::Type> ParseSparseOptimizer(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "adagrad") return SparseOptimizerSpec::ADAGRAD;
  if (n == "sgd") return SparseOptimizerSpec::SGD;
  if (n == "lazy_adam") return SparseOptimizerSpec::LAZY_ADAM;
  if (n == "ftrl") return SparseOptimizerSpec::FTRL;
  return absl::InvalidArgumentError(
      absl::StrCat("table_optimizer: got '", name, "', expected adagrad, sgd, lazy_adam or ftrl"));
}

std::string SparseOptimizerTypeName(SparseOptimizerSpec::Type type) {
  return absl::AsciiStrToLower(SparseOptimizerSpec::Type_Name(type));
}

absl::StatusOr<TableSpec::RowDtype> ParseRowDtype(absl::string_view name) {
  TableSpec::RowDtype dtype;
  if (TableSpec::RowDtype_Parse(absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name)), &dtype)) return dtype;
  return absl::InvalidArgumentError(absl::StrCat("row_dtype: got '", name, "', expected fp32, fp16 or bf16"));
}

std::string RowDtypeName(TableSpec::RowDtype dtype) {
  return TableSpec::RowDtype_IsValid(dtype) ? absl::AsciiStrToLower(TableSpec::RowDtype_Name(dtype))
                                            : absl::StrCat("unknown (", static_cast<int>(dtype), ")");
}

int64_t TableRowValueBytes(int dim, TableSpec::RowDtype dtype) {
  return dtype == TableSpec::FP32 ? int64_t{dim} * 4 : (int64_t{dim} * 2 + 3) / 4 * 4;
}

CtrShape CtrShapeOf(const JobSpec& job) {
  CtrShape shape;
  shape.num_fields = job.tables_size();
  shape.num_dense = job.data().format() == "libsvm" ? 0 : 13;
  shape.dim = job.embedding_dim();
  shape.hidden_sizes.assign(job.hidden_sizes().begin(), job.hidden_sizes().end());
  return shape;
}

int64_t TableBudgetRowBytes(const TableSpec& table) {
  constexpr int64_t kEvictionMeta = 8 + 4;
  constexpr int64_t kIndexAtLowestLoad = (12 + 1) * 16 / 7 + 1;  // 30
  return TableRowFloorBytes(table) + kEvictionMeta + kIndexAtLowestLoad;
}

int64_t TableBudgetFixedBytes(const TableSpec& table) {
  const int64_t sketch = table.admission().policy() == AdmissionSpec::COUNT ? table.admission().sketch_bytes() : 0;
  constexpr int64_t kEvictionMeta = 8 + 4;
  return kTableRowsPerBlock * (TableRowFloorBytes(table) + kEvictionMeta) + sketch +
         kMaxTableTombstones * kTableTombstoneBytes;
}

int64_t TableRowFloorBytes(const TableSpec& table) {
  int vectors = 1;
  switch (table.optimizer().type()) {
    case SparseOptimizerSpec::SGD:
      break;
    case SparseOptimizerSpec::LAZY_ADAM:
    case SparseOptimizerSpec::FTRL:
      vectors += 2;
      break;
    default:
      vectors += 1;
      break;  // ADAGRAD
  }
  const int64_t step = table.optimizer().type() == SparseOptimizerSpec::LAZY_ADAM ? 4 : 0;
  return TableRowValueBytes(table.dim(), RowDtypeOf(table)) + int64_t{table.dim()} * 4 * (vectors - 1) + step;
}

}  // namespace pstrain
