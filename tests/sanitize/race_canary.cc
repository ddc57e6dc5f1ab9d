// A data race in code of ours, on purpose: two threads add to one counter with no lock.
// scripts/sanitize.sh thread runs it under the run's own options and suppressions before the
// tests, and fails unless ThreadSanitizer reports it, so that no option or suppression can
// silence the races of our code without the run saying so.
#include <cstdio>
#include <thread>

namespace {

long counter = 0;

void AddMany() {
  for (int i = 0; i < 100000; ++i) ++counter;
}

}  // namespace

int main() {
  std::thread first(AddMany);
  std::thread second(AddMany);
  first.join();
  second.join();
  std::printf("%ld\n", counter);
  return 0;
}
