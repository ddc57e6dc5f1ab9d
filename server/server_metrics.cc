#include "server/server_metrics.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "server/parameter_store.h"

namespace pstrain::server {
namespace {

constexpr const char* kMethodNames[kNumRpcMethods] = {"Pull", "Push", "PushPull", "FinishEpoch"};
constexpr const char* kNoShard = "none";

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Checkpoint files take from milliseconds (a small shard) to minutes (a large one on slow disk).
std::vector<double> CheckpointBuckets() { return metrics::ExponentialBuckets(0.001, 4, 11); }

}  // namespace

std::string RefusalCause(absl::StatusCode code) { return absl::AsciiStrToLower(absl::StatusCodeToString(code)); }

ServerMetrics::ServerMetrics(metrics::Registry* registry) : registry_(registry) {
  CHECK(registry != nullptr);
  auto& requests =
      registry->AddCounter("pstrain_server_requests_total",
                           "Calls to the parameter service by method, counted when their handler starts", {"method"});
  auto& duration =
      registry->AddHistogram("pstrain_server_request_duration_seconds",
                             "From a call reaching its handler to its answer (OK or not; a parked call until released)",
                             {"method"}, metrics::LatencyBuckets());
  for (int m = 0; m < kNumRpcMethods; ++m) {
    requests_[m] = requests.With({kMethodNames[m]});
    duration_[m] = duration.With({kMethodNames[m]});
  }
  received_family_ = &registry->AddCounter("pstrain_server_received_bytes_total",
                                           "Serialized Pull/Push/PushPull request bytes by the shard they were for "
                                           "(none: refused before the shard was known)",
                                           {"shard"});
  sent_family_ =
      &registry->AddCounter("pstrain_server_sent_bytes_total",
                            "Serialized Pull/Push/PushPull response bytes by the shard that answered", {"shard"});
  received_[kNone] = received_family_->With({kNoShard});
  sent_[kNone] = sent_family_->With({kNoShard});
  auto& refused = registry->AddCounter("pstrain_server_refused_requests_total",
                                       "Calls answered with an error, by gRPC status code", {"cause"});
  for (int code = 1; code < static_cast<int>(refused_.size()); ++code) {
    refused_[code] = refused.With({RefusalCause(static_cast<absl::StatusCode>(code))});
  }
  step_wait_ =
      &registry->AddHistogram("pstrain_server_step_wait_seconds", "SYNC steps: from a step's first push to its last",
                              {"shard"}, metrics::LatencyBuckets());
  checkpoint_duration_ = &registry->AddHistogram("pstrain_server_checkpoint_duration_seconds",
                                                 "Writing one checkpoint file", {"shard"}, CheckpointBuckets());
  checkpoints_written_ =
      &registry->AddCounter("pstrain_server_checkpoints_written_total", "Checkpoint files written", {"shard"});
  refused_pushes_ = &registry->AddCounter("pstrain_server_refused_pushes_total",
                                          "Pushes refused for what they hold: reason=\"grad_norm\", a gradient "
                                          "norm above the job's max_grad_norm_per_sample",
                                          {"reason", "shard"});
  last_checkpoint_time_ = &registry->AddGauge("pstrain_server_last_checkpoint_timestamp_seconds",
                                              "Unix time the newest checkpoint file was written", {"shard"});
  checkpoint_age_ = &registry->AddGauge("pstrain_server_checkpoint_age_seconds",
                                        "Seconds since the newest checkpoint file was written", {"shard"});
  step_ = &registry->AddGauge("pstrain_server_step",
                              "Updates applied to the shard (SYNC: completed steps); replica=\"true\" for the live "
                              "copy of another server's shard",
                              {"shard", "replica"});
  parked_ = &registry->AddGauge("pstrain_server_parked_calls",
                                "Calls waiting in the store: SYNC pulls for the step being aggregated, SSP pulls "
                                "past the staleness bound, pushes waiting until applied",
                                {"shard"});
  table_rows_ = &registry->AddGauge("pstrain_server_table_rows", "Embedding rows held", {"table", "shard"});
  table_bytes_ = &registry->AddGauge("pstrain_server_table_bytes", "Memory used by embedding rows", {"table", "shard"});
  table_admitted_ =
      &registry->AddCounter("pstrain_server_table_admitted_rows_total",
                            "Embedding rows created by updates (keys admission let in)", {"table", "shard"});
  table_refused_ = &registry->AddCounter("pstrain_server_table_refused_updates_total",
                                         "Updates of embedding keys dropped because admission did not admit the key",
                                         {"table", "shard"});
  table_evicted_ = &registry->AddCounter("pstrain_server_table_evicted_rows_total",
                                         "Embedding rows that left by the table's eviction policy", {"table", "shard"});
  table_tombstones_ = &registry->AddGauge(
      "pstrain_server_table_tombstones",
      "Tombstones of evicted embedding rows the table holds for the next checkpoint (at most 65,536)",
      {"table", "shard"});
  inflight_requests_ =
      registry->AddGauge("pstrain_server_inflight_requests", "Calls received and not answered yet").Get();
  inflight_bytes_ =
      registry->AddGauge("pstrain_server_inflight_bytes", "Bytes held by admitted calls (requests and answer buffers)")
          .Get();
  registry->AddCollector([this] { Collect(); });
}

void ServerMetrics::SetShards(int own, std::optional<int> replica) {
  metrics::CounterFamily& received = *received_family_;
  metrics::CounterFamily& sent = *sent_family_;
  received_[kOwn] = received.With({absl::StrCat(own)});
  sent_[kOwn] = sent.With({absl::StrCat(own)});
  if (replica.has_value()) {
    received_[kReplica] = received.With({absl::StrCat(*replica)});
    sent_[kReplica] = sent.With({absl::StrCat(*replica)});
  }
}

StoreMetrics ServerMetrics::ForShard(int shard) {
  const std::string label = absl::StrCat(shard);
  StoreMetrics m;
  m.step_wait = step_wait_->With({label});
  m.checkpoint_duration = checkpoint_duration_->With({label});
  m.checkpoints_written = checkpoints_written_->With({label});
  m.last_checkpoint_time = last_checkpoint_time_->With({label});
  m.refused_grad_norm = refused_pushes_->With({"grad_norm", label});
  return m;
}

void ServerMetrics::Watch(const ParameterStore* own, const ParameterStore* replica,
                          std::function<int64_t()> inflight_bytes) {
  absl::MutexLock lock(&mu_);
  own_ = own;
  replica_ = replica;
  inflight_bytes_source_ = std::move(inflight_bytes);
}

void ServerMetrics::Unwatch() {
  absl::MutexLock lock(&mu_);
  CollectLocked();
  own_ = nullptr;
  replica_ = nullptr;
  inflight_bytes_source_ = nullptr;
}

void ServerMetrics::Collect() {
  absl::MutexLock lock(&mu_);
  CollectLocked();
}

void ServerMetrics::CollectLocked() {
  double requests = 0, answers = 0;
  for (int m = 0; m < kNumRpcMethods; ++m) {
    requests += requests_[m]->value();
    answers += static_cast<double>(duration_[m]->count());
  }
  // Read apart, so a call counted between the two reads can make it briefly negative.
  inflight_requests_->Set(std::max(0.0, requests - answers));
  if (inflight_bytes_source_) inflight_bytes_->Set(static_cast<double>(inflight_bytes_source_()));
  const double now = absl::ToUnixMicros(absl::Now()) / 1e6;
  for (const ParameterStore* store : {own_, replica_}) {
    if (store == nullptr) continue;
    const std::string shard = absl::StrCat(store->rank());
    step_->With({shard, store == replica_ ? "true" : "false"})->Set(static_cast<double>(store->step()));
    parked_->With({shard})->Set(store->num_parked());
    const double written = last_checkpoint_time_->With({shard})->value();
    if (written > 0) checkpoint_age_->With({shard})->Set(std::max(0.0, now - written));
    for (const TableStats& t : store->TableStats()) {
      table_rows_->With({t.name, shard})->Set(static_cast<double>(t.rows));
      table_bytes_->With({t.name, shard})->Set(static_cast<double>(t.bytes_used));
      table_admitted_->With({t.name, shard})->RaiseTo(static_cast<double>(t.admitted));
      table_refused_->With({t.name, shard})->RaiseTo(static_cast<double>(t.refused));
      table_evicted_->With({t.name, shard})->RaiseTo(static_cast<double>(t.evicted));
      table_tombstones_->With({t.name, shard})->Set(static_cast<double>(t.tombstones));
    }
  }
}

ServerMetrics::Call::Call(ServerMetrics* metrics, RpcMethod method, int64_t request_bytes)
    : metrics_(metrics), method_(method), request_bytes_(request_bytes), start_ns_(SteadyNanos()) {
  metrics_->requests_[static_cast<int>(method_)]->Increment();
}

void ServerMetrics::Call::Route(Slot slot) {
  if (routed_) return;
  routed_ = true;
  slot_ = slot;
  if (request_bytes_ > 0) metrics_->received_[slot_].load()->Add(static_cast<double>(request_bytes_));
}

void ServerMetrics::Call::Answered(int64_t response_bytes) const {
  if (response_bytes > 0) metrics_->sent_[slot_].load()->Add(static_cast<double>(response_bytes));
  metrics_->duration_[static_cast<int>(method_)]->Observe(static_cast<double>(SteadyNanos() - start_ns_) * 1e-9);
}

void ServerMetrics::Call::Refused(absl::StatusCode code) {
  Route(slot_);  // not routed yet: the bytes count for no shard
  metrics_->RefusedUnread(code);
  metrics_->duration_[static_cast<int>(method_)]->Observe(static_cast<double>(SteadyNanos() - start_ns_) * 1e-9);
}

void ServerMetrics::RefusedUnread(absl::StatusCode code) {
  const auto i = static_cast<size_t>(code);
  if (i == 0 || i >= refused_.size()) {
    refused_[static_cast<size_t>(absl::StatusCode::kUnknown)]->Increment();
    return;
  }
  refused_[i]->Increment();
}

double ServerMetrics::refused(absl::StatusCode code) const {
  const auto i = static_cast<size_t>(code);
  return i == 0 || i >= refused_.size() ? 0 : refused_[i]->value();
}

ServerTraffic ServerMetrics::Traffic() const {
  ServerTraffic t;
  double received = 0, sent = 0, requests = 0, refused = 0;
  for (int s = 0; s < 3; ++s) {
    received += received_bytes(static_cast<Slot>(s));
    sent += sent_bytes(static_cast<Slot>(s));
  }
  for (int m = 0; m < kNumRpcMethods; ++m) requests += requests_[m]->value();
  for (size_t c = 1; c < refused_.size(); ++c) refused += refused_[c]->value();
  t.set_bytes_received(static_cast<int64_t>(received));
  t.set_bytes_sent(static_cast<int64_t>(sent));
  t.set_requests(static_cast<int64_t>(requests));
  t.set_refused(static_cast<int64_t>(refused));
  return t;
}

}  // namespace pstrain::server
