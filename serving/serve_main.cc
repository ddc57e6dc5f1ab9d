// pstrain-serve: a read-only copy of a job's model, answering Lookup, Predict and GetModelInfo
// over gRPC (proto/serving.proto) while the job trains (docs/guides/serving.md).
//
//   pstrain-serve --checkpoint_dir=DIR [--port=0] [--poll_ms=1000]    follow a job's checkpoints
//   pstrain-serve --export_dir=EXPORT [--port=0]                      serve one export
//
// Secured like every role (--tls_cert=serving.pem --tls_key --tls_ca --job_token_file); health
// and metrics flags as theirs. Runs until SIGTERM or SIGINT. Exit status: 0 stopped; 1 the model
// could not be served (an export that does not load, checkpoints of a model it cannot lay out);
// 2 bad flags or no port.
#include <iostream>

#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "common/binary_init.h"
#include "transport/health_flags.h"
#include "common/metrics.h"
#include "common/metrics_flags.h"
#include "transport/security_flags.h"
#include "common/stop_signals.h"
#include "serving/serve_runner.h"

DEFINE_string(checkpoint_dir, "", "A training job's checkpoint folder to follow (its --checkpoint_dir)");
DEFINE_string(export_dir, "", "A model export (pstrain-export) to serve, instead of --checkpoint_dir");
DEFINE_string(model_file, "",
              "A model file whose tensors are the job's (needed for --model=external; default: the job's model)");
DEFINE_string(host, "127.0.0.1", "Address to listen on");
DEFINE_int32(port, 0, "Port to listen on; 0 picks a free one (logged)");
DEFINE_int64(poll_ms, 1000, "How often to look for a new checkpoint, milliseconds");
DEFINE_int64(max_lookup_keys, 100000, "Most keys in one Lookup");
DEFINE_int64(max_predict_records, 10000, "Most records in one Predict");

int main(int argc, char** argv) {
  pstrain::InitBinary("pstrain-serve --checkpoint_dir=DIR | --export_dir=EXPORT [--port=0]", &argc, &argv);
  // Before any thread starts, so that every thread started later leaves SIGINT and SIGTERM to it.
  pstrain::StopSignals signals;
  pstrain::serving::ServeOptions options;
  options.checkpoint_dir = FLAGS_checkpoint_dir;
  options.export_dir = FLAGS_export_dir;
  options.model_file = FLAGS_model_file;
  options.host = FLAGS_host;
  options.port = FLAGS_port;
  options.poll_interval = absl::Milliseconds(FLAGS_poll_ms);
  options.health_host = FLAGS_health_host;
  options.health_port = FLAGS_health_port;
  options.limits.max_lookup_keys = FLAGS_max_lookup_keys;
  options.limits.max_predict_records = FLAGS_max_predict_records;
  options.security = pstrain::TransportSecurityFromFlagsOrExit("pstrain-serve");
  pstrain::metrics::Registry registry;
  registry.SetConstantLabels({{"role", "serving"}});
  pstrain::serving::ServingMetrics serving_metrics(&registry);
  auto metrics_server = pstrain::ServeMetricsFromFlags(&registry);
  if (!metrics_server.ok()) {
    std::cerr << "pstrain-serve: " << metrics_server.status().message() << "\n";
    return absl::IsInvalidArgument(metrics_server.status()) ? 2 : 1;
  }
  options.metrics = &serving_metrics;
  pstrain::serving::ServeRunner runner(options);
  absl::Status status;
  {
    pstrain::StopSignals::Forwarding forwarding(&signals, [&runner] { runner.Stop(); });
    status = runner.Run();
  }
  pstrain::LingerAndStopMetrics(metrics_server->get());
  if (!status.ok()) {
    std::cerr << "pstrain-serve: " << status.message() << "\n";
    return absl::IsInvalidArgument(status) || absl::IsUnavailable(status) ? 2 : 1;
  }
  return 0;
}
