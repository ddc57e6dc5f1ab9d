/* An uninstrumented library, as Debian's gRPC is to a ThreadSanitizer build: it fills the
 * caller's buffer through libc's memcpy (which ThreadSanitizer intercepts and records) and then
 * says so through an atomic of its own (which it cannot see). Built without -fsanitize=thread by
 * scripts/sanitize.sh, for handoff_canary.cc. */
#include <stdatomic.h>
#include <string.h>

static atomic_int filled;
static char source[4096];

void canary_fill(char* buffer, size_t size) {
  memset(source, 7, sizeof source);
  memcpy(buffer, source, size < sizeof source ? size : sizeof source);
  atomic_store_explicit(&filled, 1, memory_order_release);
}

void canary_wait_filled(void) {
  while (!atomic_load_explicit(&filled, memory_order_acquire)) {
  }
}
