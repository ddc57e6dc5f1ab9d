// RunLocalCluster against fake role binaries (shell scripts) and a fake progress source.
#include "launch/launcher.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace launch {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// Writes the scheduler's port (4321, where nothing listens) into its --port_file, and prints
// the path on stdout.
constexpr char kWritePort[] = R"(
for a in "$@"; do case "$a" in --port_file=*) pf="${a#--port_file=}";; esac; done
echo "port_file=$pf"
echo 4321 > "$pf.tmp" && mv "$pf.tmp" "$pf"
)";

class FakeStatus : public JobStatusSource {
 public:
  FakeStatus(JobStatus status, bool raise_sigterm) : status_(std::move(status)), raise_sigterm_(raise_sigterm) {}
  absl::StatusOr<JobStatus> Get() override {
    // The launcher blocks SIGTERM while it runs, so this lands in its signalfd.
    if (raise_sigterm_) kill(getpid(), SIGTERM);
    return status_;
  }

 private:
  JobStatus status_;
  bool raise_sigterm_;
};

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/pstrain-launcher-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    options_.bin_dir = dir_;
    options_.num_servers = 2;
    options_.num_workers = 2;
    options_.summary_json = dir_ + "/summary.json";
    options_.job_flags = {"--epochs=2"};
    options_.stop_grace = absl::Seconds(2);
    options_.status_interval = absl::Milliseconds(50);
    // Plaintext, so the command lines below stay short; MakesThrowawayCredentialsByDefault covers
    // the default.
    options_.security.insecure = true;
    // No metrics or dashboard, for the same reason; PrintsTheDashboardAndEveryMetricsUrl covers them.
    options_.metrics = false;
    options_.http_port = 0;
    out_ = tmpfile();
    err_ = tmpfile();
    options_.out_fd = fileno(out_);
    options_.err_fd = fileno(err_);
    options_.status_source = [this](const std::string& address) {
      address_ = address;
      return std::make_unique<FakeStatus>(status_, raise_sigterm_);
    };
  }
  void TearDown() override {
    fclose(out_);
    fclose(err_);
    std::filesystem::remove_all(dir_);
  }

  void WriteScript(const std::string& name, const std::string& body) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
  }

  static std::string Contents(FILE* f) {
    fflush(f);
    std::string text;
    rewind(f);
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), f)) > 0) text.append(buffer, n);
    return text;
  }
  std::string Out() { return Contents(out_); }
  std::string Err() { return Contents(err_); }

  std::string dir_;
  LaunchOptions options_;
  FILE* out_ = nullptr;
  FILE* err_ = nullptr;
  JobStatus status_;
  bool raise_sigterm_ = false;
  std::string address_;
};

