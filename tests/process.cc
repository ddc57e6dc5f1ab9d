#include "tests/process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain::testing {

std::string BinDir() {
  const char* dir = std::getenv("PSTRAIN_BIN_DIR");
  if (dir != nullptr) return dir;
  // Run by hand: tests live in BUILD/tests, the binaries in BUILD/bin.
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "build/bin";
  std::string path(self, n);
  return path.substr(0, path.rfind('/')) + "/../bin";
}

absl::StatusOr<Child> Child::Start(const std::vector<std::string>& argv, const std::string& log_path) {
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", log_path, ": ", strerror(errno)));
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // No child outlives a crashed test.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fd);
  Child child;
  child.pid_ = pid;
  child.log_path_ = log_path;
  return child;
}

absl::StatusOr<int> Child::Wait(absl::Duration timeout) {
  timeout *= kSlowdown;
  const absl::Time give_up = absl::Now() + timeout;
  while (!exited_) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return status_;
}

void Child::Kill(int signal) {
  if (!exited_) kill(pid_, signal);
}

std::string Child::Output() const { return ReadFile(log_path_); }

std::string MillisFlag(const std::string& name, int64_t ms) { return absl::StrCat("--", name, "=", ms * kSlowdown); }

absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv, absl::Duration timeout) {
  static int counter = 0;
  std::string log = absl::StrCat(::testing::TempDir(), "/run-", getpid(), "-", counter++, ".log");
  absl::StatusOr<Child> child = Child::Start(argv, log);
  if (!child.ok()) return child.status();
  absl::StatusOr<int> code = child->Wait(timeout);
  if (!code.ok()) {
    child->Kill(SIGKILL);
    (void)child->Wait(absl::Seconds(10));
    return absl::DeadlineExceededError(
        absl::StrCat(argv[0], " did not finish: ", code.status().message(), "; output:\n", child->Output()));
  }
  return RunResult{*code, child->Output()};
}

std::string MakeTempDir(const std::string& name) {
  std::string templ = absl::StrCat(::testing::TempDir(), "/", name, "-XXXXXX");
  char* dir = mkdtemp(templ.data());
  return dir != nullptr ? std::string(dir) : ::testing::TempDir();
}

std::vector<double> JsonNumbers(const std::string& json, const std::string& key) {
  std::vector<double> out;
  std::regex re("\"" + key + "\"\\s*:\\s*([-+0-9.eE]+)");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod((*it)[1].str()));
  }
  return out;
}

double JsonNumber(const std::string& json, const std::string& key) {
  std::regex re("\"" + key + "\"\\s*:\\s*([-+0-9.eE]+)");
  std::smatch m;
  if (!std::regex_search(json, m, re)) return std::nan("");
  return std::stod(m[1].str());
}

std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& name) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  while (dirent* e = readdir(proc)) {
    pid_t pid = atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string comm, state;
    pid_t ppid = 0;
    int ignored;
    if (!(stat >> ignored >> comm >> state >> ppid) || ppid != parent) continue;
    if (ReadFile(absl::StrCat("/proc/", pid, "/cmdline")).find(name) != std::string::npos) out.push_back(pid);
  }
  closedir(proc);
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t ResidentKib(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  while (status >> key) {
    if (key == field) {
      int64_t kib = -1;
      status >> kib;
      return kib;
    }
    status.ignore(1 << 20, '\n');
  }
  return -1;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace pstrain::testing
