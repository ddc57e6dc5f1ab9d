// The job flags as one table (kTable below): each row is a flag's name, type and default, its help
// text, and where its value goes in the JobSpec, a field path set by reflection or a function for
// the flags that parse their value. The table registers the flags with gflags, applies the given
// ones to the job, refuses explicit values proto3 would read as unset, and lists them for a
// launcher, so a new flag is one row (and, if it parses, one function).
#include "common/job_flags.h"

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "common/table_spec.h"

DEFINE_string(config, "", "JobSpec textproto file; flags given on the command line override it");

namespace pstrain {
namespace {

// A flag's value, of the type gflags registers it with.
using FlagValue = std::variant<bool, int32_t, int64_t, uint64_t, double, std::string>;

FlagValue Bool(bool v) { return v; }
FlagValue I32(int32_t v) { return v; }
FlagValue I64(int64_t v) { return v; }
FlagValue U64(uint64_t v) { return v; }
FlagValue Dbl(double v) { return v; }
FlagValue Str(const char* v) { return std::string(v); }

// A numeric flag's value as T (a bool's as 0 or 1).
template <typename T>
T As(const FlagValue& value) {
  return std::visit(
      [](const auto& v) -> T {
        if constexpr (std::is_arithmetic_v<std::decay_t<decltype(v)>>) {
          return static_cast<T>(v);
        } else {
          LOG(FATAL) << "a string flag's value read as a number";
          return T{};
        }
      },
      value);
}
const std::string& AsString(const FlagValue& value) { return std::get<std::string>(value); }

// Where a given flag's value goes: a JobSpec field by path ("optimizer.lr"), or a function for a
// value that is parsed (an enum's name, a list, a size with a unit).
using ApplyFn = absl::Status (*)(const FlagValue& value, JobSpec* job);
struct Target {
  const char* field = nullptr;
  ApplyFn apply = nullptr;
};
Target Field(const char* path) { return {path, nullptr}; }
Target Via(ApplyFn apply) { return {nullptr, apply}; }

// What an explicit value must be, where proto3 would read the wrong one as "unset" and let the
// default silently replace it.
enum class Must { kAny, kAtLeastOne, kAboveZero, kNonZero };

struct JobFlag {
  const char* name;
  FlagValue default_value;
  Target target;
  const char* help;
  Must must = Must::kAny;
};

// "0640" or "640": octal digits only, the owner may at least read (a file its own job could not
// read back is a mistake), at most 0777.
bool ParseOctalMode(absl::string_view text, uint32_t* mode) {
  if (text.empty() || text.size() > 4) return false;
  uint32_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '7') return false;
    value = value * 8 + static_cast<uint32_t>(c - '0');
  }
  if (value > 0777 || (value & 0400) == 0) return false;
  *mode = value;
  return true;
}

// "512MiB", "2GiB", "65536KiB" or plain bytes (also K, M, G, KB, MB, GB, all binary). Returns
// false for anything else, or past 2^62 bytes.
bool ParseByteCount(absl::string_view text, int64_t* bytes) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t digits = 0;
  while (digits < t.size() && absl::ascii_isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  int64_t value = 0;
  if (digits == 0 || digits > 18 || !absl::SimpleAtoi(t.substr(0, digits), &value)) return false;
  const std::string unit = t.substr(digits);
  int shift = 0;
  if (unit == "k" || unit == "kb" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    shift = 30;
  } else if (!unit.empty() && unit != "b") {
    return false;
  }
  if (value > (int64_t{1} << (62 - shift))) return false;
  *bytes = value << shift;
  return true;
}

absl::Status ApplyHidden(const FlagValue& value, JobSpec* job) {
  job->clear_hidden_sizes();
  for (absl::string_view part : absl::StrSplit(AsString(value), ',', absl::SkipWhitespace())) {
    int width = 0;
    if (!absl::SimpleAtoi(part, &width) || width <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hidden: got '", AsString(value), "', expected positive integers separated by commas"));
    }
    job->add_hidden_sizes(width);
  }
  return absl::OkStatus();
}

