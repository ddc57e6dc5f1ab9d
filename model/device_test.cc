// --device parsing, and what a CUDA device spelling gives on a machine (or build) without one.
#include "model/device.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/cuda/cuda_backend.h"

namespace pstrain {
namespace model {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, CpuGivesTheCpuBackend) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = NewBackendForDevice("cpu", false);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
  // TF32 means nothing to the CPU; asking for it is not an error.
  ASSERT_TRUE(NewBackendForDevice("cpu", true).ok());
}

TEST(DeviceTest, OtherSpellingsAreInvalidArguments) {
  for (const char* device :
       {"gpu", "cuda:x", "cuda:-1", "cuda:", "cuda:+1", "cuda: 1", "CPU", "cuda0", "", "cpu:0", "cuda:99999"}) {
    const absl::Status status = NewBackendForDevice(device, false).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << device << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr("expected cpu, cuda or cuda:N")) << device;
  }
  EXPECT_EQ(NewBackendForDevice("gpu", false).status().message(), "--device: got 'gpu', expected cpu, cuda or cuda:N");
}

TEST(DeviceTest, MissingCudaDeviceIsAFailedPreconditionThatSaysWhy) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  for (const char* device : {"cuda", "cuda:0", "cuda:3"}) {
    const absl::Status status = NewBackendForDevice(device, false).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << device << ": " << status;
    if (CudaBuilt()) {
      EXPECT_THAT(status.message(), HasSubstr("this machine has 0 CUDA device(s)")) << device;
    } else {
      EXPECT_THAT(status.message(), HasSubstr("this build has no CUDA backend")) << device;
    }
  }
}

TEST(DeviceTest, DeviceIndexPastTheLastDeviceSaysHowManyThereAre) {
  if (!CudaBuilt()) GTEST_SKIP() << "this build has no CUDA backend";
  const int count = CudaDeviceCount();
  const std::string device = "cuda:" + std::to_string(count);
  const absl::Status status = NewBackendForDevice(device, false).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr(device + ": this machine has " + std::to_string(count) + " CUDA device(s)"));
}

TEST(DeviceTest, CudaCountIsZeroWithoutCudaInTheBuild) {
  if (CudaBuilt()) GTEST_SKIP() << "this build has CUDA";
  EXPECT_EQ(CudaDeviceCount(), 0);
}

}  // namespace
}  // namespace model
}  // namespace pstrain
