#include "worker/traffic_meter.h"

#include <string>

namespace pstrain::worker {

TrafficMeter::TrafficMeter(metrics::Registry* registry, int num_servers)
    : sent_family_(&registry->AddCounter("pstrain_worker_sent_bytes_total",
                                         "Serialized bytes of the requests this worker sent to each parameter server "
                                         "(push, pull, push-pull, finish-epoch, retries included)",
                                         {"server"})),
      received_family_(&registry->AddCounter("pstrain_worker_received_bytes_total",
                                             "Serialized bytes of the answers this worker received from each "
                                             "parameter server",
                                             {"server"})),
      retries_family_(&registry->AddCounter("pstrain_worker_retries_total",
                                            "Calls or steps this worker sent again, by the code of the answer that "
                                            "refused them",
                                            {"code"})),
      saved_(registry
                 ->AddCounter("pstrain_worker_compression_saved_bytes_total",
                              "Bytes gradient compression kept off the wire: the pushed gradients as float32 less "
                              "what was sent")
                 .Get()) {
  for (int s = 0; s < num_servers; ++s) {
    sent_.push_back(sent_family_->With({std::to_string(s)}));
    received_.push_back(received_family_->With({std::to_string(s)}));
  }
}

metrics::Counter* TrafficMeter::ServerCounter(metrics::CounterFamily* family,
                                              const std::vector<metrics::Counter*>& cached, int server) {
  if (server >= 0 && server < static_cast<int>(cached.size())) return cached[server];
  // Rare (a rank beyond the first view): the family's own lookup, under its lock.
  return family->With({std::to_string(server)});
}

void TrafficMeter::Sent(int server, int64_t bytes, int64_t saved) {
  ServerCounter(sent_family_, sent_, server)->Add(static_cast<double>(bytes));
  bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  if (saved > 0) {
    saved_->Add(static_cast<double>(saved));
    saved_bytes_.fetch_add(saved, std::memory_order_relaxed);
  }
}

void TrafficMeter::Received(int server, int64_t bytes) {
  ServerCounter(received_family_, received_, server)->Add(static_cast<double>(bytes));
  bytes_received_.fetch_add(bytes, std::memory_order_relaxed);
}

void TrafficMeter::Retried(absl::StatusCode code) {
  // Off the hot path: a refusal already cost a round trip.
  retries_family_->With({absl::StatusCodeToString(code)})->Increment();
}

TrafficMeter::Totals TrafficMeter::totals() const {
  return Totals{bytes_sent_.load(std::memory_order_relaxed), bytes_received_.load(std::memory_order_relaxed),
                saved_bytes_.load(std::memory_order_relaxed)};
}

}  // namespace pstrain::worker
