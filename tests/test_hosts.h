// The project's own test hosts: network namespaces on one virtual Ethernet segment, so a test can
// run the roles of a job on "different machines" with real, non-loopback addresses.
//
// TestHosts::Create(n) makes a switch namespace holding a bridge, and n host namespaces, each with
// one veth interface plugged into the bridge and the address 10.0.0.(i+1)/24 (host 0 is 10.0.0.1),
// plus loopback. Names carry the test process's pid, so leftovers of a crashed run never collide;
// every namespace is deleted when the TestHosts is destroyed (and namespaces of an earlier run with
// the same pid are deleted first).
//
// Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip`; Create says why it cannot when
// it cannot, so the caller can skip.
//
// Not thread-safe.
#ifndef PSTRAIN_TESTS_TEST_HOSTS_H_
#define PSTRAIN_TESTS_TEST_HOSTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain::testing {

class TestHosts {
 public:
  // FAILED_PRECONDITION, with the failing command and its output, when the namespaces cannot be
  // made (not root, no `ip`, no veth or bridge support).
  static absl::StatusOr<std::unique_ptr<TestHosts>> Create(int n);
  ~TestHosts();

  // Host i's address on the segment, "10.0.0.<i+1>".
  std::string address(int i) const;
  // `argv` run inside host i: {"ip", "netns", "exec", <host i>, argv...}.
  std::vector<std::string> Command(int i, const std::vector<std::string>& argv) const;

 private:
  explicit TestHosts(std::string prefix) : prefix_(std::move(prefix)) {}
  void DeleteAll();

  std::string prefix_;              // namespace names start with it
  std::vector<std::string> names_;  // host namespaces, by index
};

}  // namespace pstrain::testing

#endif  // PSTRAIN_TESTS_TEST_HOSTS_H_
