#!/usr/bin/env bash
# Builds pstrain with a sanitizer, in a build folder of its own, and runs its tests there:
#
#     scripts/sanitize.sh thread  [--quick|--smoke] [BUILD_DIR]   ThreadSanitizer: data races,
#                                                    lock-order inversions (default folder build-tsan)
#     scripts/sanitize.sh address [--quick|--smoke] [BUILD_DIR]   AddressSanitizer + UndefinedBehavior-
#                                                    Sanitizer: bad reads and writes, leaks, undefined
#                                                    behaviour (default folder build-asan)
#
# SANITIZE_TESTS=REGEX takes, after the unit tests, only the multi-process tests whose names match
# (to run again what a whole run found failing).
# The whole run takes the unit tests (in-process tests included) and the multi-process integration
# and fault tests that fit under the sanitizer (docs/testing.md, "Sanitizers", names those that do
# not and why); --quick takes the unit tests and two integration tests; --smoke builds and runs
# only the unit tests of the code where threads meet (smoke_tests below), for make test's
# tsan_smoke (a few minutes once the compiler cache holds the build). Every process a
# test starts (the roles' binaries) is instrumented too. Every report goes to a file of its own in
# BUILD_DIR/sanitizer-reports (named by program and pid), whichever process wrote it and whether
# or not its test looked at its exit code, and any such file fails the run: the script prints
# them after the tests.
#
# Under ThreadSanitizer the processes load an instrumented build of Debian's own Abseil
# (scripts/sanitize/absl-tsan.sh, built once into BUILD_DIR/absl), without which absl::Mutex would
# be invisible to it. The uninstrumented gRPC and protobuf are covered by the suppressions in
# scripts/sanitize/ (races reported inside them only; each entry says why).
#
# GCC's sanitizer runtimes (libtsan2, libasan8, libubsan1) come with g++. Exits with ctest's status.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:-}
shift || true
quick=0
smoke=0
case "${1:-}" in
  --quick) quick=1; shift ;;
  --smoke) smoke=1; shift ;;
esac
case "$kind" in
  thread) build=${1:-$root/build-tsan} ;;
  address) build=${1:-$root/build-asan} ;;
  *) echo "usage: $0 thread|address [--quick|--smoke] [BUILD_DIR]" >&2; exit 2 ;;
esac
# Absolute: the tests run from inside it, with its Abseil and report folder named by this path.
build=$(realpath -m "$build")
jobs=${SANITIZE_BUILD_JOBS:-2}
test_jobs=${SANITIZE_TEST_JOBS:-2}
supp="$root/scripts/sanitize"

# What neither sanitizer runs (docs/testing.md, "Sanitizers"): the lint passes and documentation
# checks (no C++ of ours runs), and the Python package's tests: the package is a module loaded
# into Debian's python3, which no sanitizer's runtime is loaded into (it is not built here). The
# labels taken leave out the GPU, deployment, end-to-end and fuzz tests.
excluded='thread_safety_test|format_test|python_(package|wheel|mypy)_test|docs_.*'
# Under ThreadSanitizer, scale_test.shared_reference does not fit: its six cases share one
# reference run and each re-shards a cluster of six instrumented processes, about 90 s in the
# Release build and past its whole 600 s limit here (2026-12-04). The other parts of scale_test run.
# And python_client_test: Debian's python3 cannot load the grpc module with the instrumented Abseil
# on LD_LIBRARY_PATH (libtsan cannot be loaded into a process that did not start with it).
[ "$kind" != thread ] || excluded="$excluded|python_client_test|scale_test\.shared_reference"
exclude="^($excluded)\$"
# The test cases that measure glibc's allocator, which both sanitizers replace with their own
# (a gtest filter, for every test program; scripts/sanitize-smoke.sh's too).
GTEST_FILTER=$(cat "$root/scripts/sanitize/gtest_filter.txt")
export GTEST_FILTER
# The integration tests --quick adds: a synchronous job end to end, and one with failures.
quick_integration='^(sync_cluster_test|failure_test)$'
# What --smoke builds and runs: the unit tests of the code where threads meet. The stop signals'
# thread; the whole job in one process (scheduler core, stores and workers on threads of their
# own); the worker's gRPC client and its overlapped pusher; the servers' and the scheduler's gRPC
# services and runners on real sockets; the stores' concurrent pushes, the scheduler's core and
# leases; the wire codec. The three races the first runs found were in three of them.
smoke_tests=(common_stop_signals_test training_session_test worker_ps_client_test worker_layer_pusher_test
             server_ps_service_test server_runner_test scheduler_service_test scheduler_core_test
             scheduler_lease_pool_test server_parameter_store_test server_parameter_store_sparse_test
             transport_tensor_wire_test)

