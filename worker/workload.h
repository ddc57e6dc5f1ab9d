// What the training loop (worker/trainer.h) computes: a model with its data. The loop is the same
// for every model; a Workload says how to read a step's samples, compute their gradient into the
// session's buffers, and evaluate a range of the test set.
//
//   ImageWorkload (worker/image_workload.h)  the MLP and the CNN on an in-memory image set
//   CtrWorkload   (worker/ctr_workload.h)    model/ctr_model.h on streamed Criteo or libsvm
//                                            records, with embedding rows from the servers
//
// Thread safety: one thread (the loop's).
#ifndef PSTRAIN_WORKER_WORKLOAD_H_
#define PSTRAIN_WORKER_WORKLOAD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "data/score_histogram.h"
#include "model/model.h"
#include "worker/training_session.h"

namespace pstrain::worker {

class Workload {
 public:
  virtual ~Workload() = default;

  // Installs new dense weights (the session's weights(), in the params' layout).
  virtual absl::Status SetParameters(absl::Span<const float> weights) = 0;

  // Reads a training step's samples (indices into the training set, in batch order). Before
  // BeginStep, so a read error leaves no step half begun.
  virtual absl::Status LoadBatch(absl::Span<const int64_t> samples) = 0;

  // After BeginStep: the gradient of the mean loss over the loaded batch into
  // session->gradient() (and, for models with tables, the batch's rows pulled through the session
  // and their gradients into its row_gradient()), telling `sink` (may be null) as layers finish.
  // Adds the batch's loss to *stats.
  virtual absl::Status ComputeGradient(TrainingSession* session, model::GradientSink* sink,
                                       model::BatchStats* stats) = 0;

  // Whether Evaluate scores each test sample's prediction (a click probability) for the AUC.
  virtual bool ScoresPredictions() const { return false; }

  // Evaluates test samples [begin, end) at the current weights; adds to *stats and, when
  // ScoresPredictions(), every sample's prediction to *scores (otherwise `scores` is null).
  virtual absl::Status Evaluate(TrainingSession* session, int64_t begin, int64_t end, model::BatchStats* stats,
                                data::ScoreHistogram* scores) = 0;
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_WORKLOAD_H_