// Unless told otherwise, every child gets the same throwaway CA and token and its own role's
// certificate and key, made for this job in the launcher's temporary folder: files that belong
// together, 0600 in a 0700 folder.
TEST_F(LauncherTest, MakesThrowawayPerRoleCredentialsByDefault) {
  options_.security = TransportSecurityOptions();
  // Each role keeps a copy of the credentials it was given, with their modes and its folder's (the
  // launcher removes its own), and says which they were.
  const std::string copy = absl::StrCat(
      "for a in \"$@\"; do case $a in --tls_*=*|--job_token_file=*) f=${a#*=}; [ -f \"$f\" ] && "
      "cp \"$f\" ",
      dir_,
      "/$ROLE-$(basename \"$f\") && stat -c \"$ROLE %a %n\" \"$f\" \"$(dirname \"$f\")\";; "
      "esac; done; ");
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "ROLE=scheduler; ", copy, "echo \"args $*\"; sleep 1"));
  WriteScript("pstrain-server", absl::StrCat("ROLE=server; ", copy, "echo \"server $*\""));
  WriteScript("pstrain-worker", absl::StrCat("ROLE=worker; ", copy, "echo \"worker $*\""));
  status_.set_state(FINISHED);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Out() << Err();
  const std::string out = Out();
  for (const char* flag : {"--tls_ca=", "--tls_server_name=pstrain", "--job_token_file="}) {
    EXPECT_THAT(out, ::testing::ContainsRegex(absl::StrCat("scheduler.*", flag))) << flag;
    EXPECT_THAT(out, ::testing::ContainsRegex(absl::StrCat("server 0. server .*", flag))) << flag;
    EXPECT_THAT(out, ::testing::ContainsRegex(absl::StrCat("worker 1. worker .*", flag))) << flag;
  }
  // Its own certificate and key, nobody else's.
  EXPECT_THAT(out,
              ::testing::ContainsRegex("args [^\n]*--tls_cert=[^ ]*/scheduler.pem --tls_key=[^ ]*/scheduler-key.pem"));
  EXPECT_THAT(out, ::testing::ContainsRegex(
                       "server 0. server [^\n]*--tls_cert=[^ ]*/server.pem --tls_key=[^ ]*/server-key.pem"));
  EXPECT_THAT(out, ::testing::ContainsRegex(
                       "worker 1. worker [^\n]*--tls_cert=[^ ]*/worker.pem --tls_key=[^ ]*/worker-key.pem"));
  EXPECT_THAT(out, ::testing::Not(::testing::ContainsRegex("worker 1. worker [^\n]*server.pem")));
  // Every credential file 0600, the folder 0700.
  EXPECT_THAT(out, ::testing::ContainsRegex("scheduler 600 [^ ]*/scheduler-key.pem"));
  EXPECT_THAT(out, ::testing::ContainsRegex("scheduler 600 [^ ]*/scheduler.pem"));
  EXPECT_THAT(out, ::testing::ContainsRegex("worker 600 [^ ]*/ca.pem"));
  EXPECT_THAT(out, ::testing::ContainsRegex("worker 600 [^ ]*/token"));
  EXPECT_THAT(out, ::testing::ContainsRegex("server 700 [^ ]*/tls\n"));
  EXPECT_THAT(out, ::testing::Not(::testing::ContainsRegex("(scheduler|server|worker) 6[0-7][1-7] ")));
  for (auto [role, cert_role] : {std::pair{"scheduler", CertRole::kScheduler}, std::pair{"server", CertRole::kServer},
                                 std::pair{"worker", CertRole::kWorker}}) {
    TransportSecurityOptions copied;
    copied.cert_file = absl::StrCat(dir_, "/", role, "-", role, ".pem");
    copied.key_file = absl::StrCat(dir_, "/", role, "-", role, "-key.pem");
    copied.ca_file = absl::StrCat(dir_, "/", role, "-ca.pem");
    copied.token_file = absl::StrCat(dir_, "/", role, "-token");
    copied.role = cert_role;
    absl::StatusOr<std::shared_ptr<const TransportSecurity>> security = TransportSecurity::Create(copied);
    EXPECT_TRUE(security.ok()) << role << ": " << security.status() << "\n" << out;
  }
}

// One certificate for every role is refused: the launcher says to give per-role ones.
TEST_F(LauncherTest, RefusesOneCertificateForEveryRole) {
  options_.security = TransportSecurityOptions();
  options_.security.cert_file = dir_ + "/cert.pem";
  options_.security.key_file = dir_ + "/key.pem";
  options_.security.ca_file = dir_ + "/ca.pem";
  for (const char* binary : {"pstrain-scheduler", "pstrain-server", "pstrain-worker"}) WriteScript(binary, "exit 0");
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_FALSE(code.ok());
  EXPECT_EQ(code.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(code.status().message(), HasSubstr("give --tls_dir=DIR"));
}

TEST_F(LauncherTest, SuccessfulJobPrintsPrefixedOutputEpochsAndResult) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, R"(echo "args $*"; echo "to stderr" >&2; sleep 1)"));
  WriteScript("pstrain-server", R"(echo "server $*")");
  WriteScript("pstrain-worker", R"(printf "worker $*")");  // No newline at the end.
  status_.set_state(FINISHED);
  status_.set_epochs(2);
  for (int e = 0; e < 2; ++e) {
    EpochSummary* s = status_.add_epochs_done();
    s->set_epoch(e);
    s->set_test_accuracy(e == 0 ? 0.8 : 0.9);
    s->set_samples(1000);
    s->set_seconds(0.5);
  }

  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Out() << Err();
  const std::string out = Out();
  EXPECT_EQ(address_, "127.0.0.1:4321");
  EXPECT_THAT(out, HasSubstr("[scheduler] args --host=127.0.0.1 --port=0 --port_file="));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("--summary_json=", dir_,
                                          "/summary.json --heartbeat_ms=500 "
                                          "--dead_after_ms=3000 --insecure --epochs=2\n")));
  EXPECT_THAT(Err(), HasSubstr("[scheduler] to stderr\n"));
  // Servers also listen on a unix socket inside the launcher's private temporary folder.
  EXPECT_THAT(out, ContainsRegex("\\[server 0\\] server --scheduler=127.0.0.1:4321 --host=127.0.0.1 --port=0 "
                                 "--unix_socket_dir=/[^ ]*/pstrain-launch-[^ /]+ --insecure\n"));
  EXPECT_THAT(out, HasSubstr("[server 1] server --scheduler=127.0.0.1:4321"));
  EXPECT_THAT(out, HasSubstr("[worker 0] worker --scheduler=127.0.0.1:4321 --device=cpu --insecure\n"));
  EXPECT_THAT(out, HasSubstr("[worker 1] worker --scheduler=127.0.0.1:4321 --device=cpu --insecure\n"));
  EXPECT_THAT(out, HasSubstr("epoch 1/2 done: train_loss 0.0000  test_loss 0.0000  test_acc 0.8000  0.5 s\n"));
  EXPECT_THAT(out, HasSubstr("epoch 2/2 done: "));
  EXPECT_THAT(out, HasSubstr("final test_acc 0.9000  2.0k samples/s  wall "));
  // Each epoch line once, however often it was polled.
  EXPECT_EQ(out.find("epoch 1/2 done"), out.rfind("epoch 1/2 done"));

  // The temp dir (holding the port file) is gone.
  size_t at = out.find("port_file=");
  ASSERT_NE(at, std::string::npos);
  std::string port_file = out.substr(at + 10, out.find('\n', at) - at - 10);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(port_file).parent_path())) << port_file;
}

