#include "model/optimizer.h"

#include <algorithm>
#include <cmath>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace model {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The update loops: one per optimizer, branch-free inside so -O3 vectorizes them. __restrict
// tells the compiler grad, weights and state never alias.

void SgdLoop(int64_t n, float lr, float wd, const float* __restrict grad, float* __restrict w) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + wd * w[i];
    w[i] -= lr * g;
  }
}

void MomentumLoop(int64_t n, float lr, float wd, float mu, const float* __restrict grad, float* __restrict w,
                  float* __restrict v) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + wd * w[i];
    v[i] = mu * v[i] + g;
    w[i] -= lr * v[i];
  }
}

void NesterovLoop(int64_t n, float lr, float wd, float mu, const float* __restrict grad, float* __restrict w,
                  float* __restrict v) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + wd * w[i];
    v[i] = mu * v[i] + g;
    w[i] -= lr * (g + mu * v[i]);
  }
}

// step_size = lr / (1 - b1^t) and inv_bc2 = 1 / (1 - b2^t) fold the bias corrections.
void AdamLoop(int64_t n, float step_size, float inv_bc2, float wd, float b1, float b2, float eps,
              const float* __restrict grad, float* __restrict w, float* __restrict m, float* __restrict v) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + wd * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    w[i] -= step_size * m[i] / (std::sqrt(v[i] * inv_bc2) + eps);
  }
}

// AdamLoop with decoupled decay: `shrink` = 1 - lr * weight_decay multiplies the weights before
// the step, as torch.optim.AdamW does (param.mul_(1 - lr * weight_decay), then addcdiv_).
void AdamWLoop(int64_t n, float step_size, float inv_bc2, float shrink, float b1, float b2, float eps,
               const float* __restrict grad, float* __restrict w, float* __restrict m, float* __restrict v) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    w[i] = w[i] * shrink - step_size * m[i] / (std::sqrt(v[i] * inv_bc2) + eps);
  }
}

void AdagradLoop(int64_t n, float lr, float wd, float eps, const float* __restrict grad, float* __restrict w,
                 float* __restrict sum_sq) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + wd * w[i];
    sum_sq[i] += g * g;
    w[i] -= lr * g / (std::sqrt(sum_sq[i]) + eps);
  }
}

absl::Status CheckRange(const char* field, float value, float lo, float hi, bool hi_inclusive) {
  const bool ok = value >= lo && (hi_inclusive ? value <= hi : value < hi);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer ", field, ": got ", value, ", expected [", lo, ", ", hi, hi_inclusive ? "]" : ")"));
}

absl::Status CheckPositive(const char* field, float value) {
  if (value > 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer ", field, ": got ", value, ", expected a finite value > 0"));
}

int NumStateVectors(OptimizerOptions::Type type) {
  switch (type) {
    case OptimizerOptions::Type::kSgd:
      return 0;
    case OptimizerOptions::Type::kMomentum:
    case OptimizerOptions::Type::kNesterov:
    case OptimizerOptions::Type::kAdagrad:
      return 1;
    case OptimizerOptions::Type::kAdam:
    case OptimizerOptions::Type::kAdamW:
      return 2;
  }
  LOG(FATAL) << "unknown optimizer type " << static_cast<int>(type);
  return 0;
}

}  // namespace

absl::Status ValidateLrSchedule(const LrScheduleOptions& schedule) {
  if (schedule.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr schedule warmup_steps: got ", schedule.warmup_steps, ", expected >= 0"));
  }
  switch (schedule.type) {
    case LrScheduleOptions::Type::kConstant:
      return absl::OkStatus();
    case LrScheduleOptions::Type::kStep:
      if (schedule.step_size <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("lr schedule step_size: got ", schedule.step_size, ", expected > 0 for step decay"));
      }
      if (!(schedule.gamma > 0) || !std::isfinite(schedule.gamma)) {
        return absl::InvalidArgumentError(absl::StrCat("lr schedule gamma: got ", schedule.gamma, ", expected > 0"));
      }
      return absl::OkStatus();
    case LrScheduleOptions::Type::kCosine:
      if (!(schedule.min_factor >= 0 && schedule.min_factor <= 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("lr schedule min_factor: got ", schedule.min_factor, ", expected [0, 1]"));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("lr schedule type: got ", static_cast<int>(schedule.type), ", unknown"));
}

