// --health_port and --health_host, shared by every role binary (scheduler, server, worker): a
// plaintext listener serving only grpc.health.v1.Health (transport/health.h), for probes that cannot
// present a TLS client certificate. Also PSTRAIN_HEALTH_PORT / PSTRAIN_HEALTH_HOST.
//
// Only binaries link this (library `pstrain_health_flags`); each checks the values it is given.
#ifndef PSTRAIN_TRANSPORT_HEALTH_FLAGS_H_
#define PSTRAIN_TRANSPORT_HEALTH_FLAGS_H_

#include <gflags/gflags.h>

DECLARE_int32(health_port);
DECLARE_string(health_host);

#endif  // PSTRAIN_TRANSPORT_HEALTH_FLAGS_H_
