// What the scheduler derives from a job before it starts serving: the data set's sizes, the
// model's tensors, the shard map and the number of optimizer steps.
//
// Thread-compatible free functions; SetUpJob blocks on reading two small file headers.
#ifndef PSTRAIN_SCHEDULER_JOB_SETUP_H_
#define PSTRAIN_SCHEDULER_JOB_SETUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/param_spec.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"

namespace pstrain {
namespace scheduler {

struct JobSetup {
  // Samples after the job's train_limit / test_limit.
  int64_t train_samples = 0;
  int64_t test_samples = 0;
  // The model's name and its tensors, for the log ("cnn: 8 tensors, 454922 parameters").
  std::string model_line;
  ShardMap shard_map;
  // See TotalSteps() in scheduler/scheduler.h.
  int64_t total_steps = 0;
};

// Reads the headers of the job's training and test sets and builds everything above. A job on a
// data stream reads no file (its sizes start at 0 and grow as the scheduler takes files in; it has
// no test set) and only checks that the stream's folder exists (NOT_FOUND). For an
// external model (JobSpec.model "external") reads nothing: the sizes are the job's pinned ones
// (data.train_samples / test_samples, 0 when not pinned), and the shard map and total steps stay
// empty until a worker declares the model (scheduler/declared_model.h).
// Errors: the data reader's (NOT_FOUND, DATA_LOSS, ...) for a missing or corrupt data dir;
// INVALID_ARGUMENT when the job's training set is empty, the two splits disagree on image size
// or class count, the model refuses the data's sizes, or the shard map cannot be built.
absl::StatusOr<JobSetup> SetUpJob(const JobSpec& job);

// The dense tensors of the job's built-in model, as SetUpJob makes them, reading no more than the
// training set's header (an image model's size and classes; nothing for "ctr"). For tools that
// read a job's checkpoints (pstrain-export). FAILED_PRECONDITION for an external model (its
// workers declare it); the errors of SetUpJob otherwise.
absl::StatusOr<std::vector<model::ParamSpec>> DenseParamSpecs(const JobSpec& job);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_JOB_SETUP_H_
