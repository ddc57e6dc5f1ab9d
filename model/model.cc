#include "model/model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/cnn.h"
#include "model/mlp.h"

namespace pstrain {
namespace model {
namespace {

std::vector<int> MlpLayerSizes(const ModelInput& input) {
  std::vector<int> sizes = {input.channels * input.height * input.width};
  sizes.insert(sizes.end(), input.hidden_sizes.begin(), input.hidden_sizes.end());
  sizes.push_back(input.classes);
  return sizes;
}

// The default CNN (model/cnn.h) over the input's images and classes.
CnnShape CnnShapeOf(const ModelInput& input) {
  CnnShape shape;
  shape.input_channels = input.channels;
  shape.input_height = input.height;
  shape.input_width = input.width;
  shape.classes = input.classes;
  return shape;
}

absl::Status UnknownModel(const std::string& name) {
  return absl::InvalidArgumentError(
      absl::StrCat("model '", name, "': expected '", kMlpModel, "' or '", kCnnModel, "'"));
}

}  // namespace

ModelInput ImageModelInput(int height, int width, int classes, std::vector<int> hidden_sizes) {
  ModelInput input;
  input.height = height;
  input.width = width;
  input.classes = classes;
  input.hidden_sizes = std::move(hidden_sizes);
  return input;
}

absl::StatusOr<std::vector<ParamSpec>> ModelParamSpecs(const std::string& name, const ModelInput& input) {
  if (name == kMlpModel) {
    const std::vector<int> sizes = MlpLayerSizes(input);
    RETURN_IF_ERROR(ValidateMlpLayerSizes(sizes));
    int64_t parameters = 0;
    // Each term is below 2^63 and the sum stops growing once past the bound: no overflow.
    for (size_t i = 0; i + 1 < sizes.size() && parameters <= kMaxParameters; ++i) {
      parameters += (int64_t{sizes[i]} + 1) * sizes[i + 1];
    }
    if (parameters > kMaxParameters) {
      return absl::InvalidArgumentError(absl::StrCat("model 'mlp' with layers [", absl::StrJoin(sizes, ", "), "] has ",
                                                     parameters, " parameters, expected at most ", kMaxParameters,
                                                     " (4 GiB of float32): make --hidden narrower"));
    }
    return MlpParamSpecs(sizes);
  }
  if (name == kCnnModel) {
    const CnnShape shape = CnnShapeOf(input);
    RETURN_IF_ERROR(ValidateCnnShape(shape));
    return CnnParamSpecs(shape);
  }
  return UnknownModel(name);
}

absl::StatusOr<std::unique_ptr<Model>> NewModel(const std::string& name, const ModelInput& input, Backend* backend) {
  if (name == kMlpModel) {
    ASSIGN_OR_RETURN(std::unique_ptr<Mlp> mlp, Mlp::Create(MlpLayerSizes(input), backend));
    return std::unique_ptr<Model>(std::move(mlp));
  }
  if (name == kCnnModel) {
    ASSIGN_OR_RETURN(std::unique_ptr<Cnn> cnn, Cnn::Create(CnnShapeOf(input), backend));
    return std::unique_ptr<Model>(std::move(cnn));
  }
  return UnknownModel(name);
}

}  // namespace model
}  // namespace pstrain