absl::Status ApplyMode(const FlagValue& value, JobSpec* job) {
  ASSIGN_OR_RETURN(Mode mode, ParseMode(AsString(value)));
  job->set_mode(mode);
  return absl::OkStatus();
}

absl::Status ApplyOptimizer(const FlagValue& value, JobSpec* job) {
  ASSIGN_OR_RETURN(OptimizerSpec::Type type, ParseOptimizer(AsString(value)));
  job->mutable_optimizer()->set_type(type);
  return absl::OkStatus();
}

absl::Status ApplyLrSchedule(const FlagValue& value, JobSpec* job) {
  ASSIGN_OR_RETURN(LrSchedule::Type type, ParseLrSchedule(AsString(value)));
  job->mutable_optimizer()->mutable_schedule()->set_type(type);
  return absl::OkStatus();
}

// Only checked here: the spares are added to the worker count after the defaults settle it
// (JobSpecFromFlags), and --max_workers, when given, wins.
absl::Status CheckSpareWorkers(const FlagValue& value, JobSpec*) {
  if (As<int32_t>(value) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--spare_workers: got ", As<int32_t>(value), ", expected >= 0"));
  }
  return absl::OkStatus();
}

absl::Status ApplyCtrInteraction(const FlagValue& value, JobSpec* job) {
  if (AsString(value) == "none") {
    job->set_ctr_interaction(JobSpec::CTR_INTERACTION_NONE);
  } else if (AsString(value) == "fm") {
    job->set_ctr_interaction(JobSpec::CTR_INTERACTION_FM);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--ctr_interaction='", AsString(value), "': expected none or fm"));
  }
  return absl::OkStatus();
}

absl::Status ApplyTableOptimizer(const FlagValue& value, JobSpec* job) {
  ASSIGN_OR_RETURN(SparseOptimizerSpec::Type type, ParseSparseOptimizer(AsString(value)));
  job->mutable_table_optimizer()->set_type(type);
  return absl::OkStatus();
}

absl::Status ApplyTableAdmission(const FlagValue& value, JobSpec* job) {
  absl::StatusOr<AdmissionSpec> admission = ParseAdmission(AsString(value));
  if (!admission.ok()) return absl::InvalidArgumentError(absl::StrCat("--table_", admission.status().message()));
  *job->mutable_table_admission() = *admission;
  return absl::OkStatus();
}

absl::Status ApplyEvictOrder(const FlagValue& value, JobSpec* job) {
  const std::string order = absl::AsciiStrToLower(AsString(value));
  if (order != "lru" && order != "lfu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--table_evict_order: got '", AsString(value), "', expected lru or lfu"));
  }
  job->mutable_table_eviction()->set_order(order == "lfu" ? EvictionSpec::LFU : EvictionSpec::LRU);
  return absl::OkStatus();
}

absl::Status ApplyMemoryBudget(const FlagValue& value, JobSpec* job) {
  if (AsString(value).empty()) return absl::OkStatus();
  int64_t budget = 0;
  if (!ParseByteCount(AsString(value), &budget)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--table_memory_budget: got '", AsString(value), "', expected bytes, e.g. 536870912 or 512MiB"));
  }
  job->set_table_memory_budget(budget);
  return absl::OkStatus();
}

// -1 is the flag's "the default", which the job's defaults choose.
absl::Status ApplyInitBound(const FlagValue& value, JobSpec* job) {
  if (As<double>(value) != -1) job->set_table_init_bound(As<float>(value));
  return absl::OkStatus();
}

absl::Status ApplyRowDtype(const FlagValue& value, JobSpec* job) {
  absl::StatusOr<TableSpec::RowDtype> dtype = ParseRowDtype(AsString(value));
  if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat("--table_", dtype.status().message()));
  job->set_table_row_dtype(*dtype);
  return absl::OkStatus();
}

