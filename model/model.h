// What a worker trains: a classifier whose parameters live in one flat vector in its
// params() layout (the layout the parameter servers shard and the model file stores). The MLP
// (model/mlp.h) and the CNN (model/cnn.h) implement it through model/flat_model.h; NewModel picks
// one by the job's name.
//
// Inputs and outputs of every method are host memory; the arithmetic runs on the Backend the
// model was created with.
//
// Thread safety: not thread-safe (one model per training thread, each with its own Backend).
#ifndef PSTRAIN_MODEL_MODEL_H_
#define PSTRAIN_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/backend.h"
#include "model/param_spec.h"

namespace pstrain {
namespace model {

// Loss and accuracy counts, summed over the samples seen. Mean loss = loss_sum / samples.
struct BatchStats {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t samples = 0;
  // Records of the range that held no sample (bad records skipped under --bad_records=skip), so
  // samples + skipped is the range's size.
  int64_t skipped = 0;
  // Set by the caller: models that score predictions (CTR) append each trained sample's predicted
  // probability, from the forward pass the gradient is computed on (before the update it leads
  // to), and its label (0 or 1): progressive validation.
  bool want_predictions = false;
  std::vector<float> predictions;
  std::vector<uint8_t> labels;
  // Set by the caller for data read from a stream: the file each run of predictions came from, in
  // order, as (file index in the stream's catalog, number of predictions) pairs whose numbers add
  // up to predictions.size(). Empty otherwise.
  std::vector<std::pair<int64_t, int64_t>> prediction_files;
};

// Receives each layer's gradient while ComputeGradient is still running, so the caller can send
// it on while backward goes on with the layers before (worker/trainer.h, "Overlap").
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // The gradients of tensors [first, end) (indices into params()) are in the host gradient
  // buffer. Called on ComputeGradient's thread, last layer first (descending tensor indices), each
  // tensor exactly once per ComputeGradient call; the call must not block for long, since backward
  // waits for it.
  virtual void GradientReady(int first, int end) = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const std::vector<ParamSpec>& params() const = 0;
  virtual int64_t num_parameters() const = 0;
  // Floats per sample, and the number of classes.
  virtual int input_size() const = 0;
  virtual int num_classes() const = 0;

  // Loads every weight from `flat` (num_parameters() floats, params() layout); INVALID_ARGUMENT
  // for a wrong size.
  virtual absl::Status SetParameters(absl::Span<const float> flat) = 0;
  // Copies the current weights into `flat`; INVALID_ARGUMENT for a wrong size.
  virtual absl::Status GetParameters(absl::Span<float> flat) const = 0;
  // Sets every weight to its model/init.h initial value for `seed` (what the servers start from).
  virtual absl::Status InitializeParameters(uint64_t seed) = 0;

  // Forward and backward pass over n samples (x: n * input_size() floats, labels in
  // [0, num_classes())): writes the MEAN gradient into `grad` (num_parameters() floats) and adds
  // loss sum, correct count and n to *stats (may be null). n == 0: grad all zeros. INVALID_ARGUMENT
  // for n < 0, a wrong grad size or a label out of range (naming the sample); *stats unchanged then.
  absl::Status ComputeGradient(const float* x, const int32_t* labels, int n, absl::Span<float> grad,
                               BatchStats* stats) {
    return ComputeGradient(x, labels, n, grad, stats, /*sink=*/nullptr);
  }
  // The same, telling `sink` (may be null) about each layer's gradient as soon as it is in `grad`.
  // On error the sink may have been told about some layers already; `grad` is then unspecified.
  virtual absl::Status ComputeGradient(const float* x, const int32_t* labels, int n, absl::Span<float> grad,
                                       BatchStats* stats, GradientSink* sink) = 0;
  // Forward only, in batches, so n may be a whole test set; adds to *stats. Errors as above.
  virtual absl::Status Evaluate(const float* x, const int32_t* labels, int n, BatchStats* stats) = 0;
};

// The models a job may name (JobSpec.model).
inline constexpr char kMlpModel[] = "mlp";
inline constexpr char kCnnModel[] = "cnn";

// What a model needs to know of its data and job: images of `channels` x `height` x `width`
// floats, `classes` labels, and (MLP only) the hidden layer widths.
struct ModelInput {
  int channels = 1;
  int height = 0;
  int width = 0;
  int classes = 0;
  std::vector<int> hidden_sizes;
};

// The input of a model trained on one-channel images of height x width pixels in `classes`
// classes, with the MLP's `hidden_sizes`. The scheduler (which cuts the shard map from the
// parameter layout) and the workers (which build the model) must agree on it, so both call this.
ModelInput ImageModelInput(int height, int width, int classes, std::vector<int> hidden_sizes);

// The most parameters a built-in model may have (float32: 4 GiB), the same bound as the job's
// (common/job_spec.h kMaxModelParameters, checked there before the data's input size is known).
inline constexpr int64_t kMaxParameters = int64_t{1} << 30;

// The parameter layout of model `name` for `input`. INVALID_ARGUMENT for an unknown name
// ("model 'x': expected 'mlp' or 'cnn'"), sizes the model refuses, or more than kMaxParameters
// parameters (naming --hidden), checked before anything is allocated.
absl::StatusOr<std::vector<ParamSpec>> ModelParamSpecs(const std::string& name, const ModelInput& input);

// A new model `name` on `backend` (borrowed; must outlive the model); errors as ModelParamSpecs,
// plus the backend's Allocate errors.
absl::StatusOr<std::unique_ptr<Model>> NewModel(const std::string& name, const ModelInput& input, Backend* backend);

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_MODEL_H_