// Every role gets a metrics port of its own and the scheduler the dashboard's; the URLs are printed
// one per line once the scheduler listens, and the ports are distinct.
TEST_F(LauncherTest, PrintsTheDashboardAndEveryMetricsUrl) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, R"(echo "args $*"; sleep 1)"));
  WriteScript("pstrain-server", R"(echo "server $*")");
  WriteScript("pstrain-worker", R"(echo "worker $*")");
  options_.metrics = true;
  options_.http_port = -1;
  options_.dashboard_linger = absl::Seconds(2);
  status_.set_state(FINISHED);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  const std::string out = Out();
  std::set<std::string> ports;
  for (absl::string_view role : {"dashboard ", "metrics scheduler ", "metrics server 0 ", "metrics server 1 ",
                                 "metrics worker 0 ", "metrics worker 1 "}) {
    const std::string prefix = absl::StrCat("[launch] ", role, "http://127.0.0.1:");
    const size_t at = out.find(prefix);
    ASSERT_NE(at, std::string::npos) << role << " in:\n" << out;
    const size_t end = out.find('\n', at);
    const std::string url = out.substr(at + prefix.size() - 17, end - at - prefix.size() + 17);
    const std::string port = url.substr(17, url.find('/', 17) - 17);
    EXPECT_TRUE(ports.insert(port).second) << "port " << port << " given twice";
    EXPECT_TRUE(absl::EndsWith(url, role == "dashboard " ? "/" : "/metrics")) << url;
    if (role == "dashboard ") {
      EXPECT_THAT(out, HasSubstr(absl::StrCat("--http_port=", port, " --linger_ms=2000")));
      EXPECT_THAT(out, HasSubstr(absl::StrCat("[launch] the dashboard stays up 2s at http://127.0.0.1:", port, "/")));
    }
    if (role != "dashboard ") {
      EXPECT_THAT(out, HasSubstr(absl::StrCat("--metrics_port=", port, " --metrics_host=127.0.0.1")));
    }
  }
}

TEST_F(LauncherTest, WorkersTakeACommaListOfDevicesInTurnAndGetTf32) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 1"));
  WriteScript("pstrain-server", "true");
  WriteScript("pstrain-worker", R"(echo "worker $*")");
  options_.num_workers = 3;
  options_.device = "cuda:0,cuda:1";
  options_.tf32 = true;
  status_.set_state(FINISHED);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  const std::string out = Out();
  EXPECT_THAT(out, HasSubstr("[worker 0] worker --scheduler=127.0.0.1:4321 --device=cuda:0 --tf32 --insecure\n"));
  EXPECT_THAT(out, HasSubstr("[worker 1] worker --scheduler=127.0.0.1:4321 --device=cuda:1 --tf32 --insecure\n"));
  EXPECT_THAT(out, HasSubstr("[worker 2] worker --scheduler=127.0.0.1:4321 --device=cuda:0 --tf32 --insecure\n"));
}