absl::Status ApplyOutputMode(const FlagValue& value, JobSpec* job) {
  uint32_t mode = 0;
  if (!ParseOctalMode(AsString(value), &mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--output_mode: got '", AsString(value), "', expected permission bits in octal from 0400 to 0777, e.g. 0640"));
  }
  job->set_output_mode(mode);
  return absl::OkStatus();
}

// The job flags, in the order they are documented and handed on (ExplicitJobFlags). Applied in
// this order too: --table_admission before --table_sketch_bytes, which sets a field inside it.
const std::vector<JobFlag>& Table() {
  static const std::vector<JobFlag>* const table = new std::vector<JobFlag>{
      {"model", Str("mlp"), Field("model"),
       "Model: mlp, cnn (two conv+pool blocks, two fully connected layers), ctr (embedding tables + MLP "
       "over Criteo or libsvm data) or external (declared by the workers)"},
      {"hidden", Str("256,128"), Via(ApplyHidden), "Hidden layer widths of the MLP, comma-separated"},
      {"data_dir", Str(pstrain::kDefaultDataDir), Field("data.data_dir"),
       "Folder with the Fashion-MNIST (or MNIST) IDX files"},
      {"train_limit", I64(0), Field("data.train_limit"), "Use only the first N training samples (0: all)"},
      {"test_limit", I64(0), Field("data.test_limit"), "Use only the first N test samples (0: all)"},
      {"train_samples", I64(0), Field("data.train_samples"),
       "--model=external: the training set's size (0: the first model declaration gives it)"},
      {"test_samples", I64(0), Field("data.test_samples"),
       "--model=external: the test set's size (0: the first model declaration gives it)"},
      {"mode", Str("sync"), Via(ApplyMode), "Training mode: sync, async or ssp"},
      {"staleness", I32(2), Field("staleness"), "SSP: how many steps a worker may run ahead of the slowest"},
      {"batch_size", I32(256), Field("batch_size"),
       "Samples per worker per step (default depends on the model: mlp 256, cnn 64)", Must::kAtLeastOne},
      {"epochs", I32(10), Field("epochs"), "Passes over the training set (default depends on the model: mlp 10, cnn 8)",
       Must::kAtLeastOne},
      {"seed", U64(1), Field("seed"), "Seed for initial weights and epoch permutations", Must::kNonZero},
      {"max_steps", I64(0), Field("max_steps"), "Stop after this many steps (0: no limit)"},
      {"servers", I32(2), Field("num_servers"), "Number of parameter servers", Must::kAtLeastOne},
      {"workers", I32(2), Field("num_workers"), "Number of workers", Must::kAtLeastOne},
      {"optimizer", Str("adam"), Via(ApplyOptimizer), "Optimizer: sgd, momentum, nesterov, adam, adamw or adagrad"},
      {"lr", Dbl(0.002), Field("optimizer.lr"),
       "Learning rate (default depends on the optimizer: adam and adamw 0.002, adagrad 0.01, else 0.05)",
       Must::kAboveZero},
      {"momentum", Dbl(0.9), Field("optimizer.momentum"), "Momentum coefficient (momentum, nesterov)"},
      {"beta1", Dbl(0.9), Field("optimizer.beta1"), "Adam beta1"},
      {"beta2", Dbl(0.999), Field("optimizer.beta2"), "Adam beta2"},
      {"epsilon", Dbl(1e-8), Field("optimizer.epsilon"), "Adam/AdamW/Adagrad epsilon"},
      {"weight_decay", Dbl(0.0), Field("optimizer.weight_decay"),
       "Weight decay: L2, added to the gradient (default 0); adamw: decoupled, as torch.optim.AdamW "
       "(default 0.01; 0: none)"},
      {"clip_grad_norm", Dbl(0.0), Field("optimizer.clip_grad_norm"),
       "Workers scale each gradient they push to an L2 norm of at most this, over all tensors, before "
       "compression (0: off; turns overlap off)"},
      {"lr_schedule", Str("cosine"), Via(ApplyLrSchedule), "Learning-rate schedule: constant, step or cosine"},
      {"warmup_steps", I64(0), Field("optimizer.schedule.warmup_steps"), "Linear warm-up steps"},
      {"lr_step_size", I64(0), Field("optimizer.schedule.step_size"), "Step schedule: steps between decays"},
      {"lr_gamma", Dbl(0.1), Field("optimizer.schedule.gamma"), "Step schedule: decay factor"},
      {"lr_min_factor", Dbl(0.0), Field("optimizer.schedule.min_factor"),
       "Cosine schedule: final lr as a fraction of lr"},
      {"allow_nonfinite_gradients", Bool(false), Field("allow_nonfinite_gradients"),
       "Accept NaN/Inf gradients instead of refusing them"},
      {"lease_batches", I32(4), Field("lease_batches"), "async/ssp: batches per work lease", Must::kAtLeastOne},
      {"max_chunk_bytes", I64(4 << 20), Field("max_chunk_bytes"), "Largest tensor chunk in the shard map, bytes",
       Must::kAtLeastOne},
      {"final_model", Str(""), Field("final_model_path"),
       "Where the scheduler writes the trained model (empty: not written)"},
      {"eval_last_epoch_only", Bool(false), Field("eval_last_epoch_only"), "Evaluate only after the last epoch"},
      {"checkpoint_dir", Str(""), Field("checkpoint_dir"),
       "Where servers write checkpoints of their shards (empty: none)"},
      {"checkpoint_every_steps", I64(0), Field("checkpoint_every_steps"),
       "Checkpoint every this many steps (0: never)"},
      {"min_workers", I32(1), Field("min_workers"), "Below this many live workers the job stops with an error",
       Must::kAtLeastOne},
      {"max_workers", I32(0), Field("max_workers"),
       "At most this many live workers; registrations beyond are refused (0: --workers + --spare_workers)"},
      {"max_servers", I32(0), Field("max_servers"),
       "with checkpoints: a server registering while every rank is live grows the job by one, up to "
       "this many servers (0: only pstrain-ctl scale changes the count)"},
      {"spare_workers", I32(pstrain::kDefaultSpareWorkers), Via(CheckSpareWorkers),
       "With --max_workers left at 0: how many workers beyond --workers may join (replacements, additions)"},
      {"checkpoint_every_seconds", Dbl(0.0), Field("checkpoint_every_seconds"),
       "Also checkpoint after this many seconds (0: never)"},
      {"full_checkpoint_every", I32(0), Field("full_checkpoint_every"),
       "Write a server's whole shard every this many checkpoints and, between, deltas: the embedding "
       "rows changed since the previous checkpoint (0 or 1: every checkpoint whole)"},
      {"keep_checkpoints", I32(0), Field("keep_checkpoints"),
       "Checkpoint cuts each server keeps restorable, the newest (0: 2); older files are removed"},
      {"global_batch", I64(0), Field("global_batch"),
       "sync: samples per step over all workers (0: batch_size x workers)"},
      {"resume", Bool(false), Field("resume"),
       "Continue the job whose checkpoints are in --checkpoint_dir (async/ssp: also the first run's --state_dir)"},
      {"replicas", I32(1), Field("replicas"),
       "Copies of each server's shard: 1, or 2 (a live copy on the next server survives one server's loss)",
       Must::kAtLeastOne},
      {"overlap", Bool(true), Field("overlap"),
       "sync: push each layer's gradient as soon as backward produces it (false: after backward)"},
      {"compression", Str("none"), Field("compression"),
       "How workers send gradients: none (float32), fp16 or bf16 (half the bytes, float32 sums on "
       "the servers), or topk:RATIO (the largest RATIO of each chunk, the rest carried to the next "
       "step), e.g. topk:0.01"},
      {"data_format", Str("idx"), Field("data.format"),
       "Data files: idx (Fashion-MNIST), criteo or libsvm (default: criteo for --model=ctr, and for --model=external on a --data_stream)"},
      {"data_stream", Str(""), Field("data.stream_dir"),
       "--model=ctr or external (any mode): train on the files that keep arriving in this folder, once each in "
       "name order, "
       "instead of --data_dir's training file (a file NAME is read once NAME.ready exists; an empty _END "
       "ends the stream; docs/design/streaming.md)"},
      {"bad_records", Str("fail"), Field("data.bad_records"),
       "criteo/libsvm: a line that does not parse stops the job (fail) or is skipped and counted (skip)"},
      {"embedding_dim", I32(16), Field("embedding_dim"),
       "--model=ctr (and examples/pytorch/ctr.py): floats per embedding row", Must::kAtLeastOne},
      {"ctr_interaction", Str("none"), Via(ApplyCtrInteraction),
       "--model=ctr: how the fields' embeddings meet before the logit: none (the MLP alone) or fm (DeepFM: the "
       "MLP's logit plus the sum over field pairs of their pooled embeddings' dot products; its rows then default to "
       "--table_lr=0.3 and, in a file job, --table_init_bound=0.01)"},
      {"table_optimizer", Str("adagrad"), Via(ApplyTableOptimizer),
       "--model=ctr, and declared tables that name none: how embedding rows are updated: adagrad, sgd, lazy_adam or ftrl"},
      {"table_lr", Dbl(0.05), Field("table_optimizer.lr"),
       "--table_optimizer's learning rate (default: adagrad 2.0 for --model=ctr, 0.3 with --ctr_interaction=fm, "
       "lazy_adam 0.001, else 0.05)"},
      {"table_l1", Dbl(0.0), Field("table_optimizer.l1"), "--table_optimizer=ftrl: L1 strength"},
      {"table_l2", Dbl(0.0), Field("table_optimizer.l2"), "--table_optimizer=ftrl: L2 strength"},
      {"table_admission", Str("always"), Via(ApplyTableAdmission),
       "--model=ctr: which keys become embedding rows: always, count:N (at a key's N-th update, counted "
       "in a 1 MiB sketch per table per server) or probability:P (each update of a key without a row "
       "admits it with probability P); the others' updates are dropped and counted"},
      {"table_sketch_bytes", I64(0), Field("table_admission.sketch_bytes"),
       "--table_admission=count:N: bytes of the sketch that counts keys without rows, per table per server "
       "(0: 1 MiB; from 4096 to 2^30). Too small a sketch admits keys early: see docs/guides/sparse-models.md"},
      {"table_ttl_updates", I64(0), Field("table_eviction.ttl_updates"),
       "--model=ctr: an embedding row not updated in this many of its server's updates (SYNC: steps) leaves (0: never)"},
      {"table_ttl_seconds", I64(0), Field("table_eviction.ttl_seconds"),
       "--model=ctr, --mode=async or ssp: an embedding row not updated in this many seconds of the scheduler's clock "
       "(the time its pushes' leases were handed out) leaves (0: never)"},
      {"table_max_rows", I64(0), Field("table_eviction.max_rows"),
       "--model=ctr: at most this many rows per table per server; past it, rows leave in --table_evict_order (0: no cap)"},
      {"table_evict_order", Str("lru"), Via(ApplyEvictOrder),
       "--table_max_rows: which rows leave first: lru (least recently updated) or lfu (least often)"},
      {"table_min_l2_norm", Dbl(0.0), Field("table_eviction.min_l2_norm"),
       "--model=ctr: a row whose value's L2 norm is below this leaves (0: off; e.g. FTRL's zeroed rows)"},
      {"table_keep_rows", I64(0), Field("table_eviction.keep_rows"),
       "--model=ctr: eviction never leaves fewer rows than this per table per server"},
      {"table_evict_every", I64(0), Field("table_eviction.every_updates"),
       "--model=ctr: eviction runs after every this many updates (0: 100, or a tenth of --table_ttl_updates when smaller)"},
      {"table_memory_budget", Str(""), Via(ApplyMemoryBudget),
       "Bytes each server may spend on the rows of all the job's embedding tables, e.g. 512MiB (suffixes "
       "KiB, MiB, GiB, or none for bytes): past it the least recently updated rows leave; empty or 0: no "
       "budget"},
      {"table_init_bound", Dbl(-1.0), Via(ApplyInitBound),
       "--model=ctr: embedding rows start uniform in [-B, B) (-1: 1/sqrt(--embedding_dim), or 0 on a "
       "--data_stream, where each record is predicted before it is trained on, or 0.01 with "
       "--ctr_interaction=fm)"},
      {"table_row_dtype", Str("fp32"), Via(ApplyRowDtype),
       "--model=ctr: how embedding rows store their values: fp32, or fp16 / bf16 at half the bytes "
       "(rounded after every update; the optimizer's state stays fp32)"},
      {"max_grad_norm_per_sample", Dbl(0.0), Field("max_grad_norm_per_sample"),
       "Servers refuse (and count in pstrain_server_refused_pushes_total{reason=\"grad_norm\"}) a push whose "
       "gradient (the mean over its samples) has an L2 norm above this, on their part of it; not robust "
       "aggregation, a guard against one huge push (0: off; docs/guides/security.md suggests a value)"},
      {"output_mode", Str("0600"), Via(ApplyOutputMode),
       "Permission bits, in octal, of the final model, the run summary and the servers' checkpoints, e.g. "
       "0640 to let the group read them"},
  };
  return *table;
}

// The field a path names, and the message that holds it (created on the way), or CHECK-fails:
// a path that names no scalar field of JobSpec is a mistake in the table.
std::pair<google::protobuf::Message*, const google::protobuf::FieldDescriptor*> Resolve(absl::string_view path,
                                                                                        JobSpec* job) {
  google::protobuf::Message* message = job;
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0;; ++i) {
    const google::protobuf::FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(parts[i]);
    CHECK(field != nullptr && !field->is_repeated()) << "job flag field '" << path << "': no field " << parts[i];
    if (i + 1 == parts.size()) {
      CHECK(field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE &&
            field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_ENUM)
          << "job flag field '" << path << "' is not a scalar";
      return {message, field};
    }
    CHECK(field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE)
        << "job flag field '" << path << "': " << parts[i] << " is not a message";
    message = message->GetReflection()->MutableMessage(message, field);
  }
}