echo "sanitize.sh: $kind: configuring $build"
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
# -O1 with line tables only (-g1): the sanitizers' stacks name files and lines, and the build and
# its links stay about as fast as the Release build's. NDEBUG as in the Release build and in
# Debian's libraries: protobuf's and Abseil's inline code differs without it, and code inlined
# from their headers into ours must agree with the copy in the library (a map built by
# libprotobuf and read by our code crashes otherwise). The checkout's path is mapped out of the
# debug information, so that ccache may share what it compiled between clones in other folders.
flags="-O1 -g1 -DNDEBUG -fdebug-prefix-map=$root=."
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DPSTRAIN_SANITIZE="$kind" -DPSTRAIN_CUDA=OFF > /dev/null 2> "$errors" || { cat "$errors" >&2; exit 1; }
targets=()
if [ "$smoke" = 1 ]; then
  targets=(--target "${smoke_tests[@]}")
  echo "sanitize.sh: building ${#smoke_tests[@]} unit tests"
else
  echo "sanitize.sh: building (about 20 minutes on 2 cores from an empty compiler cache)"
fi
start=$(date +%s)
nice cmake --build "$build" -j "$jobs" "${targets[@]}" > "$build/build.log" 2>&1 || {
  grep -B2 -A8 -m3 'error' "$build/build.log" >&2
  exit 1
}
echo "sanitize.sh: built in $(( $(date +%s) - start )) s"

export PSTRAIN_BIN_DIR="$build/bin"
# The roles run several times slower under a sanitizer, and a test's cluster shares the 2 cores
# with another test's: a role silent for the default 3 s is not dead here. A flag's PSTRAIN_
# variable is its default (a test that gives --dead_after_ms keeps its own).
export PSTRAIN_DEAD_AFTER_MS=${PSTRAIN_DEAD_AFTER_MS:-20000}
reports="$build/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
# The tests' temporary folders (gtest's TempDir), where the roles a test starts write their logs.
export TEST_TMPDIR="$build/sanitizer-tmp"
rm -rf "$TEST_TMPDIR"
mkdir -p "$TEST_TMPDIR"
outputs="$build/sanitizer-outputs"  # ctest's full log of each run below
rm -rf "$outputs"
mkdir -p "$outputs"
common="log_path=$reports/$kind log_exe_name=1 exitcode=66"
if [ "$kind" = thread ]; then
  "$supp/absl-tsan.sh" "$build/absl" || exit $?  # 77: the Debian archive cannot be reached
  export LD_LIBRARY_PATH="$build/absl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # ignore_noninstrumented_modules: the accesses libc's interceptors make for uninstrumented
  # libraries (gRPC's recvmsg and memcpy into its receive buffers, its free) are not recorded.
  # Their threads hand those buffers over through synchronization TSan cannot see, so such a
  # record is a write with no happens-before to our read of the same bytes: the one report of
  # the whole run in our code (docs/testing.md, "Sanitizers"). Locks and atomics they take through
  # the instrumented Abseil still count, and every access of our own code is still checked.
  export TSAN_OPTIONS="$common suppressions=$supp/tsan.supp halt_on_error=0 second_deadlock_stack=1 history_size=4 report_signal_unsafe=0 ignore_noninstrumented_modules=1"
else
  . "$supp/address-options.sh" "$common"
fi

