#include "transport/grpc_status.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(GrpcStatusTest, EveryCanonicalCodeRoundTrips) {
  for (int c = 0; c <= 16; ++c) {
    auto code = static_cast<absl::StatusCode>(c);
    absl::Status in(code, c == 0 ? "" : "tensor 'fc1.weight' chunk 3: got 1024 floats");
    grpc::Status wire = ToGrpcStatus(in);
    EXPECT_EQ(static_cast<int>(wire.error_code()), c);
    absl::Status out = FromGrpcStatus(wire);
    EXPECT_EQ(out.code(), code);
    EXPECT_EQ(out.message(), in.message());
  }
}

TEST(GrpcStatusTest, ContextIsPrefixedToTheMessage) {
  grpc::Status wire(grpc::StatusCode::UNAVAILABLE, "connection refused");
  absl::Status out = FromGrpcStatus(wire, "pull from server 1 at 127.0.0.1:4001");
  EXPECT_EQ(out.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(out.message(), "pull from server 1 at 127.0.0.1:4001: connection refused");
}

TEST(GrpcStatusTest, OkStaysOkWithContext) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "anything").ok());
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace pstrain
