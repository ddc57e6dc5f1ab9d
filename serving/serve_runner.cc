#include "serving/serve_runner.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include <glog/logging.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/health.h"
#include "common/listen_error.h"
#include "common/status_macros.h"
#include "serving/checkpoint_follower.h"
#include "serving/job_checkpoints.h"

namespace pstrain::serving {
namespace {

// A request is a table name and keys (8 bytes each), or records of a few hundred bytes: the
// limits' worth plus room for framing. What gRPC may buffer for the whole listener is bounded by
// a ResourceQuota, so that oversize or many concurrent calls cannot grow the process without end.
int MaxRequestBytes(const ServingLimits& limits) {
  const int64_t lookup = limits.max_lookup_keys * 10 + 4096;
  const int64_t predict = limits.max_predict_records * 2048 + 4096;
  return static_cast<int>(std::min<int64_t>(std::max(lookup, predict), int64_t{1} << 30));
}
constexpr size_t kListenerQuotaBytes = size_t{256} << 20;

void LogVersion(const ServedModel& model, absl::Duration took, const CheckpointFollower* follower) {
  int64_t rows = 0;
  for (int t = 0; t < model.manifest().tables_size(); ++t) rows += model.TableRows(t);
  LOG(INFO) << "serving step " << model.step() << ": " << model.dense_values() << " dense values, "
            << model.manifest().tables_size() << " tables (" << rows << " rows), loaded in "
            << absl::FormatDuration(took)
            << (follower != nullptr ? absl::StrCat(" (", follower->deltas_applied(), " deltas applied, ",
                                                   follower->chains_read(), " chains read so far)")
                                    : "");
}

}  // namespace

absl::Status ServeRunner::LoadExport(ModelSlot* slot) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(ModelExport e, ReadModelExport(options_.export_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<const ServedModel> model, ServedModel::Create(std::move(e), absl::Now()));
  const absl::Duration took = absl::Now() - start;
  options_.metrics->Loaded(took);
  LogVersion(*model, took, nullptr);
  slot->SetNewestSeen(model->step());
  slot->Set(std::move(model));
  return absl::OkStatus();
}

absl::Status ServeRunner::Follow(ModelSlot* slot, const std::function<void(bool)>& set_serving) {
  // The job's file appears when the scheduler starts; until then, wait.
  std::optional<CheckpointFollower> follower;
  absl::Status last_error;
  while (!stop_.HasBeenNotified()) {
    if (!follower.has_value()) {
      absl::StatusOr<CheckpointExportOptions> job = ReadJobCheckpoints(options_.checkpoint_dir, options_.model_file);
      if (job.ok()) {
        follower.emplace(*std::move(job));
      } else if (!absl::IsNotFound(job.status())) {
        return job.status();  // a job file that does not parse, a model it cannot lay out
      } else if (job.status() != last_error) {
        LOG(INFO) << "serving: waiting: " << job.status().message();  // once per thing it waits for
        last_error = job.status();
      }
    }
    if (follower.has_value()) {
      const absl::Time start = absl::Now();
      absl::StatusOr<std::optional<ModelExport>> next = follower->Poll();
      slot->SetNewestSeen(follower->newest_seen());
      if (!next.ok()) {
        options_.metrics->LoadFailed();
        if (next.status() != last_error) LOG(WARNING) << "serving: keeping the version served: " << next.status();
        last_error = next.status();
      } else if (next->has_value()) {
        absl::StatusOr<std::unique_ptr<const ServedModel>> model = ServedModel::Create(*std::move(*next), absl::Now());
        if (!model.ok()) return model.status();  // checkpoints of another model: nothing to serve
        const absl::Duration took = absl::Now() - start;
        options_.metrics->Loaded(took);
        LogVersion(**model, took, &*follower);
        slot->Set(*std::move(model));
        set_serving(true);
        last_error = absl::OkStatus();
      }
      const std::shared_ptr<const ServedModel> served = slot->Get();
      if (served != nullptr) options_.metrics->Behind(std::max<int64_t>(0, follower->newest_seen() - served->step()));
    }
    stop_.WaitForNotificationWithTimeout(options_.poll_interval);
  }
  return absl::OkStatus();
}

absl::Status ServeRunner::Run() {
  if (options_.checkpoint_dir.empty() == options_.export_dir.empty()) {
    return absl::InvalidArgumentError("give exactly one of --checkpoint_dir (follow a job) and --export_dir");
  }
  if (options_.poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--poll_ms must be > 0");
  }
  if (options_.limits.max_lookup_keys < 1 || options_.limits.max_lookup_keys > (int64_t{1} << 24) ||
      options_.limits.max_predict_records < 1 || options_.limits.max_predict_records > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--max_lookup_keys ", options_.limits.max_lookup_keys,
                                                   " and --max_predict_records ", options_.limits.max_predict_records,
                                                   ": expected [1, 16777216] and [1, 1048576]"));
  }
  if (options_.metrics == nullptr) return absl::InvalidArgumentError("serving: no metrics given");
  ASSIGN_OR_RETURN(std::unique_ptr<HealthServer> health,
                   StartHealthListener(options_.health_host, options_.health_port));

  ModelSlot slot;
  options_.metrics->SetSource([&slot] { return slot.Get(); });
  ServingService service(&slot, options_.limits, options_.metrics);
  const std::string listen = JoinHostPort(options_.host, options_.port);
  const TransportSecurity& security =
      options_.security != nullptr ? *options_.security : *TransportSecurity::Loopback();
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, security.ServerCredentials(listen));
  EnableHealthService();
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, credentials, &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(MaxRequestBytes(options_.limits));
  grpc::ResourceQuota quota("serving port");
  quota.Resize(kListenerQuotaBytes);
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return CannotListen("serving", listen, "port");
  SetServing(server.get(), health.get(), false);  // until the first version is loaded
  LOG(INFO) << "serving listening on " << JoinHostPort(options_.host, port) << ", "
            << (options_.export_dir.empty() ? "following the checkpoints in " + options_.checkpoint_dir
                                            : "the export " + options_.export_dir);
  absl::Status status;
  if (!options_.export_dir.empty()) {
    status = LoadExport(&slot);
    if (status.ok()) {
      SetServing(server.get(), health.get(), true);
      stop_.WaitForNotification();
    }
  } else {
    status = Follow(&slot, [&](bool serving) { SetServing(server.get(), health.get(), serving); });
  }
  SetServing(server.get(), health.get(), false);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  LOG(INFO) << "serving stopped: " << status;
  return status;
}

}  // namespace pstrain::serving
