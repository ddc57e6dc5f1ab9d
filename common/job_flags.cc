#include "common/job_flags.h"

#include <gflags/gflags.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "common/table_spec.h"
#include "common/status_macros.h"

DEFINE_string(config, "", "JobSpec textproto file; flags given on the command line override it");
DEFINE_string(model, "mlp",
              "Model: mlp, cnn (two conv+pool blocks, two fully connected layers), ctr (embedding tables + MLP "
              "over Criteo or libsvm data) or external (declared by the workers)");
DEFINE_string(hidden, "256,128", "Hidden layer widths of the MLP, comma-separated");
DEFINE_string(data_dir, pstrain::kDefaultDataDir, "Folder with the Fashion-MNIST (or MNIST) IDX files");
DEFINE_int64(train_limit, 0, "Use only the first N training samples (0: all)");
DEFINE_int64(test_limit, 0, "Use only the first N test samples (0: all)");
DEFINE_int64(train_samples, 0, "--model=external: the training set's size (0: the first model declaration gives it)");
DEFINE_int64(test_samples, 0, "--model=external: the test set's size (0: the first model declaration gives it)");
DEFINE_string(mode, "sync", "Training mode: sync, async or ssp");
DEFINE_int32(staleness, 2, "SSP: how many steps a worker may run ahead of the slowest");
DEFINE_int32(batch_size, 256, "Samples per worker per step (default depends on the model: mlp 256, cnn 64)");
DEFINE_int32(epochs, 10, "Passes over the training set (default depends on the model: mlp 10, cnn 8)");
DEFINE_uint64(seed, 1, "Seed for initial weights and epoch permutations");
DEFINE_int64(max_steps, 0, "Stop after this many steps (0: no limit)");
DEFINE_int32(servers, 2, "Number of parameter servers");
DEFINE_int32(workers, 2, "Number of workers");
DEFINE_string(optimizer, "adam", "Optimizer: sgd, momentum, nesterov, adam, adamw or adagrad");
DEFINE_double(lr, 0.002,
              "Learning rate (default depends on the optimizer: adam and adamw 0.002, adagrad 0.01, else 0.05)");
DEFINE_double(momentum, 0.9, "Momentum coefficient (momentum, nesterov)");
DEFINE_double(beta1, 0.9, "Adam beta1");
DEFINE_double(beta2, 0.999, "Adam beta2");
DEFINE_double(epsilon, 1e-8, "Adam/AdamW/Adagrad epsilon");
DEFINE_double(weight_decay, 0.0,
              "Weight decay: L2, added to the gradient (default 0); adamw: decoupled, as torch.optim.AdamW "
              "(default 0.01; 0: none)");
DEFINE_double(clip_grad_norm, 0.0,
              "Workers scale each gradient they push to an L2 norm of at most this, over all tensors, before "
              "compression (0: off; turns overlap off)");
DEFINE_string(lr_schedule, "cosine", "Learning-rate schedule: constant, step or cosine");
DEFINE_int64(warmup_steps, 0, "Linear warm-up steps");
DEFINE_int64(lr_step_size, 0, "Step schedule: steps between decays");
DEFINE_double(lr_gamma, 0.1, "Step schedule: decay factor");
DEFINE_double(lr_min_factor, 0.0, "Cosine schedule: final lr as a fraction of lr");
DEFINE_bool(allow_nonfinite_gradients, false, "Accept NaN/Inf gradients instead of refusing them");
DEFINE_double(max_grad_norm_per_sample, 0.0,
              "Servers refuse (and count in pstrain_server_refused_pushes_total{reason=\"grad_norm\"}) a push whose "
              "gradient (the mean over its samples) has an L2 norm above this, on their part of it; not robust "
              "aggregation, a guard against one huge push (0: off; docs/guides/security.md suggests a value)");
DEFINE_string(output_mode, "0600",
              "Permission bits, in octal, of the final model, the run summary and the servers' checkpoints, e.g. "
              "0640 to let the group read them");