float ScheduledLearningRate(float base_lr, const LrScheduleOptions& schedule, int64_t step, int64_t total_steps) {
  const int64_t warmup = schedule.warmup_steps;
  if (step < warmup) {
    return static_cast<float>(static_cast<double>(base_lr) * static_cast<double>(step + 1) /
                              static_cast<double>(warmup));
  }
  const int64_t s = step - warmup;
  switch (schedule.type) {
    case LrScheduleOptions::Type::kConstant:
      return base_lr;
    case LrScheduleOptions::Type::kStep: {
      const int64_t decays = s / schedule.step_size;
      return static_cast<float>(base_lr * std::pow(static_cast<double>(schedule.gamma), static_cast<double>(decays)));
    }
    case LrScheduleOptions::Type::kCosine: {
      const int64_t span = total_steps - warmup;
      const double p = span <= 0 ? 1.0 : std::min(1.0, static_cast<double>(s) / span);
      const double min_factor = schedule.min_factor;
      const double factor = min_factor + (1.0 - min_factor) * 0.5 * (1.0 + std::cos(kPi * p));
      return static_cast<float>(base_lr * factor);
    }
  }
  LOG(FATAL) << "unknown lr schedule type " << static_cast<int>(schedule.type);
  return base_lr;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerOptions& options, int64_t num_elements) {
  using Type = OptimizerOptions::Type;
  if (num_elements < 0) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer size: got ", num_elements, " elements, expected >= 0"));
  }
  switch (options.type) {
    case Type::kSgd:
    case Type::kMomentum:
    case Type::kNesterov:
    case Type::kAdam:
    case Type::kAdagrad:
    case Type::kAdamW:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer type: got ", static_cast<int>(options.type), ", unknown"));
  }
  RETURN_IF_ERROR(CheckPositive("lr", options.lr));
  if (!(options.weight_decay >= 0) || !std::isfinite(options.weight_decay)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer weight_decay: got ", options.weight_decay, ", expected a finite value >= 0"));
  }
  if (options.type == Type::kMomentum || options.type == Type::kNesterov) {
    RETURN_IF_ERROR(CheckRange("momentum", options.momentum, 0.0f, 1.0f, false));
  }
  const bool adam = options.type == Type::kAdam || options.type == Type::kAdamW;
  if (adam) {
    RETURN_IF_ERROR(CheckRange("beta1", options.beta1, 0.0f, 1.0f, false));
    RETURN_IF_ERROR(CheckRange("beta2", options.beta2, 0.0f, 1.0f, false));
  }
  if (adam || options.type == Type::kAdagrad) {
    RETURN_IF_ERROR(CheckPositive("epsilon", options.epsilon));
  }
  RETURN_IF_ERROR(ValidateLrSchedule(options.schedule));
  return std::unique_ptr<Optimizer>(new Optimizer(options, num_elements));
}

Optimizer::Optimizer(const OptimizerOptions& options, int64_t num_elements)
    : options_(options),
      num_elements_(num_elements),
      state_(NumStateVectors(options.type), std::vector<float>(num_elements, 0.0f)) {}

void Optimizer::Apply(int64_t step, float lr, const float* grad, float* weights) {
  const OptimizerOptions& o = options_;
  const int64_t n = num_elements_;
  switch (o.type) {
    case OptimizerOptions::Type::kSgd:
      SgdLoop(n, lr, o.weight_decay, grad, weights);
      return;
    case OptimizerOptions::Type::kMomentum:
      MomentumLoop(n, lr, o.weight_decay, o.momentum, grad, weights, state_[0].data());
      return;
    case OptimizerOptions::Type::kNesterov:
      NesterovLoop(n, lr, o.weight_decay, o.momentum, grad, weights, state_[0].data());
      return;
    case OptimizerOptions::Type::kAdam:
    case OptimizerOptions::Type::kAdamW: {
      const double t = static_cast<double>(step + 1);
      const double bc1 = 1.0 - std::pow(static_cast<double>(o.beta1), t);
      const double bc2 = 1.0 - std::pow(static_cast<double>(o.beta2), t);
      const float step_size = static_cast<float>(lr / bc1);
      const float inv_bc2 = static_cast<float>(1.0 / bc2);
      if (o.type == OptimizerOptions::Type::kAdam) {
        AdamLoop(n, step_size, inv_bc2, o.weight_decay, o.beta1, o.beta2, o.epsilon, grad, weights, state_[0].data(),
                 state_[1].data());
      } else {
        AdamWLoop(n, step_size, inv_bc2, 1.0f - lr * o.weight_decay, o.beta1, o.beta2, o.epsilon, grad, weights,
                  state_[0].data(), state_[1].data());
      }
      return;
    }
    case OptimizerOptions::Type::kAdagrad:
      AdagradLoop(n, lr, o.weight_decay, o.epsilon, grad, weights, state_[0].data());
      return;
  }
  LOG(FATAL) << "unknown optimizer type " << static_cast<int>(o.type);
}

}  // namespace model
}  // namespace pstrain
