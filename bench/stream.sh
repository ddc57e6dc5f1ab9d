#!/usr/bin/env bash
# A CTR job on a data stream against a file job of the same records, in one invocation: what the
# stream's machinery costs in samples/s, and how its progressive validation (each record predicted
# before the update it leads to) compares with the planted model's AUC, hour by hour.
#
#   bench/stream.sh BUILD_DIR            e.g. bench/stream.sh build
#
# The data: pstrain-gen-ctr --stream_dir --hours=H --records_per_hour=R --new_key_rate=0.3 writes H
# hourly files of drifting keys, each marked ready, and _END; it prints each hour's planted AUC.
# The same files, concatenated, are the file job's train.tsv (its test.tsv: 1,000 records of the last
# hour, so evaluation costs next to nothing). Both jobs: `pstrain-launch --model=ctr --servers=2
# --workers=2 --mode=sync --batch_size=1024 --lr_schedule=constant`, the file job with --epochs=1;
# they train the same steps on the same records and end with the same model. The runs alternate,
# file then stream, STREAM_REPEATS times; samples/s is the scheduler's over the run (the summary's
# samples_per_second), and the ratio is of the medians.
# Then one more stream job runs while the generator writes at STREAM_RATE records/s, to show the
# workers keeping up (its lag at the end, and how long the workers waited).
#
# Environment knobs:
#   STREAM_HOURS     files (default 6)
#   STREAM_PER_HOUR  records a file (default 100000)
#   STREAM_REPEATS   pairs of runs (default 3)
#   STREAM_RATE      the live run's writing rate, records/s (default 20000)
#   STREAM_MODE      sync (default) or async: both jobs in that mode (ASYNC models are not
#                    byte-for-byte repeatable, so only the counts and the AUC compare)
#   STREAM_BATCH     --batch_size of both jobs (default 1024)
#   STREAM_NEW_KEY_RATE  the generator's --new_key_rate (default 0.3; 0: no drift)
#   STREAM_INIT_BOUND    --table_init_bound of both jobs (default 0, a stream's default; 0.25 is
#                    a file job's at dim 16)
#   STREAM_INTERACTION   --ctr_interaction of both jobs (default none; fm: DeepFM)
# Summaries and logs are kept in a temporary folder whose name is printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_binaries "$0" "$1" pstrain-gen-ctr
HOURS="${STREAM_HOURS:-6}"
PER_HOUR="${STREAM_PER_HOUR:-100000}"
REPEATS="${STREAM_REPEATS:-3}"
RATE="${STREAM_RATE:-20000}"
MODE="${STREAM_MODE:-sync}"
BATCH="${STREAM_BATCH:-1024}"
OUT="$(mktemp -d -t pstrain-stream.XXXXXX)"
GEN_FLAGS=(--hours="$HOURS" --records_per_hour="$PER_HOUR" --new_key_rate="${STREAM_NEW_KEY_RATE:-0.3}" --seed=11)
# Rows start at zero in both jobs (a stream's default; the file job's from the flag).
JOB=(--model=ctr --servers=2 --workers=2 --mode="$MODE" --batch_size="$BATCH" --lr_schedule=constant --seed=5
     --table_init_bound="${STREAM_INIT_BOUND:-0}" --ctr_interaction="${STREAM_INTERACTION:-none}")
PY=/usr/bin/python3

"$BIN/pstrain-gen-ctr" --stream_dir="$OUT/stream" "${GEN_FLAGS[@]}" > "$OUT/planted.jsonl"
mkdir -p "$OUT/files"
cat "$OUT"/stream/part-*.tsv > "$OUT/files/train.tsv"
head -n 1000 "$(ls "$OUT"/stream/part-*.tsv | tail -n 1)" > "$OUT/files/test.tsv"