DEFINE_int32(lease_batches, 4, "async/ssp: batches per work lease");
DEFINE_int64(max_chunk_bytes, 4 << 20, "Largest tensor chunk in the shard map, bytes");
DEFINE_string(final_model, "", "Where the scheduler writes the trained model (empty: not written)");
DEFINE_bool(eval_last_epoch_only, false, "Evaluate only after the last epoch");
DEFINE_string(checkpoint_dir, "", "Where servers write checkpoints of their shards (empty: none)");
DEFINE_int64(checkpoint_every_steps, 0, "Checkpoint every this many steps (0: never)");
DEFINE_int32(min_workers, 1, "Below this many live workers the job stops with an error");
DEFINE_int32(max_workers, 0,
             "At most this many live workers; registrations beyond are refused (0: --workers + --spare_workers)");
DEFINE_int32(max_servers, 0,
             "with checkpoints: a server registering while every rank is live grows the job by one, up to "
             "this many servers (0: only pstrain-ctl scale changes the count)");
DEFINE_int32(spare_workers, pstrain::kDefaultSpareWorkers,
             "With --max_workers left at 0: how many workers beyond --workers may join (replacements, additions)");
DEFINE_double(checkpoint_every_seconds, 0, "Also checkpoint after this many seconds (0: never)");
DEFINE_int32(full_checkpoint_every, 0,
             "Write a server's whole shard every this many checkpoints and, between, deltas: the embedding "
             "rows changed since the previous checkpoint (0 or 1: every checkpoint whole)");
DEFINE_int32(keep_checkpoints, 0,
             "Checkpoint cuts each server keeps restorable, the newest (0: 2); older files are removed");
DEFINE_int64(global_batch, 0, "sync: samples per step over all workers (0: batch_size x workers)");
DEFINE_bool(resume, false,
            "Continue the job whose checkpoints are in --checkpoint_dir (async/ssp: also the first run's --state_dir)");
DEFINE_bool(overlap, true, "sync: push each layer's gradient as soon as backward produces it (false: after backward)");
DEFINE_string(compression, "none",
              "How workers send gradients: none (float32), fp16 or bf16 (half the bytes, float32 sums on "
              "the servers), or topk:RATIO (the largest RATIO of each chunk, the rest carried to the next "
              "step), e.g. topk:0.01");
DEFINE_string(
    data_format, "idx",
    "Data files: idx (Fashion-MNIST), criteo or libsvm (default: criteo for --model=ctr, and for --model=external on a --data_stream)");
DEFINE_string(data_stream, "",
              "--model=ctr or external (any mode): train on the files that keep arriving in this folder, once each in "
              "name order, "
              "instead of --data_dir's training file (a file NAME is read once NAME.ready exists; an empty _END "
              "ends the stream; docs/design/streaming.md)");
DEFINE_string(bad_records, "fail",
              "criteo/libsvm: a line that does not parse stops the job (fail) or is skipped and counted (skip)");
DEFINE_int32(embedding_dim, 16, "--model=ctr (and examples/pytorch/ctr.py): floats per embedding row");
DEFINE_string(
    ctr_interaction, "none",
    "--model=ctr: how the fields' embeddings meet before the logit: none (the MLP alone) or fm (DeepFM: the "
    "MLP's logit plus the sum over field pairs of their pooled embeddings' dot products; its rows then default to "
    "--table_lr=0.3 and, in a file job, --table_init_bound=0.01)");
DEFINE_string(
    table_optimizer, "adagrad",
    "--model=ctr, and declared tables that name none: how embedding rows are updated: adagrad, sgd, lazy_adam or ftrl");
DEFINE_double(table_lr, 0.05,
              "--table_optimizer's learning rate (default: adagrad 2.0 for --model=ctr, 0.3 with --ctr_interaction=fm, "
              "lazy_adam 0.001, else 0.05)");
DEFINE_double(table_l1, 0.0, "--table_optimizer=ftrl: L1 strength");
DEFINE_double(table_l2, 0.0, "--table_optimizer=ftrl: L2 strength");
DEFINE_string(table_admission, "always",
              "--model=ctr: which keys become embedding rows: always, count:N (at a key's N-th update, counted "
              "in a 1 MiB sketch per table per server) or probability:P (each update of a key without a row "
              "admits it with probability P); the others' updates are dropped and counted");
