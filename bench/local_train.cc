// The single-process baseline for end-to-end speed: the cluster's model (model::Mlp), data
// (Fashion-MNIST) and optimizer (model::Optimizer, Adam lr 1e-3 by default) in one process with
// no servers. Compare with a SYNC cluster at the same GLOBAL batch (workers x per-worker batch):
// both then make the same updates per epoch.
//
// The last line of stdout is machine-readable:
//   samples_per_second=12345.6 test_accuracy=0.8812 train_seconds=4.86 steps=469 batch_size=128
// samples_per_second counts training only: gathering batches, forward/backward and the optimizer,
// not loading the files nor evaluating.
#include <cblas.h>

#include <algorithm>
#include <chrono>
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
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/batch.h"
#include "data/idx_reader.h"
#include "data/permutation.h"
#include "model/cpu_backend.h"
#include "model/mlp.h"
#include "model/optimizer.h"

DEFINE_string(data_dir, "/usr/share/datasets/fashion-mnist", "Folder with the Fashion-MNIST IDX files");
DEFINE_int32(batch_size, 128, "Samples per step; use the cluster's global batch (workers x batch_size)");
DEFINE_int32(epochs, 1, "Passes over the training set");
DEFINE_int64(train_limit, 0, "Use only the first N training samples (0: all)");
DEFINE_int64(test_limit, 0, "Use only the first N test samples (0: all)");
DEFINE_int32(blas_threads, 1, "OpenBLAS threads (a cluster worker on a shared machine gets about one core)");
DEFINE_string(hidden, "256,128", "Hidden layer widths of the MLP, comma-separated");
DEFINE_string(optimizer, "adam", "Optimizer: sgd, momentum, nesterov, adam or adagrad");
DEFINE_double(lr, 0.002, "Learning rate (the demo job's default)");
DEFINE_bool(cosine, true, "Cosine learning-rate decay to zero over the run, as the demo job does");
DEFINE_int64(warmup_steps, 0, "Linear warm-up steps");
DEFINE_uint64(seed, 1, "Seed for the initial weights and the epoch permutations (as the cluster's)");

