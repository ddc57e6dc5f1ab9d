#include "tests/test_hosts.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

// The `ip` binary (iproute2): /usr/sbin on Debian, /sbin on older layouts.
std::string IpBinary() { return access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/sbin/ip"; }

// Runs `argv` and returns OK when it exits 0, else FAILED_PRECONDITION naming it and its output.
absl::Status Ip(const std::vector<std::string>& argv) {
  std::vector<std::string> full = {IpBinary()};
  full.insert(full.end(), argv.begin(), argv.end());
  absl::StatusOr<RunResult> run = Run(full, absl::Seconds(20));
  if (!run.ok())
    return absl::FailedPreconditionError(absl::StrCat(absl::StrJoin(full, " "), ": ", run.status().message()));
  if (run->exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("`", absl::StrJoin(full, " "), "` exited ", run->exit_code, ": ", run->output));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TestHosts>> TestHosts::Create(int n) {
  std::unique_ptr<TestHosts> hosts(new TestHosts(absl::StrCat("pst", getpid(), "-")));
  // Namesakes left by an earlier process with this pid.
  for (int i = 0; i < n; ++i) (void)Ip({"netns", "delete", absl::StrCat(hosts->prefix_, "h", i)});
  hosts->DeleteAll();
  const std::string sw = hosts->prefix_ + "sw";
  if (absl::Status s = Ip({"netns", "add", sw}); !s.ok()) return s;
  // Errors below return through the destructor, which deletes what was made.
  if (absl::Status s = Ip({"-n", sw, "link", "add", "br0", "type", "bridge"}); !s.ok()) return s;
  if (absl::Status s = Ip({"-n", sw, "link", "set", "br0", "up"}); !s.ok()) return s;
  for (int i = 0; i < n; ++i) {
    const std::string name = absl::StrCat(hosts->prefix_, "h", i);
    if (absl::Status s = Ip({"netns", "add", name}); !s.ok()) return s;
    hosts->names_.push_back(name);
    // The host's end is created inside the host, its peer inside the switch: no interface ever
    // appears in the caller's namespace, so nothing clashes with the machine's own.
    const std::string port = absl::StrCat("p", i);
    if (absl::Status s = Ip({"-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", sw});
        !s.ok()) {
      return s;
    }
    for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
             {"-n", sw, "link", "set", port, "master", "br0"},
             {"-n", sw, "link", "set", port, "up"},
             {"-n", name, "addr", "add", absl::StrCat(hosts->address(i), "/24"), "dev", "eth0"},
             {"-n", name, "link", "set", "eth0", "up"},
             {"-n", name, "link", "set", "lo", "up"}}) {
      if (absl::Status s = Ip(argv); !s.ok()) return s;
    }
  }
  return hosts;
}

TestHosts::~TestHosts() { DeleteAll(); }

void TestHosts::DeleteAll() {
  // Deleting a namespace removes its interfaces, and a veth pair goes with either end.
  for (const std::string& name : names_) (void)Ip({"netns", "delete", name});
  names_.clear();
  (void)Ip({"netns", "delete", prefix_ + "sw"});
}

std::string TestHosts::address(int i) const { return absl::StrCat("10.0.0.", i + 1); }

std::vector<std::string> TestHosts::Command(int i, const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {IpBinary(), "netns", "exec", names_[i]};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

}  // namespace pstrain::testing