TEST_F(LauncherTest, WorkerCmdRunsWithTheSlotsEnvironmentAndTheBuildsPythonPackage) {
  // A build tree: <dir>/bin holds the roles (no pstrain-worker needed), <dir>/python the package.
  std::filesystem::create_directories(dir_ + "/bin");
  std::filesystem::create_directories(dir_ + "/python/pstrain");
  WriteScript("bin/pstrain-scheduler", absl::StrCat(kWritePort, "sleep 1"));
  WriteScript("bin/pstrain-server", "true");
  WriteScript("worker script.sh",
              R"(echo "scheduler=$PSTRAIN_SCHEDULER index=$PSTRAIN_WORKER_INDEX device=$PSTRAIN_DEVICE"
echo "pythonpath=$PYTHONPATH"
echo "args=$*"
echo "ppid=$PPID")");
  options_.bin_dir = dir_ + "/bin";
  options_.worker_cmd = absl::StrCat("'", dir_, "/worker script.sh' one 'two words'");
  options_.pythonpath = "/elsewhere/lib";
  options_.device = "cuda:0,cuda:1";
  options_.tf32 = true;  // for pstrain-worker only
  status_.set_state(FINISHED);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Out() << Err();
  const std::string out = Out();
  EXPECT_THAT(out, HasSubstr("[worker 0] scheduler=127.0.0.1:4321 index=0 device=cuda:0\n"));
  EXPECT_THAT(out, HasSubstr("[worker 1] scheduler=127.0.0.1:4321 index=1 device=cuda:1\n"));
  const std::string python = std::filesystem::canonical(dir_ + "/python").string();
  EXPECT_THAT(out, HasSubstr(absl::StrCat("[worker 0] pythonpath=", python, ":/elsewhere/lib\n")));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("[worker 1] pythonpath=", python, ":/elsewhere/lib\n")));
  EXPECT_THAT(out, HasSubstr("[worker 0] args=one two words\n"));
  // exec: the command is the launcher's own child, not a shell's.
  EXPECT_THAT(out, HasSubstr(absl::StrCat("[worker 1] ppid=", getpid(), "\n")));
  EXPECT_THAT(out, Not(HasSubstr("--tf32")));
}

TEST_F(LauncherTest, FailingWorkerCmdIsRestartedThenDroppedLikeAFailingWorker) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 1.5"));
  WriteScript("pstrain-server", "exit 0");
  options_.num_workers = 1;
  options_.max_restarts = 1;
  // No <bin_dir>/../python here: PYTHONPATH is left as the launcher's.
  WriteScript("fails.sh", absl::StrCat("echo \"run $PSTRAIN_WORKER_INDEX $PSTRAIN_SCHEDULER\" >> '", dir_,
                                       "/worker.runs'; echo 'cmd broke' >&2; exit 3"));
  options_.worker_cmd = dir_ + "/fails.sh";
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Err();
  const std::string err = Err();
  EXPECT_THAT(err, HasSubstr("[worker 0] cmd broke\n"));
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 died (exited with status 3); restarting (1 of 1)\n"));
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 exited with status 3; the job continues without it\n"));
  std::ifstream runs(dir_ + "/worker.runs");
  std::stringstream text;
  text << runs.rdbuf();
  EXPECT_EQ(text.str(), "run 0 127.0.0.1:4321\nrun 0 127.0.0.1:4321\n");
}

TEST_F(LauncherTest, FailingWorkersLeaveTheJobRunningAndExitZero) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 1"));
  WriteScript("pstrain-server", "sleep 0.5");
  WriteScript("pstrain-worker", "echo 'worker broke' >&2; exit 1");
  status_.set_state(RUNNING);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Err();
  const std::string err = Err();
  EXPECT_THAT(err, HasSubstr("[worker 0] worker broke\n"));
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 exited with status 1; the job continues without it\n"));
  EXPECT_THAT(err, HasSubstr("[launch] worker 1 exited with status 1; the job continues without it\n"));
  EXPECT_THAT(err, Not(HasSubstr("restarting")));
  EXPECT_THAT(Out(), HasSubstr("final test_acc"));
}