namespace pstrain::bench {
namespace {

absl::StatusOr<std::vector<int>> LayerSizes(const std::string& hidden, int inputs, int classes) {
  std::vector<int> sizes = {inputs};
  for (absl::string_view part : absl::StrSplit(hidden, ',', absl::SkipEmpty())) {
    int width = 0;
    if (!absl::SimpleAtoi(part, &width) || width <= 0) {
      return absl::InvalidArgumentError("--hidden: got '" + std::string(part) +
                                        "', expected comma-separated positive integers");
    }
    sizes.push_back(width);
  }
  sizes.push_back(classes);
  return sizes;
}

absl::StatusOr<model::OptimizerOptions::Type> OptimizerType(const std::string& name) {
  using Type = model::OptimizerOptions::Type;
  if (name == "sgd") return Type::kSgd;
  if (name == "momentum") return Type::kMomentum;
  if (name == "nesterov") return Type::kNesterov;
  if (name == "adam") return Type::kAdam;
  if (name == "adagrad") return Type::kAdagrad;
  return absl::InvalidArgumentError("--optimizer: got '" + name +
                                    "', expected one of sgd, momentum, nesterov, adam, adagrad");
}

// What one run measured.
struct Result {
  double train_seconds = 0;
  int64_t samples = 0;
  int64_t steps = 0;
  double test_accuracy = 0;
};

absl::Status Run(Result* result) {
  if (FLAGS_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--batch_size: got ", FLAGS_batch_size, ", expected >= 1"));
  }
  if (FLAGS_epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--epochs: got ", FLAGS_epochs, ", expected >= 1"));
  }
  if (FLAGS_blas_threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--blas_threads: got ", FLAGS_blas_threads, ", expected >= 1"));
  }
  openblas_set_num_threads(FLAGS_blas_threads);

  absl::StatusOr<data::Dataset> train = data::LoadFashionMnist(FLAGS_data_dir, data::Split::kTrain, FLAGS_train_limit);
  if (!train.ok()) return train.status();
  absl::StatusOr<data::Dataset> test = data::LoadFashionMnist(FLAGS_data_dir, data::Split::kTest, FLAGS_test_limit);
  if (!test.ok()) return test.status();

  absl::StatusOr<std::vector<int>> sizes =
      LayerSizes(FLAGS_hidden, static_cast<int>(train->features()), train->num_classes);
  if (!sizes.ok()) return sizes.status();
  std::unique_ptr<model::Backend> backend = model::NewCpuBackend();
  absl::StatusOr<std::unique_ptr<model::Mlp>> mlp = model::Mlp::Create(*sizes, backend.get());
  if (!mlp.ok()) return mlp.status();
  model::Mlp& net = **mlp;
  if (absl::Status s = net.InitializeParameters(FLAGS_seed); !s.ok()) return s;

  model::OptimizerOptions optimizer_options;
  absl::StatusOr<model::OptimizerOptions::Type> type = OptimizerType(FLAGS_optimizer);
  if (!type.ok()) return type.status();
  optimizer_options.type = *type;
  optimizer_options.lr = static_cast<float>(FLAGS_lr);
  if (FLAGS_cosine) optimizer_options.schedule.type = model::LrScheduleOptions::Type::kCosine;
  optimizer_options.schedule.warmup_steps = FLAGS_warmup_steps;
  absl::StatusOr<std::unique_ptr<model::Optimizer>> optimizer =
      model::Optimizer::Create(optimizer_options, net.num_parameters());
  if (!optimizer.ok()) return optimizer.status();

  // The host copy of the weights plays the servers' part: the optimizer updates it, and the
  // model loads it before every step, as a worker loads pulled weights.
  std::vector<float> weights(static_cast<size_t>(net.num_parameters()));
  std::vector<float> grad(weights.size());
  if (absl::Status s = net.GetParameters(absl::MakeSpan(weights)); !s.ok()) return s;
  const int64_t batch = FLAGS_batch_size;
  std::vector<float> x(static_cast<size_t>(batch * train->features()));
  std::vector<int32_t> labels(static_cast<size_t>(batch));

  const int64_t total_steps = FLAGS_epochs * ((train->num_samples + batch - 1) / batch);
  const auto start = std::chrono::steady_clock::now();
  int64_t step = 0;
  for (int epoch = 0; epoch < FLAGS_epochs; ++epoch) {
    const std::vector<int64_t> perm = data::EpochPermutation(FLAGS_seed, epoch, train->num_samples);
    model::BatchStats stats;
    for (int64_t begin = 0; begin < train->num_samples; begin += batch) {
      const data::Range range{begin, std::min(begin + batch, train->num_samples)};
      data::GatherRange(*train, perm, range, x.data(), labels.data());
      if (absl::Status s = net.SetParameters(weights); !s.ok()) return s;
      if (absl::Status s = net.ComputeGradient(x.data(), labels.data(), static_cast<int>(range.size()),
                                               absl::MakeSpan(grad), &stats);
          !s.ok()) {
        return s;
      }
      const float lr =
          model::ScheduledLearningRate(optimizer_options.lr, optimizer_options.schedule, step, total_steps);
      (*optimizer)->Apply(step, lr, grad.data(), weights.data());
      ++step;
    }
    if (stats.samples > 0) {
      LOG(INFO) << "epoch " << epoch << ": train loss " << stats.loss_sum / stats.samples << ", train accuracy "
                << static_cast<double>(stats.correct) / stats.samples;
    }
  }
  result->train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result->samples = train->num_samples * FLAGS_epochs;
  result->steps = step;

  if (absl::Status s = net.SetParameters(weights); !s.ok()) return s;
  model::BatchStats eval;
  if (absl::Status s =
          net.Evaluate(test->images.data(), test->labels.data(), static_cast<int>(test->num_samples), &eval);
      !s.ok()) {
    return s;
  }
  result->test_accuracy = eval.samples > 0 ? static_cast<double>(eval.correct) / eval.samples : 0;
  return absl::OkStatus();
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Single-process training baseline for pstrain's end-to-end speed");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  pstrain::bench::Result result;
  if (absl::Status s = pstrain::bench::Run(&result); !s.ok()) {
    LOG(ERROR) << s;
    return 1;
  }
  std::printf("samples_per_second=%.1f test_accuracy=%.4f train_seconds=%.3f steps=%lld batch_size=%d\n",
              result.train_seconds > 0 ? result.samples / result.train_seconds : 0.0, result.test_accuracy,
              result.train_seconds, static_cast<long long>(result.steps), FLAGS_batch_size);
  return 0;
}
