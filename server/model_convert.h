// Conversions from the wire description of a job (proto/cluster.proto, proto/job.proto) to the
// plain structs of model/ (which knows nothing of protos).
#ifndef PSTRAIN_SERVER_MODEL_CONVERT_H_
#define PSTRAIN_SERVER_MODEL_CONVERT_H_

#include "absl/status/statusor.h"
#include "model/optimizer.h"
#include "model/param_spec.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"

namespace pstrain::server {

// INVALID_ARGUMENT when the tensor's init kind is unspecified or unknown, or its element count
// does not match its shape.
absl::StatusOr<model::ParamSpec> ParamSpecFromProto(const TensorSpec& tensor);

// REQUIRES: ApplyJobDefaults has filled the optional fields (proto/job.proto documents them).
model::LrScheduleOptions LrScheduleFromProto(const LrSchedule& schedule);
model::OptimizerOptions OptimizerOptionsFromProto(const OptimizerSpec& spec);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_MODEL_CONVERT_H_
