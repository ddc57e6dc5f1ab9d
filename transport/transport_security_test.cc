#include "transport/transport_security.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "transport/job_credentials.h"
#include "common/session_credential.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/tls-", name, "-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A fresh job's credentials for `role` (transport/job_credentials.h).
TransportSecurityOptions Credentials(const std::string& name, CertRole role = CertRole::kWorker) {
  absl::StatusOr<JobCredentials> made = MakeJobCredentials(FreshDir(name));
  CHECK(made.ok()) << made.status();
  return made->For(role);
}

std::shared_ptr<const TransportSecurity> Secure(const TransportSecurityOptions& options) {
  auto security = TransportSecurity::Create(options);
  CHECK(security.ok()) << security.status();
  return *security;
}

TEST(LoopbackTest, RecognizesLoopbackAddresses) {
  for (const char* address :
       {"127.0.0.1:80", "127.3.4.5:1", "localhost:9", "LOCALHOST", "[::1]:5", "::1", "unix:/tmp/x.sock", "127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackAddress(address)) << address;
  }
  for (const char* address : {"0.0.0.0:80", "10.0.0.1:5", "[::]:5", "host:1", "128.0.0.1:1", "[fe80::1]:2"}) {
    EXPECT_FALSE(IsLoopbackAddress(address)) << address;
  }
}

TEST(TransportSecurityCreateTest, RefusesBadFlagCombinationsAndFiles) {
  TransportSecurityOptions a = Credentials("a");
  TransportSecurityOptions b = Credentials("b");

  TransportSecurityOptions partial = a;
  partial.key_file.clear();
  EXPECT_THAT(TransportSecurity::Create(partial).status().message(),
              HasSubstr("needs all of --tls_cert, --tls_key and --tls_ca; got --tls_cert --tls_ca only"));

  TransportSecurityOptions both = a;
  both.insecure = true;
  EXPECT_THAT(TransportSecurity::Create(both).status().message(), HasSubstr("contradict"));

  TransportSecurityOptions token_only;
  token_only.token_file = a.token_file;
  EXPECT_THAT(TransportSecurity::Create(token_only).status().message(), HasSubstr("travel in the clear"));

  TransportSecurityOptions wrong_key = a;
  wrong_key.key_file = b.key_file;
  EXPECT_THAT(TransportSecurity::Create(wrong_key).status().message(), HasSubstr("is not the key of --tls_cert"));

  TransportSecurityOptions foreign = a;
  foreign.ca_file = b.ca_file;
  EXPECT_THAT(TransportSecurity::Create(foreign).status().message(), HasSubstr("does not verify against --tls_ca"));

  TransportSecurityOptions missing = a;
  missing.cert_file += ".missing";
  EXPECT_THAT(TransportSecurity::Create(missing).status().message(), HasSubstr("--tls_cert"));

  TransportSecurityOptions not_pem = a;
  not_pem.ca_file = a.token_file;
  EXPECT_THAT(TransportSecurity::Create(not_pem).status().message(), HasSubstr("not a PEM file"));

  const std::string short_token = FreshDir("short") + "/token";
  std::ofstream(short_token) << "abc\n";
  TransportSecurityOptions weak = a;
  weak.token_file = short_token;
  EXPECT_THAT(TransportSecurity::Create(weak).status().message(), HasSubstr("expected at least 16"));

  for (const auto& options : {partial, both, token_only, wrong_key, foreign, missing, not_pem, weak}) {
    EXPECT_TRUE(absl::IsInvalidArgument(TransportSecurity::Create(options).status()));
  }
  EXPECT_TRUE(TransportSecurity::Create(a).ok());
}

TEST(TransportSecurityTest, SecretFilesAreOwnerOnly) {
  TransportSecurityOptions a = Credentials("modes");
  struct stat st;
  ASSERT_EQ(stat(a.key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  ASSERT_EQ(stat(a.token_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
}

TEST(TransportSecurityTest, PlaintextOnlyOnLoopbackUnlessInsecure) {
  auto plain = TransportSecurity::Loopback();
  EXPECT_TRUE(plain->ServerCredentials("127.0.0.1:0").ok());
  EXPECT_TRUE(plain->ServerCredentials("unix:/tmp/a.sock").ok());
  absl::Status refused = plain->ServerCredentials("0.0.0.0:7000").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(refused));
  EXPECT_THAT(refused.message(), HasSubstr("refusing to listen on 0.0.0.0:7000 without TLS"));
  EXPECT_THAT(refused.message(), HasSubstr("--insecure"));

  TransportSecurityOptions insecure;
  insecure.insecure = true;
  EXPECT_TRUE(Secure(insecure)->ServerCredentials("0.0.0.0:0").ok());
  EXPECT_TRUE(Secure(Credentials("any"))->ServerCredentials("0.0.0.0:0").ok());
}

// A real gRPC server (the built-in health service) behind `security`, on loopback TCP or, given
// `unix_address` ("unix:PATH"), on that unix socket.
class SecuredServer {
 public:
  explicit SecuredServer(const TransportSecurity& security, const SessionGate* gate = nullptr,
                         const std::string& unix_address = "")
      : unix_address_(unix_address) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    const std::string listen = unix_address.empty() ? "127.0.0.1:0" : unix_address;
    auto credentials = security.ServerCredentials(listen, gate);
    CHECK(credentials.ok()) << credentials.status();
    builder.AddListeningPort(listen, *credentials, &port_);
    builder.RegisterCallbackGenericService(&unknown_);  // The health service needs a callback server.
    server_ = builder.BuildAndStart();
    CHECK(server_ != nullptr);
  }
  ~SecuredServer() { server_->Shutdown(std::chrono::system_clock::now()); }

  std::string address() const { return unix_address_.empty() ? absl::StrCat("127.0.0.1:", port_) : unix_address_; }

 private:
  std::string unix_address_;
  int port_ = 0;
  grpc::CallbackGenericService unknown_;
  std::unique_ptr<grpc::Server> server_;
};

// A health check over `channel`, with the session credential `session` unless it is empty.
grpc::Status Check(const std::shared_ptr<grpc::Channel>& channel, const std::string& session = "") {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!session.empty()) context.AddMetadata(kSessionMetadataKey, session);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&context, request, &response);
}

grpc::Status CheckWith(const TransportSecurity& security, const std::string& address, const std::string& session = "",
                       CertRole peer = CertRole::kNone) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // A fresh handshake for every client.
  return Check(security.NewChannel(address, args, peer), session);
}