TEST_F(LauncherTest, SchedulerFailingAfterAWorkerDiedExitsOne) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 0.5; echo 'too few workers' >&2; exit 1"));
  WriteScript("pstrain-server", "exec sleep 100");
  WriteScript("pstrain-worker", "exit 1");
  options_.num_workers = 1;
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  const std::string err = Err();
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 exited with status 1; the job continues without it\n"));
  EXPECT_THAT(err, HasSubstr("[scheduler] too few workers\n"));
  EXPECT_THAT(err, HasSubstr("[launch] scheduler exited with status 1\n"));
  EXPECT_THAT(Out(), Not(HasSubstr("final test_acc")));
}

TEST_F(LauncherTest, FailingServerStopsEveryoneAndExitsOne) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "exec sleep 100"));
  WriteScript("pstrain-server", "echo 'server broke' >&2; exit 1");
  WriteScript("pstrain-worker", "exec sleep 100");
  const absl::Time start = absl::Now();
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  // Everyone else went on SIGTERM, not after their sleep.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  const std::string err = Err();
  EXPECT_THAT(err, HasSubstr("] server broke\n"));
  EXPECT_TRUE(absl::StrContains(err, "[launch] server 0 exited with status 1\n") ||
              absl::StrContains(err, "[launch] server 1 exited with status 1\n"))
      << err;
  EXPECT_THAT(err, Not(HasSubstr("continues")));
  EXPECT_THAT(Out(), Not(HasSubstr("final test_acc")));
}

TEST_F(LauncherTest, EveryWorkerExitingBeforeTheJobStartsFailsItAtOnceWithTheirReason) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "exec sleep 100"));
  WriteScript("pstrain-server", "exec sleep 100");
  WriteScript("pstrain-worker", "echo 'pstrain: this job trains model mlp, not external' >&2; exit 2");
  status_.set_state(WAITING_FOR_ROLES);
  const absl::Time start = absl::Now();
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(Err(), HasSubstr("[launch] job failed: every worker exited before the job started; the last one "
                               "said: [worker "));
  EXPECT_THAT(Err(), HasSubstr("] pstrain: this job trains model mlp, not external\n"));
}

TEST_F(LauncherTest, AWorkerCmdWithoutThePythonPackageSaysHowToBuildIt) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "exec sleep 100"));
  WriteScript("pstrain-server", "exec sleep 100");
  WriteScript("script.sh", "echo \"ModuleNotFoundError: No module named 'pstrain'\" >&2; exit 1");
  options_.worker_cmd = dir_ + "/script.sh";
  status_.set_state(WAITING_FOR_ROLES);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(Err(), HasSubstr("No module named 'pstrain' (the pstrain package is not built: `make build` builds"));
}

TEST_F(LauncherTest, OneWorkerOfTwoExitingBeforeTheJobStartsLeavesItWaiting) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 1"));
  WriteScript("pstrain-server", "sleep 0.5");
  // The first worker to start exits; the other one is still there to join.
  WriteScript("pstrain-worker", absl::StrCat("mkdir '", dir_, "/first' 2>/dev/null && exit 2; sleep 0.5"));
  status_.set_state(WAITING_FOR_ROLES);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Err();
  EXPECT_THAT(Err(), Not(HasSubstr("every worker exited")));
}

TEST_F(LauncherTest, WorkerFailingOnceIsRestartedOnceWithTheSameCommandLine) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 1"));
  WriteScript("pstrain-server", "exit 0");
  WriteScript("pstrain-worker", absl::StrCat("echo run >> '", dir_, "/worker.runs'\n", "if [ -e '", dir_,
                                             "/worker.failed' ]; then echo \"again $*\"; exit 0; fi\n", "touch '", dir_,
                                             "/worker.failed'; kill -9 $$"));
  options_.num_workers = 1;
  options_.max_restarts = 1;
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Err();
  const std::string err = Err();
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 died (was killed by signal 9 (SIGKILL)); restarting (1 of 1)\n"));
  EXPECT_EQ(err.find("restarting"), err.rfind("restarting")) << err;
  EXPECT_THAT(err, Not(HasSubstr("continues")));
  EXPECT_THAT(Out(), HasSubstr("[worker 0] again --scheduler=127.0.0.1:4321 --device=cpu --insecure\n"));
  std::ifstream runs(dir_ + "/worker.runs");
  std::stringstream text;
  text << runs.rdbuf();
  EXPECT_EQ(text.str(), "run\nrun\n");
}

