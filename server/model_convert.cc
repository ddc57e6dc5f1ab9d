#include "server/model_convert.h"

#include "absl/strings/str_cat.h"

namespace pstrain::server {

absl::StatusOr<model::ParamSpec> ParamSpecFromProto(const TensorSpec& tensor) {
  model::ParamSpec spec;
  spec.name = tensor.name();
  spec.shape.assign(tensor.shape().begin(), tensor.shape().end());
  spec.num_elements = tensor.num_elements();
  spec.flat_offset = tensor.flat_offset();
  spec.fan_in = tensor.fan_in();
  spec.fan_out = tensor.fan_out();
  switch (tensor.init()) {
    case ZEROS:
      spec.init = model::InitKind::kZeros;
      break;
    case HE_UNIFORM:
      spec.init = model::InitKind::kHeUniform;
      break;
    case GLOROT_UNIFORM:
      spec.init = model::InitKind::kGlorotUniform;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.id(), " '", tensor.name(), "': init kind ",
                                                     static_cast<int>(tensor.init()),
                                                     " is not one of ZEROS, HE_UNIFORM, GLOROT_UNIFORM"));
  }
  int64_t product = 1;
  for (int64_t d : spec.shape) product *= d;
  if (spec.shape.empty() || product != spec.num_elements || spec.num_elements <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.id(), " '", tensor.name(), "': num_elements is ",
                                                   spec.num_elements, ", expected the product of its shape (", product,
                                                   ") and > 0"));
  }
  if ((spec.init == model::InitKind::kHeUniform && spec.fan_in <= 0) ||
      (spec.init == model::InitKind::kGlorotUniform &&
       (spec.fan_in < 0 || spec.fan_out < 0 || spec.fan_in + spec.fan_out <= 0))) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.id(), " '", tensor.name(), "': fan_in ",
                                                   spec.fan_in, " and fan_out ", spec.fan_out,
                                                   " do not define its init bound"));
  }
  return spec;
}

model::LrScheduleOptions LrScheduleFromProto(const LrSchedule& schedule) {
  model::LrScheduleOptions out;
  switch (schedule.type()) {
    case LrSchedule::STEP:
      out.type = model::LrScheduleOptions::Type::kStep;
      break;
    case LrSchedule::COSINE:
      out.type = model::LrScheduleOptions::Type::kCosine;
      break;
    default:
      out.type = model::LrScheduleOptions::Type::kConstant;
      break;
  }
  out.warmup_steps = schedule.warmup_steps();
  out.step_size = schedule.step_size();
  if (schedule.has_gamma()) out.gamma = schedule.gamma();
  out.min_factor = schedule.min_factor();
  return out;
}

model::OptimizerOptions OptimizerOptionsFromProto(const OptimizerSpec& spec) {
  using Type = model::OptimizerOptions::Type;
  model::OptimizerOptions out;
  switch (spec.type()) {
    case OptimizerSpec::SGD:
      out.type = Type::kSgd;
      break;
    case OptimizerSpec::MOMENTUM:
      out.type = Type::kMomentum;
      break;
    case OptimizerSpec::NESTEROV:
      out.type = Type::kNesterov;
      break;
    case OptimizerSpec::ADAGRAD:
      out.type = Type::kAdagrad;
      break;
    case OptimizerSpec::ADAMW:
      out.type = Type::kAdamW;
      break;
    default:
      out.type = Type::kAdam;
      break;  // TYPE_UNSPECIFIED means ADAM.
  }
  if (spec.has_lr()) out.lr = spec.lr();
  if (spec.has_momentum()) out.momentum = spec.momentum();
  if (spec.has_beta1()) out.beta1 = spec.beta1();
  if (spec.has_beta2()) out.beta2 = spec.beta2();
  if (spec.has_epsilon()) out.epsilon = spec.epsilon();
  out.weight_decay = spec.weight_decay();
  out.schedule = LrScheduleFromProto(spec.schedule());
  return out;
}

}  // namespace pstrain::server
