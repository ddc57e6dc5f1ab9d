#!/usr/bin/env bash
# Ten days of drifting keys: a CTR job's servers' memory and rows day by day, and the last day's
# test AUC, with an eviction policy against without one, run in the same invocation.
#
#   bench/drift_ctr.sh BUILD_DIR            e.g. bench/drift_ctr.sh build
#
# The data: pstrain-gen-ctr --days=10 --new_key_rate=0.2: train.tsv holds the days in order, and
# each day draws a fifth of its values from ids of its own, never seen before or after (as new
# items and users arrive and old ones go); test.tsv is the last day's. The job trains one epoch
# over it in file order (`pstrain-launch --model=ctr --servers=2 --workers=2 --mode=sync
# --batch_size=1024 --epochs=1`), so its step s trains on day floor(s * 2048 / records a day)
# (ASYNC/SSP: each push is a step of 1024 records, so day floor(s * 1024 / records a day)).
# While it runs, each server's /metrics is read every second: its RSS
# (process_resident_memory_bytes), its step and its tables' rows. The table gives each server's
# RSS and rows at the end of each day, and how far its RSS moved from the end of day 2 on.
#
# Environment knobs:
#   DRIFT_DATA_DIR      data to train on (default: generated as above into a temporary folder,
#                       removed at the end; give DRIFT_DAYS and DRIFT_TRAIN to match it)
#   DRIFT_DAYS          days (default 10)
#   DRIFT_TRAIN         training records over all days (default 2000000)
#   DRIFT_NEW_KEY_RATE  (default 0.2)
#   DRIFT_UNIQUE_KEYS   the lasting ids over all fields (default 1000000)
#   DRIFT_POLICY        the policy's job flags (default: --table_ttl_updates=U, U the updates of
#                       one day)
#   DRIFT_MODE          the job's --mode (default sync; async or ssp for --table_ttl_seconds,
#                       e.g. DRIFT_MODE=async DRIFT_POLICY=--table_ttl_seconds=4)
# Summaries, logs and the series are kept in a temporary folder whose name is printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_binaries "$0" "$1" pstrain-gen-ctr
DAYS="${DRIFT_DAYS:-10}"
TRAIN="${DRIFT_TRAIN:-2000000}"
GLOBAL_BATCH=2048
UPDATES_A_DAY=$(( (TRAIN / DAYS + GLOBAL_BATCH - 1) / GLOBAL_BATCH ))
POLICY="${DRIFT_POLICY:---table_ttl_updates=$UPDATES_A_DAY}"
MODE="${DRIFT_MODE:-sync}"
OUT="$(mktemp -d -t pstrain-drift.XXXXXX)"
ctr_data_or_generate "$0" "${DRIFT_DATA_DIR:-}" --train_samples="$TRAIN" --days="$DAYS" \
  --new_key_rate="${DRIFT_NEW_KEY_RATE:-0.2}" --unique_keys="${DRIFT_UNIQUE_KEYS:-1000000}" --zipf=1.0

echo "### Drifting keys over $DAYS days: eviction against none"
echo
print_machine
echo
echo "Data: $GEN."
echo "Job: \`pstrain-launch --model=ctr --servers=2 --workers=2 --mode=$MODE --batch_size=1024 --epochs=1\`,"\
     "without a policy and with \`$POLICY\`, one after the other."
echo

