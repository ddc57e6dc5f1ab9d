// The single-process baseline for the CTR model end to end: the cluster's model (model::CtrModel),
// data (data::CtrSource over the same files, read in file order) and optimizers in one process
// with no servers. The dense parameters take the job's optimizer (server/model_convert.h: Adam
// 0.002 with cosine decay by default) as a server applies it; each table is an
// server::EmbeddingTable with the job's table options (Adagrad 0.05, the same seed, so the same
// initial rows), read before the step and updated after it, as the servers read and update
// theirs. Compare with a SYNC cluster at the same GLOBAL batch (workers x per-worker batch): both
// then make the same updates, step for step, up to the order of float sums.
//
// The last line of stdout is machine-readable:
//   samples_per_second=12345.6 test_auc=0.7712 test_logloss=0.4567 train_seconds=4.86 steps=469
//   batch_size=1024 rows=1000000
// samples_per_second counts training only (reading the records, the rows, forward/backward and
// both updates), as the cluster's step times do; not counting the records nor evaluating. rows
// is the rows the tables hold at the end (the keys the training data touched).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "common/ctr_model_options.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "common/table_spec.h"
#include "data/ctr_files.h"
#include "data/ctr_source.h"
#include "data/score_histogram.h"
#include "model/cpu_backend.h"
#include "model/ctr_model.h"
#include "model/optimizer.h"
#include "server/embedding_table.h"
#include "server/sparse_shard.h"
#include "server/model_convert.h"

DEFINE_string(data_dir, "", "Folder with train.tsv and test.tsv (pstrain-gen-ctr's output, or Criteo's files)");
DEFINE_string(data_format, "criteo", "criteo or libsvm");
DEFINE_int32(batch_size, 1024, "Samples per step; use the cluster's global batch (workers x batch_size)");
DEFINE_int32(epochs, 1, "Passes over the training set");
DEFINE_int64(train_limit, 0, "Use only the first N training records (0: all)");
DEFINE_int64(test_limit, 0, "Use only the first N test records (0: all)");
DEFINE_int32(blas_threads, 1, "OpenBLAS threads (a cluster worker gets 1)");
DEFINE_string(hidden, "256,128", "Hidden layer widths of the MLP, comma-separated (the job's --hidden)");
DEFINE_int32(embedding_dim, 16, "Floats per embedding row (the job's --embedding_dim)");
DEFINE_uint64(seed, 1, "The job's seed: initial dense weights and rows");

namespace pstrain::bench {
namespace {

constexpr int64_t kEvalPiece = 8192;  // test records per Predict, as the workers evaluate

// The job a cluster would run with these flags, defaults applied: its optimizers and tables.
absl::StatusOr<JobSpec> JobOfFlags() {
  JobSpec job;
  job.set_model(kCtrModel);
  job.mutable_data()->set_format(FLAGS_data_format);
  job.set_embedding_dim(FLAGS_embedding_dim);
  job.set_seed(FLAGS_seed);
  for (absl::string_view part : absl::StrSplit(FLAGS_hidden, ',', absl::SkipEmpty())) {
    int width = 0;
    if (!absl::SimpleAtoi(part, &width) || width <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hidden: got '", FLAGS_hidden, "', expected comma-separated positive integers"));
    }
    job.add_hidden_sizes(width);
  }
  ApplyJobDefaults(&job);
  RETURN_IF_ERROR(ValidateTables(job));
  return job;
}

// The tables' rows for the keys of the batch last indexed: one buffer per table, read (not
// created) from the tables as a server answers a pull.
class Rows {
 public:
  absl::Status Read(const std::vector<std::unique_ptr<server::EmbeddingTable>>& tables,
                    const std::vector<absl::Span<const uint64_t>>& keys) {
    rows_.resize(tables.size());
    grads_.resize(tables.size());
    rows_view_.clear();
    grads_view_.clear();
    for (size_t t = 0; t < tables.size(); ++t) {
      const size_t n = keys[t].size() * tables[t]->dim();
      rows_[t].resize(n);
      grads_[t].resize(n);
      RETURN_IF_ERROR(tables[t]->Read(keys[t], absl::MakeSpan(rows_[t])));
      rows_view_.push_back(rows_[t]);
      grads_view_.push_back(absl::MakeSpan(grads_[t]));
    }
    return absl::OkStatus();
  }
  const std::vector<absl::Span<const float>>& rows() const { return rows_view_; }
  const std::vector<absl::Span<float>>& grads() const { return grads_view_; }

 private:
  std::vector<std::vector<float>> rows_;
  std::vector<std::vector<float>> grads_;
  std::vector<absl::Span<const float>> rows_view_;
  std::vector<absl::Span<float>> grads_view_;
};

struct Result {
  double train_seconds = 0;
  int64_t samples = 0;
  int64_t steps = 0;
  double test_auc = 0;
  double test_logloss = 0;
  int64_t rows = 0;
};

absl::Status Run(Result* result) {
  if (FLAGS_batch_size < 1 || FLAGS_epochs < 1 || FLAGS_blas_threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--batch_size, --epochs, --blas_threads: got ", FLAGS_batch_size,
                                                   ", ", FLAGS_epochs, ", ", FLAGS_blas_threads, ", expected >= 1"));
  }
  model::SetCpuThreads(FLAGS_blas_threads);
  ASSIGN_OR_RETURN(const JobSpec job, JobOfFlags());
  ASSIGN_OR_RETURN(const data::DataFormat format, data::ParseDataFormat(FLAGS_data_format));
  ASSIGN_OR_RETURN(const data::CtrFiles files, data::FindCtrFiles(FLAGS_data_dir, format));
  data::RecordCounter counter;
  ASSIGN_OR_RETURN(int64_t train_records, counter.Count(files.train));
  ASSIGN_OR_RETURN(int64_t test_records, counter.Count(files.test));
  if (FLAGS_train_limit > 0) train_records = std::min(train_records, FLAGS_train_limit);
  if (FLAGS_test_limit > 0) test_records = std::min(test_records, FLAGS_test_limit);
  data::CtrSource::Options source;
  source.format = format;
  ASSIGN_OR_RETURN(std::unique_ptr<data::CtrSource> train, data::CtrSource::Open(files.train, source));
  ASSIGN_OR_RETURN(std::unique_ptr<data::CtrSource> test, data::CtrSource::Open(files.test, source));

