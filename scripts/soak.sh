#!/usr/bin/env bash
# Soak: a secured sync job under its own load plus a steady stream of calls that must be refused,
# for a warm-up (SOAK_WARMUP, default 300 s) and then about SECONDS (default 600) that the bound is
# judged on. Not part of `make test`.
#
#   scripts/soak.sh BUILD_DIR [SECONDS]
#
# It runs the same job twice with the same credentials and seed: once undisturbed, once while
# scripts/soak_insider.py has holders of a worker's files join as workers and try what a worker's
# session must not allow (scripts/soak_insider.py lists it), and
# scripts/soak_attacker.py hammers every role's port with calls that must all be refused
# (plaintext, a certificate of another CA, the job's certificate without the token or with a
# wrong one, and a member's certificate and token without a session credential or with a forged
# one; pushes carry 1 MiB of garbage). Meanwhile it samples every role's RSS every 5 s.
# It prints the RSS table and exits non-zero when a role's RSS grew after warm-up, when any refused
# call was accepted, or when the two final models differ (a sync job is bitwise repeatable, so the
# stream must have changed nothing).
#
# Warm-up is the first SOAK_WARMUP seconds of the disturbed run (default 300): under the streams a
# server's heap takes 2 to 4 minutes to reach its plateau (docs/performance.md "Soak"), and the
# bound is on what follows, over the SECONDS after it. Sampling stops when the job's training is
# over (the scheduler logs that every live worker is done): the end of a job, which assembles and
# writes the final model, is no soak.
#
# "Grew" is judged against the warm-up's envelope, not one sample of it: under the stream a
# server's RSS swings by 2-4 MiB from sample to sample with the calls in flight and the freed
# memory not yet handed back (up to a request's worth; server/server_runner.cc), so one sample may
# fall in a trough. A role fails if any sample after warm-up exceeds the warm-up's largest by more
# than 5% (an excursion past the envelope), or if the median of the last quarter of the samples
# after warm-up exceeds the median of their first quarter by more than 5% (a level that rose while
# the job ran on: what a leak does, whatever the swings).
#
# Environment: SOAK_EPOCHS (default: calibrated so that the disturbed run lasts about
# SOAK_WARMUP + SECONDS), SOAK_WARMUP (seconds, default 300), SOAK_BATCH (default 32: small steps,
# many calls).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 BUILD_DIR [SECONDS]" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="$(cd "$1" && pwd)/bin"
SECONDS_WANTED="${2:-600}"
BATCH="${SOAK_BATCH:-32}"
WARMUP="${SOAK_WARMUP:-300}"
[[ -x "$BIN/pstrain-launch" ]] || { echo "$0: $BIN/pstrain-launch not found; build first" >&2; exit 1; }
OUT="$(mktemp -d -t pstrain-soak.XXXXXX)"
echo "soak: outputs in $OUT"

# The job's credentials (one certificate per role) and a stranger's, as docs/guides/security.md
# makes them.
make_credentials() {
  "$(dirname "$0")/../deploy/k8s/tools/make-tls-secret.sh" --dir "$1" --days 2 >/dev/null
}
make_credentials "$OUT/job"
make_credentials "$OUT/stranger"
SEC=(--tls_dir="$OUT/job")

run_job() {  # NAME EPOCHS: the job, in the background; sets JOB_PID
  "$BIN/pstrain-launch" "${SEC[@]}" --mode=sync --batch_size="$BATCH" --epochs="$2" --seed=11 \
    --eval_last_epoch_only --summary_json="$OUT/$1.json" --final_model="$OUT/$1.model" > "$OUT/$1.log" 2>&1 &
  JOB_PID=$!
}

# Calibration: one epoch's wall time sets the epochs of a run of about SECONDS.
EPOCHS="${SOAK_EPOCHS:-}"
if [[ -z "$EPOCHS" ]]; then
  start=$(date +%s.%N)
  run_job calibrate 1
  wait "$JOB_PID"
  per_epoch=$(echo "$(date +%s.%N) - $start" | bc)
  # The streams about halve the job's speed (each staller holds it up, each joiner makes the others
  # redo a step): an undisturbed epoch's time is about half a disturbed one's.
  EPOCHS=$(echo "e = ($WARMUP + $SECONDS_WANTED) / (2 * $per_epoch); if (e < 2) 2 else e / 1" | bc)
fi
echo "soak: $EPOCHS epochs a run (batch $BATCH); warm-up ${WARMUP} s, then about ${SECONDS_WANTED} s measured"

echo "soak: undisturbed reference run"
run_job reference "$EPOCHS"
wait "$JOB_PID" || { echo "soak: the reference run failed; see $OUT/reference.log" >&2; exit 1; }

echo "soak: the same job under a stream of refused calls"
run_job soak "$EPOCHS"
LAUNCHER=$JOB_PID
# Every role's pid and, once listening, port.
roles() { ps -o pid=,comm= --ppid "$LAUNCHER" 2>/dev/null | awk '$2 ~ /^pstrain-/ {print $1, $2}'; }
for _ in $(seq 1 100); do
  [[ $(roles | wc -l) -ge 5 ]] && break
  sleep 0.2
done
ports=""
for _ in $(seq 1 100); do
  ports=$(for pid in $(roles | awk '$2 != "pstrain-worker" {print $1}'); do
            ss -ltnpH 2>/dev/null | grep "pid=$pid," | awk '{print $4}' | sed 's/.*://'
          done | sort -u | tr '\n' ' ')
  [[ $(echo "$ports" | wc -w) -ge 3 ]] && break
  sleep 0.2
