#include "common/job_spec.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/compression.h"
#include "common/file_io.h"
#include "common/table_spec.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace pstrain {
namespace {

// Collects the first parse error with its position, for a message that names file, line, column.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

absl::Status Invalid(absl::string_view field, absl::string_view got, absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": got ", got, ", expected ", expected));
}

bool InUnitInterval(float v) { return v >= 0.0f && v < 1.0f; }

// What a built-in model trains with when the job leaves these unset (0). Chosen per model because
// the CNN learns best with smaller batches: at the MLP's 256 x 10 epochs it stops at 0.9075 test
// accuracy, at 64 x 8 it reaches 0.91+ (docs/performance.md, "Accuracy").
struct ModelDefaults {
  int32_t batch_size;
  int32_t epochs;
};

ModelDefaults DefaultsFor(absl::string_view model) {
  if (model == "cnn") return {/*batch_size=*/64, /*epochs=*/8};
  // CTR data sets are large and their rare keys overfit: a few passes of larger batches.
  if (model == "ctr") return {/*batch_size=*/512, /*epochs=*/3};
  return {/*batch_size=*/256, /*epochs=*/10};  // mlp and every other model
}

// The base learning rate when the job leaves it unset. Both models use the same rates today.
float DefaultLr(absl::string_view /*model*/, OptimizerSpec::Type type) {
  switch (type) {
    case OptimizerSpec::ADAM:
    case OptimizerSpec::ADAMW:
      return 0.002f;
    case OptimizerSpec::ADAGRAD:
      return 0.01f;
    default:
      return 0.05f;
  }
}

}  // namespace

absl::StatusOr<JobSpec> ReadJobSpecFile(const std::string& path, absl::string_view what) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, what, kMaxFlagFileBytes);
  if (!text.ok()) return text.status();
  JobSpec job;
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(*text, &job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job config ", path, ": not a valid JobSpec textproto: ", errors.first()));
  }
  return job;
}

void ApplyJobDefaults(JobSpec* job) {
  if (job->model().empty()) job->set_model("mlp");
  if (job->hidden_sizes().empty()) {
    job->add_hidden_sizes(256);
    job->add_hidden_sizes(128);
  }
  if (job->data().data_dir().empty()) job->mutable_data()->set_data_dir(kDefaultDataDir);
  if (job->data().format().empty()) {
    const bool ctr_text = job->model() == kCtrModel || (IsExternalModel(*job) && IsStreamJob(*job));
    job->mutable_data()->set_format(ctr_text ? "criteo" : "idx");
  }
  if (job->data().bad_records().empty()) job->mutable_data()->set_bad_records("fail");
  if (job->mode() == MODE_UNSPECIFIED) job->set_mode(SYNC);
  const ModelDefaults model_defaults = DefaultsFor(job->model());
  if (job->batch_size() == 0) job->set_batch_size(model_defaults.batch_size);
  // A stream is trained once, in order: one data epoch.
  if (job->epochs() == 0) job->set_epochs(IsStreamJob(*job) ? 1 : model_defaults.epochs);
  if (job->seed() == 0) job->set_seed(1);
  if (job->num_servers() == 0) job->set_num_servers(2);
  if (job->num_workers() == 0) job->set_num_workers(2);
  if (job->lease_batches() == 0) job->set_lease_batches(4);
  if (job->max_chunk_bytes() == 0) job->set_max_chunk_bytes(4 << 20);
  if (job->mode() == SSP && job->staleness() == 0) job->set_staleness(2);
  if (job->min_workers() == 0) job->set_min_workers(1);
  if (job->max_workers() == 0) job->set_max_workers(job->num_workers() + kDefaultSpareWorkers);
  if (job->replicas() == 0) job->set_replicas(1);
  if (job->global_batch() == 0) job->set_global_batch(int64_t{job->batch_size()} * job->num_workers());
  if (job->compression().empty()) job->set_compression("none");

  OptimizerSpec* opt = job->mutable_optimizer();
  if (opt->type() == OptimizerSpec::TYPE_UNSPECIFIED) opt->set_type(OptimizerSpec::ADAM);
  if (!opt->has_lr()) opt->set_lr(DefaultLr(job->model(), opt->type()));
  if (!opt->has_momentum()) opt->set_momentum(0.9f);
  if (!opt->has_beta1()) opt->set_beta1(0.9f);
  if (!opt->has_beta2()) opt->set_beta2(0.999f);
  if (!opt->has_epsilon()) opt->set_epsilon(opt->type() == OptimizerSpec::ADAGRAD ? 1e-10f : 1e-8f);
  // Unset decay is 0 (no decay) except for ADAMW, which follows torch.optim.AdamW.
  if (opt->type() == OptimizerSpec::ADAMW && !opt->has_weight_decay()) opt->set_weight_decay(0.01f);
  LrSchedule* schedule = opt->mutable_schedule();
  // A stream has no last step for a cosine to end at.
  if (schedule->type() == LrSchedule::TYPE_UNSPECIFIED) {
    schedule->set_type(IsStreamJob(*job) ? LrSchedule::CONSTANT : LrSchedule::COSINE);
  }
  if (!schedule->has_gamma()) schedule->set_gamma(0.1f);
  ApplyTableDefaults(job);
}

