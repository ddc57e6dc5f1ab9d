#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang into their own build folder and runs each for
# SECONDS (default 60), starting from its checked-in corpus fuzz/corpus/<target>/ (seeds and the
# inputs of crashes fixed earlier, which therefore replay first). Prints one row per target:
# executions, executions per second, crashes. Exits 1 when any target crashed (its input is kept
# in <build-dir>/artifacts/), 77 when clang or libFuzzer is missing (ctest reports a skip).
#
#   scripts/fuzz.sh [--build-dir DIR] [--seed N] [--parallel N] [SECONDS]
#
# `make test` runs it for a few seconds per target with a fixed seed (ctest label fuzz); a longer
# run is this script by hand. New inputs the fuzzer finds go to <build-dir>/corpus/<target>/, not
# into the checked-in corpus.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/fuzz"
seed=0
parallel=1
seconds=60
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --parallel) parallel=$2; shift 2 ;;
    -*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
    *) seconds=$1; shift ;;
  esac
done

# Exits 77 itself without clang and libFuzzer.
"$root/scripts/sanitize/clang-configure.sh" "$build" || exit $?
nice cmake --build "$build" --target fuzzers -j "${FUZZ_BUILD_JOBS:-2}"

targets=$(cd "$root/fuzz" && ls *_fuzz.cc | sed 's/\.cc$//')
logs="$build/logs"
mkdir -p "$logs" "$build/artifacts"

run_one() {
  local t=$1
  mkdir -p "$build/corpus/$t"
  # -timeout: an input slower than 10 s is a hang; -rss_limit_mb: one that needs 2 GiB is a bug too.
  "$build/bin/$t" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
    "$build/corpus/$t" "$root/fuzz/corpus/$t" >"$logs/$t.log" 2>&1 && rc=0 || rc=$?
  echo "$rc" >"$logs/$t.rc"
}

running=0
for t in $targets; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

failed=0
printf '%-24s | %12s | %8s | %s\n' target executions exec/s crashes
for t in $targets; do
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logs/$t.log" | tail -1)
  crashes=0
  if [ "$(cat "$logs/$t.rc")" != 0 ]; then
    crashes=1
    failed=1
  fi
  printf '%-24s | %12s | %8s | %s\n' "$t" "${execs:-?}" "${rate:-?}" "$crashes"
done
if [ "$failed" != 0 ]; then
  for t in $targets; do
    if [ "$(cat "$logs/$t.rc")" != 0 ]; then
      echo "== $t (log $logs/$t.log)"
      # -a: the log may hold the input's bytes; || true: head closing the pipe is not a failure.
      grep -aE '^==.*ERROR|SUMMARY|runtime error|Test unit written|#[0-9]+ 0x' "$logs/$t.log" | head -30 || true
    fi
  done
  exit 1
fi
