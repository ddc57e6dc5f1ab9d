#include "worker/evaluate.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "data/idx_reader.h"
#include "model/cpu_backend.h"
#include "model/mlp.h"
#include "model/model_file.h"

namespace pstrain::worker {
namespace {

using ::testing::HasSubstr;

// ---- LayerSizesFromParams ----

TEST(LayerSizesFromParamsTest, RecoversTheSizesOfEveryMlpLayout) {
  for (const std::vector<int>& sizes :
       std::vector<std::vector<int>>{{784, 256, 128, 10}, {784, 10}, {5, 7, 3}, {1, 1, 1, 2}}) {
    absl::StatusOr<std::vector<int>> got = LayerSizesFromParams(model::MlpParamSpecs(sizes));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, sizes);
  }
}

// The message of LayerSizesFromParams for the {784, 16, 10} layout changed by `mutate`.
template <typename Mutate>
std::string ErrorFor(Mutate mutate) {
  std::vector<model::ParamSpec> params = model::MlpParamSpecs({784, 16, 10});
  mutate(params);
  absl::StatusOr<std::vector<int>> got = LayerSizesFromParams(params);
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  return std::string(got.status().message());
}

TEST(LayerSizesFromParamsTest, NamesTheFirstTensorThatIsNotTheMlpLayout) {
  EXPECT_THAT(ErrorFor([](auto& p) { p.clear(); }), HasSubstr("no tensors"));
  EXPECT_THAT(ErrorFor([](auto& p) { p[2].name = "out.weight"; }),
              HasSubstr("model tensor 2: got 'out.weight' {16, 10}, expected 'fc2.weight' {16, 10}"));
  EXPECT_THAT(ErrorFor([](auto& p) { p[1].shape = {17}; }),
              HasSubstr("model tensor 1: got 'fc1.bias' {17}, expected 'fc1.bias' {16}"));
  // fc2 does not take what fc1 gives.
  EXPECT_THAT(ErrorFor([](auto& p) {
                p[2].shape = {32, 10};
              }),
              HasSubstr("model tensor 2: got 'fc2.weight' {32, 10}, expected 'fc2.weight' {16, 10}"));
  EXPECT_THAT(ErrorFor([](auto& p) { p.pop_back(); }),
              HasSubstr("model has 3 tensors, expected tensor 3 to be 'fc2.bias' {10}"));
  EXPECT_THAT(ErrorFor([](auto& p) {
                p.push_back({"extra", {4}, 4, 0});
              }),
              HasSubstr("model tensor 4: got 'extra' {4}, expected either no more tensors or 'fc3.weight'"));
  EXPECT_THAT(ErrorFor([](auto& p) { p[0].shape = {784 * 16}; }),
              HasSubstr("model tensor 0: got 'fc1.weight' {12544}, expected 'fc1.weight' {inputs, outputs}"));
  EXPECT_THAT(ErrorFor([](auto& p) { p[0].shape = {784, 0}; }), HasSubstr("model tensor 0"));
  EXPECT_THAT(ErrorFor([](auto& p) {
                p = model::MlpParamSpecs({784, 16, 1});
              }),
              HasSubstr("1 output classes, expected at least 2"));
}

// ---- EvaluateModelFile ----

constexpr int kSamples = 50;

void PutBigEndian32(std::ofstream& out, uint32_t v) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                         static_cast<char>(v)};
  out.write(bytes, 4);
}

// A fresh folder under the test temp dir holding a tiny uncompressed Fashion-MNIST-shaped test split:
// `n` random images of rows x cols and random labels in [0, 10).
std::string WriteTestSplit(const std::string& name, int n, int rows, int cols) {
  const std::string dir = ::testing::TempDir() + "evaluate_test_" + name;
  mkdir(dir.c_str(), 0755);
  std::mt19937 rng(11);
  std::ofstream images(dir + "/t10k-images-idx3-ubyte", std::ios::binary | std::ios::trunc);
  PutBigEndian32(images, data::kIdxImageMagic);
  PutBigEndian32(images, n);
  PutBigEndian32(images, rows);
  PutBigEndian32(images, cols);
  for (int i = 0; i < n * rows * cols; ++i) images.put(static_cast<char>(rng() % 256));
  std::ofstream labels(dir + "/t10k-labels-idx1-ubyte", std::ios::binary | std::ios::trunc);
  PutBigEndian32(labels, data::kIdxLabelMagic);
  PutBigEndian32(labels, n);
  for (int i = 0; i < n; ++i) labels.put(static_cast<char>(rng() % 10));
  return dir;
}

class EvaluateModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    data_dir_ = WriteTestSplit(name, kSamples, 28, 28);
    model_path_ = ::testing::TempDir() + "evaluate_test_" + name + ".model";
    backend_ = model::NewCpuBackend();
    auto mlp = model::Mlp::Create({784, 16, 10}, backend_.get());
    ASSERT_TRUE(mlp.ok()) << mlp.status();
    mlp_ = std::move(*mlp);
    ASSERT_TRUE(mlp_->InitializeParameters(5).ok());
    std::vector<float> values(mlp_->num_parameters());
    ASSERT_TRUE(mlp_->GetParameters(absl::MakeSpan(values)).ok());
    ASSERT_TRUE(model::WriteModelFile(model_path_, mlp_->params(), values).ok());
  }
  void TearDown() override { std::remove(model_path_.c_str()); }

  // Mlp::Evaluate of the in-memory model on the first `limit` samples of the test split.
  model::BatchStats EvaluateDirectly(int64_t limit) {
    absl::StatusOr<data::Dataset> test = data::LoadFashionMnist(data_dir_, data::Split::kTest, limit);
    EXPECT_TRUE(test.ok()) << test.status();
    model::BatchStats stats;
    if (!test.ok()) return stats;
    EXPECT_TRUE(
        mlp_->Evaluate(test->images.data(), test->labels.data(), static_cast<int>(test->num_samples), &stats).ok());
    return stats;
  }

  std::string data_dir_, model_path_;
  std::unique_ptr<model::Backend> backend_;
  std::unique_ptr<model::Mlp> mlp_;
};

TEST_F(EvaluateModelFileTest, RoundTripMatchesMlpEvaluateExactly) {
  for (int64_t limit : {int64_t{0}, int64_t{7}}) {
    absl::StatusOr<model::BatchStats> got = EvaluateModelFile(model_path_, data_dir_, limit);
    ASSERT_TRUE(got.ok()) << got.status();
    const model::BatchStats want = EvaluateDirectly(limit);
    EXPECT_EQ(got->samples, limit > 0 ? limit : kSamples);
    EXPECT_EQ(got->samples, want.samples);
    EXPECT_EQ(got->correct, want.correct);
    EXPECT_EQ(got->loss_sum, want.loss_sum);  // Bitwise: the same weights through the same code.
    EXPECT_GT(got->loss_sum, 0.0);
  }
}

TEST_F(EvaluateModelFileTest, CorruptModelFileFailsNamingTheFile) {
  std::string bytes;
  {
    std::ifstream in(model_path_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() / 2] ^= 0x40;  // One flipped bit in the weights.
  {
    std::ofstream out(model_path_, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  absl::StatusOr<model::BatchStats> got = EvaluateModelFile(model_path_, data_dir_, 0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(model_path_));
}

TEST_F(EvaluateModelFileTest, MissingModelOrDataFailsNamingTheFile) {
  absl::StatusOr<model::BatchStats> got = EvaluateModelFile(model_path_ + ".absent", data_dir_, 0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(model_path_ + ".absent"));

  got = EvaluateModelFile(model_path_, data_dir_ + "-absent", 0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(data_dir_ + "-absent/t10k-images-idx3-ubyte"));
}

TEST_F(EvaluateModelFileTest, InputWidthMustMatchTheImages) {
  const std::string dir = WriteTestSplit("narrow", 3, 10, 10);
  absl::StatusOr<model::BatchStats> got = EvaluateModelFile(model_path_, dir, 0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(model_path_ + ": the model takes 784 inputs"));
  EXPECT_THAT(got.status().message(), HasSubstr("10x10 = 100 pixels"));
}

TEST_F(EvaluateModelFileTest, TensorsThatAreNotAnMlpFailNamingFileAndTensor) {
  std::vector<model::ParamSpec> params = model::MlpParamSpecs({784, 16, 10});
  params[3].name = "head.bias";
  std::vector<float> values(model::TotalElements(params), 0.5f);
  ASSERT_TRUE(model::WriteModelFile(model_path_, params, values).ok());
  absl::StatusOr<model::BatchStats> got = EvaluateModelFile(model_path_, data_dir_, 0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(got.status().message(),
              HasSubstr(model_path_ + ": not the built-in MLP or CNN (model tensor 3: got 'head.bias' {10}, "
                                      "expected 'fc2.bias' {10})"));
  // What the file does hold, for a model of another kind (a PyTorch worker's).
  EXPECT_THAT(got.status().message(), HasSubstr("it holds 4 tensors, 12730 parameters: 'fc1.weight' {784, 16}"));
  EXPECT_THAT(got.status().message(), HasSubstr("pstrain.torch.load_state_dict"));
}

}  // namespace
}  // namespace pstrain::worker
