#include "server/inflight_budget.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/compression.h"
#include "common/job_spec.h"

namespace pstrain::server {
namespace {

// A chunk's header in a push: tags, tensor id, offset, length, encoding, the data's length prefix.
constexpr int64_t kChunkHeaderBytes = 40;

// The most bytes a push of chunk `length` can take on the wire under `compression`.
int64_t ChunkBytes(const Compression& compression, int64_t length) {
  int64_t data = 4 * length;  // float32: also what fp16/bf16 fall back to for out-of-range values
  if (compression.kind == Compression::kTopK) data = std::max(data, 8 * TopKCount(compression.topk_ratio, length));
  return kChunkHeaderBytes + data;
}

}  // namespace

RequestLimits RequestLimitsForJob(const JobSpec& job, const ShardMap& shard_map, const std::vector<int>& shards) {
  // A job that got this far had its compression validated; an unknown one falls back to float32.
  const Compression compression = ParseCompression(job.compression()).value_or(Compression{});
  const int64_t samples = std::max<int64_t>({job.batch_size(), job.global_batch(), 1});
  int64_t one_key_each = 0;  // a row per sample per table: key, row, the key asked back
  for (const TableSpec& table : job.tables()) one_key_each += samples * (8 + 4 * int64_t{std::max(table.dim(), 1)} + 8);
  const int64_t sparse = kKeysPerSampleAllowance * one_key_each;
  int64_t largest_push = 0;
  int64_t largest_dense = 0;
  int64_t answers = 0;
  for (int shard : shards) {
    int64_t dense = 0;
    int64_t floats = 0;
    for (const ChunkSpec& chunk : shard_map.chunks()) {
      if (chunk.server_rank() != shard) continue;
      dense += ChunkBytes(compression, chunk.length());
      floats += chunk.length();
    }
    largest_push = std::max(largest_push, dense + sparse);
    largest_dense = std::max(largest_dense, dense);
    answers += 4 * floats;
  }
  RequestLimits limits;
  limits.max_request_bytes = largest_push + largest_push / 8 + kRequestHeadroomBytes;
  const int64_t typical = largest_dense + one_key_each;
  limits.typical_request_bytes = typical + typical / 8 + kRequestHeadroomBytes;
  const int64_t workers = (job.max_workers() > 0 ? job.max_workers() : job.num_workers() + kDefaultSpareWorkers) + 1;
  limits.max_inflight_bytes = workers * (static_cast<int64_t>(shards.size()) * 2 * limits.max_request_bytes + answers);
  return limits;
}

InflightBudget::Ticket::Ticket(Ticket&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      reading_(other.reading_) {}

InflightBudget::Ticket& InflightBudget::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    reading_ = other.reading_;
  }
  return *this;
}

InflightBudget::Ticket::~Ticket() { Release(); }

void InflightBudget::Ticket::Release() {
  if (budget_ != nullptr) {
    if (reading_) budget_->reading_.fetch_sub(bytes_, std::memory_order_relaxed);
    budget_->inflight_.fetch_sub(bytes_, std::memory_order_relaxed);
  }
  budget_ = nullptr;
  bytes_ = 0;
}

void InflightBudget::SetLimits(const RequestLimits& limits) {
  max_request_.store(std::max<int64_t>(limits.max_request_bytes, 0), std::memory_order_relaxed);
  max_inflight_.store(std::max<int64_t>(limits.max_inflight_bytes, 0), std::memory_order_relaxed);
}

RequestLimits InflightBudget::limits() const {
  return RequestLimits{max_request_.load(std::memory_order_relaxed), max_inflight_.load(std::memory_order_relaxed)};
}

absl::Status InflightBudget::CheckSize(absl::string_view what, int64_t request_bytes) {
  const int64_t most = max_request_.load(std::memory_order_relaxed);
  if (most == 0 || request_bytes <= most) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": request of ", request_bytes, " bytes exceeds this job's limit of ", most, " bytes"));
}

absl::StatusOr<InflightBudget::Ticket> InflightBudget::Admit(absl::string_view what, int64_t bytes, bool reading) {
  bytes = std::max<int64_t>(bytes, 0);
  const int64_t bound = max_inflight_.load(std::memory_order_relaxed);
  // Reading calls count against half the bound first; then every call against the whole.
  std::atomic<int64_t>* counters[2] = {reading ? &reading_ : nullptr, &inflight_};
  const int64_t bounds[2] = {bound / 2, bound};
  for (int i = 0; i < 2; ++i) {
    if (counters[i] == nullptr) continue;
    const int64_t most = bounds[i];
    int64_t held = counters[i]->load(std::memory_order_relaxed);
    while (true) {
      if (bound != 0 && held != 0 && held + bytes > most) {
        if (i == 1 && reading) reading_.fetch_sub(bytes, std::memory_order_relaxed);  // undo the first count
        return absl::ResourceExhaustedError(
            absl::StrCat(what, ": ", bytes, " bytes would exceed the server's bound of ", most, " bytes in flight (",
                         held, " held); retry after ", absl::ToInt64Milliseconds(retry_after_), " ms"));
      }
      if (counters[i]->compare_exchange_weak(held, held + bytes, std::memory_order_relaxed)) break;
    }
  }
  return Ticket(this, bytes, reading);
}

}  // namespace pstrain::server