# run NAME FLAGS: one job; its summary in $OUT/NAME.json, its servers' series in $OUT/NAME.series
# (lines "seconds server step rss_bytes rows").
run() {
  local name="$1" policy="$2"
  local -a flags
  read -r -a flags <<< "$policy"
  "$LAUNCH" --model=ctr --data_dir="$DATA" --servers=2 --workers=2 --mode="$MODE" --batch_size=1024 --epochs=1 \
    --http_port=0 "${flags[@]}" --summary_json="$OUT/$name.json" > "$OUT/$name.log" 2>&1 &
  local job=$!
  /usr/bin/python3 - "$OUT/$name.log" "$job" > "$OUT/$name.series" <<'EOF'
import os, re, sys, time, urllib.request
log, job = sys.argv[1], int(sys.argv[2])
def alive():
    try:
        os.kill(job, 0)
        return True
    except OSError:
        return False
urls, start = {}, time.time()
while alive() and len(urls) < 2:  # the launcher prints the servers' metrics URLs at the start
    for m in re.finditer(r"metrics server (\d+) (http://\S+)", open(log).read()):
        urls[int(m.group(1))] = m.group(2)
    time.sleep(0.2)
def gauge(text, name):
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))
while alive():
    for server, url in sorted(urls.items()):
        try:
            text = urllib.request.urlopen(url, timeout=2).read().decode()
        except OSError:
            continue
        step = max((int(float(line.split()[-1])) for line in text.splitlines()
                    if line.startswith("pstrain_server_step{") and 'replica="false"' in line), default=0)
        print(f"{time.time() - start:.1f} {server} {step} {int(gauge(text, 'process_resident_memory_bytes'))}"
              f" {int(gauge(text, 'pstrain_server_table_rows'))}", flush=True)
    time.sleep(1)
EOF
  wait "$job" || { echo "$0: the job with '$policy' failed, see $OUT/$name.log" >&2; exit 1; }
}

run none ""
run policy "$POLICY"

# A server's step counts global batches in SYNC, each worker's batches in ASYNC/SSP.
STEP_RECORDS=$([[ "$MODE" == sync ]] && echo "$GLOBAL_BATCH" || echo 1024)
/usr/bin/python3 - "$OUT" "$DAYS" "$TRAIN" "$STEP_RECORDS" "$POLICY" <<'EOF'
import json, sys
out, days, train, batch, policy = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
per_day = train / days
def by_day(name):
    """{server: [(rss MiB, rows) at the last sample of each day]} from NAME.series."""
    days_seen = {}
    for line in open(f"{out}/{name}.series"):
        _, server, step, rss, rows = line.split()
        day = min(int(int(step) * batch // per_day), days - 1)
        days_seen.setdefault(int(server), {})[day] = (int(rss) / 2**20, int(rows))
    return {s: [d.get(day) for day in range(days)] for s, d in days_seen.items()}
runs = {name: (by_day(name), json.load(open(f"{out}/{name}.json"))) for name in ("none", "policy")}
servers = sorted(runs["none"][0])
head = "| day |" + "".join(f" server {s} RSS, none | server {s} RSS, policy | server {s} rows, none | server {s} rows, policy |" for s in servers)
print(head)
print("|---:|" + "---:|" * (4 * len(servers)))
for day in range(days):
    cells = []
    for s in servers:
        a, b = runs["none"][0][s][day], runs["policy"][0].get(s, [None] * days)[day]
        cells += [f"{a[0]:.0f} MiB" if a else "-", f"{b[0]:.0f} MiB" if b else "-",
                  f"{a[1]:,}" if a else "-", f"{b[1]:,}" if b else "-"]
    print(f"| {day + 1} | " + " | ".join(cells) + " |")
print()
for name, label in (("none", "no policy"), ("policy", policy)):
    series, summary = runs[name]
    moves = []
    for s in servers:
        rss = [v[0] for v in series[s][2:] if v]  # from the end of day 3 on, against day 2's
        base = series[s][1][0] if series[s][1] else None
        if base and rss:
            moves.append(f"server {s} {min(rss) / base - 1:+.1%} to {max(rss) / base - 1:+.1%}")
    print(f"- {label}: last-day test AUC {summary['final_test_auc']:.4f}, {summary['samples_per_second']:,.0f} samples/s, "
          f"rows at the end {summary['embedding_tables']['rows']:,}; RSS after day 2 against its end: {', '.join(moves)}")
a, b = runs["policy"][1], runs["none"][1]
print(f"- {policy} against none: AUC {a['final_test_auc'] - b['final_test_auc']:+.4f}, "
      f"samples/s {a['samples_per_second'] / b['samples_per_second']:.3f}x, "
      f"rows {a['embedding_tables']['rows'] / b['embedding_tables']['rows']:.3f}x")
EOF
echo
echo "(summaries, logs and series in $OUT)"
