// The barriers a job has. A barrier is known to the job; it is never created by a caller's name.
//
//   "servers-ready"        group ALL, entered by every server and worker once it can serve or
//                          train (common/barriers.h): training starts when it opens.
//   "epoch-<N>-trained"    group WORKERS, entered by workers only, 0 <= N < epochs (ASYNC/SSP:
//                          every lease of data epoch N is complete; worker/training_session.cc).
//
// Any other name, another group, a server entering a WORKERS barrier, or an epoch outside the
// job's is refused with INVALID_ARGUMENT before anything is stored, so the barrier set, the saved
// state, /api/status and the run summary hold at most epochs + 1 barriers.
//
// Thread-safe: a plain function.
#ifndef PSTRAIN_SCHEDULER_BARRIER_NAMES_H_
#define PSTRAIN_SCHEDULER_BARRIER_NAMES_H_

#include "absl/status/status.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler.pb.h"

namespace pstrain {
namespace scheduler {

// OK when (request.name, its group) is one of the job's barriers above and request.role may enter
// it; INVALID_ARGUMENT otherwise, e.g. "barrier from worker 2: unknown barrier name 'x' (9 bytes);
// the job's barriers are 'servers-ready' (ALL) and 'epoch-<N>-trained' (WORKERS) for N in [0, 3)".
// A group PARTICIPANTS_UNSPECIFIED means WORKERS, a role ROLE_UNSPECIFIED a worker.
absl::Status CheckBarrierRequest(const BarrierRequest& request, int epochs);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_BARRIER_NAMES_H_