done
echo "soak: roles $(roles | tr '\n' ' '); ports $ports"
/usr/bin/python3 "$HERE/soak_attacker.py" --job_dir="$OUT/job" --stranger_dir="$OUT/stranger" \
  --ports="$ports" --until_pid="$LAUNCHER" > "$OUT/attacker.txt" 2>&1 &
ATTACKER=$!
# The insiders: a worker's files and the token, each with a session of its own.
sched_port=""
http_port=""
for _ in $(seq 1 100); do
  sched_port=$(grep -o 'scheduler listening on [^ ]*' "$OUT/soak.log" | head -1 | sed 's/.*://')
  http_port=$(grep -o 'dashboard http://[^/]*' "$OUT/soak.log" | head -1 | sed 's/.*://')
  [[ -n "$sched_port" && -n "$http_port" ]] && break
  sleep 0.2
done
/usr/bin/python3 "$HERE/soak_insider.py" --job_dir="$OUT/job" --port="$sched_port" --http_port="$http_port" \
  --until_pid="$LAUNCHER" --protoc="$(command -v protoc)" > "$OUT/insider.txt" 2>&1 &
INSIDER=$!

# VmRSS is what the bound judges; RssAnon (the heap, stacks and other private memory) and RssFile
# (the binaries' and libraries' pages read in) say which part moved.
echo "seconds,pid,role,rss_kib,anon_kib,file_kib" > "$OUT/rss.csv"
start=$(date +%s)
# While the job trains: once every live worker is done (or a role has exited) the job is over, and
# what its end does (the final shards sent, the final model written, the summary) is no soak.
while kill -0 "$LAUNCHER" 2>/dev/null && [[ $(roles | wc -l) -ge 5 ]] \
      && ! grep -q 'every live worker is done' "$OUT/soak.log"; do
  now=$(( $(date +%s) - start ))
  roles | while read -r pid role; do
    sample=$(awk '/^(VmRSS|RssAnon|RssFile):/ {v[$1] = $2} END {if (v["VmRSS:"] != "") print v["VmRSS:"] "," v["RssAnon:"] "," v["RssFile:"]}' \
      "/proc/$pid/status" 2>/dev/null || true)
    [[ -n "$sample" ]] && echo "$now,$pid,$role,$sample" >> "$OUT/rss.csv"
  done
  sleep 5
done
wait "$LAUNCHER" || { echo "soak: the disturbed run failed; see $OUT/soak.log" >&2; exit 1; }
wait "$ATTACKER" || true
wait "$INSIDER" || true

/usr/bin/python3 - "$OUT" "$WARMUP" <<'EOF'
import collections, csv, filecmp, sys
out, warmup = sys.argv[1], int(sys.argv[2])
rows = list(csv.DictReader(open(f"{out}/rss.csv")))
by_pid = collections.defaultdict(list)
anon_by_pid = collections.defaultdict(list)
names = {}
for r in rows:
    by_pid[r["pid"]].append((int(r["seconds"]), int(r["rss_kib"])))
    anon_by_pid[r["pid"]].append((int(r["seconds"]), int(r["anon_kib"])))
    names[r["pid"]] = r["role"]
failed = []
median = lambda xs: sorted(xs)[len(xs) // 2]
print("| role (pid) | samples (warm-up + after) | warm-up max MiB | max after MiB | peak vs warm-up max "
      "| first-quarter median after MiB | last-quarter median MiB | level change | of it anonymous, MiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for pid, samples in sorted(by_pid.items(), key=lambda kv: names[kv[0]]):
    if len(samples) < 8:
        continue
    warm = [r for t, r in samples if t < warmup]
    after = [r for t, r in samples if t >= warmup]
    if not warm or len(after) < 8:
        failed.append(f"{names[pid]} ({pid}): {len(after)} samples after the {warmup} s warm-up, too few to judge")
        continue
    quarter = len(after) // 4
    second, last = after[:quarter], after[-quarter:]
    peak = (max(after) - max(warm)) / max(warm)
    level = (median(last) - median(second)) / median(second)
    # Growth is what abuse would cause; a drop (a done worker freeing its data) is not.
    if peak > 0.05 or level > 0.05:
        failed.append(f"{names[pid]} ({pid}) RSS grew after warm-up: peak {peak:+.1%} over the warm-up's max, "
                      f"level {level:+.1%} (the last quarter's median over the first's, after warm-up)")
    anon = [a for t, a in anon_by_pid[pid] if t >= warmup]
    anon_levels = f"{median(anon[:quarter]) / 1024:.1f} → {median(anon[-quarter:]) / 1024:.1f}"
    print(f"| {names[pid]} ({pid}) | {len(warm)} + {len(after)} | {max(warm) / 1024:.1f} | {max(after) / 1024:.1f} | {peak:+.1%} "
          f"| {median(second) / 1024:.1f} | {median(last) / 1024:.1f} | {level:+.1%} | {anon_levels} |")
print()
print(open(f"{out}/attacker.txt").read().strip())
if "accepted 0" not in open(f"{out}/attacker.txt").read():
    failed.append("a call that should have been refused was accepted")
print()
print(open(f"{out}/insider.txt").read().strip())
if "accepted 0" not in open(f"{out}/insider.txt").read():
    failed.append("an insider's attack succeeded (see above)")
same = filecmp.cmp(f"{out}/reference.model", f"{out}/soak.model", shallow=False)
print(f"final model equal to the undisturbed run's: {'yes, bitwise' if same else 'NO'}")
if not same:
    failed.append("the final model differs from the undisturbed run's")
for f in failed:
    print("FAIL:", f)
sys.exit(1 if failed else 0)
EOF
