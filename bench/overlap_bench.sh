#!/usr/bin/env bash
# Does pushing during backward (--overlap) hide communication behind compute on a real link?
#
#   bench/overlap_bench.sh BUILD_DIR [RUNS]         (as root; default 3 runs per setting)
#
# On one machine, loopback "communication" is CPU work on the same cores the workers compute on,
# so nothing can hide behind anything. This script puts the scheduler and the servers in one
# network namespace and the workers in another, joined by a veth pair shaped to RATE (default
# 1gbit, both directions, tc tbf), and runs the same sync job with --overlap=true and =false in
# turn. It prints, per setting, the medians of samples/s and of the per-step time split from the
# run summaries (compute, push, wait, pull, overlapped; ms per step, see StepTimes in
# proto/scheduler.proto), and the ratio of the two settings' samples/s.
#
# Environment knobs: RATE (tc rate, default 1gbit), JOB (job flags, default the CNN on 4096
# training samples, 1 epoch, batch 64 per worker, 2 servers x 2 workers).
# Needs root, ip and tc (iproute2). Namespaces are removed on exit.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [RUNS]" >&2
  exit 2
fi
BIN="$(cd "$1" && pwd)/bin"
RUNS="${2:-3}"
RATE="${RATE:-1gbit}"
JOB="${JOB:---model=cnn --train_limit=4096 --test_limit=512 --epochs=1 --batch_size=64 --servers=2 --workers=2 --eval_last_epoch_only}"
if [[ "$(id -u)" != 0 ]] || ! command -v ip > /dev/null || ! command -v tc > /dev/null; then
  echo "$0: needs root, ip and tc to make network namespaces; skipped" >&2
  exit 0
fi
for b in pstrain-scheduler pstrain-server pstrain-worker; do
  [[ -x "$BIN/$b" ]] || { echo "$0: $BIN/$b not found; build first" >&2; exit 1; }
done

SRV=pstrain-ovl-srv
WRK=pstrain-ovl-wrk
SRV_IP=10.231.0.1
OUT="$(mktemp -d -t pstrain-overlap.XXXXXX)"
cleanup() {
  ip netns del "$SRV" 2> /dev/null || true
  ip netns del "$WRK" 2> /dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add "$SRV"
ip netns add "$WRK"
ip link add pstovl-s type veth peer name pstovl-w
ip link set pstovl-s netns "$SRV"
ip link set pstovl-w netns "$WRK"
ip -n "$SRV" addr add "$SRV_IP/24" dev pstovl-s
ip -n "$WRK" addr add 10.231.0.2/24 dev pstovl-w
for ns in "$SRV" "$WRK"; do ip -n "$ns" link set lo up; done
ip -n "$SRV" link set pstovl-s up
ip -n "$WRK" link set pstovl-w up
tc -n "$SRV" qdisc add dev pstovl-s root tbf rate "$RATE" burst 256kb latency 50ms
tc -n "$WRK" qdisc add dev pstovl-w root tbf rate "$RATE" burst 256kb latency 50ms

# One job; $1: overlap setting, $2: run number. Leaves the summary in $OUT.
run_job() {
  local overlap="$1" run="$2" dir="$OUT/$1-$2"
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  ip netns exec "$SRV" "$BIN/pstrain-scheduler" --host="$SRV_IP" --port_file="$dir/port" \
    --summary_json="$dir/summary.json" --overlap="$overlap" $JOB > "$dir/scheduler.log" 2>&1 &
  local scheduler=$!
  for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
  local address="$SRV_IP:$(cat "$dir/port")"
  local servers workers
  servers="$(echo "$JOB" | sed -n 's/.*--servers=\([0-9]*\).*/\1/p')"
  workers="$(echo "$JOB" | sed -n 's/.*--workers=\([0-9]*\).*/\1/p')"
  for s in $(seq "${servers:-2}"); do
    ip netns exec "$SRV" "$BIN/pstrain-server" --scheduler="$address" --host="$SRV_IP" > "$dir/server-$s.log" 2>&1 &
  done
  for w in $(seq "${workers:-2}"); do
    ip netns exec "$WRK" "$BIN/pstrain-worker" --scheduler="$address" > "$dir/worker-$w.log" 2>&1 &
  done
  wait "$scheduler"
  wait
}

for run in $(seq "$RUNS"); do
  for overlap in true false; do
    run_job "$overlap" "$run"
  done
done

python3 - "$OUT" "$RUNS" "$RATE" <<'PY'
import json, statistics, sys
out, runs, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for overlap in ("true", "false"):
    per = []
    for run in range(1, runs + 1):
        with open(f"{out}/{overlap}-{run}/summary.json") as f:
            s = json.load(f)
        t = s["step_time_ms"]
        per.append((s["samples_per_second"], t["compute"], t["push"], t["wait"], t["pull"], t["overlapped"]))
    rows[overlap] = [statistics.median(col) for col in zip(*per)]
print(f"link: {rate} each way between the workers' and the servers' namespaces; medians of {runs} runs")
print()
print("| --overlap | samples/s | compute ms | push ms | wait ms | pull ms | overlapped ms |")
print("|---|---:|---:|---:|---:|---:|---:|")
for overlap in ("true", "false"):
    r = rows[overlap]
    print(f"| {overlap} | {r[0]:.0f} | {r[1]:.1f} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:.1f} |")
print()
print(f"samples/s with overlap / without: {rows['true'][0] / rows['false'][0]:.2f}")
PY
echo "raw outputs: $OUT"