# Prints every report the processes wrote, and fails when there is one. UndefinedBehaviorSanitizer
# combined with AddressSanitizer writes to stderr whatever log_path says (GCC's runtime), so its
# reports ("runtime error:") are also looked for where every process's stderr ends up: ctest's log
# (the test programs) and the logs in the tests' temporary folders (the roles they start).
check_reports() {
  local found ub
  found=$(find "$reports" -type f | sort)
  ub=$(grep -rl --binary-files=text 'runtime error: ' "$outputs" "$TEST_TMPDIR" 2>/dev/null | sort || true)
  if [ -z "$found" ] && [ -z "$ub" ]; then
    echo "sanitize.sh: $kind: no report"
    return 0
  fi
  [ -z "$found" ] || echo "sanitize.sh: $kind: $(echo "$found" | wc -l) processes reported:"
  for f in $found; do
    echo "== $f"
    head -60 "$f"
  done
  [ -z "$ub" ] || echo "sanitize.sh: $kind: undefined behaviour reported in $(echo "$ub" | wc -l) logs:"
  for f in $ub; do
    echo "== $f"
    grep -a -m3 -A8 'runtime error: ' "$f"
  done
  return 1
}

# Keeps ctest's full log of the run just made (the next run overwrites it).
keep_output() { cp Testing/Temporary/LastTest.log "$outputs/$1.log" 2>/dev/null || true; }

# ThreadSanitizer's canaries (tests/sanitize/), under the run's own options and suppressions,
# before the tests: a race in our code must still be reported, and a buffer an uninstrumented
# library hands over through synchronization TSan cannot see must be reported without
# ignore_noninstrumented_modules and not with it. A canary's report goes to a folder of its own.
tsan_canaries() {
  local dir=$build/sanitizer-canaries src=$root/tests/sanitize
  rm -rf "$dir"
  mkdir -p "$dir"
  g++ -O1 -g -fsanitize=thread -pthread "$src/race_canary.cc" -o "$dir/race_canary" &&
    gcc -O1 -fno-builtin -shared -fPIC "$src/handoff_lib.c" -o "$dir/libhandoff.so" &&
    g++ -O1 -g -fsanitize=thread -pthread "$src/handoff_canary.cc" -L"$dir" -lhandoff \
      -Wl,-rpath,"$dir" -o "$dir/handoff_canary" || return 1
  canary() {  # PROGRAM NAME OPTIONS EXPECTED(report|none)
    TSAN_OPTIONS="$TSAN_OPTIONS $3 log_path=$dir/$2-report exitcode=0" "$dir/$1" > /dev/null || return 1
    if ls "$dir/$2-report".* > /dev/null 2>&1; then got=report; else got=none; fi
    [ "$got" = "$4" ] || { echo "sanitize.sh: canary $2: expected $4, got $got" >&2; return 1; }
  }
  canary race_canary race "" report &&
    canary handoff_canary handoff-visible "ignore_noninstrumented_modules=0" report &&
    canary handoff_canary handoff "" none || return 1
  echo "sanitize.sh: thread: canaries: a race of ours reported, a library's hand-over not"
}
if [ "$kind" = thread ]; then
  tsan_canaries || { echo "sanitize.sh: the ThreadSanitizer canaries failed" >&2; exit 1; }
fi

cd "$build"
set +e
if [ "$smoke" = 1 ]; then
  ctest --output-on-failure -j "$test_jobs" -R "^($(IFS='|'; echo "${smoke_tests[*]}"))\$"
else
  ctest --output-on-failure -j "$test_jobs" -L '^unit$' -E "$exclude"
fi
tests=$?
keep_output unit
if [ "$smoke" = 1 ]; then
  :
elif [ "$quick" = 1 ]; then
  ctest --output-on-failure -R "$quick_integration"
else
  # One multi-process test at a time: each runs a cluster of instrumented processes.
  ctest --output-on-failure -L '^(integration|fault)$' -E "$exclude" -R "${SANITIZE_TESTS:-.}"
fi
[ $? = 0 ] || tests=1
keep_output integration
check_reports
clean=$?
[ "$tests" = 0 ] && [ "$clean" = 0 ]
