#!/usr/bin/env bash
# Many files through one stream job: does anything of the stream's machinery grow with the files?
# A SYNC CTR job trains on a stream of STREAM_FILES hourly files that pstrain-gen-ctr writes at a
# set rate, with checkpoints (a base every 5 cuts, 2 kept) and TTL eviction on the tables (so that
# the rows, which follow the drifting ids, stay bounded too). The scheduler's and the servers'
# resident memory is read every 2 s; the table prints each role's median RSS per quarter of the
# run, so a leak shows as a rising row.
#
#   bench/stream_memory.sh BUILD_DIR            e.g. bench/stream_memory.sh build
#
# Environment knobs:
#   STREAM_FILES     files (default 120)
#   STREAM_PER_FILE  records a file (default 20000)
#   STREAM_RATE      records/s written (default 40000)
# Logs, the summary and the samples are kept in a temporary folder whose name is printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_binaries "$0" "$1" pstrain-gen-ctr
FILES="${STREAM_FILES:-120}"
PER_FILE="${STREAM_PER_FILE:-20000}"
RATE="${STREAM_RATE:-40000}"
OUT="$(mktemp -d -t pstrain-stream-memory.XXXXXX)"
mkdir -p "$OUT/stream"
# The rows of one file's worth of updates live on: a key not updated for two files' steps leaves.
TTL=$(( 2 * PER_FILE / 2048 ))
JOB=(--model=ctr --servers=2 --workers=2 --mode=sync --batch_size=1024 --data_stream="$OUT/stream"
     --checkpoint_dir="$OUT/ckpt" --checkpoint_every_steps=50 --full_checkpoint_every=5
     --table_ttl_updates="$TTL" --table_evict_every=10)

echo "### Many files through one stream job"
echo
print_machine
echo
echo "Stream: \`pstrain-gen-ctr --hours=$FILES --records_per_hour=$PER_FILE --new_key_rate=0.3 --rate=$RATE\`;"\
     "job: \`pstrain-launch $(echo "${JOB[*]}" | sed "s|$OUT|TMP|g")\`."
echo

"$BIN/pstrain-gen-ctr" --stream_dir="$OUT/stream" --hours="$FILES" --records_per_hour="$PER_FILE" \
  --new_key_rate=0.3 --rate="$RATE" > "$OUT/gen.log" &
WRITER=$!
"$LAUNCH" "${JOB[@]}" --summary_json="$OUT/summary.json" \
  > "$OUT/launch.log" 2>&1 &
LAUNCHER=$!

# Samples: "seconds role rss_kib" every 2 s while the launcher runs.
start=$(date +%s)
while kill -0 "$LAUNCHER" 2>/dev/null; do
  now=$(( $(date +%s) - start ))
  for pid in $(pgrep -P "$LAUNCHER" || true); do
    name=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | awk '{print $1}' | xargs -r basename 2>/dev/null || true)
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [[ -n "$name" && -n "$rss" ]] && echo "$now $name.$pid $rss" >> "$OUT/rss.txt"
  done
  sleep 2
done
wait "$LAUNCHER" || { echo "the job failed; see $OUT/launch.log" >&2; tail -n 20 "$OUT/launch.log" >&2; exit 1; }
wait "$WRITER"

/usr/bin/python3 - "$OUT" <<'EOF'
import collections, json, statistics, sys
out = sys.argv[1]
series = collections.defaultdict(list)
for line in open(f"{out}/rss.txt"):
    t, role, kib = line.split()
    if role.startswith(("pstrain-scheduler", "pstrain-server")):
        series[role].append((int(t), int(kib)))
print("| process | RSS MiB, median of each quarter of the run | last vs second quarter |")
print("|---|---|---:|")
for role in sorted(series):
    pts = series[role]
    n = len(pts)
    quarters = [statistics.median(k for _, k in pts[i * n // 4:(i + 1) * n // 4]) / 1024 for i in range(4)]
    print(f"| {role.split('.')[0]} (pid {role.split('.')[1]}) | {', '.join(f'{q:.1f}' for q in quarters)} "
          f"| {100 * (quarters[3] / quarters[1] - 1):+.1f}% |")
s = json.load(open(f"{out}/summary.json"))
st = s["stream"]
print()
print(f"{st['files_ready']} files, {st['trained_records']:,} records trained at {s['samples_per_second']:,.0f} samples/s "
      f"over the run, lag at the end {st['lag_records']}; rows at the end {s['embedding_tables']['rows']:,}, "
      f"evicted {s['embedding_tables']['evicted']:,}; progressive AUC of the last {st['window_files']} files "
      f"{st['window']['auc']:.4f}.")
EOF
echo
echo "(logs and samples: $OUT)"
