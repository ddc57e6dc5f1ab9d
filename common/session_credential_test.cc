#include "common/session_credential.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<SessionSigner> NewSigner() { return *SessionSigner::Generate(); }

std::unique_ptr<SessionVerifier> VerifierOf(const SessionSigner& signer) {
  return *SessionVerifier::Create(signer.public_key());
}

TEST(SessionCredentialTest, VerifiedCredentialGivesTheSignedClaims) {
  auto signer = NewSigner();
  const SessionClaims claims{WORKER, 3, "host/123/abc"};
  absl::StatusOr<SessionClaims> got = VerifierOf(*signer)->Verify(signer->Sign(claims));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, claims);
  // Twice: the second answer comes from the remembered credentials and must be the same.
  auto verifier = VerifierOf(*signer);
  ASSERT_TRUE(verifier->Verify(signer->Sign(claims)).ok());
  EXPECT_EQ(*verifier->Verify(signer->Sign(claims)), claims);
}

TEST(SessionCredentialTest, InstanceIdWithNewlinesAndDotsSurvives) {
  auto signer = NewSigner();
  const SessionClaims claims{SERVER, 0, "a.b\nc.d"};
  EXPECT_EQ(*VerifierOf(*signer)->Verify(signer->Sign(claims)), claims);
}

TEST(SessionCredentialTest, RestoredKeyHonoursEarlierCredentials) {
  auto signer = NewSigner();
  const std::string credential = signer->Sign({WORKER, 1, "x"});
  absl::StatusOr<std::unique_ptr<SessionSigner>> restored = SessionSigner::FromPrivateKey(signer->private_key());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->public_key(), signer->public_key());
  EXPECT_EQ((*restored)->Sign({WORKER, 1, "x"}), credential);
  EXPECT_TRUE(VerifierOf(**restored)->Verify(credential).ok());
}

TEST(SessionCredentialTest, AnotherSchedulersCredentialIsRefused) {
  auto ours = NewSigner();
  auto theirs = NewSigner();
  absl::Status status = VerifierOf(*ours)->Verify(theirs->Sign({WORKER, 0, ""})).status();
  EXPECT_TRUE(absl::IsUnauthenticated(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("signature does not verify"));
}

TEST(SessionCredentialTest, AlteredClaimsAreRefused) {
  auto signer = NewSigner();
  const std::string credential = signer->Sign({WORKER, 1, "me"});
  const std::string signature = credential.substr(credential.find('.'));
  // The same signature over a payload naming another rank.
  const std::string forged =
      absl::StrCat(absl::WebSafeBase64Escape(std::string("pstrain-session-v1\n2\n0\nme")), signature);
  absl::Status status = VerifierOf(*signer)->Verify(forged).status();
  EXPECT_TRUE(absl::IsUnauthenticated(status)) << status;
}

TEST(SessionCredentialTest, MalformedCredentialsAreRefusedWithAMessage) {
  auto verifier = VerifierOf(*NewSigner());
  for (const std::string& bad : {std::string(""), std::string("garbage"), std::string("a.b.c"), std::string("!!!.???"),
                                 std::string(5000, 'A'), std::string("AAAA.AAAA")}) {
    absl::Status status = verifier->Verify(bad).status();
    EXPECT_TRUE(absl::IsUnauthenticated(status)) << "'" << bad.substr(0, 20) << "': " << status;
    EXPECT_FALSE(status.message().empty());
  }
  EXPECT_THAT(verifier->Verify("").status().message(), HasSubstr("no session credential"));
}

TEST(SessionCredentialTest, KeysOfTheWrongLengthAreRefused) {
  EXPECT_TRUE(absl::IsInvalidArgument(SessionVerifier::Create("short").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SessionSigner::FromPrivateKey(std::string(31, 'k')).status()));
}

TEST(SessionCredentialTest, LeaseGrantsVerifyAndAreNoCredentials) {
  auto signer = NewSigner();
  auto verifier = VerifierOf(*signer);
  const LeaseGrant lease{3, 2, 17, 4096, 8192, 5};
  const std::string grant = signer->SignLease(lease);
  absl::StatusOr<LeaseGrant> got = verifier->VerifyLease(grant);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, lease);
  // One kind of signed text never passes for the other.
  EXPECT_TRUE(absl::IsUnauthenticated(verifier->Verify(grant).status()));
  EXPECT_TRUE(absl::IsUnauthenticated(verifier->VerifyLease(signer->Sign({WORKER, 3, ""})).status()));
  EXPECT_THAT(verifier->VerifyLease("").status().message(), HasSubstr("no lease grant"));
  EXPECT_THAT(VerifierOf(*NewSigner())->VerifyLease(grant).status().message(),
              HasSubstr("lease grant: the signature does not verify"));
}

TEST(SessionCredentialTest, CheckActsAsNamesBothSides) {
  const SessionClaims worker1{WORKER, 1, ""};
  EXPECT_TRUE(CheckActsAs(worker1, WORKER, 1, "Leave").ok());
  absl::Status other_rank = CheckActsAs(worker1, WORKER, 0, "Leave");
  EXPECT_TRUE(absl::IsPermissionDenied(other_rank));
  EXPECT_EQ(other_rank.message(), "Leave: worker 1's session may not act as worker 0");
  EXPECT_TRUE(absl::IsPermissionDenied(CheckActsAs(worker1, SERVER, 1, "ReportCheckpoints")));
}

}  // namespace
}  // namespace pstrain
