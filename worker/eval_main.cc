// pstrain-eval: evaluates a trained model file (--final_model of a run) on the test split.
//
// Prints one line for people and one for scripts, e.g.
//   model run/model.bin: test accuracy 89.29%, mean loss 0.3043 over 10000 samples
//   test_accuracy=0.8929 test_loss=0.3043 samples=10000
// Exit status: 0 evaluated; 1 the model file or the data could not be used; 2 bad flags.
#include <cstdio>
#include <iostream>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/binary_init.h"
#include "common/job_spec.h"
#include "model/cpu_backend.h"
#include "worker/evaluate.h"

DEFINE_string(model, "", "Model file to evaluate, as written by --final_model (required)");
DEFINE_string(data_dir, pstrain::kDefaultDataDir, "Folder with the Fashion-MNIST (or MNIST) IDX files");
DEFINE_int64(test_limit, 0, "Evaluate only the first N test samples (0: all)");
DEFINE_int32(blas_threads, 1, "OpenBLAS threads for the CPU backend");

int main(int argc, char** argv) {
  pstrain::InitBinary("pstrain-eval --model=FILE [--data_dir=DIR] [--test_limit=N]", &argc, &argv);
  if (FLAGS_model.empty()) {
    std::cerr << "pstrain-eval: --model=FILE is required\n";
    return 2;
  }
  if (FLAGS_test_limit < 0) {
    std::cerr << "pstrain-eval: --test_limit: got " << FLAGS_test_limit << ", expected >= 0\n";
    return 2;
  }
  if (FLAGS_blas_threads < 1) {
    std::cerr << "pstrain-eval: --blas_threads: got " << FLAGS_blas_threads << ", expected >= 1\n";
    return 2;
  }
  pstrain::model::SetCpuThreads(FLAGS_blas_threads);

  absl::StatusOr<pstrain::model::BatchStats> stats =
      pstrain::worker::EvaluateModelFile(FLAGS_model, FLAGS_data_dir, FLAGS_test_limit);
  if (!stats.ok()) {
    // The model file is refused before anything is allocated for it: not a regular file (a FIFO,
    // /dev/zero), too large, malformed, or holding NaN or Inf (model/model_file.h).
    LOG(ERROR) << "evaluation failed: --model=" << FLAGS_model << ": " << stats.status();
    return 1;
  }
  if (stats->samples == 0) {
    LOG(ERROR) << "evaluation failed: the test set in " << FLAGS_data_dir << " has no samples";
    return 1;
  }
  const double accuracy = static_cast<double>(stats->correct) / static_cast<double>(stats->samples);
  const double loss = stats->loss_sum / static_cast<double>(stats->samples);
  std::printf("model %s: test accuracy %.2f%%, mean loss %.4f over %lld samples\n", FLAGS_model.c_str(), 100 * accuracy,
              loss, static_cast<long long>(stats->samples));
  // %.10g, as the run summary writes its numbers, so the two compare digit for digit.
  std::printf("test_accuracy=%.10g test_loss=%.10g samples=%lld\n", accuracy, loss,
              static_cast<long long>(stats->samples));
  return 0;
}
