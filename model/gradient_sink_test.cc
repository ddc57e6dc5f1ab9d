// ComputeGradient with a GradientSink: every layer is reported once, last layer first, its
// gradient is already in the host buffer when reported, and the result equals the sink-less call.
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/cpu_backend.h"
#include "model/model.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

// Records the reports and a copy of the gradient buffer at each report.
class RecordingSink : public GradientSink {
 public:
  explicit RecordingSink(const std::vector<float>* grad) : grad_(grad) {}
  void GradientReady(int first, int end) override {
    reports.emplace_back(first, end);
    seen.push_back(*grad_);
  }
  std::vector<std::pair<int, int>> reports;
  std::vector<std::vector<float>> seen;

 private:
  const std::vector<float>* grad_;
};

class GradientSinkTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GradientSinkTest, LayersAreReportedLastFirstWithTheirFinalGradient) {
  ModelInput input;
  input.height = 8;
  input.width = 8;
  input.classes = 3;
  input.hidden_sizes = {6, 5};
  std::unique_ptr<Backend> backend = NewCpuBackend();
  absl::StatusOr<std::unique_ptr<Model>> model = NewModel(GetParam(), input, backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->InitializeParameters(3).ok());
  const int n = 4;
  const std::vector<float> x = testutil::RandomVector(n * (*model)->input_size(), 11);
  const std::vector<int32_t> labels = {0, 2, 1, 2};

  std::vector<float> plain((*model)->num_parameters());
  ASSERT_TRUE((*model)->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(plain), nullptr).ok());
  std::vector<float> streamed((*model)->num_parameters(), -7.0f);
  RecordingSink sink(&streamed);
  ASSERT_TRUE((*model)->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(streamed), nullptr, &sink).ok());
  EXPECT_EQ(streamed, plain);

  const std::vector<ParamSpec>& params = (*model)->params();
  const int tensors = static_cast<int>(params.size());
  ASSERT_EQ(static_cast<int>(sink.reports.size()), tensors / 2);
  int expected_end = tensors;
  for (size_t r = 0; r < sink.reports.size(); ++r) {
    const auto [first, end] = sink.reports[r];
    EXPECT_EQ(end, expected_end) << "report " << r << ": not last layer first or not contiguous";
    EXPECT_LT(first, end);
    expected_end = first;
    // The reported tensors hold their final gradient at the time of the report.
    for (int t = first; t < end; ++t) {
      for (int64_t i = 0; i < params[t].num_elements; ++i) {
        const int64_t at = params[t].flat_offset + i;
        ASSERT_EQ(sink.seen[r][at], plain[at]) << params[t].name << " element " << i;
      }
    }
  }
  EXPECT_EQ(expected_end, 0);
}

TEST_P(GradientSinkTest, EmptyBatchReportsEveryTensorAtOnce) {
  ModelInput input;
  input.height = 8;
  input.width = 8;
  input.classes = 3;
  input.hidden_sizes = {6};
  std::unique_ptr<Backend> backend = NewCpuBackend();
  absl::StatusOr<std::unique_ptr<Model>> model = NewModel(GetParam(), input, backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> grad((*model)->num_parameters(), 1.0f);
  RecordingSink sink(&grad);
  ASSERT_TRUE((*model)->ComputeGradient(nullptr, nullptr, 0, absl::MakeSpan(grad), nullptr, &sink).ok());
  ASSERT_EQ(sink.reports.size(), 1u);
  EXPECT_EQ(sink.reports[0], std::make_pair(0, static_cast<int>((*model)->params().size())));
  EXPECT_EQ(grad, std::vector<float>(grad.size(), 0.0f));
}

INSTANTIATE_TEST_SUITE_P(Models, GradientSinkTest, ::testing::Values(kMlpModel, kCnnModel));

}  // namespace
}  // namespace model
}  // namespace pstrain
