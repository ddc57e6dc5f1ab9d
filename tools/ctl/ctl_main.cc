// pstrain-ctl: an operator's requests to a running job's scheduler.
//
//   pstrain-ctl scale --scheduler=HOST:PORT --servers=N | --cancel
//       [--tls_cert=operator.crt --tls_key=... --tls_ca=...] [--job_token_file=FILE]
//
// scale asks the job for N parameter servers (Scheduler.Scale): growing, start N - n more
// pstrain-server processes against the same scheduler (they wait for the cut-over); shrinking, the
// servers of the highest ranks are drained and exit. The job moves to the new count at its next
// consistent checkpoint cut (docs/guides/failures-and-churn.md, "Changing the server count").
// scale --cancel cancels a change that has not cut over yet: the job stays at its count, and the
// servers started for it exit 0. A scale-up whose servers do not all register within the job's
// --server_recovery_timeout_ms is cancelled the same way by the scheduler.
// With TLS the certificate must be the job's operator certificate. Prints the scheduler's plan.
// Exit status: 0 the request was taken; 1 the scheduler refused it or could not be reached (the
// message says why); 2 bad flags.
#include <cstdio>
#include <iostream>
#include <string>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "absl/time/time.h"
#include "common/binary_init.h"
#include "scheduler/client/scheduler_client.h"
#include "transport/security_flags.h"

DEFINE_string(scheduler, "", "The job's scheduler, host:port (required)");
DEFINE_int32(servers, 0, "scale: the server count wanted (>= 1)");
DEFINE_bool(cancel, false, "scale: cancel the pending change of the server count instead of asking for one");
DEFINE_double(timeout_s, 10, "How long to wait for the scheduler's answer, in seconds");

int main(int argc, char** argv) {
  pstrain::InitBinary("pstrain-ctl scale --scheduler=HOST:PORT --servers=N | --cancel", &argc, &argv);
  if (argc != 2 || std::string(argv[1]) != "scale") {
    std::cerr << "pstrain-ctl: expected a command: scale (e.g. pstrain-ctl scale --scheduler=HOST:PORT --servers=3)\n";
    return 2;
  }
  if (FLAGS_scheduler.empty()) {
    std::cerr << "pstrain-ctl: --scheduler=HOST:PORT is required\n";
    return 2;
  }
  if (FLAGS_cancel && FLAGS_servers != 0) {
    std::cerr << "pstrain-ctl: scale: --cancel and --servers=" << FLAGS_servers << ": expected one of them\n";
    return 2;
  }
  if (!FLAGS_cancel && FLAGS_servers < 1) {
    std::cerr << "pstrain-ctl: scale: --servers: got " << FLAGS_servers << ", expected a count >= 1\n";
    return 2;
  }
  if (!(FLAGS_timeout_s > 0)) {
    std::cerr << "pstrain-ctl: --timeout_s: got " << FLAGS_timeout_s << ", expected > 0\n";
    return 2;
  }
  std::shared_ptr<const pstrain::TransportSecurity> security = pstrain::TransportSecurityFromFlagsOrExit("pstrain-ctl");
  absl::StatusOr<std::unique_ptr<pstrain::SchedulerClient>> client =
      pstrain::SchedulerClient::Create(FLAGS_scheduler, absl::Seconds(FLAGS_timeout_s), security);
  if (!client.ok()) {
    std::cerr << "pstrain-ctl: " << client.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<pstrain::ScaleResponse> answer =
      FLAGS_cancel ? (*client)->CancelScale() : (*client)->Scale(FLAGS_servers);
  if (!answer.ok()) {
    std::cerr << "pstrain-ctl: scale refused: " << absl::StatusCodeToString(answer.status().code()) << ": "
              << answer.status().message() << "\n";
    return 1;
  }
  std::printf("%s (shard map version %lld now)\n", answer->plan().c_str(),
              static_cast<long long>(answer->shard_map_version()));
  return 0;
}