DEFINE_int64(table_sketch_bytes, 0,
             "--table_admission=count:N: bytes of the sketch that counts keys without rows, per table per server "
             "(0: 1 MiB; from 4096 to 2^30). Too small a sketch admits keys early: see docs/guides/sparse-models.md");
DEFINE_int64(
    table_ttl_updates, 0,
    "--model=ctr: an embedding row not updated in this many of its server's updates (SYNC: steps) leaves (0: never)");
DEFINE_int64(
    table_ttl_seconds, 0,
    "--model=ctr, --mode=async or ssp: an embedding row not updated in this many seconds of the scheduler's clock "
    "(the time its pushes' leases were handed out) leaves (0: never)");
DEFINE_int64(
    table_max_rows, 0,
    "--model=ctr: at most this many rows per table per server; past it, rows leave in --table_evict_order (0: no cap)");
DEFINE_string(table_evict_order, "lru",
              "--table_max_rows: which rows leave first: lru (least recently updated) or lfu (least often)");
DEFINE_double(table_min_l2_norm, 0,
              "--model=ctr: a row whose value's L2 norm is below this leaves (0: off; e.g. FTRL's zeroed rows)");
DEFINE_int64(table_keep_rows, 0, "--model=ctr: eviction never leaves fewer rows than this per table per server");
DEFINE_int64(
    table_evict_every, 0,
    "--model=ctr: eviction runs after every this many updates (0: 100, or a tenth of --table_ttl_updates when smaller)");
DEFINE_string(table_memory_budget, "",
              "Bytes each server may spend on the rows of all the job's embedding tables, e.g. 512MiB (suffixes "
              "KiB, MiB, GiB, or none for bytes): past it the least recently updated rows leave; empty or 0: no "
              "budget");
DEFINE_double(table_init_bound, -1,
              "--model=ctr: embedding rows start uniform in [-B, B) (-1: 1/sqrt(--embedding_dim), or 0 on a "
              "--data_stream, where each record is predicted before it is trained on, or 0.01 with "
              "--ctr_interaction=fm)");
DEFINE_string(table_row_dtype, "fp32",
              "--model=ctr: how embedding rows store their values: fp32, or fp16 / bf16 at half the bytes "
              "(rounded after every update; the optimizer's state stays fp32)");
DEFINE_int32(replicas, 1,
             "Copies of each server's shard: 1, or 2 (a live copy on the next server survives one server's loss)");

