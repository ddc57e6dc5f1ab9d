// pstrain-export: writes a model export (serving/model_export.h, docs/reference/export-format.md)
// from a job's checkpoint folder: the dense tensors and every embedding table's rows of one cut,
// each server's checkpoint read through its chain of deltas.
//
//   pstrain-export --checkpoint_dir=DIR --out=EXPORT [--step=N] [--model_file=FILE]
//
// The job is DIR/job.textproto (the scheduler writes it); the dense tensors' names and shapes are
// the job's built-in model's (an image model reads its training set's header), or FILE's (a model
// file of the same model, e.g. a declared model's or a final model: needed for --model=external).
// Prints what it wrote. Exit status: 0 written; 1 the checkpoints or the files could not be used;
// 2 bad flags.
#include <cstdio>
#include <iostream>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/binary_init.h"
#include "serving/checkpoint_export.h"
#include "serving/job_checkpoints.h"

DEFINE_string(checkpoint_dir, "", "The job's checkpoint folder (--checkpoint_dir of its run; required)");
DEFINE_string(out, "", "The export folder to write; must not exist (required)");
DEFINE_int64(step, -1, "The cut to export (-1: the newest every server has)");
DEFINE_string(model_file, "", "A model file whose tensors are the job's (default: the job's built-in model)");

int main(int argc, char** argv) {
  pstrain::InitBinary("pstrain-export --checkpoint_dir=DIR --out=EXPORT [--step=N] [--model_file=FILE]", &argc, &argv);
  if (FLAGS_checkpoint_dir.empty() || FLAGS_out.empty()) {
    std::cerr << "pstrain-export: --checkpoint_dir=DIR and --out=EXPORT are required\n";
    return 2;
  }
  if (FLAGS_step < -1) {
    std::cerr << "pstrain-export: --step: got " << FLAGS_step << ", expected >= 0 (or -1: the newest)\n";
    return 2;
  }
  absl::StatusOr<pstrain::serving::CheckpointExportOptions> options =
      pstrain::serving::ReadJobCheckpoints(FLAGS_checkpoint_dir, FLAGS_model_file);
  if (!options.ok()) {
    LOG(ERROR) << "export failed: " << options.status();
    return 1;
  }
  options->step = FLAGS_step;
  absl::StatusOr<pstrain::serving::ModelExport> exported = pstrain::serving::ExportCheckpoints(*options);
  if (!exported.ok()) {
    LOG(ERROR) << "export failed: " << exported.status();
    return 1;
  }
  if (absl::Status s = pstrain::serving::WriteModelExport(*exported, FLAGS_out); !s.ok()) {
    LOG(ERROR) << "export failed: " << s;
    return 1;
  }
  int64_t rows = 0;
  for (const auto& t : exported->tables) rows += static_cast<int64_t>(t.keys.size());
  std::printf("exported step %lld of %s to %s: %zu dense tensors (%zu values), %d tables (%lld rows)\n",
              static_cast<long long>(exported->manifest.step()), FLAGS_checkpoint_dir.c_str(), FLAGS_out.c_str(),
              exported->dense.params.size(), exported->dense.values.size(), exported->manifest.tables_size(),
              static_cast<long long>(rows));
  return 0;
}
