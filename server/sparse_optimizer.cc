#include "server/sparse_optimizer.h"

#include <cmath>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace pstrain::server {
namespace {

using Type = SparseOptimizerOptions::Type;

absl::Status CheckAtLeastZero(const char* field, float value) {
  if (value >= 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("sparse optimizer ", field, ": got ", value, ", expected a finite value >= 0"));
}

absl::Status CheckPositive(const char* field, float value) {
  if (value > 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("sparse optimizer ", field, ": got ", value, ", expected a finite value > 0"));
}

absl::Status CheckBeta(const char* field, float value) {
  if (value >= 0 && value < 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("sparse optimizer ", field, ": got ", value, ", expected [0, 1)"));
}

// The loops are branch-free per element (FTRL's threshold compiles to a select) so -O3
// vectorizes them; __restrict says grad, weights and state never alias.

void AdagradRow(int dim, float lr, float eps, const float* __restrict g, float* __restrict w,
                float* __restrict sum_sq) {
  for (int i = 0; i < dim; ++i) {
    sum_sq[i] += g[i] * g[i];
    w[i] -= lr * g[i] / (std::sqrt(sum_sq[i]) + eps);
  }
}

void SgdRow(int dim, float lr, const float* __restrict g, float* __restrict w) {
  for (int i = 0; i < dim; ++i) w[i] -= lr * g[i];
}

// step_size = lr / (1 - b1^t) and inv_bc2 = 1 / (1 - b2^t) fold the bias corrections, as the
// dense Adam does (model/optimizer.cc).
void AdamRow(int dim, float step_size, float inv_bc2, float b1, float b2, float eps, const float* __restrict g,
             float* __restrict w, float* __restrict m, float* __restrict v) {
  for (int i = 0; i < dim; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= step_size * m[i] / (std::sqrt(v[i] * inv_bc2) + eps);
  }
}

void FtrlRow(int dim, float alpha, float beta, float l1, float l2, const float* __restrict g, float* __restrict w,
             float* __restrict z, float* __restrict n) {
  const float inv_alpha = 1.0f / alpha;
  for (int i = 0; i < dim; ++i) {
    const float n_new = n[i] + g[i] * g[i];
    const float sigma = (std::sqrt(n_new) - std::sqrt(n[i])) * inv_alpha;
    z[i] += g[i] - sigma * w[i];
    n[i] = n_new;
    const float shrunk = z[i] - std::copysign(l1, z[i]);
    const float weight = -shrunk / ((beta + std::sqrt(n_new)) * inv_alpha + l2);
    w[i] = std::fabs(z[i]) <= l1 ? 0.0f : weight;
  }
}

}  // namespace

absl::Status ValidateSparseOptimizer(const SparseOptimizerOptions& options) {
  switch (options.type) {
    case Type::kAdagrad:
      if (auto s = CheckAtLeastZero("initial_accumulator", options.initial_accumulator); !s.ok()) {
        return s;
      }
      return CheckPositive("epsilon", options.epsilon);
    case Type::kSgd:
      return absl::OkStatus();
    case Type::kLazyAdam:
      if (auto s = CheckBeta("beta1", options.beta1); !s.ok()) return s;
      if (auto s = CheckBeta("beta2", options.beta2); !s.ok()) return s;
      return CheckPositive("epsilon", options.epsilon);
    case Type::kFtrl:
      if (auto s = CheckAtLeastZero("initial_accumulator", options.initial_accumulator); !s.ok()) {
        return s;
      }
      if (auto s = CheckAtLeastZero("ftrl_beta", options.ftrl_beta); !s.ok()) return s;
      if (auto s = CheckAtLeastZero("l1", options.l1); !s.ok()) return s;
      return CheckAtLeastZero("l2", options.l2);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("sparse optimizer type: got ", static_cast<int>(options.type), ", unknown"));
}

const char* SparseOptimizerName(Type type) {
  switch (type) {
    case Type::kAdagrad:
      return "adagrad";
    case Type::kSgd:
      return "sgd";
    case Type::kLazyAdam:
      return "lazy_adam";
    case Type::kFtrl:
      return "ftrl";
  }
  return "unknown";
}

int StateFloatsPerElement(Type type) {
  switch (type) {
    case Type::kAdagrad:
      return 1;
    case Type::kSgd:
      return 0;
    case Type::kLazyAdam:
    case Type::kFtrl:
      return 2;
  }
  LOG(FATAL) << "unknown sparse optimizer type " << static_cast<int>(type);
  return 0;
}

bool HasRowStepCount(Type type) { return type == Type::kLazyAdam; }

void InitRowState(const SparseOptimizerOptions& options, int dim, float* state, uint32_t* step) {
  switch (options.type) {
    case Type::kAdagrad:
      for (int i = 0; i < dim; ++i) state[i] = options.initial_accumulator;
      return;
    case Type::kSgd:
      return;
    case Type::kLazyAdam:
      for (int i = 0; i < 2 * dim; ++i) state[i] = 0.0f;
      *step = 0;
      return;
    case Type::kFtrl:
      for (int i = 0; i < dim; ++i) state[i] = 0.0f;
      for (int i = 0; i < dim; ++i) state[dim + i] = options.initial_accumulator;
      return;
  }
  LOG(FATAL) << "unknown sparse optimizer type " << static_cast<int>(options.type);
}

void ApplyRowUpdate(const SparseOptimizerOptions& options, int dim, float lr, const float* grad, float* w, float* state,
                    uint32_t* step) {
  switch (options.type) {
    case Type::kAdagrad:
      AdagradRow(dim, lr, options.epsilon, grad, w, state);
      return;
    case Type::kSgd:
      SgdRow(dim, lr, grad, w);
      return;
    case Type::kLazyAdam: {
      const uint32_t t = ++*step;
      const double bc1 = 1.0 - std::pow(static_cast<double>(options.beta1), t);
      const double bc2 = 1.0 - std::pow(static_cast<double>(options.beta2), t);
      AdamRow(dim, static_cast<float>(lr / bc1), static_cast<float>(1.0 / bc2), options.beta1, options.beta2,
              options.epsilon, grad, w, state, state + dim);
      return;
    }
    case Type::kFtrl:
      FtrlRow(dim, lr, options.ftrl_beta, options.l1, options.l2, grad, w, state, state + dim);
      return;
  }
  LOG(FATAL) << "unknown sparse optimizer type " << static_cast<int>(options.type);
}

}  // namespace pstrain::server
