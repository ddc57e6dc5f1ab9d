#!/usr/bin/env bash
# Runs pstrain's benchmarks and prints Markdown tables of ratios against baselines measured in the
# same invocation (absolute figures on a shared 2-core machine are noise; ratios much less so).
#
#   bench/run.sh BUILD_DIR            e.g. bench/run.sh build   (or: make bench)
#
# Needs BUILD_DIR/bin/{ps_bench,aggregation_bench,local_train}, and for the end-to-end table
# pstrain-launch with the role binaries it starts. Environment knobs:
#   E2E_BATCHES      per-worker batch sizes end to end (default: the demo's default batch, 64 and
#                    256, duplicates dropped)
#   E2E_TRAIN_LIMIT  use only the first N training samples end to end (default 0: all 60000)
#   E2E_EPOCHS       epochs of each end-to-end run (default 2)
#   E2E_REPEATS      repeats of each end-to-end pair, reported as medians (default 3)
#   SKIP_E2E=1       skip the end-to-end runs (and so the scaling table)
#   SKIP_SCALING=1   skip the scaling table (bench/scaling.sh; its SCALING_* knobs apply)
#   SKIP_CHURN=1     skip the recovery-from-failures runs (churn_bench, about two minutes)
#   SKIP_MICRO=1     skip the in-process benchmarks (a) and (b)
#   SKIP_DEFAULT_MALLOC=1  skip the second ps_bench pass with glibc's default malloc settings
#   SKIP_SPARSE=1    skip the sparse pull/push table (bench/sparse.sh; its SPARSE_* knobs apply)
#   SKIP_TLS=1       skip the TLS cost tables (bench/tls.sh; its TLS_* knobs apply)
#   SKIP_METRICS=1   skip the metrics cost tables (bench/metrics.sh, metrics_scrape_bench; its
#                    METRICS_* knobs apply)
# The CTR tables take their own data and minutes each: bench/ctr.sh, bench/scale_ctr.sh,
# bench/stream.sh (a stream against a file job) and bench/stream_memory.sh (many files through one
# job).
# Raw outputs are kept in a temporary folder whose name is printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
[[ -d "$1" ]] || { echo "$0: build folder $1 not found; build first (cmake -S . -B $1 && cmake --build $1)" >&2; exit 1; }
BIN="$(cd "$1" && pwd)/bin"
REPORT="python3 $HERE/report.py"
for b in ps_bench aggregation_bench local_train; do
  [[ -x "$BIN/$b" ]] || { echo "$0: $BIN/$b not found; build it first (cmake --build $1)" >&2; exit 1; }
done
OUT="$(mktemp -d -t pstrain-bench.XXXXXX)"
NPROC="$(nproc)"

# Runs benchmark binary $1 writing JSON to $2; the remaining arguments go to the binary.
run_bench() {
  local bin="$1" json="$2"
  shift 2
  if ! "$BIN/$bin" "$@" --benchmark_out="$json" --benchmark_out_format=json > "${json%.json}.txt" 2>&1; then
    echo "**$bin failed:**"; echo '```'; tail -20 "${json%.json}.txt"; echo '```'
    return 1
  fi
}

echo "## pstrain benchmarks"
echo
print_machine
echo

# (a) gRPC: parameter server vs echo, with malloc set up as the role binaries do it, then with
# glibc's defaults (fresh mmaps for every block >= 128 KiB) to show what that setting buys.
if [[ "${SKIP_MICRO:-0}" != 1 ]]; then
run_bench ps_bench "$OUT/ps_bench.json" && $REPORT ps "$OUT/ps_bench.json" --title "malloc as in the binaries"
fi
if [[ "${SKIP_MICRO:-0}" != 1 && "${SKIP_DEFAULT_MALLOC:-0}" != 1 ]]; then
  run_bench ps_bench "$OUT/ps_bench_glibc.json" --glibc_default_malloc &&
    $REPORT ps "$OUT/ps_bench_glibc.json" --title "glibc default malloc"
fi

# (b) aggregation vs memcpy.
[[ "${SKIP_MICRO:-0}" == 1 ]] ||
  { run_bench aggregation_bench "$OUT/aggregation_bench.json" && $REPORT agg "$OUT/aggregation_bench.json"; }

# (g) sparse pull and push vs a socket ping-pong and the table in process.
if [[ "${SKIP_MICRO:-0}" != 1 && "${SKIP_SPARSE:-0}" != 1 && -x "$BIN/sparse_bench" ]]; then
  "$HERE/sparse.sh" "$1" || echo "**sparse.sh failed (exit $?)**"
  echo
fi

# (h) what mutual TLS and the job token cost, raw and end to end.
if [[ "${SKIP_TLS:-0}" != 1 && "${SKIP_E2E:-0}" != 1 ]]; then
  "$HERE/tls.sh" "$1" || echo "**tls.sh failed (exit $?)**"
  echo