echo "### A stream against a file job of the same records"
echo
print_machine
echo
echo "Data: \`pstrain-gen-ctr --stream_dir ${GEN_FLAGS[*]}\` ($((HOURS * PER_HOUR)) records);"\
     "jobs: \`pstrain-launch ${JOB[*]}\`, with \`--data_stream\`, or \`--data_dir\` (train.tsv: the files"\
     "concatenated) and \`--epochs=1\`; $REPEATS pairs, alternating."
echo

# run NAME FLAGS...: one job; its summary in $OUT/NAME.json, its output in $OUT/NAME.log.
run() {
  local name="$1"
  shift
  "$LAUNCH" "${JOB[@]}" "$@" --summary_json="$OUT/$name.json" --final_model="$OUT/$name.model" \
    > "$OUT/$name.log" 2>&1 || { echo "$name failed; see $OUT/$name.log" >&2; tail -n 20 "$OUT/$name.log" >&2; exit 1; }
}
for i in $(seq 1 "$REPEATS"); do
  run "file-$i" --data_dir="$OUT/files" --epochs=1
  run "stream-$i" --data_stream="$OUT/stream"
done

# The live run: the generator writes while the job trains.
mkdir -p "$OUT/live"
"$BIN/pstrain-gen-ctr" --stream_dir="$OUT/live" "${GEN_FLAGS[@]}" --rate="$RATE" > "$OUT/live-gen.log" &
WRITER=$!
run live --data_stream="$OUT/live"
wait "$WRITER"

"$PY" - "$OUT" "$REPEATS" "$RATE" "$MODE" <<'EOF'
import json, statistics, sys
out, repeats, rate, mode = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
load = lambda name: json.load(open(f"{out}/{name}.json"))
rate_of = lambda s: s["samples_per_second"]
files = [rate_of(load(f"file-{i}")) for i in range(1, repeats + 1)]
streams = [rate_of(load(f"stream-{i}")) for i in range(1, repeats + 1)]
print("| run | samples/s (each) | median | vs file |")
print("|---|---|---:|---:|")
fm, sm = statistics.median(files), statistics.median(streams)
print(f"| file job | {', '.join(f'{x:,.0f}' for x in files)} | {fm:,.0f} | 1.000x |")
print(f"| stream (all files ready) | {', '.join(f'{x:,.0f}' for x in streams)} | {sm:,.0f} | {sm / fm:.3f}x |")
same = open(f"{out}/file-1.model", "rb").read() == open(f"{out}/stream-1.model", "rb").read()
print()
print(f"The stream's final model equals the file job's byte for byte: {'yes' if same else 'NO'}"
      + (" (not expected in ASYNC)." if mode == "async" else "."))
for name in ["file-1", "stream-1"]:
    print(f"{name}: {load(name)['epochs'][0]['samples']:,} samples counted.")
planted = [json.loads(l) for l in open(f"{out}/planted.jsonl") if l.startswith("{")]
stream = load("stream-1")["stream"]
print()
print("Progressive validation by hour (stream run 1; each record predicted before it was trained on):")
print()
print("| hour | records | planted AUC | progressive AUC | difference | progressive log loss |")
print("|---:|---:|---:|---:|---:|---:|")
for p, f in zip(planted, stream["progressive"]):
    print(f"| {p['hour']} | {f['samples']:,} | {p['planted_auc']:.4f} | {f['auc']:.4f} | {f['auc'] - p['planted_auc']:+.4f} "
          f"| {f['logloss']:.4f} |")
w = stream["window"]
print()
print(f"Window (last {stream['window_files']} files): AUC {w['auc']:.4f}, log loss {w['logloss']:.4f} over {w['samples']:,} records.")
live = load("live")
print()
print(f"Live run (the generator writing {rate:,.0f} records/s while the job trains): {live['samples_per_second']:,.0f} samples/s "
      f"over the run, lag at the end {live['stream']['lag_records']} records; final model equal to the file job's: "
      f"{'yes' if open(f'{out}/live.model', 'rb').read() == open(f'{out}/file-1.model', 'rb').read() else 'NO'}.")
EOF
echo
echo "(summaries and logs: $OUT)"
