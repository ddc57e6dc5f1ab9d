// Which roles share a host, for choosing a unix domain socket over TCP (LocalEndpoint in
// proto/cluster.proto).
//
// Two processes may use each other's unix sockets when they see the same filesystem (the same
// mount namespace: a socket path means the same file to both) and, so that "the same host" also
// means "the same loopback", the same network namespace: the id is the kernel's boot id plus the
// inodes of the process's mount and network namespaces. Processes in different containers or
// pods (also containers sharing the host's network but not its filesystem), or in the test hosts
// of tests/test_hosts.h, get different ids even on one machine.
#ifndef PSTRAIN_COMMON_HOST_ID_H_
#define PSTRAIN_COMMON_HOST_ID_H_

#include <string>

namespace pstrain {

// "<boot id>/mnt:<inode>/net:<inode>"; empty when any of them cannot be read (then nobody is
// local to us).
std::string HostId();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HOST_ID_H_
