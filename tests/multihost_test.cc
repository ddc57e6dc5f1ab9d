// A job whose roles run on five different hosts with real, non-loopback addresses (the project's
// own test hosts: network namespaces on one virtual segment, tests/test_hosts.h), started exactly
// as docs/guides/cluster-by-hand.md says. Skips, saying why, where namespaces cannot be
// made (not root, no iproute2).
#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "transport/job_credentials.h"
#include "transport/transport_security.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process.h"
#include "tests/test_hosts.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kTrainSamples = 6000;

// What a job started by hand on the hosts promises: every role exits 0 when it ends; the servers
// (hosts 1 and 2, port 7001) were reached at their hosts' addresses, not over loopback; the job
// finished with each of its two epochs' samples trained once, to a plausible accuracy. The
// summary is in `dir`.
void ExpectHandStartedJobFinished(std::vector<std::unique_ptr<Child>>& roles, TestHosts& hosts,
                                  const std::string& dir) {
  for (auto& role : roles) {
    absl::StatusOr<int> code = role->Wait(absl::Minutes(3));
    ASSERT_TRUE(code.ok()) << code.status() << "\n" << role->Output();
    EXPECT_EQ(*code, 0) << role->Output();
  }
  const std::string scheduler_log = roles[0]->Output();
  EXPECT_THAT(scheduler_log, HasSubstr("at " + hosts.address(1) + ":7001")) << scheduler_log;
  EXPECT_THAT(scheduler_log, HasSubstr("at " + hosts.address(2) + ":7001")) << scheduler_log;
  const std::string summary = ReadFile(dir + "/summary.json");
  EXPECT_THAT(summary, HasSubstr("\"state\": \"FINISHED\"")) << summary;
  const std::vector<double> samples = JsonNumbers(summary, "samples");
  ASSERT_GE(samples.size(), 2u) << summary;
  EXPECT_EQ(samples[0], kTrainSamples) << summary;
  EXPECT_EQ(samples[1], kTrainSamples) << summary;
  EXPECT_GT(JsonNumber(summary, "final_test_accuracy"), 0.7) << summary;
}

// The job's credentials (mutual TLS, one certificate per role, and a token), made in `dir`: every
// multi-host job runs secured, as a job on a shared network must.
JobCredentials MakeCredentials(const std::string& dir) {
  std::filesystem::create_directories(dir + "/tls");
  absl::StatusOr<JobCredentials> made = MakeJobCredentials(dir + "/tls");
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *made : JobCredentials();
}

// The role a command runs as, by its binary: a pstrain-scheduler or pstrain-server; else a worker
// (pstrain-worker or a Python worker).
CertRole RoleOf(const std::vector<std::string>& argv) {
  for (const std::string& arg : argv) {
    if (absl::EndsWith(arg, "/pstrain-scheduler")) return CertRole::kScheduler;
    if (absl::EndsWith(arg, "/pstrain-server")) return CertRole::kServer;
  }
  return CertRole::kWorker;
}

// `argv` with the security flags of its role's credentials appended.
std::vector<std::string> Secured(std::vector<std::string> argv, const JobCredentials& credentials) {
  for (const std::string& flag : TransportSecurityFlags(credentials.For(RoleOf(argv)))) argv.push_back(flag);
  return argv;
}

TEST(MultiHostTest, RolesOnFiveHostsTrainTogether) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(5);
  if (!made.ok()) GTEST_SKIP() << "cannot make test hosts in network namespaces: " << made.status();
  TestHosts& hosts = **made;
  const std::string dir = MakeTempDir("multihost");
  const JobCredentials credentials = MakeCredentials(dir);
  const std::string bin = BinDir();
  const std::string scheduler_address = hosts.address(0) + ":7000";

  // Host A: the scheduler, with every job flag.
  std::vector<std::unique_ptr<Child>> roles;
  auto start = [&](int host, const std::vector<std::string>& argv, const std::string& name) {
    absl::StatusOr<Child> child =
        Child::Start(hosts.Command(host, Secured(argv, credentials)), dir + "/" + name + ".log");
    ASSERT_TRUE(child.ok()) << child.status();
    roles.push_back(std::make_unique<Child>(std::move(*child)));
  };
  start(0,
        {bin + "/pstrain-scheduler", "--host=0.0.0.0", "--port=7000", "--servers=2", "--workers=2", "--mode=sync",
         "--epochs=2", "--train_limit=" + std::to_string(kTrainSamples), "--test_limit=1000",
         "--summary_json=" + dir + "/summary.json"},
        "scheduler");
  // Hosts B and C: a parameter server each, on an address the workers can reach.
  for (int host : {1, 2}) {
    start(host,
          {bin + "/pstrain-server", "--scheduler=" + scheduler_address, "--host=" + hosts.address(host), "--port=7001"},
          "server-" + std::to_string(host));
  }
  // Hosts D and E: a worker each.
  for (int host : {3, 4}) {
    start(host, {bin + "/pstrain-worker", "--scheduler=" + scheduler_address}, "worker-" + std::to_string(host));
  }

  ExpectHandStartedJobFinished(roles, hosts, dir);
  // Different hosts: the workers dialled the servers over TCP, never their unix sockets.
  for (int i : {3, 4}) EXPECT_THAT(roles[i]->Output(), ::testing::Not(HasSubstr("dialling unix:")));
}

