// Model declarations (JobSpec.model "external"): checking what a worker declares
// (Scheduler.DeclareModel), deriving the job's setup from the first declaration accepted, and
// comparing later ones with it.
//
// A declaration is a model file (model/model_file.h: names, shapes, float32 initial values) and
// the data set sizes the worker trains on. The first valid one fixes the job's model; every later
// one must declare the same tensors (count, order, names, shapes) and sizes:
//
//   worker 0: DeclareModel(file A, 60000, 10000) -> accepted: tensors, shard map, sizes, steps
//   worker 1: DeclareModel(file A', 60000, 10000) -> OK if A' has A's names and shapes
//   worker 2: DeclareModel(file B, 58000, 10000) -> INVALID_ARGUMENT "worker 2 declares 58000
//                                                   training samples; the job has 60000"
//
// A declaration also names the tensors that are averaged rather than trained
// (ModelDeclaration.averaged_tensors); the first accepted set is the job's (TensorSpec.averaged in
// the shard map) and later declarations must name the same set.
//
// Thread-compatible free functions with no shared state.
#ifndef PSTRAIN_SCHEDULER_DECLARED_MODEL_H_
#define PSTRAIN_SCHEDULER_DECLARED_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "model/model_file.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"
#include "scheduler/job_setup.h"

namespace pstrain {
namespace scheduler {

// A declaration checked on its own (not yet against the job): its model file parsed.
// Errors name the declaring worker: model::ParseModelFile's INVALID_ARGUMENT (not a model file,
// unsupported version) or DATA_LOSS (truncated, damaged); INVALID_ARGUMENT for no tensors, a
// tensor with zero elements, a non-finite initial value (naming the tensor and the element),
// train_samples < 1 or test_samples < 0 (for a job on a data stream, `stream`: sizes other than
// 0 and 0, since the scheduler counts the stream's records and there is no test set), an averaged
// tensor (averaged_tensors) that names no declared tensor or is listed twice. Blocks on nothing;
// reads the whole file (its checksum).
absl::StatusOr<model::ModelFile> ParseDeclaration(const ModelDeclaration& declaration, bool stream);

// OK when `train_samples` / `test_samples` agree with the sizes `job` pins
// (JobSpec.data.train_samples / test_samples when > 0); otherwise INVALID_ARGUMENT, e.g.
// "worker 2 declares 58000 training samples; the job pins 60000 (data.train_samples)".
absl::Status CheckPinnedSizes(const JobSpec& job, int worker_rank, int64_t train_samples, int64_t test_samples);

// The job's setup from the first accepted declaration of worker `worker_rank`: its tensors (ids
// in order, laid out back to back; those named in `averaged` with TensorSpec.averaged) and the
// shard map cut from them (num_servers, max_chunk_bytes), the declared sizes, total_steps
// (TotalSteps, as for a built-in model) and a model line such as "external: 4 tensors, 203530
// parameters (declared by worker 0)". INVALID_ARGUMENT when the shard map cannot be built.
absl::StatusOr<JobSetup> SetUpDeclaredJob(const JobSpec& job, const std::vector<model::ParamSpec>& params,
                                          const std::vector<std::string>& averaged, int64_t train_samples,
                                          int64_t test_samples, int worker_rank);

// OK when `who` (e.g. "worker 2") declares the job's model: the same tensor count, names and
// shapes in the same order as `tensors` (the job's shard map), and the job's sizes. Values are not
// compared. Otherwise INVALID_ARGUMENT naming the first difference: "worker 2 declares tensor 3
// 'fc2.weight' with shape [128, 256]; the job's is [128, 512]", "worker 2 declares 5 tensors; the
// job's model has 4", "worker 2 declares 58000 training samples; the job has 60000".
absl::Status MatchDeclaration(absl::string_view who, const std::vector<model::ParamSpec>& declared,
                              int64_t train_samples, int64_t test_samples,
                              const google::protobuf::RepeatedPtrField<TensorSpec>& tensors, int64_t job_train_samples,
                              int64_t job_test_samples);

// OK when `who` declares as averaged exactly the job's averaged tensors (TensorSpec.averaged of
// `tensors`, the job's shard map, whose names `averaged` was checked against by ParseDeclaration
// and MatchDeclaration). Otherwise INVALID_ARGUMENT naming the first such tensor in model order:
// "worker 1 declares tensor 'bn.running_mean' as averaged; the job trains it" or "worker 1
// declares tensor 'bn.running_var' as trained; the job averages it".
absl::Status MatchAveragedTensors(absl::string_view who,
                                  const google::protobuf::RepeatedPtrField<std::string>& averaged,
                                  const google::protobuf::RepeatedPtrField<TensorSpec>& tensors);

// A restarted scheduler's check of the model file saved beside `state` for its accepted
// declaration (state.declared_model): it parses, and its tensors are those of the state's shard
// map. DATA_LOSS or INVALID_ARGUMENT (from parsing) or FAILED_PRECONDITION (another model),
// naming the file.
absl::Status CheckSavedDeclaration(absl::string_view model_file, const SchedulerState& state);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_DECLARED_MODEL_H_