  const model::CtrModelOptions options = CtrModelOptionsOf(job);
  std::unique_ptr<model::Backend> backend = model::NewCpuBackend();
  ASSIGN_OR_RETURN(std::unique_ptr<model::CtrModel> net, model::CtrModel::Create(options, backend.get()));
  RETURN_IF_ERROR(net->InitializeParameters(job.seed()));

  // The same tables the servers build.
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<server::EmbeddingTable>> tables, server::MakeJobTables(job));
  std::vector<float> table_lr;
  for (const TableSpec& spec : job.tables()) table_lr.push_back(spec.optimizer().lr());

  const model::OptimizerOptions dense = server::OptimizerOptionsFromProto(job.optimizer());
  ASSIGN_OR_RETURN(std::unique_ptr<model::Optimizer> optimizer, model::Optimizer::Create(dense, net->num_parameters()));
  // The host copy of the dense weights plays the servers' part, as in local_train.
  std::vector<float> weights(static_cast<size_t>(net->num_parameters()));
  std::vector<float> grad(weights.size());
  RETURN_IF_ERROR(net->GetParameters(absl::MakeSpan(weights)));

  const int64_t batch = FLAGS_batch_size;
  const int64_t steps_per_epoch = (train_records + batch - 1) / batch;
  const int64_t total_steps = FLAGS_epochs * steps_per_epoch;
  data::CtrBatch records;
  Rows rows;
  const auto start = std::chrono::steady_clock::now();
  int64_t step = 0;
  for (int epoch = 0; epoch < FLAGS_epochs; ++epoch) {
    model::BatchStats stats;
    for (int64_t first = 0; first < train_records; first += batch) {
      RETURN_IF_ERROR(train->ReadBatch(first, std::min(batch, train_records - first), &records));
      ASSIGN_OR_RETURN(const std::vector<absl::Span<const uint64_t>> keys, net->TableKeys(records));
      RETURN_IF_ERROR(rows.Read(tables, keys));
      RETURN_IF_ERROR(net->SetParameters(weights));
      RETURN_IF_ERROR(net->ComputeGradient(records, rows.rows(), absl::MakeSpan(grad), rows.grads(), &stats));
      optimizer->Apply(step, model::ScheduledLearningRate(dense.lr, dense.schedule, step, total_steps), grad.data(),
                       weights.data());
      for (size_t t = 0; t < tables.size(); ++t) {
        if (keys[t].empty()) continue;
        RETURN_IF_ERROR(tables[t]->Apply(keys[t], rows.grads()[t], table_lr[t]));
      }
      ++step;
    }
    if (stats.samples > 0) {
      LOG(INFO) << "epoch " << epoch << ": train loss " << stats.loss_sum / stats.samples;
    }
  }
  result->train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result->samples = train_records * FLAGS_epochs;
  result->steps = step;
  for (const auto& table : tables) result->rows += table->num_rows();

  // The whole test set, scored as the workers score it (a 2^16-bin histogram per evaluation).
  RETURN_IF_ERROR(net->SetParameters(weights));
  data::ScoreHistogram scores;
  data::PredictionTotals totals;
  int64_t scored = 0;
  std::vector<float> probabilities;
  for (int64_t first = 0; first < test_records; first += kEvalPiece) {
    RETURN_IF_ERROR(test->ReadBatch(first, std::min(kEvalPiece, test_records - first), &records));
    ASSIGN_OR_RETURN(const std::vector<absl::Span<const uint64_t>> keys, net->TableKeys(records));
    RETURN_IF_ERROR(rows.Read(tables, keys));
    probabilities.resize(records.size);
    RETURN_IF_ERROR(net->Predict(records, rows.rows(), absl::MakeSpan(probabilities)));
    RETURN_IF_ERROR(data::ScorePredictions(probabilities, records.labels, &scores, &totals));
    scored += records.size;
  }
  ASSIGN_OR_RETURN(result->test_auc, scores.Auc());
  result->test_logloss = scored > 0 ? totals.log_loss_sum / scored : 0;
  return absl::OkStatus();
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Single-process CTR training baseline for pstrain's sparse end-to-end speed");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  pstrain::bench::Result result;
  if (absl::Status s = pstrain::bench::Run(&result); !s.ok()) {
    LOG(ERROR) << s;
    return 1;
  }
  std::printf(
      "samples_per_second=%.1f test_auc=%.4f test_logloss=%.4f train_seconds=%.3f steps=%lld batch_size=%d rows=%lld\n",
      result.train_seconds > 0 ? result.samples / result.train_seconds : 0.0, result.test_auc, result.test_logloss,
      result.train_seconds, static_cast<long long>(result.steps), FLAGS_batch_size,
      static_cast<long long>(result.rows));
  return 0;
}
