#!/usr/bin/env bash
# What mutual TLS costs between hosts: the demo job with its roles on three of the project's own
# test hosts (network namespaces on one virtual Ethernet segment, 10.0.0.1-3, made and deleted by
# this script), secured (mutual TLS and the job token) against --insecure, runs alternating.
# Host 1: the scheduler and both servers; hosts 2 and 3: one worker each, so every push and pull
# crosses the segment over TCP.
#
#   bench/tls_hosts.sh BUILD_DIR          e.g. bench/tls_hosts.sh build   (root; iproute2, openssl)
#
# Environment knobs:
#   HOSTS_REPEATS  runs of each side (default 5)
#   HOSTS_EPOCHS   epochs of each run (default 3)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_binaries "$0" "$1" pstrain-scheduler pstrain-server pstrain-worker
[[ "$(id -u)" == 0 ]] || { echo "$0: needs root to make network namespaces" >&2; exit 1; }
REPEATS="${HOSTS_REPEATS:-5}"
EPOCHS="${HOSTS_EPOCHS:-3}"
OUT="$(mktemp -d -t pstrain-tls-hosts.XXXXXX)"
NS="pstb$$"

cleanup() {
  for n in sw h1 h2 h3; do ip netns del "$NS-$n" 2>/dev/null || true; done
}
trap cleanup EXIT

# The segment: a bridge in a switch namespace, one veth per host namespace.
ip netns add "$NS-sw"
ip -n "$NS-sw" link add br0 type bridge
ip -n "$NS-sw" link set br0 up
for i in 1 2 3; do
  ip netns add "$NS-h$i"
  ip link add "${NS}v$i" type veth peer name "${NS}p$i"
  ip link set "${NS}v$i" netns "$NS-h$i"
  ip link set "${NS}p$i" netns "$NS-sw"
  ip -n "$NS-sw" link set "${NS}p$i" master br0 up
  ip -n "$NS-h$i" addr add "10.0.0.$i/24" dev "${NS}v$i"
  ip -n "$NS-h$i" link set "${NS}v$i" up
  ip -n "$NS-h$i" link set lo up
done

# The job's credentials, one certificate per role (docs/guides/security.md).
"$(dirname "$0")/../deploy/k8s/tools/make-tls-secret.sh" --dir "$OUT/tls" --days 2 >/dev/null
# secured ROLE: the flags that give ROLE its own certificate.
secured() {
  echo --tls_cert="$OUT/tls/$1.pem" --tls_key="$OUT/tls/$1-key.pem" --tls_ca="$OUT/tls/ca.pem" \
    --job_token_file="$OUT/tls/token"
}

# One job: $1 side (secured|insecure), $2 repeat.
run_job() {
  local side="$1" i="$2"
  # flags ROLE: that role's security flags on this side.
  flags() { if [[ "$side" == insecure ]]; then echo --insecure; else secured "$1"; fi; }
  local s="$OUT/$side-$i"
  # shellcheck disable=SC2046  # the flags are words without spaces
  ip netns exec "$NS-h1" "$BIN/pstrain-scheduler" --host=10.0.0.1 --port=7000 --servers=2 --workers=2 \
    --epochs="$EPOCHS" --summary_json="$s.json" $(flags scheduler) > "$s.scheduler.log" 2>&1 &
  local scheduler=$!
  local pids=()
  for k in 0 1; do
    # shellcheck disable=SC2046
    ip netns exec "$NS-h1" "$BIN/pstrain-server" --scheduler=10.0.0.1:7000 --host=10.0.0.1 --port=0 $(flags server) \
      > "$s.server$k.log" 2>&1 &
    pids+=($!)
  done
  for h in 2 3; do
    # shellcheck disable=SC2046
    ip netns exec "$NS-h$h" "$BIN/pstrain-worker" --scheduler=10.0.0.1:7000 $(flags worker) > "$s.worker$h.log" 2>&1 &
    pids+=($!)
  done
  if ! wait "$scheduler"; then
    kill "${pids[@]}" 2>/dev/null || true
    echo "$side run $i failed: see $s.scheduler.log" >&2
    exit 1
  fi
  wait "${pids[@]}" || true
}

echo "### Mutual TLS between hosts (bench/tls_hosts.sh)"
echo
print_machine
for ((i = 0; i < REPEATS; ++i)); do
  for side in secured insecure; do run_job "$side" "$i"; done
done

/usr/bin/python3 - "$OUT" "$REPEATS" "$EPOCHS" <<'PY'
import json, statistics, sys

out, repeats, epochs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def runs(side):
    return [json.load(open(f"{out}/{side}-{i}.json")) for i in range(repeats)]
sides = {side: runs(side) for side in ("secured", "insecure")}
speed = {side: statistics.median(s["samples_per_second"] for s in v) for side, v in sides.items()}
ratios = [a["samples_per_second"] / b["samples_per_second"] for a, b in zip(sides["secured"], sides["insecure"])]
print()
print(f"The demo job (`--epochs={epochs}`: sync MLP, 2 servers on host 1, one worker on each of hosts 2"
      f" and 3, so all tensor traffic crosses the virtual segment), {repeats} runs a side alternating;"
      " training samples/s from the run summary, medians.")
print()
print("| run | samples/s | vs --insecure | test accuracy (median) |")
print("|---|---:|---:|---:|")
for side, name in (("secured", "mutual TLS + token"), ("insecure", "`--insecure`")):
    acc = statistics.median(s.get("final_test_accuracy", 0.0) for s in sides[side])
    r = statistics.median(ratios) if side == "secured" else 1.0
    print(f"| {name} | {speed[side]:,.0f} | {r:.2f}x | {acc:.4f} |")
PY
echo
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "Raw outputs: $OUT"