void SetField(absl::string_view path, const FlagValue& value, JobSpec* job) {
  auto [message, field] = Resolve(path, job);
  const google::protobuf::Reflection* r = message->GetReflection();
  using F = google::protobuf::FieldDescriptor;
  switch (field->cpp_type()) {
    case F::CPPTYPE_BOOL:
      r->SetBool(message, field, std::get<bool>(value));
      break;
    case F::CPPTYPE_INT32:
      r->SetInt32(message, field, As<int32_t>(value));
      break;
    case F::CPPTYPE_INT64:
      r->SetInt64(message, field, As<int64_t>(value));
      break;
    case F::CPPTYPE_UINT32:
      r->SetUInt32(message, field, As<uint32_t>(value));
      break;
    case F::CPPTYPE_UINT64:
      r->SetUInt64(message, field, As<uint64_t>(value));
      break;
    case F::CPPTYPE_FLOAT:
      r->SetFloat(message, field, As<float>(value));
      break;
    case F::CPPTYPE_DOUBLE:
      r->SetDouble(message, field, As<double>(value));
      break;
    case F::CPPTYPE_STRING:
      r->SetString(message, field, AsString(value));
      break;
    default:
      LOG(FATAL) << "job flag field '" << path << "' is not a scalar";
  }
}

// Each flag's value as gflags parsed it, by row of the table. Registered at static
// initialization, before main parses the command line; never freed, as gflags requires.
FlagValue* RegisterFlags() {
  const std::vector<JobFlag>& table = Table();
  auto* current = new FlagValue[table.size()];
  auto* defaults = new FlagValue[table.size()];
  for (size_t i = 0; i < table.size(); ++i) {
    current[i] = defaults[i] = table[i].default_value;
    std::visit(
        [&](auto& fallback) {
          using T = std::decay_t<decltype(fallback)>;
          gflags::FlagRegisterer(table[i].name, table[i].help, __FILE__, std::get_if<T>(&current[i]), &fallback);
        },
        defaults[i]);
    if (table[i].target.field != nullptr) {  // A row with a wrong path fails every binary at once.
      JobSpec probe;
      Resolve(table[i].target.field, &probe);
    }
  }
  return current;
}
FlagValue* const kValues = RegisterFlags();

