#!/usr/bin/env bash
# The sparse throughput tables: pull and push of 10k and 100k keys at dim 8, 16 and 64 through a
# real gRPC parameter server (sparse_bench), against a plain TCP socket ping-pong and the table in
# process moving the same bytes, all in one invocation with their repetitions interleaved at
# random (so a burst of load from other processes hits every benchmark alike); medians.
#
#   bench/sparse.sh BUILD_DIR            e.g. bench/sparse.sh build
#
# Environment knobs:
#   SPARSE_REPEATS   repetitions of each benchmark (default 5)
#   SPARSE_FILTER    a --benchmark_filter regex (default: all)
# The raw JSON is kept in a temporary folder whose name is printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
BIN="$(cd "$1" && pwd)/bin"
[[ -x "$BIN/sparse_bench" ]] || { echo "$0: $BIN/sparse_bench not found; build it first (cmake --build $1 --target sparse_bench)" >&2; exit 1; }
REPEATS="${SPARSE_REPEATS:-5}"
OUT="$(mktemp -d -t pstrain-sparse.XXXXXX)"

echo "### (g) Sparse pull and push vs a socket ping-pong and the table in process"
echo
print_machine
echo
echo "One server on 127.0.0.1 in the benchmark's process, ASYNC, one Adagrad table of 1M rows; calls"\
     "through the worker's client (worker::PsClient, worker::SparseRowsCache) as a training worker makes"\
     "them. Bytes: 8 per key + 4 x dim per row, one way, for every column, so a GB/s ratio is an inverse"\
     "time ratio. Ping-pong: a blocking TCP socket carrying the same request and answer sizes."\
     "Table: the same call on an in-process EmbeddingTable of the same rows, no network."\
     "vs ping-pong + table: against the two run one after the other. Medians of $REPEATS interleaved"\
     "repetitions."
echo
"$BIN/sparse_bench" --benchmark_repetitions="$REPEATS" --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true --benchmark_filter="${SPARSE_FILTER:-.}" \
  --benchmark_out="$OUT/sparse_bench.json" --benchmark_out_format=json > "$OUT/sparse_bench.txt" 2>&1 ||
  { echo "**sparse_bench failed:**"; echo '```'; tail -20 "$OUT/sparse_bench.txt"; echo '```'; exit 1; }
python3 "$HERE/report.py" sparse "$OUT/sparse_bench.json"
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Raw outputs: $OUT"