TEST(TransportSecurityTest, MutualTlsAndTokenKeepStrangersOut) {
  TransportSecurityOptions job = Credentials("job");
  SecuredServer server(*Secure(job));

  EXPECT_TRUE(CheckWith(*Secure(job), server.address()).ok());

  // No certificate at all: the handshake fails, nothing reaches a service.
  grpc::Status plaintext = CheckWith(*TransportSecurity::Loopback(), server.address());
  EXPECT_EQ(plaintext.error_code(), grpc::StatusCode::UNAVAILABLE) << plaintext.error_message();

  // A certificate of another CA, even with the job's token.
  TransportSecurityOptions stranger = Credentials("stranger");
  stranger.token_file = job.token_file;
  EXPECT_EQ(CheckWith(*Secure(stranger), server.address()).error_code(), grpc::StatusCode::UNAVAILABLE);

  // The job's certificate without the token, and with another token.
  TransportSecurityOptions no_token = job;
  no_token.token_file.clear();
  grpc::Status missing = CheckWith(*Secure(no_token), server.address());
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(missing.error_message(), HasSubstr("no job token"));

  TransportSecurityOptions other_token = job;
  other_token.token_file = Credentials("other").token_file;
  grpc::Status wrong = CheckWith(*Secure(other_token), server.address());
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(wrong.error_message(), HasSubstr("wrong job token"));
}

// Admits a call only with the session credential "let-me-in", and remembers what it was asked.
class TestGate final : public SessionGate {
 public:
  absl::Status Admit(absl::string_view method, absl::string_view credential, const Peer& peer) const override {
    absl::MutexLock lock(&mu_);
    asked_.push_back(absl::StrCat(method, " ", credential));
    peers_.push_back(absl::StrCat(peer.has_certificate ? "certificate " : "none ", CertRoleName(peer.role)));
    if (credential == "let-me-in") return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(method, ": not with '", credential, "'"));
  }
  std::vector<std::string> asked() const {
    absl::MutexLock lock(&mu_);
    return asked_;
  }
  // "certificate <role>" or "none no role" for each call, in order.
  std::vector<std::string> peers() const {
    absl::MutexLock lock(&mu_);
    return peers_;
  }

 private:
  mutable absl::Mutex mu_;
  mutable std::vector<std::string> asked_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<std::string> peers_ ABSL_GUARDED_BY(mu_);
};