// PyTorch workers (the pstrain Python package), started by hand as docs/guides/cluster-by-hand.md says: the scheduler
// with --model=external, each worker the example script with --scheduler. The first worker's
// declaration is the job's model; each epoch covers the script's training set exactly once. Skips
// where the package is not built or PyTorch is missing.
TEST(MultiHostTest, PythonWorkersOnTwoHostsTrainADeclaredModel) {
  const std::string bin = BinDir();
  const std::string python_path = "PYTHONPATH=" + bin + "/../python";
  absl::StatusOr<RunResult> probe = pstrain::testing::Run(
      {"/usr/bin/env", python_path, "/usr/bin/python3", "-c", "import pstrain.torch"}, absl::Seconds(60));
  if (!probe.ok() || probe->exit_code != 0) {
    GTEST_SKIP() << "the pstrain Python package or PyTorch is missing: "
                 << (probe.ok() ? probe->output : probe.status().ToString());
  }
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(5);
  if (!made.ok()) GTEST_SKIP() << "cannot make test hosts in network namespaces: " << made.status();
  TestHosts& hosts = **made;
  const std::string dir = MakeTempDir("multihost-python");
  const JobCredentials credentials = MakeCredentials(dir);
  const std::string source = std::string(__FILE__).substr(0, std::string(__FILE__).rfind("/tests/"));
  const std::string scheduler_address = hosts.address(0) + ":7000";

  std::vector<std::unique_ptr<Child>> roles;
  auto start = [&](int host, const std::vector<std::string>& argv, const std::string& name) {
    absl::StatusOr<Child> child =
        Child::Start(hosts.Command(host, Secured(argv, credentials)), dir + "/" + name + ".log");
    ASSERT_TRUE(child.ok()) << child.status();
    roles.push_back(std::make_unique<Child>(std::move(*child)));
  };
  start(0,
        {bin + "/pstrain-scheduler", "--host=0.0.0.0", "--port=7000", "--model=external", "--servers=2", "--workers=2",
         "--mode=sync", "--epochs=2", "--summary_json=" + dir + "/summary.json", "--final_model=" + dir + "/model.bin"},
        "scheduler");
  for (int host : {1, 2}) {
    start(host,
          {bin + "/pstrain-server", "--scheduler=" + scheduler_address, "--host=" + hosts.address(host), "--port=7001"},
          "server-" + std::to_string(host));
  }
  // The data limits are the script's: the scheduler of an external model reads no data.
  for (int host : {3, 4}) {
    start(host,
          {"/usr/bin/env", python_path, "PYTHONDONTWRITEBYTECODE=1", "/usr/bin/python3",
           source + "/examples/pytorch/fashion_mlp.py", "--train_limit=" + std::to_string(kTrainSamples),
           "--test_limit=1000", "--scheduler=" + scheduler_address},
          "worker-" + std::to_string(host));
  }

  ExpectHandStartedJobFinished(roles, hosts, dir);
  for (int i : {3, 4}) EXPECT_THAT(roles[i]->Output(), HasSubstr(": done at epoch 1")) << roles[i]->Output();
  // The declared model, sent by a Python worker and written by the scheduler.
  EXPECT_FALSE(ReadFile(dir + "/model.bin").empty());
}