const FlagValue& ValueOf(absl::string_view name) {
  const std::vector<JobFlag>& table = Table();
  for (size_t i = 0; i < table.size(); ++i) {
    if (name == table[i].name) return kValues[i];
  }
  LOG(FATAL) << "no job flag --" << name;
  return kValues[0];  // Not reached.
}

bool Given(const char* name) {
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(name, &info) && !info.is_default;
}

absl::Status RejectExplicitZeros() {
  const std::vector<JobFlag>& table = Table();
  for (size_t i = 0; i < table.size(); ++i) {
    const JobFlag& flag = table[i];
    if (flag.must == Must::kAny || !Given(flag.name)) continue;
    const FlagValue& value = kValues[i];
    if (flag.must == Must::kAtLeastOne && As<int64_t>(value) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag.name, ": got ", As<int64_t>(value), ", expected >= 1"));
    }
    if (flag.must == Must::kAboveZero && !(As<double>(value) > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag.name, ": got ", As<double>(value), ", expected > 0"));
    }
    if (flag.must == Must::kNonZero && As<uint64_t>(value) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag.name, ": got 0, expected a non-zero ", flag.name));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyFlags(JobSpec* job) {
  const std::vector<JobFlag>& table = Table();
  for (size_t i = 0; i < table.size(); ++i) {
    const JobFlag& flag = table[i];
    if (!Given(flag.name)) continue;
    if (flag.target.apply != nullptr) {
      RETURN_IF_ERROR(flag.target.apply(kValues[i], job));
    } else {
      SetField(flag.target.field, kValues[i], job);
    }
  }
  if (job->table_eviction().ByteSizeLong() == 0) job->clear_table_eviction();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobSpec> JobSpecFromFlags() {
  JobSpec job;
  if (!FLAGS_config.empty()) {
    ASSIGN_OR_RETURN(job, ReadJobSpecFile(FLAGS_config, "--config (job config)"));
  }
  RETURN_IF_ERROR(RejectExplicitZeros());
  RETURN_IF_ERROR(ApplyFlags(&job));
  ApplyJobDefaults(&job);
  // After the defaults, which settle the worker count the spares are added to.
  if (Given("spare_workers") && !Given("max_workers")) {
    job.set_max_workers(job.num_workers() + As<int32_t>(ValueOf("spare_workers")));
  }
  RETURN_IF_ERROR(ValidateJobSpec(job));
  // The model is written at the very end: a folder that cannot take it fails now, not after the job.
  if (!job.final_model_path().empty()) {
    RETURN_IF_ERROR(CheckWritableFilePath(job.final_model_path(), "--final_model"));
  }
  return job;
}

std::vector<std::string> ExplicitJobFlags() {
  std::vector<std::string> out;
  if (!FLAGS_config.empty()) out.push_back(absl::StrCat("--config=", FLAGS_config));
  for (const JobFlag& flag : Table()) {
    gflags::CommandLineFlagInfo info;
    if (gflags::GetCommandLineFlagInfo(flag.name, &info) && !info.is_default) {
      out.push_back(absl::StrCat("--", flag.name, "=", info.current_value));
    }
  }
  return out;
}

}  // namespace pstrain