TEST_F(LauncherTest, WorkerOutOfRestartsIsDroppedAndTheJobContinues) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 1.5"));
  WriteScript("pstrain-server", "exit 0");
  WriteScript("pstrain-worker", absl::StrCat("echo run >> '", dir_, "/worker.runs'; exit 2"));
  options_.num_workers = 1;
  options_.max_restarts = 2;
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Err();
  const std::string err = Err();
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 died (exited with status 2); restarting (1 of 2)\n"));
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 died (exited with status 2); restarting (2 of 2)\n"));
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 exited with status 2; the job continues without it\n"));
  EXPECT_THAT(err, Not(HasSubstr("(3 of 2)")));
  std::ifstream runs(dir_ + "/worker.runs");
  std::stringstream text;
  text << runs.rdbuf();
  EXPECT_EQ(text.str(), "run\nrun\nrun\n");
}

TEST_F(LauncherTest, ServerOutOfRestartsStopsEveryoneAndExitsOne) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "exec sleep 100"));
  WriteScript("pstrain-server", absl::StrCat("echo run >> '", dir_, "/server.runs'; exit 3"));
  WriteScript("pstrain-worker", "exec sleep 100");
  options_.num_servers = 1;
  options_.max_restarts = 1;
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  const std::string err = Err();
  EXPECT_THAT(err, HasSubstr("[launch] server 0 died (exited with status 3); restarting (1 of 1)\n"));
  EXPECT_THAT(err, HasSubstr("[launch] server 0 exited with status 3\n"));
  std::ifstream runs(dir_ + "/server.runs");
  std::stringstream text;
  text << runs.rdbuf();
  EXPECT_EQ(text.str(), "run\nrun\n");
}

TEST_F(LauncherTest, RestartedSchedulerKeepsItsPort) {
  // The first run writes its port and is killed; the second prints its arguments and finishes.
  WriteScript("pstrain-scheduler",
              absl::StrCat("if [ -e '", dir_, "/scheduler.failed' ]; then echo \"again $*\"; sleep 0.3; exit 0; fi\n",
                           kWritePort, "touch '", dir_, "/scheduler.failed'; sleep 1; kill -9 $$"));
  WriteScript("pstrain-server", "exit 0");
  WriteScript("pstrain-worker", "exit 0");
  options_.max_restarts = 1;
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Err();
  EXPECT_THAT(Err(), HasSubstr("[launch] scheduler died (was killed by signal 9 (SIGKILL)); restarting (1 of 1)\n"));
  EXPECT_THAT(Out(), HasSubstr("[scheduler] again --host=127.0.0.1 --port=4321 --port_file="));
}

TEST_F(LauncherTest, SchedulerThatExitsWithAStatusIsNotRestarted) {
  // Exit 1 is the scheduler's own verdict (the job failed): restarting it would only repeat it.
  WriteScript("pstrain-scheduler",
              absl::StrCat("echo run >> '", dir_, "/scheduler.runs'\n", kWritePort, "sleep 1; exit 1"));
  WriteScript("pstrain-server", "exec sleep 100");
  WriteScript("pstrain-worker", "exec sleep 100");
  options_.max_restarts = 1;
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(Err(), HasSubstr("[launch] scheduler exited with status 1\n"));
  EXPECT_THAT(Err(), ::testing::Not(HasSubstr("restarting")));
  std::ifstream runs(dir_ + "/scheduler.runs");
  std::stringstream text;
  text << runs.rdbuf();
  EXPECT_EQ(text.str(), "run\n");
}

TEST_F(LauncherTest, NothingIsRestartedOnceTheSchedulerSaysTheJobFailed) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "exec sleep 100"));
  WriteScript("pstrain-server", "exec sleep 100");
  WriteScript("pstrain-worker", "sleep 0.3; exit 1");
  options_.num_workers = 1;
  options_.max_restarts = 3;
  status_.set_state(FAILED);
  status_.set_failure("server 0 sent no heartbeat for 3.0 s");
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  const std::string err = Err();
  EXPECT_THAT(err, HasSubstr("[launch] job failed: server 0 sent no heartbeat for 3.0 s\n"));
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 exited with status 1\n"));
  EXPECT_THAT(err, Not(HasSubstr("restarting")));
  EXPECT_THAT(err, Not(HasSubstr("continues")));
}

