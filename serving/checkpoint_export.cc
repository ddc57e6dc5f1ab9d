#include "serving/checkpoint_export.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_files.h"
#include "common/job_spec.h"
#include "common/server_counts.h"
#include "common/status_macros.h"
#include "common/table_spec.h"
#include "server/checkpoint_chain.h"
#include "server/embedding_table.h"
#include "server/le_bytes.h"
#include "server/table_format.h"

namespace pstrain::serving {
namespace {

// Puts a server's dense chunks into `values` (the model's flat layout), marking what they cover.
absl::Status PlaceChunks(const server::ShardCheckpoint& ckpt, const std::vector<model::ParamSpec>& params,
                         std::vector<float>* values, std::vector<bool>* covered) {
  const std::string where = absl::StrCat("server ", ckpt.rank, "'s checkpoint of step ", ckpt.step);
  int64_t at = 0;
  for (const ChunkSpec& chunk : ckpt.chunks) {
    const int32_t t = chunk.tensor_id();
    if (t < 0 || t >= static_cast<int32_t>(params.size()) || chunk.offset() < 0 || chunk.length() < 0 ||
        chunk.offset() + chunk.length() > params[t].num_elements) {
      return absl::FailedPreconditionError(absl::StrCat(where, ": chunk of tensor ", t, " at offset ", chunk.offset(),
                                                        " length ", chunk.length(), " is outside the model's tensors (",
                                                        params.size(), " of them); is it this job's model?"));
    }
    const int64_t base = params[t].flat_offset + chunk.offset();
    for (int64_t i = 0; i < chunk.length(); ++i) {
      if ((*covered)[base + i]) {
        return absl::FailedPreconditionError(absl::StrCat(where, ": element ", chunk.offset() + i, " of tensor '",
                                                          params[t].name, "' is in two chunks"));
      }
      (*covered)[base + i] = true;
      (*values)[base + i] = ckpt.weights[at + i];
    }
    at += chunk.length();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelExport> ExportCheckpoints(const CheckpointExportOptions& options) {
  const JobSpec& job = options.job;
  const std::string& dir = options.checkpoint_dir;
  int64_t step = options.step;
  // The server count the step's files were taken under (a job resumed on another count changes it).
  ASSIGN_OR_RETURN(const std::vector<ServerCountEra> eras, ReadServerCounts(dir, job.num_servers()));
  int servers = ServersAt(eras, step);
  if (step < 0) {
    ASSIGN_OR_RETURN(const ConsistentCut cut, LatestConsistentCut(dir, eras));
    step = cut.step;
    servers = cut.num_servers;
  }
  std::vector<server::ShardCheckpoint> shards;
  for (int r = 0; r < servers; ++r) {
    ASSIGN_OR_RETURN(server::ShardCheckpoint ckpt, server::ReadCheckpointChain(dir, r, step));
    shards.push_back(std::move(ckpt));
  }
  return AssembleExport(shards, options);
}

absl::StatusOr<ModelExport> AssembleExport(const std::vector<server::ShardCheckpoint>& shards,
                                           const CheckpointExportOptions& options) {
  const JobSpec& job = options.job;
  const std::string& dir = options.checkpoint_dir;
  if (shards.empty())
    return absl::InvalidArgumentError("an export needs every server's checkpoint of a cut: none given");
  const int64_t step = shards[0].step;
  for (const server::ShardCheckpoint& ckpt : shards) {
    // Every table of the checkpoints is the job's: none is left out of the export.
    if (static_cast<int>(ckpt.tables.size()) != job.tables_size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("server ", ckpt.rank, "'s checkpoint of step ", step, " holds ", ckpt.tables.size(),
                       " tables, the job ", job.tables_size(),
                       IsExternalModel(job) ? " (its workers' declared tables, recorded beside the checkpoints)" : ""));
    }
  }
  for (size_t r = 0; r < shards.size(); ++r) {
    if (shards[r].rank != static_cast<int>(r) || shards[r].step != step || shards[r].base_step >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", r, " of the cut is server ", shards[r].rank, "'s step ", shards[r].step,
          (shards[r].base_step >= 0 ? " (a delta)" : ""), ", expected server ", r, "'s whole step ", step));
    }
  }

