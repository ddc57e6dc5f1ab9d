// The built-in CTR model (model/ctr_model.h) a job describes: its CtrShape (common/table_spec.h)
// as CtrModelOptions, for every role that builds or lays out the model (the scheduler's set-up, the
// worker, pstrain-serve, the benchmarks). Header only: CtrModelOptions is a plain struct, so
// nothing of the model library is linked for it.
#ifndef PSTRAIN_COMMON_CTR_MODEL_OPTIONS_H_
#define PSTRAIN_COMMON_CTR_MODEL_OPTIONS_H_

#include "common/table_spec.h"
#include "model/ctr_model.h"
#include "proto/job.pb.h"

namespace pstrain {

inline model::CtrModelOptions CtrModelOptionsOf(const JobSpec& job) {
  const CtrShape shape = CtrShapeOf(job);
  model::CtrModelOptions options;
  options.num_fields = shape.num_fields;
  options.num_dense = shape.num_dense;
  options.dim = shape.dim;
  options.hidden_sizes = shape.hidden_sizes;
  options.interaction =
      job.ctr_interaction() == JobSpec::CTR_INTERACTION_FM ? model::CtrInteraction::kFm : model::CtrInteraction::kNone;
  return options;
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CTR_MODEL_OPTIONS_H_
