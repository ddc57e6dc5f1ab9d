// The ShardTransfer service over a real gRPC channel on loopback: a server answers its part of a
// cut it holds, page by page, and the pages decode to exactly CutPartFor's part; bad requests and
// callers without a server's session are refused with what is wrong.
#include "server/shard_transfer_service.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/checkpoint_files.h"
#include "common/session_credential.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cut_part.h"
#include "server/reshard_test_util.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;
using namespace reshard_test;  // NOLINT: the shared helpers of the re-cut tests

class ShardTransferServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/shard_transfer";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    cut_ = CutOf(MapOf(2), 2);
    for (const ShardCheckpoint& ckpt : cut_)
      ASSERT_TRUE(WriteCheckpoint(CheckpointPath(dir_, ckpt.rank, kStep), ckpt).ok());
    three_ = MapOf(3);
    three_.set_version(2);
    three_.set_num_servers(3);
    // Pages of 100 bytes, so a part takes many calls.
    service_ = std::make_unique<ShardTransferService>(100);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = ShardTransfer::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  absl::StatusOr<ShardCheckpoint> Fetch(int64_t step, int from, int64_t version, int to,
                                        const std::string& session = "") {
    return FetchCutPart(stub_.get(), session, absl::Seconds(10), step, from, version, to);
  }

  std::string dir_;
  std::vector<ShardCheckpoint> cut_;
  ShardMap three_;
  std::unique_ptr<ShardTransferService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ShardTransfer::Stub> stub_;
};

TEST_F(ShardTransferServiceTest, AServerAnswersItsPartOfACutPageByPage) {
  // Before the server joined its job, and before it knows the new map: UNAVAILABLE, to try again.
  EXPECT_TRUE(absl::IsUnavailable(Fetch(kStep, 1, 2, 2).status()));
  service_->Start(1, dir_, nullptr);  // server 1 of the old map
  absl::Status early = Fetch(kStep, 1, 2, 2).status();
  EXPECT_TRUE(absl::IsUnavailable(early)) << early;
  EXPECT_THAT(early.message(), HasSubstr("server 1 does not know shard map version 2 yet"));

  service_->SetMap(three_);
  size_t largest = 0;
  for (int to = 0; to < 3; ++to) {
    absl::StatusOr<ShardCheckpoint> got = Fetch(kStep, 1, 2, to);
    ASSERT_TRUE(got.ok()) << got.status();
    absl::StatusOr<ShardCheckpoint> want = CutPartFor(cut_[1], three_, 3, to);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(*EncodeCheckpoint(*got), *EncodeCheckpoint(*want)) << "destination " << to;
    largest = std::max(largest, EncodeCheckpoint(*want)->size());
  }
  EXPECT_GT(largest, 1000u) << "a part of many pages";
  // Asked again after its last page: encoded again, the same bytes.
  EXPECT_EQ(*EncodeCheckpoint(*Fetch(kStep, 1, 2, 0)), *EncodeCheckpoint(*CutPartFor(cut_[1], three_, 3, 0)));
}

TEST_F(ShardTransferServiceTest, BadRequestsAreRefusedNamingWhatIsWrong) {
  service_->Start(1, dir_, nullptr);
  service_->SetMap(three_);
  absl::Status s = Fetch(kStep, 0, 2, 1).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("the request asks for server 0's, expected 1"));
  s = Fetch(kStep, 1, 2, 3).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("expected a destination in [0, 3)"));
  s = Fetch(kStep + 1, 1, 2, 1).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("server 1's part of its checkpoint of step 41"));
  s = Fetch(kStep, 1, 7, 1).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

TEST_F(ShardTransferServiceTest, OnlyAServersSessionMayFetch) {
  service_->SetMap(three_);
  absl::StatusOr<std::unique_ptr<SessionSigner>> signer = SessionSigner::Generate();
  ASSERT_TRUE(signer.ok()) << signer.status();
  absl::StatusOr<std::unique_ptr<SessionVerifier>> verifier = SessionVerifier::Create((*signer)->public_key());
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  service_->Start(1, dir_, *std::move(verifier));

  absl::Status none = Fetch(kStep, 1, 2, 0).status();
  EXPECT_TRUE(absl::IsUnauthenticated(none)) << none;
  absl::Status worker = Fetch(kStep, 1, 2, 0, (*signer)->Sign(SessionClaims{WORKER, 0, "w"})).status();
  EXPECT_TRUE(absl::IsPermissionDenied(worker)) << worker;
  EXPECT_THAT(worker.message(), HasSubstr("worker 0 may not fetch a part of a cut; only servers do"));
  absl::StatusOr<std::unique_ptr<SessionSigner>> other = SessionSigner::Generate();
  absl::Status forged = Fetch(kStep, 1, 2, 0, (*other)->Sign(SessionClaims{SERVER, 2, "s"})).status();
  EXPECT_TRUE(absl::IsUnauthenticated(forged)) << forged;
  EXPECT_TRUE(Fetch(kStep, 1, 2, 0, (*signer)->Sign(SessionClaims{SERVER, 2, "s"})).ok());
}

}  // namespace
}  // namespace pstrain::server
