// The CPU backend: host memory, OpenBLAS sgemm, plain loops for the rest.
#ifndef PSTRAIN_MODEL_CPU_BACKEND_H_
#define PSTRAIN_MODEL_CPU_BACKEND_H_

#include <memory>

#include "model/backend.h"

namespace pstrain {
namespace model {

// A new CPU backend. Its memory is ordinary host memory, so Upload/Download are memcpy. OpenBLAS
// picks its own thread count (OPENBLAS_NUM_THREADS) unless SetCpuThreads says otherwise; the
// backend adds no threads of its own.
// Not thread-safe (see Backend), although independent instances may run on different threads.
std::unique_ptr<Backend> NewCpuBackend();

// Sets how many threads OpenBLAS uses, for every CPU backend in the process (OpenBLAS's setting is
// process-wide). Workers that share a machine with other roles run best with 1: OpenBLAS threads
// spin while they wait, taking cores from the servers. `threads` must be >= 1.
void SetCpuThreads(int threads);

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CPU_BACKEND_H_