  ModelExport e;
  e.manifest.set_step(step);
  *e.manifest.mutable_job() = job;
  // Dense: every element of the model from exactly one server's chunk.
  e.dense.params = options.params;
  const int64_t total = model::TotalElements(options.params);
  e.dense.values.assign(static_cast<size_t>(total), 0.0f);
  std::vector<bool> covered(static_cast<size_t>(total), false);
  for (const server::ShardCheckpoint& ckpt : shards)
    RETURN_IF_ERROR(PlaceChunks(ckpt, options.params, &e.dense.values, &covered));
  if (const auto gap = std::find(covered.begin(), covered.end(), false); gap != covered.end()) {
    return absl::FailedPreconditionError(absl::StrCat("the checkpoints of step ", step, " in '", dir,
                                                      "' cover no value for element ", gap - covered.begin(),
                                                      " of the model's ", total));
  }

  // Tables: every server's rows together, keys ascending.
  for (int t = 0; t < job.tables_size(); ++t) {
    const TableSpec& spec = job.tables(t);
    const TableSpec::RowDtype dtype = spec.has_row_dtype() ? spec.row_dtype() : TableSpec::FP32;
    const int64_t value_bytes = TableRowValueBytes(spec.dim(), dtype);
    std::vector<server::TableBytes> parts;
    for (const server::ShardCheckpoint& ckpt : shards) {
      const std::string where = absl::StrCat("table '", spec.name(), "' of server ", ckpt.rank, "'s step ", step);
      ASSIGN_OR_RETURN(server::TableBytes bytes, server::ParseTableBytes(ckpt.tables[t], where));
      if (bytes.name != spec.name() || bytes.dim != spec.dim() || bytes.record_bytes < value_bytes) {
        return absl::FailedPreconditionError(absl::StrCat(where, ": holds table '", bytes.name, "' of dim ", bytes.dim,
                                                          ", the job's is '", spec.name(), "' of dim ", spec.dim()));
      }
      parts.push_back(bytes);
    }
    // Every server's rows in key order: a merge of the parts, each sorted by key (checked), no key
    // on two servers.
    uint64_t total = 0;
    for (const server::TableBytes& part : parts) total += part.num_rows;
    TableRows out;
    std::string stored;
    out.keys.reserve(total);
    stored.reserve(total * value_bytes);
    using Head = std::pair<uint64_t, size_t>;  // (key, part), smallest key on top
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    std::vector<uint64_t> next(parts.size(), 0);
    for (size_t p = 0; p < parts.size(); ++p) {
      if (parts[p].num_rows > 0) heads.emplace(parts[p].key(0), p);
    }
    while (!heads.empty()) {
      const auto [key, p] = heads.top();
      heads.pop();
      if (!out.keys.empty() && key <= out.keys.back()) {
        return absl::DataLossError(absl::StrCat(
            "table '", spec.name(), "' at step ", step, ": key ", key,
            key == out.keys.back() ? std::string(" is on two servers")
                                   : absl::StrCat(" is out of order in server ", shards[p].rank, "'s rows")));
      }
      out.keys.push_back(key);
      const absl::string_view value = parts[p].row(next[p]).substr(8, value_bytes);
      stored.append(value.data(), value.size());
      if (++next[p] < parts[p].num_rows) heads.emplace(parts[p].key(next[p]), p);
    }
    ASSIGN_OR_RETURN(out.values, DecodeStoredValues(stored, spec.dim(), dtype));
    ExportedTable* info = e.manifest.add_tables();
    info->set_name(spec.name());
    info->set_id(t);
    info->set_dim(spec.dim());
    info->set_row_dtype(dtype);
    info->set_init_bound(spec.has_init_bound() ? spec.init_bound() : server::DefaultInitBound(spec.dim()));
    info->set_seed(job.seed());
    e.tables.push_back(std::move(out));
    e.stored_values.push_back(std::move(stored));
  }
  return e;
}

}  // namespace pstrain::serving
