// Server-side optimizers and learning-rate schedules.
//
// A parameter server keeps one Optimizer per chunk of a tensor it owns; the optimizer holds the
// per-element state of that chunk (momentum, Adam moments, Adagrad sums) and nothing else, so
// chunks update independently and in parallel.
#ifndef PSTRAIN_MODEL_OPTIMIZER_H_
#define PSTRAIN_MODEL_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pstrain {
namespace model {

// How the learning rate moves over a job. With base rate lr, warm-up W = warmup_steps and
// s = step - W (step is 0-based):
//
//   step < W (warm-up):  lr * (step + 1) / W          -- step 0 gets lr/W, step W-1 gets lr
//   kConstant:           lr
//   kStep:               lr * gamma^floor(s / step_size)
//   kCosine:             lr * (min_factor + (1 - min_factor) * (1 + cos(pi * p)) / 2),
//                        p = min(s / (total_steps - W), 1)
//                        -- lr at s = 0, lr * min_factor from step total_steps on; a job with
//                        total_steps <= W has no cosine phase and uses lr * min_factor after W.
struct LrScheduleOptions {
  enum class Type { kConstant, kStep, kCosine };
  Type type = Type::kConstant;
  int64_t warmup_steps = 0;  // >= 0
  int64_t step_size = 0;     // kStep: > 0
  float gamma = 0.1f;        // kStep: > 0
  float min_factor = 0.0f;   // kCosine: in [0, 1]
};

// OK, or INVALID_ARGUMENT naming the field, the value and what was expected.
absl::Status ValidateLrSchedule(const LrScheduleOptions& schedule);

// Learning rate for update number `step` (0-based) of a job of `total_steps` updates (see
// LrScheduleOptions for the formulas). REQUIRES: ValidateLrSchedule(schedule) is OK, step >= 0.
float ScheduledLearningRate(float base_lr, const LrScheduleOptions& schedule, int64_t step, int64_t total_steps);

struct OptimizerOptions {
  enum class Type { kSgd, kMomentum, kNesterov, kAdam, kAdagrad, kAdamW };
  Type type = Type::kSgd;
  float lr = 0.01f;           // base rate, > 0 (Apply takes the scheduled rate)
  float momentum = 0.9f;      // kMomentum, kNesterov: [0, 1)
  float beta1 = 0.9f;         // kAdam, kAdamW: [0, 1)
  float beta2 = 0.999f;       // kAdam, kAdamW: [0, 1)
  float epsilon = 1e-8f;      // kAdam, kAdamW, kAdagrad: > 0
  float weight_decay = 0.0f;  // >= 0; kAdamW: decoupled, others: coupled (added to the gradient)
  LrScheduleOptions schedule;
};

// Thread safety: not thread-safe; one instance per chunk, used under that chunk's lock.
class Optimizer {
 public:
  // An optimizer for a chunk of `num_elements` weights, its state zeroed. INVALID_ARGUMENT names
  // the bad option (e.g. "optimizer momentum: got 1.5, expected [0, 1)") or a negative size.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerOptions& options, int64_t num_elements);

  const OptimizerOptions& options() const { return options_; }
  int64_t num_elements() const { return num_elements_; }

  // One update of weights[0, num_elements) with grad[0, num_elements). `step` = updates applied
  // before this one (Adam's bias correction uses t = step + 1); `lr` = this update's rate (the
  // caller applies the schedule). With g = grad + weight_decay * w:
  //   kSgd:      w -= lr g
  //   kMomentum: v = mu v + g;  w -= lr v
  //   kNesterov: v = mu v + g;  w -= lr (g + mu v)
  //   kAdam:     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
  //              w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
  //   kAdagrad:  G += g^2;  w -= lr g / (sqrt(G) + eps)
  // kAdamW decays the weights apart from the gradient (decoupled, torch.optim.AdamW's order), so
  // with g = grad:
  //   kAdamW:    w *= 1 - lr weight_decay;  then kAdam's step
  //              -- in one line, w -= lr (m^ / (sqrt(v^) + eps) + weight_decay w_old)
  // grad and weights must not overlap.
  void Apply(int64_t step, float lr, const float* grad, float* weights);

  // The per-element state, for checkpoints: 0 vectors (SGD), 1 (momentum/Nesterov: v; Adagrad:
  // G) or 2 (Adam, AdamW: m, v), each num_elements floats. Writable so a checkpoint can be restored.
  int num_state_vectors() const { return static_cast<int>(state_.size()); }
  absl::Span<float> state_vector(int i) { return absl::MakeSpan(state_[i]); }

 private:
  Optimizer(const OptimizerOptions& options, int64_t num_elements);

  const OptimizerOptions options_;
  const int64_t num_elements_;
  std::vector<std::vector<float>> state_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_OPTIMIZER_H_