namespace pstrain {
namespace {

// The job flags, by name, in the order they are documented.
const char* const kJobFlags[] = {"model",
                                 "hidden",
                                 "data_dir",
                                 "train_limit",
                                 "test_limit",
                                 "train_samples",
                                 "test_samples",
                                 "mode",
                                 "staleness",
                                 "batch_size",
                                 "epochs",
                                 "seed",
                                 "max_steps",
                                 "servers",
                                 "workers",
                                 "optimizer",
                                 "lr",
                                 "momentum",
                                 "beta1",
                                 "beta2",
                                 "epsilon",
                                 "weight_decay",
                                 "clip_grad_norm",
                                 "lr_schedule",
                                 "warmup_steps",
                                 "lr_step_size",
                                 "lr_gamma",
                                 "lr_min_factor",
                                 "allow_nonfinite_gradients",
                                 "lease_batches",
                                 "max_chunk_bytes",
                                 "final_model",
                                 "eval_last_epoch_only",
                                 "checkpoint_dir",
                                 "checkpoint_every_steps",
                                 "min_workers",
                                 "max_workers",
                                 "max_servers",
                                 "spare_workers",
                                 "checkpoint_every_seconds",
                                 "full_checkpoint_every",
                                 "keep_checkpoints",
                                 "global_batch",
                                 "resume",
                                 "replicas",
                                 "overlap",
                                 "compression",
                                 "data_format",
                                 "data_stream",
                                 "bad_records",
                                 "embedding_dim",
                                 "ctr_interaction",
                                 "table_optimizer",
                                 "table_lr",
                                 "table_l1",
                                 "table_l2",
                                 "table_admission",
                                 "table_sketch_bytes",
                                 "table_ttl_updates",
                                 "table_ttl_seconds",
                                 "table_max_rows",
                                 "table_evict_order",
                                 "table_min_l2_norm",
                                 "table_keep_rows",
                                 "table_evict_every",
                                 "table_memory_budget",
                                 "table_init_bound",
                                 "table_row_dtype",
                                 "max_grad_norm_per_sample",
                                 "output_mode"};

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

bool Given(const char* name) {
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(name, &info) && !info.is_default;
}

absl::Status ApplyFlags(JobSpec* job) {
  if (Given("model")) job->set_model(FLAGS_model);
  if (Given("hidden")) {
    job->clear_hidden_sizes();
    for (absl::string_view part : absl::StrSplit(FLAGS_hidden, ',', absl::SkipWhitespace())) {
      int width = 0;
      if (!absl::SimpleAtoi(part, &width) || width <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--hidden: got '", FLAGS_hidden, "', expected positive integers separated by commas"));
      }
      job->add_hidden_sizes(width);
    }
  }
  DataSpec* data = job->mutable_data();
  if (Given("data_dir")) data->set_data_dir(FLAGS_data_dir);
  if (Given("train_limit")) data->set_train_limit(FLAGS_train_limit);
  if (Given("test_limit")) data->set_test_limit(FLAGS_test_limit);
  if (Given("train_samples")) data->set_train_samples(FLAGS_train_samples);
  if (Given("test_samples")) data->set_test_samples(FLAGS_test_samples);
  if (Given("mode")) {
    ASSIGN_OR_RETURN(Mode mode, ParseMode(FLAGS_mode));
    job->set_mode(mode);
  }
  if (Given("staleness")) job->set_staleness(FLAGS_staleness);
  if (Given("batch_size")) job->set_batch_size(FLAGS_batch_size);
  if (Given("epochs")) job->set_epochs(FLAGS_epochs);
  if (Given("seed")) job->set_seed(FLAGS_seed);
  if (Given("max_steps")) job->set_max_steps(FLAGS_max_steps);
  if (Given("servers")) job->set_num_servers(FLAGS_servers);
  if (Given("workers")) job->set_num_workers(FLAGS_workers);
  OptimizerSpec* opt = job->mutable_optimizer();
  if (Given("optimizer")) {
    ASSIGN_OR_RETURN(OptimizerSpec::Type type, ParseOptimizer(FLAGS_optimizer));
    opt->set_type(type);
  }
  if (Given("lr")) opt->set_lr(static_cast<float>(FLAGS_lr));
  if (Given("momentum")) opt->set_momentum(static_cast<float>(FLAGS_momentum));
  if (Given("beta1")) opt->set_beta1(static_cast<float>(FLAGS_beta1));
  if (Given("beta2")) opt->set_beta2(static_cast<float>(FLAGS_beta2));
  if (Given("epsilon")) opt->set_epsilon(static_cast<float>(FLAGS_epsilon));
  if (Given("weight_decay")) opt->set_weight_decay(static_cast<float>(FLAGS_weight_decay));
  if (Given("clip_grad_norm")) opt->set_clip_grad_norm(static_cast<float>(FLAGS_clip_grad_norm));
  LrSchedule* schedule = opt->mutable_schedule();
  if (Given("lr_schedule")) {
    ASSIGN_OR_RETURN(LrSchedule::Type type, ParseLrSchedule(FLAGS_lr_schedule));
    schedule->set_type(type);
  }
  if (Given("warmup_steps")) schedule->set_warmup_steps(FLAGS_warmup_steps);
  if (Given("lr_step_size")) schedule->set_step_size(FLAGS_lr_step_size);
  if (Given("lr_gamma")) schedule->set_gamma(static_cast<float>(FLAGS_lr_gamma));
  if (Given("lr_min_factor")) schedule->set_min_factor(static_cast<float>(FLAGS_lr_min_factor));
  if (Given("allow_nonfinite_gradients")) job->set_allow_nonfinite_gradients(FLAGS_allow_nonfinite_gradients);
  if (Given("lease_batches")) job->set_lease_batches(FLAGS_lease_batches);
  if (Given("max_chunk_bytes")) job->set_max_chunk_bytes(FLAGS_max_chunk_bytes);
  if (Given("final_model")) job->set_final_model_path(FLAGS_final_model);
  if (Given("eval_last_epoch_only")) job->set_eval_last_epoch_only(FLAGS_eval_last_epoch_only);
  if (Given("checkpoint_dir")) job->set_checkpoint_dir(FLAGS_checkpoint_dir);
  if (Given("checkpoint_every_steps")) job->set_checkpoint_every_steps(FLAGS_checkpoint_every_steps);
  if (Given("min_workers")) job->set_min_workers(FLAGS_min_workers);
  if (Given("max_workers")) job->set_max_workers(FLAGS_max_workers);
  if (Given("max_servers")) job->set_max_servers(FLAGS_max_servers);
  if (Given("spare_workers") && !Given("max_workers")) {
    if (FLAGS_spare_workers < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--spare_workers: got ", FLAGS_spare_workers, ", expected >= 0"));
    }
  }
  if (Given("checkpoint_every_seconds")) job->set_checkpoint_every_seconds(FLAGS_checkpoint_every_seconds);
  if (Given("full_checkpoint_every")) job->set_full_checkpoint_every(FLAGS_full_checkpoint_every);
  if (Given("keep_checkpoints")) job->set_keep_checkpoints(FLAGS_keep_checkpoints);
  if (Given("global_batch")) job->set_global_batch(FLAGS_global_batch);
  if (Given("resume")) job->set_resume(FLAGS_resume);
  if (Given("replicas")) job->set_replicas(FLAGS_replicas);
  if (Given("overlap")) job->set_overlap(FLAGS_overlap);
  if (Given("compression")) job->set_compression(FLAGS_compression);
  if (Given("data_format")) data->set_format(FLAGS_data_format);
  if (Given("data_stream")) data->set_stream_dir(FLAGS_data_stream);
  if (Given("bad_records")) data->set_bad_records(FLAGS_bad_records);
  if (Given("embedding_dim")) job->set_embedding_dim(FLAGS_embedding_dim);
  if (Given("ctr_interaction")) {
    if (FLAGS_ctr_interaction == "none") {
      job->set_ctr_interaction(JobSpec::CTR_INTERACTION_NONE);
    } else if (FLAGS_ctr_interaction == "fm") {
      job->set_ctr_interaction(JobSpec::CTR_INTERACTION_FM);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--ctr_interaction='", FLAGS_ctr_interaction, "': expected none or fm"));
    }
  }
  SparseOptimizerSpec* table_opt = job->mutable_table_optimizer();
  if (Given("table_optimizer")) {
    ASSIGN_OR_RETURN(SparseOptimizerSpec::Type type, ParseSparseOptimizer(FLAGS_table_optimizer));
    table_opt->set_type(type);
  }
  if (Given("table_lr")) table_opt->set_lr(static_cast<float>(FLAGS_table_lr));
  if (Given("table_l1")) table_opt->set_l1(static_cast<float>(FLAGS_table_l1));
  if (Given("table_l2")) table_opt->set_l2(static_cast<float>(FLAGS_table_l2));
  if (Given("table_admission")) {
    absl::StatusOr<AdmissionSpec> admission = ParseAdmission(FLAGS_table_admission);
    if (!admission.ok()) return absl::InvalidArgumentError(absl::StrCat("--table_", admission.status().message()));
    *job->mutable_table_admission() = *admission;
  }
  if (Given("table_sketch_bytes")) job->mutable_table_admission()->set_sketch_bytes(FLAGS_table_sketch_bytes);
  EvictionSpec* eviction = job->mutable_table_eviction();
  if (Given("table_ttl_updates")) eviction->set_ttl_updates(FLAGS_table_ttl_updates);
  if (Given("table_ttl_seconds")) eviction->set_ttl_seconds(FLAGS_table_ttl_seconds);
  if (Given("table_max_rows")) eviction->set_max_rows(FLAGS_table_max_rows);
  if (Given("table_evict_order")) {
    const std::string order = absl::AsciiStrToLower(FLAGS_table_evict_order);
    if (order != "lru" && order != "lfu") {
      return absl::InvalidArgumentError(
          absl::StrCat("--table_evict_order: got '", FLAGS_table_evict_order, "', expected lru or lfu"));
    }
    eviction->set_order(order == "lfu" ? EvictionSpec::LFU : EvictionSpec::LRU);
  }
  if (Given("table_min_l2_norm")) eviction->set_min_l2_norm(static_cast<float>(FLAGS_table_min_l2_norm));
  if (Given("table_keep_rows")) eviction->set_keep_rows(FLAGS_table_keep_rows);
  if (Given("table_evict_every")) eviction->set_every_updates(FLAGS_table_evict_every);
  if (job->table_eviction().ByteSizeLong() == 0) job->clear_table_eviction();
  if (Given("table_init_bound") && FLAGS_table_init_bound != -1) {
    job->set_table_init_bound(static_cast<float>(FLAGS_table_init_bound));
  }
  if (Given("table_row_dtype")) {
    absl::StatusOr<TableSpec::RowDtype> dtype = ParseRowDtype(FLAGS_table_row_dtype);
    if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat("--table_", dtype.status().message()));
    job->set_table_row_dtype(*dtype);
  }
  if (Given("table_memory_budget") && !FLAGS_table_memory_budget.empty()) {
    int64_t budget = 0;
    if (!ParseByteCount(FLAGS_table_memory_budget, &budget)) {
      return absl::InvalidArgumentError(absl::StrCat("--table_memory_budget: got '", FLAGS_table_memory_budget,
                                                     "', expected bytes, e.g. 536870912 or 512MiB"));
    }
    job->set_table_memory_budget(budget);
  }
  if (Given("max_grad_norm_per_sample")) job->set_max_grad_norm_per_sample(FLAGS_max_grad_norm_per_sample);
  if (Given("output_mode")) {
    uint32_t mode = 0;
    if (!ParseOctalMode(FLAGS_output_mode, &mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--output_mode: got '", FLAGS_output_mode,
                       "', expected permission bits in octal from 0400 to 0777, e.g. 0640"));
    }
    job->set_output_mode(mode);
  }
  return absl::OkStatus();
}