// The pods' way (deploy/k8s/): every setting from PSTRAIN_* variables as the manifests set them,
// the job from the manifests' own job.textproto (shortened by variables), servers listening on
// 0.0.0.0 and advertising their host's address, every role serving health on a plaintext health
// port (7002) beside its TLS port, as the probes need. Then a worker started
// after the end (what a StatefulSet does to a pod that exited 0) learns the job is over and exits 0.
TEST(MultiHostTest, RolesConfiguredOnlyByEnvironmentLikeThePods) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(4);
  if (!made.ok()) GTEST_SKIP() << "cannot make test hosts in network namespaces: " << made.status();
  TestHosts& hosts = **made;
  const std::string dir = MakeTempDir("multihost-env");
  const std::string bin = BinDir();
  const std::string source = std::string(__FILE__).substr(0, std::string(__FILE__).rfind("/tests/"));
  const std::string scheduler_env = "PSTRAIN_SCHEDULER=" + hosts.address(0) + ":7000";
  // The pods take their certificates and token from a Secret, named by PSTRAIN_* variables.
  const JobCredentials credentials = MakeCredentials(dir);

  std::vector<std::unique_ptr<Child>> roles;
  auto start = [&](int host, std::vector<std::string> env, const std::string& binary, const std::string& name) {
    std::vector<std::string> argv = {"/usr/bin/env"};
    for (const auto& [name, value] : TransportSecurityEnvironment(credentials.For(RoleOf({"/" + binary})))) {
      argv.push_back(name + "=" + value);
    }
    argv.insert(argv.end(), env.begin(), env.end());
    argv.push_back(bin + "/" + binary);  // no flags: the environment says everything
    absl::StatusOr<Child> child = Child::Start(hosts.Command(host, argv), dir + "/" + name + ".log");
    ASSERT_TRUE(child.ok()) << child.status();
    roles.push_back(std::make_unique<Child>(std::move(*child)));
  };
  start(0,
        {"PSTRAIN_HOST=0.0.0.0", "PSTRAIN_PORT=7000", "PSTRAIN_HEALTH_PORT=7002",
         "PSTRAIN_CONFIG=" + source + "/deploy/k8s/base/job.textproto", "PSTRAIN_STATE_DIR=" + dir + "/state",
         "PSTRAIN_SUMMARY_JSON=" + dir + "/summary.json", "PSTRAIN_LINGER_MS=20000", "PSTRAIN_EPOCHS=1",
         "PSTRAIN_TRAIN_LIMIT=" + std::to_string(kTrainSamples), "PSTRAIN_TEST_LIMIT=1000",
         "PSTRAIN_CHECKPOINT_DIR=" + dir + "/checkpoints", "PSTRAIN_FINAL_MODEL=" + dir + "/model.bin"},
        "pstrain-scheduler", "scheduler");
  for (int host : {1, 2}) {
    start(host,
          {scheduler_env, "PSTRAIN_HOST=0.0.0.0", "PSTRAIN_PORT=7001", "PSTRAIN_HEALTH_PORT=7002",
           "PSTRAIN_ADVERTISE_HOST=" + hosts.address(host)},
          "pstrain-server", "server-" + std::to_string(host));
  }
  start(3, {scheduler_env, "PSTRAIN_HEALTH_PORT=7002"}, "pstrain-worker", "worker-a");
  start(3, {scheduler_env, "PSTRAIN_HEALTH_PORT=7003"}, "pstrain-worker", "worker-b");

  // Servers and workers exit 0 when the job ends; the scheduler lingers meanwhile.
  for (size_t i = 1; i < roles.size(); ++i) {
    absl::StatusOr<int> code = roles[i]->Wait(absl::Minutes(3));
    ASSERT_TRUE(code.ok()) << code.status() << "\n" << roles[i]->Output();
    EXPECT_EQ(*code, 0) << roles[i]->Output();
  }
  // A worker restarted after the end learns it from the lingering scheduler.
  absl::StatusOr<RunResult> late = pstrain::testing::Run(
      hosts.Command(3, Secured({"/usr/bin/env", scheduler_env, bin + "/pstrain-worker"}, credentials)),
      absl::Seconds(30));
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->exit_code, 0) << late->output;
  EXPECT_THAT(late->output, HasSubstr("the job is over (FINISHED)"));

  roles[0]->Kill(SIGTERM);  // ends the linger
  absl::StatusOr<int> code = roles[0]->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << roles[0]->Output();
  const std::string scheduler_log = roles[0]->Output();
  EXPECT_THAT(scheduler_log, HasSubstr("at " + hosts.address(1) + ":7001")) << scheduler_log;
  // Plaintext beyond loopback, beside a TLS port: allowed for the health port alone.
  EXPECT_THAT(scheduler_log, HasSubstr("health service (plaintext, health status only) on 0.0.0.0:7002"));
  EXPECT_THAT(roles[1]->Output(), HasSubstr("health service (plaintext, health status only) on 0.0.0.0:7002"));
  const std::string summary = ReadFile(dir + "/summary.json");
  EXPECT_THAT(summary, HasSubstr("\"state\": \"FINISHED\"")) << summary;
  EXPECT_EQ(JsonNumber(summary, "samples"), kTrainSamples) << summary;
  // The manifests' job: the MLP, checkpoints, and the final model written by the scheduler.
  EXPECT_THAT(summary, HasSubstr("\"hidden_sizes\":[256,128]")) << summary;
  EXPECT_FALSE(ReadFile(dir + "/model.bin").empty());
}

}  // namespace
}  // namespace pstrain::testing
