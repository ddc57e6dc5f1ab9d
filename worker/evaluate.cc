#include "worker/evaluate.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "data/idx_reader.h"
#include "model/cpu_backend.h"
#include "model/model_file.h"

namespace pstrain::worker {
namespace {

// "'fc1.weight' {784, 256}", for messages.
std::string Describe(const model::ParamSpec& spec) {
  return absl::StrCat("'", spec.name, "' {", absl::StrJoin(spec.shape, ", "), "}");
}

// A weight's shape gives a layer's in and out sizes when it is 2-D and both fit an int.
bool IsWeightShape(const std::vector<int64_t>& shape) {
  return shape.size() == 2 && std::all_of(shape.begin(), shape.end(),
                                          [](int64_t d) { return d > 0 && d <= std::numeric_limits<int>::max(); });
}

// Every tensor of a model file, for the message that says it is not a built-in model.
std::string Contents(const std::vector<model::ParamSpec>& params) {
  std::vector<std::string> tensors;
  for (const model::ParamSpec& p : params) tensors.push_back(Describe(p));
  return absl::StrCat(params.size(), " tensors, ", model::TotalElements(params),
                      " parameters: ", absl::StrJoin(tensors, ", "));
}

}  // namespace

absl::StatusOr<std::vector<int>> LayerSizesFromParams(const std::vector<model::ParamSpec>& params) {
  if (params.empty()) {
    return absl::InvalidArgumentError("model has no tensors, expected fc1.weight, fc1.bias, ...");
  }
  // Read the sizes off the weights (even indices) as far as they look like weights; the full
  // comparison with MlpParamSpecs below then finds the first tensor that does not fit.
  std::vector<int> sizes;
  for (size_t i = 0; i < params.size() && IsWeightShape(params[i].shape); i += 2) {
    if (sizes.empty()) sizes.push_back(static_cast<int>(params[i].shape[0]));
    sizes.push_back(static_cast<int>(params[i].shape[1]));
  }
  if (sizes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model tensor 0: got ", Describe(params[0]), ", expected 'fc1.weight' {inputs, outputs}"));
  }
  const std::vector<model::ParamSpec> expected = model::MlpParamSpecs(sizes);
  for (size_t i = 0; i < std::max(params.size(), expected.size()); ++i) {
    if (i >= params.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model has ", params.size(), " tensors, expected tensor ", i, " to be ", Describe(expected[i])));
    }
    if (i >= expected.size()) {
      return absl::InvalidArgumentError(absl::StrCat("model tensor ", i, ": got ", Describe(params[i]),
                                                     ", expected either no more tensors or 'fc", i / 2 + 1,
                                                     ".weight' {", sizes.back(), ", outputs}"));
    }
    if (params[i].name != expected[i].name || params[i].shape != expected[i].shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("model tensor ", i, ": got ", Describe(params[i]), ", expected ", Describe(expected[i])));
    }
  }
  if (sizes.back() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("model has ", sizes.back(), " output classes, expected at least 2"));
  }
  return sizes;
}

absl::StatusOr<model::CnnShape> CnnShapeFromParams(const std::vector<model::ParamSpec>& params, int height, int width) {
  // conv1.weight {c1, in_c*25}, conv2.weight {c2, c1*25}, fc1.weight {flat, hidden}, fc2.weight
  // {hidden, classes}: the sizes are read off those four, the rest is checked against the layout.
  if (params.size() != 8) {
    return absl::InvalidArgumentError(absl::StrCat("cnn model has ", params.size(), " tensors, expected 8"));
  }
  for (int i : {0, 2, 4, 6}) {
    if (!IsWeightShape(params[i].shape)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cnn model tensor ", i, ": got ", Describe(params[i]), ", expected a 2-D weight"));
    }
  }
  model::CnnShape shape;
  shape.input_height = height;
  shape.input_width = width;
  shape.conv1_channels = static_cast<int>(params[0].shape[0]);
  shape.input_channels = static_cast<int>(params[0].shape[1] / 25);
  shape.conv2_channels = static_cast<int>(params[2].shape[0]);
  shape.hidden = static_cast<int>(params[4].shape[1]);
  shape.classes = static_cast<int>(params[6].shape[1]);
  RETURN_IF_ERROR(model::ValidateCnnShape(shape));
  const std::vector<model::ParamSpec> expected = model::CnnParamSpecs(shape);
  for (size_t i = 0; i < expected.size(); ++i) {
    if (params[i].name != expected[i].name || params[i].shape != expected[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat("cnn model tensor ", i, ": got ", Describe(params[i]),
                                                     ", expected ", Describe(expected[i]), " for ",
                                                     shape.DebugString()));
    }
  }
  return shape;
}

absl::StatusOr<model::BatchStats> EvaluateModelFile(const std::string& model_path, const std::string& data_dir,
                                                    int64_t test_limit) {
  ASSIGN_OR_RETURN(model::ModelFile file, model::ReadModelFile(model_path));
  ASSIGN_OR_RETURN(data::Dataset test, data::LoadFashionMnist(data_dir, data::Split::kTest, test_limit));
  std::unique_ptr<model::Backend> backend = model::NewCpuBackend();
  std::unique_ptr<model::Model> net;
  if (!file.params.empty() && file.params[0].name == "conv1.weight") {
    absl::StatusOr<model::CnnShape> shape = CnnShapeFromParams(file.params, test.rows, test.cols);
    if (!shape.ok()) {
      return absl::Status(shape.status().code(), absl::StrCat(model_path, ": ", shape.status().message()));
    }
    ASSIGN_OR_RETURN(net, model::Cnn::Create(*shape, backend.get()));
  } else {
    absl::StatusOr<std::vector<int>> sizes = LayerSizesFromParams(file.params);
    if (!sizes.ok()) {
      // Any model can be in a model file (a PyTorch worker's, for one); say what this one holds.
      return absl::Status(
          sizes.status().code(),
          absl::StrCat(model_path, ": not the built-in MLP or CNN (", sizes.status().message(), "); it holds ",
                       Contents(file.params), ". A PyTorch model's file loads with pstrain.torch.load_state_dict"));
    }
    if (test.features() != sizes->front()) {
      return absl::InvalidArgumentError(absl::StrCat(model_path, ": the model takes ", sizes->front(),
                                                     " inputs, but the test images in ", data_dir, " are ", test.rows,
                                                     "x", test.cols, " = ", test.features(), " pixels"));
    }
    ASSIGN_OR_RETURN(net, model::Mlp::Create(*sizes, backend.get()));
  }
  if (test.num_samples > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(data_dir, ": ", test.num_samples, " test samples, expected at most ",
                                                   std::numeric_limits<int>::max()));
  }

  RETURN_IF_ERROR(net->SetParameters(file.values));
  model::BatchStats stats;
  absl::Status status =
      net->Evaluate(test.images.data(), test.labels.data(), static_cast<int>(test.num_samples), &stats);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("evaluating ", model_path, " on the test set in ", data_dir, ": ",
                                                    status.message()));
  }
  return stats;
}

}  // namespace pstrain::worker