// Values a user gives explicitly that proto3 would read as "unset": refuse them rather than let
// the default silently replace them.
absl::Status RejectExplicitZeros() {
  struct IntFlag {
    const char* name;
    int64_t value;
  };
  const IntFlag must_be_positive[] = {{"servers", FLAGS_servers},
                                      {"workers", FLAGS_workers},
                                      {"batch_size", FLAGS_batch_size},
                                      {"epochs", FLAGS_epochs},
                                      {"lease_batches", FLAGS_lease_batches},
                                      {"max_chunk_bytes", FLAGS_max_chunk_bytes},
                                      {"min_workers", FLAGS_min_workers},
                                      {"replicas", FLAGS_replicas},
                                      {"embedding_dim", FLAGS_embedding_dim}};
  for (const IntFlag& f : must_be_positive) {
    if (Given(f.name) && f.value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", f.name, ": got ", f.value, ", expected >= 1"));
    }
  }
  if (Given("lr") && !(FLAGS_lr > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--lr: got ", FLAGS_lr, ", expected > 0"));
  }
  if (Given("seed") && FLAGS_seed == 0) {
    return absl::InvalidArgumentError("--seed: got 0, expected a non-zero seed");
  }
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
  if (Given("spare_workers") && !Given("max_workers")) job.set_max_workers(job.num_workers() + FLAGS_spare_workers);
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
  for (const char* name : kJobFlags) {
    gflags::CommandLineFlagInfo info;
    if (gflags::GetCommandLineFlagInfo(name, &info) && !info.is_default) {
      out.push_back(absl::StrCat("--", name, "=", info.current_value));
    }
  }
  return out;
}

}  // namespace pstrain
