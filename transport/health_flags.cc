#include "transport/health_flags.h"

DEFINE_int32(health_port, 0,
             "Also serve gRPC health checking (grpc.health.v1.Health, nothing else) in plaintext on this port: "
             "SERVING while the role is of use to the job, for probes that cannot present a TLS client "
             "certificate (0: none; the scheduler's and a server's main port serve it too)");
DEFINE_string(health_host, "0.0.0.0",
              "With --health_port: the address the health service listens on (plaintext is allowed beyond "
              "loopback here: it serves only the health status)");
