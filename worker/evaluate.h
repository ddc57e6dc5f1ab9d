// Offline evaluation of a trained model file (model/model_file.h) on the Fashion-MNIST test split:
// what `pstrain-eval` runs.
//
//   ReadModelFile -> LoadFashionMnist(kTest, limit) -> the model's layout (an MLP from its
//   weights' shapes, or a CNN when the first tensor is conv1.weight) -> Create + SetParameters
//   (CPU backend) -> Evaluate over every sample
//
// The test samples are evaluated with the same Evaluate the workers run at the end of each epoch, so on the same
// weights and the same test_limit the accuracy matches the run summary's final_test_accuracy exactly: every sample is
// counted the same way.
//
// Thread safety: free functions with no shared state. OpenBLAS's thread count is process-wide and
// left to the caller (model::SetCpuThreads).
#ifndef PSTRAIN_WORKER_EVALUATE_H_
#define PSTRAIN_WORKER_EVALUATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/cnn.h"
#include "model/mlp.h"
#include "model/param_spec.h"

namespace pstrain::worker {

// The MLP layer sizes (input, hidden..., classes) whose model::MlpParamSpecs layout is exactly
// `params`, names and shapes in order: {fc1.weight {784, 256}, fc1.bias {256}, fc2.weight
// {256, 10}, fc2.bias {10}} gives {784, 256, 10}. The sizes follow from the weights' shapes; the
// result is one that model::Mlp::Create accepts. INVALID_ARGUMENT naming the first tensor that
// differs from that layout (its index, name and shape and what was expected there), for no
// tensors, a missing or extra tensor, or fewer than 2 classes.
absl::StatusOr<std::vector<int>> LayerSizesFromParams(const std::vector<model::ParamSpec>& params);

// The CNN shape (model/cnn.h) of a model file whose first tensor is conv1.weight, for images of
// `height` x `width`: channels, hidden width and classes follow from the tensors' shapes, and the
// whole model::CnnParamSpecs layout must then match `params` (names and shapes), else
// INVALID_ARGUMENT naming the first tensor that differs.
absl::StatusOr<model::CnnShape> CnnShapeFromParams(const std::vector<model::ParamSpec>& params, int height, int width);

// Loads the model file at `model_path`, rebuilds its MLP on a CPU backend and evaluates it on the
// test split in `data_dir` (data::LoadFashionMnist; `test_limit` > 0 keeps the first test_limit
// samples, <= 0 all). On OK the stats sum over every kept test sample. Errors name the file:
// those of model::ReadModelFile and data::LoadFashionMnist pass through (NOT_FOUND, DATA_LOSS,
// ...); INVALID_ARGUMENT, prefixed with the model path, for tensors that are not an MLP layout
// (see LayerSizesFromParams; the message then also lists every tensor of the file, which may be
// any model, e.g. a PyTorch worker's), or a model whose input width differs from the test images'
// rows * cols. Blocks on disk I/O and the forward passes.
absl::StatusOr<model::BatchStats> EvaluateModelFile(const std::string& model_path, const std::string& data_dir,
                                                    int64_t test_limit);

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_EVALUATE_H_