TEST_F(LauncherTest, WorkerFailingAfterTheSchedulerFinishedIsNotRestartedAndFails) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 0.3"));
  WriteScript("pstrain-server", "exit 0");
  WriteScript("pstrain-worker", "sleep 0.8; exit 1");
  options_.num_workers = 1;
  options_.max_restarts = 3;
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  const std::string err = Err();
  EXPECT_THAT(err, HasSubstr("[launch] worker 0 exited with status 1\n"));
  EXPECT_THAT(err, Not(HasSubstr("restarting")));
}

TEST_F(LauncherTest, ChildKilledBySignalIsNamed) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "exec sleep 100"));
  WriteScript("pstrain-server", "kill -9 $$");
  WriteScript("pstrain-worker", "exec sleep 100");
  options_.num_servers = 1;
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(Err(), HasSubstr("[launch] server 0 was killed by signal 9 (SIGKILL)"));
}

TEST_F(LauncherTest, SchedulerExitingBeforeItsPortFails) {
  WriteScript("pstrain-scheduler", "echo 'bad flag' >&2; exit 2");
  WriteScript("pstrain-server", "exit 0");
  WriteScript("pstrain-worker", "exit 0");
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(Err(), HasSubstr("[scheduler] bad flag\n"));
  EXPECT_THAT(Err(), HasSubstr("[launch] scheduler exited with status 2"));
  EXPECT_THAT(Out(), Not(HasSubstr("[server")));
}

TEST_F(LauncherTest, SchedulerExitingZeroWithoutPortIsFailedPrecondition) {
  WriteScript("pstrain-scheduler", "exit 0");
  WriteScript("pstrain-server", "exit 0");
  WriteScript("pstrain-worker", "exit 0");
  absl::StatusOr<int> code = RunLocalCluster(options_);
  EXPECT_EQ(code.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LauncherTest, NoPortFileInTimeIsDeadlineExceeded) {
  WriteScript("pstrain-scheduler", "exec sleep 100");
  WriteScript("pstrain-server", "exit 0");
  WriteScript("pstrain-worker", "exit 0");
  options_.port_timeout = absl::Milliseconds(300);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  EXPECT_EQ(code.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(LauncherTest, MissingBinaryIsNotFound) {
  WriteScript("pstrain-scheduler", "exit 0");
  WriteScript("pstrain-worker", "exit 0");
  absl::StatusOr<int> code = RunLocalCluster(options_);
  EXPECT_EQ(code.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(code.status().message()), HasSubstr("pstrain-server"));
}

TEST_F(LauncherTest, SigtermToLauncherStopsChildrenAndExits143) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "exec sleep 100"));
  WriteScript("pstrain-server", "exec sleep 100");
  WriteScript("pstrain-worker", "exec sleep 100");
  raise_sigterm_ = true;
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 128 + SIGTERM);
  EXPECT_THAT(Err(), HasSubstr("[launch] got SIGTERM: stopping the cluster"));
}

TEST_F(LauncherTest, RoleStillRunningAfterSchedulerFinishedFails) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 0.2"));
  WriteScript("pstrain-server", "exit 0");
  WriteScript("pstrain-worker", "exec sleep 100");
  options_.num_workers = 1;
  options_.finish_timeout = absl::Milliseconds(300);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(Err(), HasSubstr("[launch] worker 0 still running"));
}

TEST_F(LauncherTest, PlainProgressLinesWhenNotATerminal) {
  WriteScript("pstrain-scheduler", absl::StrCat(kWritePort, "sleep 1"));
  WriteScript("pstrain-server", "exit 0");
  WriteScript("pstrain-worker", "exit 0");
  status_.set_state(RUNNING);
  status_.set_epochs(2);
  status_.set_step(5);
  status_.set_total_steps(10);
  status_.set_recent_loss(1.5);
  status_.set_samples_per_second(640);
  status_.set_eta_seconds(3);
  absl::StatusOr<int> code = RunLocalCluster(options_);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  const std::string out = Out();
  EXPECT_THAT(out, HasSubstr("\nepoch 1/2  step 5/10  loss 1.5000  640 samples/s  ETA 3s\n"));
  EXPECT_THAT(out, Not(HasSubstr("\r")));
  // The default progress interval (5 s) is longer than the job: one line only.
  EXPECT_EQ(out.find("step 5/10"), out.rfind("step 5/10"));
}

}  // namespace
}  // namespace launch
}  // namespace pstrain
