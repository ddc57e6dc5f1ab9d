#include "transport/peer_role.h"

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "transport/job_credentials.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(CertRoleTest, RoleIsTheLastSegmentOfTheOnePstrainUri) {
  EXPECT_EQ(CertRoleFromUris({"spiffe://pstrain/job-1/server"}), CertRole::kServer);
  EXPECT_EQ(CertRoleFromUris({"https://example.com/", "spiffe://pstrain/j/worker"}), CertRole::kWorker);
  EXPECT_EQ(CertRoleFromUris({"spiffe://pstrain/j/scheduler"}), CertRole::kScheduler);
  EXPECT_EQ(CertRoleFromUris({"spiffe://pstrain/j/operator"}), CertRole::kOperator);
  EXPECT_EQ(CertRoleFromUris({}), CertRole::kNone);
  for (const char* uri :
       {"spiffe://other/j/server", "spiffe://pstrain/server", "spiffe://pstrain//server", "spiffe://pstrain/j/servers",
        "spiffe://pstrain/j/server/x", "spiffe://pstrain/j/Server", "pstrain/j/server"}) {
    EXPECT_EQ(CertRoleFromUris({uri}), CertRole::kNone) << uri;
  }
  // Two roles in one certificate: ambiguous, so no role.
  EXPECT_EQ(CertRoleFromUris({"spiffe://pstrain/j/worker", "spiffe://pstrain/j/server"}), CertRole::kNone);
  EXPECT_EQ(CertRoleUri("j", CertRole::kServer), "spiffe://pstrain/j/server");
  EXPECT_EQ(CertRoleFromName("worker"), CertRole::kWorker);
  EXPECT_EQ(CertRoleFromName("no role"), CertRole::kNone);
}

TEST(CertRoleTest, JobCredentialsIssueOneCertificatePerRole) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/peer-role-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  JobCredentialOptions options;
  options.job = "my-job.1";
  absl::StatusOr<JobCredentials> job = MakeJobCredentials(dir, options);
  ASSERT_TRUE(job.ok()) << job.status();
  for (CertRole role : kCertRoles) {
    absl::StatusOr<std::string> pem = ReadWholeFile(job->For(role).cert_file, "cert");
    ASSERT_TRUE(pem.ok()) << pem.status();
    EXPECT_EQ(*CertRoleOfPem(*pem), role) << CertRoleName(role);
    EXPECT_THAT(*pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
  }
  // The CA is no role's.
  absl::StatusOr<std::string> ca = ReadWholeFile(job->For(CertRole::kWorker).ca_file, "ca");
  ASSERT_TRUE(ca.ok());
  EXPECT_EQ(*CertRoleOfPem(*ca), CertRole::kNone);
  EXPECT_EQ(CertRoleOfPem("not a certificate").status().code(), absl::StatusCode::kInvalidArgument);

  options.job = "bad/label";
  EXPECT_EQ(MakeJobCredentials(dir, options).status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(CertRoleTest, CheckPeerRoleSaysWhatTheCertificateIsAndWhatIsNeeded) {
  EXPECT_TRUE(CheckPeerRole(Peer{true, CertRole::kServer}, CertRole::kServer, "Register as server").ok());
  // No certificate (a unix socket, plaintext): the token and session decide.
  EXPECT_TRUE(CheckPeerRole(Peer{false, CertRole::kNone}, CertRole::kServer, "Register as server").ok());
  absl::Status worker = CheckPeerRole(Peer{true, CertRole::kWorker}, CertRole::kServer, "Register as server");
  EXPECT_EQ(worker.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(worker.message(),
            "Register as server: the peer's certificate is for role worker; a server needs the job's server "
            "certificate (--tls_cert)");
  absl::Status none = CheckPeerRole(Peer{true, CertRole::kNone}, CertRole::kWorker, "Heartbeat");
  EXPECT_EQ(none.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(none.message(), HasSubstr("Heartbeat: the peer's certificate carries no role"));
  EXPECT_THAT(none.message(), HasSubstr("issue one per role"));
}

}  // namespace
}  // namespace pstrain
