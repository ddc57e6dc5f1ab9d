// A buffer filled on one thread by an uninstrumented library and read on another once that
// library says it is filled: correctly synchronized, but through an atomic ThreadSanitizer cannot
// see, and the fill is recorded (libc's memcpy is intercepted) while its synchronization is not.
// That is how gRPC hands a received message to the thread that runs its callback, and how the
// one report of the whole run in our code arose (docs/testing.md, "Sanitizers").
// scripts/sanitize.sh thread runs it twice: without ignore_noninstrumented_modules it must be
// reported (the canary still shows the pattern), and under the run's options it must not be.
#include <pthread.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

extern "C" void canary_fill(char* buffer, size_t size);
extern "C" void canary_wait_filled();

namespace {

constexpr size_t kSize = 4096;
char* buffer = nullptr;

void* Fill(void*) {
  canary_fill(buffer, kSize);
  return nullptr;
}

}  // namespace

int main() {
  buffer = new char[kSize];
  pthread_t filler;
  pthread_create(&filler, nullptr, Fill, nullptr);
  canary_wait_filled();
  char copy[kSize];
  std::memcpy(copy, buffer, kSize);  // our code's read, as PayloadView::CopyTo's
  std::printf("%d\n", copy[kSize - 1]);
  pthread_join(filler, nullptr);
  delete[] buffer;
  return 0;
}
