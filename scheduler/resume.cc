#include "scheduler/resume.h"

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint_files.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "common/server_counts.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"

namespace pstrain {
namespace scheduler {
namespace {

// The fields a resumed job must share with the first run: they fix the layout of the shard files
// (model, split), what the optimizer state means, and which samples each step saw.
struct Field {
  const char* name;
  std::string (*get)(const JobSpec&);
};

const Field kMustMatch[] = {
    {"model", [](const JobSpec& j) { return j.model(); }},
    {"hidden_sizes", [](const JobSpec& j) { return absl::StrJoin(j.hidden_sizes(), ","); }},
    {"max_chunk_bytes", [](const JobSpec& j) { return absl::StrCat(j.max_chunk_bytes()); }},
    {"mode", [](const JobSpec& j) { return ModeName(j.mode()); }},
    {"seed", [](const JobSpec& j) { return absl::StrCat(j.seed()); }},
    {"data.train_limit", [](const JobSpec& j) { return absl::StrCat(j.data().train_limit()); }},
    {"optimizer.type", [](const JobSpec& j) { return OptimizerName(j.optimizer().type()); }},
    {"epochs", [](const JobSpec& j) { return absl::StrCat(j.epochs()); }},
    {"max_steps", [](const JobSpec& j) { return absl::StrCat(j.max_steps()); }},
};

}  // namespace

std::string JobManifestPath(const JobSpec& job) { return absl::StrCat(job.checkpoint_dir(), "/", kJobManifestName); }

absl::Status WriteJobManifest(const JobSpec& job) {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(job, &text)) {
    return absl::InternalError("job manifest: cannot print the job as text");
  }
  std::error_code ignored;  // A folder that cannot be made fails the write below, with its path.
  std::filesystem::create_directories(job.checkpoint_dir(), ignored);
  return WriteFileAtomically(JobManifestPath(job), "job manifest",
                             absl::StrCat("# Written by pstrain-scheduler; read back by --resume.\n", text));
}

absl::Status WriteDeclaration(const JobSpec& job, absl::string_view model_file,
                              const google::protobuf::RepeatedPtrField<TableSpec>& tables) {
  JobSpec tables_only;
  *tables_only.mutable_tables() = tables;
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(tables_only, &text)) {
    return absl::InternalError("declared tables: cannot print them as text");
  }
  const mode_t mode = OutputMode(job.output_mode());
  RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(job.checkpoint_dir(), "/", kDeclaredModelName), "declared model",
                                      model_file, mode));
  return WriteFileAtomically(absl::StrCat(job.checkpoint_dir(), "/", kDeclaredTablesName), "declared tables",
                             absl::StrCat("# Written by pstrain-scheduler: the tables the workers declared.\n", text),
                             mode);
}

absl::Status WriteStreamCatalog(const JobSpec& job, const StreamState& catalog) {
  StreamState files_only = catalog;
  files_only.clear_scores();
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(files_only, &text)) {
    return absl::InternalError("stream catalog: cannot print it as text");
  }
  return WriteFileAtomically(
      absl::StrCat(job.checkpoint_dir(), "/", kStreamCatalogName), "stream catalog",
      absl::StrCat("# Written by pstrain-scheduler: the data stream's files and their first positions.\n", text),
      OutputMode(job.output_mode()));
}

absl::StatusOr<StreamState> ReadStreamCatalog(const JobSpec& job) {
  const std::string path = absl::StrCat(job.checkpoint_dir(), "/", kStreamCatalogName);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return StreamState();
  ASSIGN_OR_RETURN(const std::string text, ReadRegularFile(path, "stream catalog", int64_t{1} << 30));
  StreamState catalog;
  if (!google::protobuf::TextFormat::ParseFromString(text, &catalog)) {
    return absl::DataLossError(absl::StrCat("stream catalog ", path, ": not a StreamState textproto"));
  }
  return catalog;
}

absl::Status CheckNoEarlierCheckpoints(const JobSpec& job) {
  for (int rank = 0; rank < job.num_servers(); ++rank) {
    const std::vector<int64_t> steps = ListCheckpointSteps(job.checkpoint_dir(), rank);
    if (steps.empty()) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint_dir ", job.checkpoint_dir(), " already holds checkpoints of an earlier run (server ", rank,
        ", steps [", absl::StrJoin(steps, ", "), "]); pass --resume to continue that job, or use an empty folder"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ResumePoint> FindResumePoint(const JobSpec& job) {
  const std::string path = JobManifestPath(job);
  if (job.mode() != SYNC) {
    // Async servers checkpoint at their own update counts, so their files form no common step to
    // go back to, and the lease pools' positions are not in them.
    return absl::InvalidArgumentError(absl::StrCat("resume: mode is ", ModeName(job.mode()),
                                                   "; resuming a whole job needs mode sync (consistent "
                                                   "checkpoint cuts)"));
  }
  absl::StatusOr<JobSpec> first = ReadJobSpecFile(path);
  if (!first.ok()) {
    if (absl::IsNotFound(first.status())) {
      return absl::NotFoundError(
          absl::StrCat("resume: no job manifest ", path, "; expected the checkpoint folder of an earlier run"));
    }
    return absl::InvalidArgumentError(absl::StrCat("resume: ", first.status().message()));
  }
  ApplyJobDefaults(&*first);
  for (const Field& field : kMustMatch) {
    const std::string now = field.get(job);
    const std::string then = field.get(*first);
    if (now != then) {
      return absl::InvalidArgumentError(absl::StrCat("resume: ", field.name, " is ", now, ", but the job in ", path,
                                                     " had ", then, "; expected the same"));
    }
  }
  absl::StatusOr<std::vector<ServerCountEra>> eras = ReadServerCounts(job.checkpoint_dir(), first->num_servers());
  if (!eras.ok()) return absl::Status(eras.status().code(), absl::StrCat("resume: ", eras.status().message()));
  absl::StatusOr<ConsistentCut> cut = LatestConsistentCut(job.checkpoint_dir(), *eras);
  if (!cut.ok()) return absl::NotFoundError(absl::StrCat("resume: ", cut.status().message()));
  ResumePoint point;
  point.step = cut->step;
  point.num_servers = cut->num_servers;
  point.global_batch = first->global_batch();
  point.server_counts = ContinueFrom(*eras, cut->step, job.num_servers());
  return point;
}

}  // namespace scheduler
}  // namespace pstrain
