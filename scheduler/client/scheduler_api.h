// What a role asks of the scheduler, as an interface with no transport in it.
//
// scheduler/client/scheduler_client.h implements it over gRPC (deadlines, retries across a scheduler
// restart); tests implement it in-process over scheduler::Scheduler, with injected failures, so
// that the worker's recovery logic runs without sockets. The contract of each call (what OK and
// each error mean) is the scheduler's (scheduler/scheduler.h, proto/scheduler.proto); an
// implementation adds only transport errors: UNAVAILABLE when the scheduler cannot be reached,
// DEADLINE_EXCEEDED when it did not answer in time.
//
// Thread safety: implementations are thread-safe.
#ifndef PSTRAIN_SCHEDULER_CLIENT_SCHEDULER_API_H_
#define PSTRAIN_SCHEDULER_CLIENT_SCHEDULER_API_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler.pb.h"

namespace pstrain {

class SchedulerApi {
 public:
  virtual ~SchedulerApi() = default;

  // Registers this role; its rank and the job. Waits up to `timeout` for the scheduler to exist.
  virtual absl::StatusOr<RegisterResponse> Register(Role role, const std::string& address, absl::Duration timeout,
                                                    const LocalEndpoint& local = {}) = 0;
  // Blocks until every role has registered and returns the complete view (ABORTED: the job
  // failed; DEADLINE_EXCEEDED: `timeout`).
  virtual absl::StatusOr<ClusterView> WaitUntilRunning(absl::Duration timeout) = 0;
  // The current view, without waiting.
  virtual absl::StatusOr<ClusterView> GetClusterView() = 0;
  // Blocks until every participant has entered barrier `name` (ABORTED: the job failed;
  // DEADLINE_EXCEEDED: `timeout`).
  virtual absl::Status Barrier(const std::string& name, BarrierRequest::Participants who, Role role, int rank,
                               absl::Duration timeout) = 0;
  virtual absl::StatusOr<HeartbeatResponse> Heartbeat(Role role, int rank) = 0;
  // A range of the epoch's training data to train on (ASYNC/SSP).
  virtual absl::StatusOr<LeaseResponse> LeaseWork(int worker_rank, int epoch) = 0;
  // A range of the test set to evaluate after `epoch`.
  virtual absl::StatusOr<LeaseResponse> LeaseEval(int worker_rank, int epoch) = 0;
  virtual absl::Status ReportProgress(const ProgressReport& report) = 0;
  virtual absl::Status ReportFailure(Role role, int rank, const std::string& message) = 0;
  virtual absl::StatusOr<JobStatus> GetJobStatus() = 0;
  virtual absl::Status Leave(Role role, int rank, const std::string& reason) = 0;
  // Server `server_rank` holds checkpoints of `steps` (ascending). On OK, the answer's
  // keep_from_step (proto/scheduler.proto CheckpointAck) goes to *keep_from when not null: -1
  // when the answer set none.
  virtual absl::Status ReportCheckpoints(int server_rank, const std::vector<int64_t>& steps,
                                         int64_t* keep_from = nullptr) = 0;
  virtual absl::Status ReportSlowStep(const SlowStepReport& report) = 0;
  // Servers: one shard of the final model, when the scheduler asks for it (proto/scheduler.proto
  // SubmitFinalShard); returns once the scheduler took it.
  virtual absl::Status SubmitFinalShard(const FinalShard& shard) = 0;
  // JobSpec.model "external": declares the model a worker trains (proto/scheduler.proto
  // ModelDeclaration: the model file's names, shapes and initial values, the data set's sizes, the
  // tensors averaged rather than trained, the embedding tables); the first declaration defines the
  // job.
  virtual absl::Status DeclareModel(ModelDeclaration declaration) = 0;
  // JobSpec.model "external": the accepted declaration's model file (the initial weights).
  virtual absl::StatusOr<std::string> GetInitialModel() = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_CLIENT_SCHEDULER_API_H_
