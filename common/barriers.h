// Names of the barriers that servers, workers and the scheduler agree on.
#ifndef PSTRAIN_COMMON_BARRIERS_H_
#define PSTRAIN_COMMON_BARRIERS_H_

namespace pstrain {

// Every server and worker enters it once the servers hold their initialised shards and the workers
// are ready to train (participants ALL). Its release is the start of training.
inline constexpr char kServersReadyBarrier[] = "servers-ready";

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_BARRIERS_H_