namespace {

// The limits of a job on a data stream (JobSpec.data.stream_dir); OK for any other job.
absl::Status ValidateStreamJob(const JobSpec& job) {
  if (!IsStreamJob(job)) return absl::OkStatus();
  if (job.model() != kCtrModel && !IsExternalModel(job)) {
    return Invalid("data.stream_dir", absl::StrCat("'", job.data().stream_dir(), "'"),
                   absl::StrCat("empty for model '", job.model(), "' (models 'ctr' and 'external' train on a stream)"));
  }
  if (job.data().format() != "criteo" && job.data().format() != "libsvm") {
    return Invalid("data.format", absl::StrCat("'", job.data().format(), "'"),
                   "'criteo' or 'libsvm' for a job on a data stream");
  }
  if (job.data().train_samples() != 0 || job.data().test_samples() != 0) {
    return Invalid("data.train_samples",
                   absl::StrCat(job.data().train_samples(), " (test_samples ", job.data().test_samples(), ")"),
                   "0 for a job on a data stream (its records are the stream's; it has no test set)");
  }
  if (job.epochs() != 1) {
    return Invalid("epochs", absl::StrCat(job.epochs()), "1 for a job on a data stream (each record is trained once)");
  }
  if (job.max_steps() != 0) {
    return Invalid("max_steps", absl::StrCat(job.max_steps()),
                   "0 for a job on a data stream (it ends with the stream)");
  }
  if (job.data().train_limit() != 0 || job.data().test_limit() != 0) {
    return Invalid("data.train_limit",
                   absl::StrCat(job.data().train_limit(), " (test_limit ", job.data().test_limit(), ")"),
                   "0 for a job on a data stream");
  }
  if (job.optimizer().schedule().type() == LrSchedule::COSINE) {
    return Invalid("optimizer.schedule", "cosine",
                   "constant or step for a job on a data stream (a cosine decays to the job's last step, which a "
                   "stream does not have)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& job) {
  if (job.model() != "mlp" && job.model() != "cnn" && job.model() != kCtrModel && !IsExternalModel(job)) {
    return Invalid("model", absl::StrCat("'", job.model(), "'"), "'mlp', 'cnn', 'ctr' or 'external'");
  }
  const std::string& format = job.data().format();
  if (format != "idx" && format != "criteo" && format != "libsvm") {
    return Invalid("data.format", absl::StrCat("'", format, "'"), "'idx', 'criteo' or 'libsvm'");
  }
  if ((job.model() == "mlp" || job.model() == "cnn") && format != "idx") {
    return Invalid("data.format", absl::StrCat("'", format, "'"),
                   absl::StrCat("'idx' for model '", job.model(), "' (an image classifier)"));
  }
  if (job.model() == kCtrModel && format == "idx") {
    return Invalid("data.format", "'idx'", "'criteo' or 'libsvm' for model 'ctr'");
  }
  if (!JobSpec::CtrInteraction_IsValid(job.ctr_interaction())) {
    return Invalid("ctr_interaction", absl::StrCat(job.ctr_interaction()), "NONE or FM");
  }
  if (job.ctr_interaction() != JobSpec::CTR_INTERACTION_NONE && job.model() != kCtrModel) {
    return Invalid("ctr_interaction (--ctr_interaction)", JobSpec::CtrInteraction_Name(job.ctr_interaction()),
                   absl::StrCat("NONE for model '", job.model(), "' (an interaction is model 'ctr''s)"));
  }
  if (job.data().bad_records() != "fail" && job.data().bad_records() != "skip") {
    return Invalid("data.bad_records", absl::StrCat("'", job.data().bad_records(), "'"), "'fail' or 'skip'");
  }
  if (absl::Status s = ValidateTables(job); !s.ok()) return s;
  int64_t hidden_parameters = 0;  // the weights between hidden layers: a lower bound of the model's size
  for (int i = 0; i < job.hidden_sizes_size(); ++i) {
    if (job.hidden_sizes(i) <= 0 || job.hidden_sizes(i) > kMaxHiddenWidth) {
      return Invalid(absl::StrCat("hidden_sizes[", i, "] (--hidden)"), absl::StrCat(job.hidden_sizes(i)),
                     absl::StrCat("in [1, ", kMaxHiddenWidth, "]"));
    }
    if (i > 0) hidden_parameters += int64_t{job.hidden_sizes(i - 1)} * job.hidden_sizes(i);
  }
  if (hidden_parameters > kMaxModelParameters) {
    return Invalid("hidden_sizes (--hidden)",
                   absl::StrCat(absl::StrJoin(job.hidden_sizes(), ","), ": ", hidden_parameters,
                                " weights between the hidden layers alone"),
                   absl::StrCat("a model of at most ", kMaxModelParameters, " parameters (4 GiB of float32)"));
  }
  if (job.num_servers() < 1) return Invalid("num_servers", absl::StrCat(job.num_servers()), ">= 1");
  if (job.num_workers() < 1) return Invalid("num_workers", absl::StrCat(job.num_workers()), ">= 1");
  if (job.min_workers() < 1 || job.min_workers() > job.num_workers()) {
    return Invalid("min_workers", absl::StrCat(job.min_workers()),
                   absl::StrCat("in [1, num_workers = ", job.num_workers(), "]"));
  }
  if (job.max_workers() < job.num_workers()) {
    return Invalid("max_workers", absl::StrCat(job.max_workers()),
                   absl::StrCat(">= num_workers = ", job.num_workers()));
  }
  if (job.max_servers() != 0) {
    if (job.max_servers() < job.num_servers() || job.max_servers() > kMaxJobServers) {
      return Invalid("max_servers", absl::StrCat(job.max_servers()),
                     absl::StrCat("0 or in [num_servers = ", job.num_servers(), ", ", kMaxJobServers, "]"));
    }
    if (job.max_servers() > job.num_servers() && (job.mode() != SYNC || !CheckpointsOn(job) || job.replicas() == 2)) {
      return Invalid("max_servers", absl::StrCat(job.max_servers()),
                     "a sync job with checkpoints and without replicas to grow into (or num_servers: no growth)");
    }
  }
  if (job.batch_size() < 1) return Invalid("batch_size", absl::StrCat(job.batch_size()), ">= 1");
  if (job.epochs() < 1) return Invalid("epochs", absl::StrCat(job.epochs()), ">= 1");
  if (job.max_steps() < 0) return Invalid("max_steps", absl::StrCat(job.max_steps()), ">= 0");
  if (absl::Status s = ValidateStreamJob(job); !s.ok()) return s;
  if (job.staleness() < 0) return Invalid("staleness", absl::StrCat(job.staleness()), ">= 0");
  if (job.lease_batches() < 1) return Invalid("lease_batches", absl::StrCat(job.lease_batches()), ">= 1");
  if (job.max_chunk_bytes() < 4 || job.max_chunk_bytes() % 4 != 0) {
    return Invalid("max_chunk_bytes", absl::StrCat(job.max_chunk_bytes()), "a positive multiple of 4");
  }
  if (job.checkpoint_every_steps() < 0) {
    return Invalid("checkpoint_every_steps", absl::StrCat(job.checkpoint_every_steps()), ">= 0");
  }
  if (job.checkpoint_every_steps() > 0 && job.checkpoint_dir().empty()) {
    return Invalid("checkpoint_dir", "''", "a folder when checkpoint_every_steps > 0");
  }
  if (!(job.checkpoint_every_seconds() >= 0) || !std::isfinite(job.checkpoint_every_seconds())) {
    return Invalid("checkpoint_every_seconds", absl::StrCat(job.checkpoint_every_seconds()), ">= 0");
  }
  if (job.checkpoint_every_seconds() > 0 && job.checkpoint_dir().empty()) {
    return Invalid("checkpoint_dir", "''", "a folder when checkpoint_every_seconds > 0");
  }
  if (job.full_checkpoint_every() < 0) {
    return Invalid("full_checkpoint_every", absl::StrCat(job.full_checkpoint_every()), ">= 0");
  }
  if (job.keep_checkpoints() != 0 && (job.keep_checkpoints() < 2 || job.keep_checkpoints() > kMaxKeepCheckpoints)) {
    return Invalid("keep_checkpoints", absl::StrCat(job.keep_checkpoints()),
                   absl::StrCat("0 (2) or 2 to ", kMaxKeepCheckpoints,
                                ": fewer than 2 could leave no cut every server has written"));
  }
  if (job.global_batch() < 0) return Invalid("global_batch", absl::StrCat(job.global_batch()), ">= 0");
  if (job.resume() && job.checkpoint_dir().empty()) {
    return Invalid("checkpoint_dir", "''", "the folder of the job to resume (resume is set)");
  }
  if (job.replicas() < 0 || job.replicas() > 2) {
    return Invalid("replicas", absl::StrCat(job.replicas()), "1 or 2 (0 means 1)");
  }
  if (job.replicas() == 2 && job.num_servers() < 2) {
    return Invalid(
        "replicas", "2",
        absl::StrCat("1 with num_servers = ", job.num_servers(), " (a shard's copy lives on another server)"));
  }
  if (absl::StatusOr<Compression> c = ParseCompression(job.compression()); !c.ok()) return c.status();
  if (job.data().train_limit() < 0) return Invalid("data.train_limit", absl::StrCat(job.data().train_limit()), ">= 0");
  if (job.data().test_limit() < 0) return Invalid("data.test_limit", absl::StrCat(job.data().test_limit()), ">= 0");
  // Pinned data set sizes: only an external model's (0: the first model declaration sets them).
  auto check_size = [&job](const char* field, int64_t value) -> absl::Status {
    if (IsExternalModel(job)) return value >= 0 ? absl::OkStatus() : Invalid(field, absl::StrCat(value), ">= 0");
    if (value == 0) return absl::OkStatus();
    return Invalid(field, absl::StrCat(value),
                   absl::StrCat("0 for model '", job.model(), "' (only model 'external' pins the data set sizes)"));
  };
  if (absl::Status s = check_size("data.train_samples", job.data().train_samples()); !s.ok()) return s;
  if (absl::Status s = check_size("data.test_samples", job.data().test_samples()); !s.ok()) return s;
  if (job.mode() == MODE_UNSPECIFIED || !Mode_IsValid(job.mode())) {
    return Invalid("mode", absl::StrCat(static_cast<int>(job.mode())), "sync, async or ssp");
  }

  const OptimizerSpec& opt = job.optimizer();
  if (opt.type() == OptimizerSpec::TYPE_UNSPECIFIED || !OptimizerSpec::Type_IsValid(opt.type())) {
    return Invalid("optimizer.type", absl::StrCat(static_cast<int>(opt.type())),
                   "sgd, momentum, nesterov, adam, adamw or adagrad");
  }
  if (!(opt.lr() > 0) || !std::isfinite(opt.lr())) return Invalid("optimizer.lr", absl::StrCat(opt.lr()), "> 0");
  if (!InUnitInterval(opt.momentum())) return Invalid("optimizer.momentum", absl::StrCat(opt.momentum()), "in [0, 1)");
  if (!InUnitInterval(opt.beta1())) return Invalid("optimizer.beta1", absl::StrCat(opt.beta1()), "in [0, 1)");
  if (!InUnitInterval(opt.beta2())) return Invalid("optimizer.beta2", absl::StrCat(opt.beta2()), "in [0, 1)");
  if (!(opt.epsilon() > 0)) return Invalid("optimizer.epsilon", absl::StrCat(opt.epsilon()), "> 0");
  if (!(opt.weight_decay() >= 0) || !std::isfinite(opt.weight_decay())) {
    return Invalid("optimizer.weight_decay", absl::StrCat(opt.weight_decay()), "a finite value >= 0");
  }
  if (!(opt.clip_grad_norm() >= 0) || !std::isfinite(opt.clip_grad_norm())) {
    return Invalid("optimizer.clip_grad_norm", absl::StrCat(opt.clip_grad_norm()), "a finite value >= 0 (0: off)");
  }
  const LrSchedule& s = opt.schedule();
  if (s.warmup_steps() < 0) return Invalid("optimizer.schedule.warmup_steps", absl::StrCat(s.warmup_steps()), ">= 0");
  if (s.type() == LrSchedule::STEP && s.step_size() < 1) {
    return Invalid("optimizer.schedule.step_size", absl::StrCat(s.step_size()), ">= 1 for the step schedule");
  }
  if (!(s.gamma() > 0 && s.gamma() <= 1))
    return Invalid("optimizer.schedule.gamma", absl::StrCat(s.gamma()), "in (0, 1]");
  if (!(s.min_factor() >= 0 && s.min_factor() <= 1)) {
    return Invalid("optimizer.schedule.min_factor", absl::StrCat(s.min_factor()), "in [0, 1]");
  }
  if (!(job.max_grad_norm_per_sample() >= 0) || !std::isfinite(job.max_grad_norm_per_sample())) {
    return Invalid("max_grad_norm_per_sample", absl::StrCat(job.max_grad_norm_per_sample()),
                   "a finite value >= 0 (0: off)");
  }
  if (job.output_mode() > 0777) {
    return Invalid("output_mode (--output_mode)", absl::StrFormat("0%o", job.output_mode()),
                   "permission bits in 0 to 0777 (0: 0600)");
  }
  return absl::OkStatus();
}

bool CheckpointsOn(const JobSpec& job) {
  return !job.checkpoint_dir().empty() && (job.checkpoint_every_steps() > 0 || job.checkpoint_every_seconds() > 0);
}

absl::StatusOr<Mode> ParseMode(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "sync") return SYNC;
  if (n == "async") return ASYNC;
  if (n == "ssp") return SSP;
  return absl::InvalidArgumentError(absl::StrCat("mode: got '", name, "', expected sync, async or ssp"));
}

absl::StatusOr<OptimizerSpec::Type> ParseOptimizer(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "sgd") return OptimizerSpec::SGD;
  if (n == "momentum") return OptimizerSpec::MOMENTUM;
  if (n == "nesterov") return OptimizerSpec::NESTEROV;
  if (n == "adam") return OptimizerSpec::ADAM;
  if (n == "adamw") return OptimizerSpec::ADAMW;
  if (n == "adagrad") return OptimizerSpec::ADAGRAD;
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer: got '", name, "', expected sgd, momentum, nesterov, adam, adamw or adagrad"));
}

absl::StatusOr<LrSchedule::Type> ParseLrSchedule(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "constant") return LrSchedule::CONSTANT;
  if (n == "step") return LrSchedule::STEP;
  if (n == "cosine") return LrSchedule::COSINE;
  return absl::InvalidArgumentError(absl::StrCat("lr_schedule: got '", name, "', expected constant, step or cosine"));
}

std::string ModeName(Mode mode) {
  switch (mode) {
    case SYNC:
      return "sync";
    case ASYNC:
      return "async";
    case SSP:
      return "ssp";
    default:
      return "unspecified";
  }
}

std::string OptimizerName(OptimizerSpec::Type type) { return absl::AsciiStrToLower(OptimizerSpec::Type_Name(type)); }

std::string JobSpecToText(const JobSpec& job) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  std::string out;
  printer.PrintToString(job, &out);
  return out;
}

}  // namespace pstrain
