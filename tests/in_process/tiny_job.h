// A tiny model and job for the worker's in-process tests: two tensors ("w" 2x3, "b" 2), two
// servers, two epochs, plain SGD at a constant rate, no overlap.
#ifndef PSTRAIN_TESTS_IN_PROCESS_TINY_JOB_H_
#define PSTRAIN_TESTS_IN_PROCESS_TINY_JOB_H_

#include <vector>

#include "model/param_spec.h"
#include "proto/job.pb.h"

namespace pstrain::in_process {

inline std::vector<model::ParamSpec> TinyParams() {
  model::ParamSpec w;
  w.name = "w";
  w.shape = {2, 3};
  w.num_elements = 6;
  w.init = model::InitKind::kHeUniform;
  w.fan_in = 2;
  w.fan_out = 3;
  model::ParamSpec b;
  b.name = "b";
  b.shape = {2};
  b.num_elements = 2;
  b.flat_offset = 6;
  return {w, b};
}

inline JobSpec TinyJob(Mode mode, int workers, int batch_size, float lr = 0.5f) {
  JobSpec job;
  job.set_mode(mode);
  job.set_num_servers(2);
  job.set_num_workers(workers);
  job.set_batch_size(batch_size);
  job.set_epochs(2);
  job.set_seed(3);
  job.set_lease_batches(2);
  job.set_overlap(false);
  job.mutable_optimizer()->set_type(OptimizerSpec::SGD);
  job.mutable_optimizer()->set_lr(lr);
  job.mutable_optimizer()->mutable_schedule()->set_type(LrSchedule::CONSTANT);
  return job;
}

}  // namespace pstrain::in_process

#endif  // PSTRAIN_TESTS_IN_PROCESS_TINY_JOB_H_
