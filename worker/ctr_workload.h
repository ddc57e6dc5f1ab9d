// Model "ctr" (model/ctr_model.h) on streamed Criteo or libsvm records (data/ctr_source.h), as a
// Workload (worker/workload.h). Each step reads its records, asks the model for the batch's keys
// per table, pulls their rows through the session, and hands the session the dense gradient and
// one gradient row per key. Evaluation reads the test range in pieces of kEvalPiece records, pulls
// each piece's rows, and scores it.
//
// Records are read in file order (the session hands text data out unshuffled), so a step's
// samples are one contiguous range of records. A skipped bad record (--bad_records=skip) still
// counts as a record of the epoch but adds no sample to the gradient.
//
// A job on a data stream (JobSpec.data.stream_dir) reads its steps from the stream's ready files
// (worker/stream_reader.h), as the view the workload follows (FollowView) lists them; it has no
// test set.
#ifndef PSTRAIN_WORKER_CTR_WORKLOAD_H_
#define PSTRAIN_WORKER_CTR_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/ctr_batch.h"
#include "data/ctr_source.h"
#include "model/backend.h"
#include "model/ctr_model.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "worker/stream_reader.h"
#include "worker/workload.h"

namespace pstrain::worker {

class CtrWorkload : public Workload {
 public:
  static constexpr int64_t kEvalPiece = 8192;

  // Opens the job's training and test files and builds the model on `backend` (borrowed; must
  // outlive the workload). NOT_FOUND for missing files; INVALID_ARGUMENT when the model's dense
  // tensors do not match the view's shard map or the files hold fewer records than the view says.
  static absl::StatusOr<std::unique_ptr<CtrWorkload>> Create(const JobSpec& job, const ClusterView& view,
                                                             model::Backend* backend);

  // A job on a data stream: the view whose ready files (ClusterView.stream) LoadBatch reads,
  // the session's (TrainingSession::view(), which stays at one address); borrowed, must outlive
  // the workload. Required before LoadBatch on a stream.
  void FollowView(const ClusterView* view) { view_ = view; }

  const std::vector<model::ParamSpec>& params() const { return model_->params(); }

  absl::Status SetParameters(absl::Span<const float> weights) override;
  absl::Status LoadBatch(absl::Span<const int64_t> samples) override;
  absl::Status ComputeGradient(TrainingSession* session, model::GradientSink* sink, model::BatchStats* stats) override;
  bool ScoresPredictions() const override { return true; }
  absl::Status Evaluate(TrainingSession* session, int64_t begin, int64_t end, model::BatchStats* stats,
                        data::ScoreHistogram* scores) override;

  // Bad records skipped so far (training and test files).
  int64_t skipped() const {
    return (train_ ? train_->skipped() : 0) + (test_ ? test_->skipped() : 0) + (stream_ ? stream_->skipped() : 0);
  }

 private:
  CtrWorkload(std::unique_ptr<model::CtrModel> model, std::unique_ptr<data::CtrSource> train,
              std::unique_ptr<data::CtrSource> test, std::unique_ptr<StreamReader> stream);

  // Pulls the rows of `batch`'s keys (TableKeys ran on it) through the session.
  absl::Status PullRows(TrainingSession* session, const std::vector<absl::Span<const uint64_t>>& keys);

  std::unique_ptr<model::CtrModel> model_;
  std::unique_ptr<data::CtrSource> train_;  // null on a stream
  std::unique_ptr<data::CtrSource> test_;   // null on a stream
  // A stream: its reader and the view whose files it reads.
  std::unique_ptr<StreamReader> stream_;
  const ClusterView* view_ = nullptr;
  data::CtrBatch batch_;
  std::vector<absl::Span<const uint64_t>> keys_;  // of batch_, from TableKeys
  std::vector<absl::Span<const float>> rows_;
  std::vector<absl::Span<float>> row_grads_;
  std::vector<float> probabilities_;
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_CTR_WORKLOAD_H_
