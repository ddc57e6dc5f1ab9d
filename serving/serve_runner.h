// pstrain-serve's process: the Serving listener (serving/serving_service.h), secured like every
// role's (transport/transport_security.h), and the loop that keeps the version it answers from
// current.
//
// Where versions come from, one of:
//   - a training job's checkpoint folder: waits for its job.textproto, then polls every
//     `poll_interval` (serving/checkpoint_follower.h) and swaps in each newer cut as it lands.
//     A poll that fails (a file pruned under it, a corrupt delta) is logged and counted; the
//     version served stays, and the next poll tries again.
//   - an export folder (serving/model_export.h): loaded once.
//
// Health (gRPC health on the main port and on the optional plaintext health port) is NOT_SERVING
// until the first version is loaded, so a readiness probe waits for it.
//
// Thread safety: Run blocks the calling thread until Stop (from any thread, e.g. a signal).
#ifndef PSTRAIN_SERVING_SERVE_RUNNER_H_
#define PSTRAIN_SERVING_SERVE_RUNNER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "transport/transport_security.h"
#include "serving/serving_metrics.h"
#include "serving/serving_service.h"

namespace pstrain::serving {

struct ServeOptions {
  // Exactly one of the two.
  std::string checkpoint_dir;
  std::string export_dir;
  // The dense tensors' layout, from a model file (needed for --model=external jobs); empty: the
  // job's built-in model (scheduler/job_setup.h DenseParamSpecs).
  std::string model_file;
  absl::Duration poll_interval = absl::Seconds(1);
  std::string host = "127.0.0.1";
  int port = 0;
  std::string health_host = "0.0.0.0";
  int health_port = 0;
  std::shared_ptr<const TransportSecurity> security;  // null: plaintext on loopback
  ServingLimits limits;
  ServingMetrics* metrics = nullptr;  // borrowed; required
};

class ServeRunner {
 public:
  explicit ServeRunner(ServeOptions options) : options_(std::move(options)) {}

  // Checks the options (INVALID_ARGUMENT naming the flag), listens (UNAVAILABLE when it cannot),
  // logs "serving listening on HOST:PORT", and follows or loads versions until Stop. Errors that
  // end it: those before listening, and an export folder that does not load.
  absl::Status Run();
  void Stop() { stop_.Notify(); }

 private:
  // Loads newer versions into `slot` until Stop.
  absl::Status Follow(ModelSlot* slot, const std::function<void(bool)>& set_serving);
  absl::Status LoadExport(ModelSlot* slot);

  const ServeOptions options_;
  absl::Notification stop_;
};

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_SERVE_RUNNER_H_