fi

# (i) what metrics and the dashboard cost end to end, and how long a scrape takes.
if [[ "${SKIP_METRICS:-0}" != 1 && "${SKIP_E2E:-0}" != 1 ]]; then
  "$HERE/metrics.sh" "$1" || echo "**metrics.sh failed (exit $?)**"
  echo
  [[ -x "$BIN/metrics_scrape_bench" ]] && { "$BIN/metrics_scrape_bench" || echo "**metrics_scrape_bench failed (exit $?)**"; }
  echo
fi

# (c) end to end: cluster vs one process.
if [[ "${SKIP_E2E:-0}" == 1 ]]; then
  echo "(end-to-end runs skipped: SKIP_E2E=1)"
  echo; echo "Raw outputs: $OUT"
  exit 0
fi
find_launcher "$0" "$1"

# The demo runs pstrain-launch with its defaults; read its default per-worker batch from its help.
DEMO_BATCH="$("$LAUNCH" --helpfull 2>&1 | grep -A1 -- '-batch_size ' | grep -o 'default: [0-9]*' |
              grep -o '[0-9]*' | head -1 || true)"
DEMO_BATCH="${DEMO_BATCH:-64}"
BATCHES="${E2E_BATCHES:-$(printf '%s\n' "$DEMO_BATCH" 64 256 | awk '!seen[$0]++' | tr '\n' ' ')}"
TRAIN_LIMIT="${E2E_TRAIN_LIMIT:-0}"

EPOCHS="${E2E_EPOCHS:-2}"
REPEATS="${E2E_REPEATS:-3}"
echo "### (c) End to end: 2 servers x 2 workers (SYNC) vs one process"
echo
echo "$EPOCHS epochs of Fashion-MNIST (train_limit=$TRAIN_LIMIT, 0 = all), MLP 784-256-128-10, Adam lr 0.002 with cosine decay (the demo's optimizer) on both sides."
echo "Cluster: \`pstrain-launch --servers=2 --workers=2 --mode=sync --epochs=$EPOCHS --eval_last_epoch_only\`."
echo "Training samples/s = global batch / mean step time (compute + push + wait + pull, the summary's"
echo "step_time_ms): training alone, as \`local_train\` times it; the whole-job figure also counts start-up,"
echo "the barriers and the final evaluation. Single process: \`local_train\` at the same global batch"
echo "(2 x per-worker batch), training time only. $REPEATS repeats, each the cluster then the single"
echo "process back to back; medians of the figures and of each repeat's ratio."
echo "The demo's default per-worker batch is $DEMO_BATCH."
echo
$REPORT e2e-header "$NPROC"
for B in $BATCHES; do
  G=$((2 * B))
  for R in $(seq 1 "$REPEATS"); do
    if ! "$LAUNCH" --servers=2 --workers=2 --mode=sync --batch_size="$B" --epochs="$EPOCHS" \
          --eval_last_epoch_only --train_limit="$TRAIN_LIMIT" --summary_json="$OUT/e2e-b$B-r$R.json" \
          > "$OUT/e2e-b$B-r$R.log" 2>&1; then
      echo "(pstrain-launch failed at batch $B, repeat $R: see e2e-b$B-r$R.log)" >&2
      rm -f "$OUT/e2e-b$B-r$R.json"
      continue
    fi
    "$BIN/local_train" --batch_size="$G" --epochs="$EPOCHS" --train_limit="$TRAIN_LIMIT" \
      --blas_threads=1 2> "$OUT/local-g$G-t1-r$R.log" | tail -1 > "$OUT/local1-b$B-r$R.txt"
    "$BIN/local_train" --batch_size="$G" --epochs="$EPOCHS" --train_limit="$TRAIN_LIMIT" \
      --blas_threads="$NPROC" 2> "$OUT/local-g$G-t$NPROC-r$R.log" | tail -1 > "$OUT/localn-b$B-r$R.txt"
  done
  $REPORT e2e-row "$OUT" "$B"
done
echo

# (d) recovery from failures (worker killed, SIGTERM, SIGSTOP, joining; a server killed, with a
# replica or replaced and rolled back to a checkpoint; the scheduler killed and restarted).
if [[ "${SKIP_CHURN:-0}" != 1 && -x "$BIN/churn_bench" ]]; then
  "$BIN/churn_bench" --bin_dir="$BIN" 2> "$OUT/churn_bench.log" || echo "**churn_bench failed, see churn_bench.log**"
  echo
fi

# (e) scaling: 1, 2, 4 workers x 1, 2 servers, with the bytes each server's counters measured.
if [[ "${SKIP_SCALING:-0}" != 1 ]]; then
  "$HERE/scaling.sh" "$1" || echo "**scaling.sh failed (exit $?)**"
  echo
fi
echo "Raw outputs: $OUT"