TEST(TransportSecurityTest, SessionGateJudgesEveryCallAfterTheToken) {
  TransportSecurityOptions job = Credentials("gate");
  TestGate gate;
  SecuredServer server(*Secure(job), &gate);
  auto check = [&](const std::string& session) { return CheckWith(*Secure(job), server.address(), session); };
  grpc::Status refused = check("forged");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(refused.error_message(), "/grpc.health.v1.Health/Check: not with 'forged'");
  EXPECT_EQ(check("").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(check("let-me-in").ok());
  EXPECT_EQ(gate.asked(),
            (std::vector<std::string>{"/grpc.health.v1.Health/Check forged", "/grpc.health.v1.Health/Check ",
                                      "/grpc.health.v1.Health/Check let-me-in"}));

  // Without the job's token the gate is never asked.
  TransportSecurityOptions no_token = job;
  no_token.token_file.clear();
  EXPECT_EQ(CheckWith(*Secure(no_token), server.address()).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(gate.asked().size(), 3u);
}

TEST(TransportSecurityTest, SecuredUnixSocketNeedsAFolderOnlyThisUserMayEnter) {
  auto secure = Secure(Credentials("folder"));
  // /tmp is open to everyone (1777).
  absl::Status open = secure->ServerCredentials("unix:/tmp/pstrain-test.sock").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(open)) << open;
  EXPECT_THAT(open.message(), HasSubstr("unix socket folder '/tmp' has mode 1777"));
  EXPECT_THAT(open.message(), HasSubstr("chmod 700"));

  const std::string parent = FreshDir("sockets");
  absl::StatusOr<std::string> dir = PrivateSocketDir(parent, "mine");
  ASSERT_TRUE(dir.ok()) << dir.status();
  struct stat st;
  ASSERT_EQ(stat(dir->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(secure->ServerCredentials(absl::StrCat("unix:", *dir, "/a.sock")).ok());
  // Taken over when it is already private; refused once anyone else may enter it.
  EXPECT_TRUE(PrivateSocketDir(parent, "mine").ok());
  ASSERT_EQ(chmod(dir->c_str(), 0750), 0);
  absl::StatusOr<std::string> opened = PrivateSocketDir(parent, "mine");
  EXPECT_TRUE(absl::IsFailedPrecondition(opened.status())) << opened.status();
  EXPECT_THAT(opened.status().message(), HasSubstr("has mode 0750"));
  EXPECT_TRUE(absl::IsInvalidArgument(PrivateSocketDir(parent + "/missing", "x").status()));
}

TEST(TransportSecurityTest, SameHostSocketKeepsTheTokenAndGateWithoutEncryption) {
  TransportSecurityOptions job = Credentials("local");
  absl::StatusOr<std::string> dir = PrivateSocketDir(FreshDir("local-sockets"), "s");
  ASSERT_TRUE(dir.ok()) << dir.status();
  TestGate gate;
  SecuredServer server(*Secure(job), &gate, absl::StrCat("unix:", *dir, "/ps.sock"));
  auto check = [&](const TransportSecurity& security, const std::string& session) {
    return CheckWith(security, server.address(), session);
  };
  EXPECT_TRUE(check(*Secure(job), "let-me-in").ok());
  EXPECT_EQ(check(*Secure(job), "forged").error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // The same user without the token, or with another job's.
  TransportSecurityOptions no_token = job;
  no_token.token_file.clear();
  grpc::Status missing = check(*Secure(no_token), "let-me-in");
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED) << missing.error_message();
  EXPECT_THAT(missing.error_message(), HasSubstr("no job token"));
  TransportSecurityOptions other_token = job;
  other_token.token_file = Credentials("local-other").token_file;
  EXPECT_EQ(check(*Secure(other_token), "let-me-in").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // A plaintext client sends no token either.
  EXPECT_FALSE(check(*TransportSecurity::Loopback(), "let-me-in").ok());
  // Only the job's own calls reached the gate.
  EXPECT_EQ(gate.asked().size(), 2u);
}

TEST(TransportSecurityTest, AnotherUserCannotConnectToTheSameHostSocket) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run a process as another user";
  absl::StatusOr<std::string> dir = PrivateSocketDir(FreshDir("other-user"), "s");
  ASSERT_TRUE(dir.ok()) << dir.status();
  // The test's TempDir may itself be closed to others; the private folder alone must do.
  ASSERT_EQ(chmod(std::filesystem::path(*dir).parent_path().c_str(), 0755), 0);
  const std::string path = *dir + "/ps.sock";
  SecuredServer server(*Secure(Credentials("other-user-job")), nullptr, "unix:" + path);
  auto connect_as = [&](uid_t uid, gid_t gid) {
    const pid_t child = fork();
    if (child == 0) {
      if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) _exit(3);
      const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
      if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) _exit(0);
      _exit(errno == EACCES ? 1 : 2);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(connect_as(65534, 65534), 1) << "nobody should get EACCES (1); 0 means it connected";
  EXPECT_EQ(connect_as(0, 0), 0) << "the job's own user connects";
}

TEST(TransportSecurityTest, ClientRefusesServerOfAnotherJob) {
  TransportSecurityOptions job = Credentials("job2");
  TransportSecurityOptions impostor = Credentials("impostor");
  SecuredServer server(*Secure(impostor));
  // The impostor's server accepts no client of the job either way; what matters is that the
  // job's client never sends it anything: the handshake fails on the client's check.
  EXPECT_EQ(CheckWith(*Secure(job), server.address()).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(TransportSecurityTest, ReloadsRotatedCertificates) {
  const std::string dir = FreshDir("rotate");
  absl::StatusOr<TransportSecurityOptions> first = MakeJobCredentials(dir)->For(CertRole::kWorker);
  ASSERT_TRUE(first.ok());
  TransportSecurityOptions watched = *first;
  watched.reload_interval = absl::Seconds(1);
  SecuredServer server(*Secure(watched));
  // A copy of the first credentials elsewhere, as a client that was not rotated holds them.
  const std::string old_dir = FreshDir("rotate-old");
  TransportSecurityOptions old = *first;
  for (std::string* file : {&old.ca_file, &old.cert_file, &old.key_file, &old.token_file}) {
    const std::string copy = old_dir + "/" + std::filesystem::path(*file).filename().string();
    std::filesystem::copy_file(*file, copy);
    *file = copy;
  }
  ASSERT_TRUE(CheckWith(*Secure(old), server.address()).ok());

  // Rotate everything but the token (a new CA too), as a renewed Kubernetes Secret would.
  const std::string token = first->token_file;
  absl::StatusOr<TransportSecurityOptions> second = MakeJobCredentials(dir)->For(CertRole::kWorker);
  ASSERT_TRUE(second.ok());
  std::filesystem::copy_file(old.token_file, token, std::filesystem::copy_options::overwrite_existing);
  TransportSecurityOptions rotated = *second;

  bool took = false;
  for (int i = 0; i < 100 && !took; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    took = CheckWith(*Secure(rotated), server.address()).ok();
  }
  EXPECT_TRUE(took) << "the server never took the rotated certificate";
  EXPECT_EQ(CheckWith(*Secure(old), server.address()).error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Each role has its own certificate, and a process refuses to start with another role's.
TEST(TransportSecurityCreateTest, RefusesAnotherRolesCertificate) {
  TransportSecurityOptions worker = Credentials("role-files");
  worker.role = CertRole::kWorker;
  EXPECT_TRUE(TransportSecurity::Create(worker).ok());
  TransportSecurityOptions as_server = worker;
  as_server.role = CertRole::kServer;
  absl::Status refused = TransportSecurity::Create(as_server).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("is the worker certificate; this process is a server and needs the "
                                           "job's server certificate"));
}

// The gate learns the role of the certificate a TCP peer presented; a unix socket's peer has none.
TEST(TransportSecurityTest, GateSeesThePeersCertificateRole) {
  const std::string dir = FreshDir("peer-roles");
  absl::StatusOr<JobCredentials> job = MakeJobCredentials(dir);
  ASSERT_TRUE(job.ok()) << job.status();
  TestGate gate;
  SecuredServer server(*Secure(job->For(CertRole::kServer)), &gate);
  EXPECT_TRUE(CheckWith(*Secure(job->For(CertRole::kWorker)), server.address(), "let-me-in").ok());
  EXPECT_TRUE(CheckWith(*Secure(job->For(CertRole::kServer)), server.address(), "let-me-in").ok());
  EXPECT_TRUE(CheckWith(*Secure(job->For(CertRole::kOperator)), server.address(), "let-me-in").ok());

  absl::StatusOr<std::string> sockets = PrivateSocketDir(FreshDir("peer-roles-sockets"), "s");
  ASSERT_TRUE(sockets.ok()) << sockets.status();
  SecuredServer local(*Secure(job->For(CertRole::kServer)), &gate, absl::StrCat("unix:", *sockets, "/ps.sock"));
  EXPECT_TRUE(CheckWith(*Secure(job->For(CertRole::kWorker)), local.address(), "let-me-in").ok());
  EXPECT_EQ(gate.peers(), (std::vector<std::string>{"certificate worker", "certificate server", "certificate operator",
                                                    "none no role"}));
}

// A client that says whom it dials refuses a peer whose certificate is another role's.
TEST(TransportSecurityTest, ClientChecksTheRoleOfThePeerItDials) {
  const std::string dir = FreshDir("dial-roles");
  absl::StatusOr<JobCredentials> job = MakeJobCredentials(dir);
  ASSERT_TRUE(job.ok()) << job.status();
  SecuredServer scheduler(*Secure(job->For(CertRole::kScheduler)));
  const auto worker = Secure(job->For(CertRole::kWorker));
  EXPECT_TRUE(CheckWith(*worker, scheduler.address(), "", CertRole::kScheduler).ok());
  EXPECT_TRUE(CheckWith(*worker, scheduler.address(), "", CertRole::kNone).ok());
  // A worker's files serving as "the scheduler" or "a server": the dialler never sends a call.
  SecuredServer impostor(*Secure(job->For(CertRole::kWorker)));
  EXPECT_EQ(CheckWith(*worker, impostor.address(), "", CertRole::kScheduler).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CheckWith(*worker, impostor.address(), "", CertRole::kServer).error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace pstrain
