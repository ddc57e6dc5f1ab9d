#!/usr/bin/env bash
# container_test: the demo job (deploy/k8s/base/job.textproto: MLP on Fashion-MNIST, sync, 2
# servers, 2 workers, 10 epochs, checkpoints every 200 steps) run from the CPU image as one podman
# container per role, the way the Kubernetes manifests (deploy/k8s/base/) run the pods: the same
# PSTRAIN_* settings, entry points and mounts, user 10001, a read-only root file system with a tmpfs
# /tmp, no capabilities, mutual TLS and the job token from the role's own Secret-like folder mounted
# read-only (made by deploy/k8s/tools/make-tls-secret.sh, group 10001, mode 0440), each server with its own
# checkpoint folder. All on the host network, on free loopback ports.
#
# Once the first checkpoint is written, server 0's container is killed (SIGKILL) and started again
# on the same address and checkpoint folder, as the kubelet restarts a crashed container in its pod
# (at once, then with its back-off while it keeps failing). Passes when the scheduler exits 0 with
# "job FINISHED" and logged the restarted server taking over the dead rank, the run summary's final
# test accuracy is at least 0.80 and it lists the server's death and return, the final model file
# evaluates to that accuracy (pstrain-eval in another container), and every container but the
# killed one (and restarts refused before the death was noticed) exited 0.
#
# Usage: tests/container_test.sh [IMAGE]   (default: localhost/pstrain:cpu, from
#        scripts/build-images.sh; the test does not build it)
# Exit status: 0 passed, 1 failed, 77 skipped (not root, no podman, no image, or podman cannot
# run a container here). Bounded: fails after 10 minutes whatever happens. Every container it
# started is removed on the way out; on failure the logs stay in the folder it prints.
set -euo pipefail

image=${1:-localhost/pstrain:cpu}
limit_s=600
min_accuracy=0.80
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
start_s=$(date +%s)

skip() {
  echo "container_test: SKIPPED: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root (rootful podman, as scripts/build-images.sh sets it up)"
command -v podman >/dev/null || skip "podman is not installed (scripts/build-images.sh installs it)"
for tool in openssl python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
podman image exists "$image" || skip "no image $image here: build it with scripts/build-images.sh --cpu-only"
if ! out=$(timeout 120 podman run --rm --network=none "$image" true 2>&1); then
  skip "podman cannot run a container here: ${out//$'\n'/ } (scripts/build-images.sh sets podman up where it can)"
fi

work=$(mktemp -d /tmp/pstrain-container-test.XXXXXX)
prefix="pstrain-ct-$$"
started=()
passed=false
watchdog=

cleanup() {
  local status=$?
  trap - EXIT TERM INT
  [ -z "$watchdog" ] || kill "$watchdog" 2>/dev/null || true
  if [ ${#started[@]} -gt 0 ]; then
    for name in "${started[@]}"; do
      podman logs "$name" >"$work/logs/$name.log" 2>&1 || true
    done
    podman rm --force --time 0 "${started[@]}" >/dev/null 2>&1 || true
  fi
  if $passed; then
    rm -rf "$work"
    echo "container_test: 1 passed, 0 failed"
    exit 0
  fi
  echo "container_test: logs and files in $work"
  echo "container_test: 0 passed, 1 failed"
  exit $((status == 0 ? 1 : status))
}
trap cleanup EXIT
trap 'echo "container_test: FAILED: interrupted or past the ${limit_s} s limit"; exit 1' TERM INT
# The watchdog: TERM to this script at the limit; the cleanup stops it (and its sleep) first.
(
  trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  sleep "$limit_s" &
  sleeper=$!
  wait "$sleeper" && kill -TERM $$
) &
watchdog=$!

fail() {
  echo "container_test: FAILED: $*"
  for name in "${started[@]}"; do
    echo "--- last lines of $name"
    podman logs --tail 15 "$name" 2>&1 | sed 's/^/    /' || true
  done
  exit 1
}
elapsed() { echo $(($(date +%s) - start_s)); }

# --- the job's files: credentials as the pstrain-tls-ROLE Secrets, the job's ConfigMap, the volumes ---
mkdir -p "$work/logs" "$work/tls" "$work/job"
"$repo/deploy/k8s/tools/make-tls-secret.sh" --dir "$work/tls" --days 1 >/dev/null
for role in scheduler server worker; do
  mkdir -p "$work/secret-$role"
  cp "$work/tls/ca.pem" "$work/tls/token" "$work/secret-$role/"
  cp "$work/tls/$role.pem" "$work/secret-$role/cert.pem"
  cp "$work/tls/$role-key.pem" "$work/secret-$role/key.pem"
  # As the Secret's volume: group 10001 (the pods' fsGroup), mode 0440; the CA's key stays out.
  chgrp -R 10001 "$work/secret-$role"
  chmod 0440 "$work/secret-$role"/*
  chmod 0750 "$work/secret-$role"
done
cp "$repo/deploy/k8s/base/job.textproto" "$work/job/"
chmod -R a+rX "$work/job"
for volume in state scheduler-checkpoints server-0 server-1; do
  mkdir -p "$work/$volume"
  chown 10001:10001 "$work/$volume"
done

# Free loopback ports: gRPC (scheduler, 2 servers), health (5 roles), metrics (5 roles), dashboard.
read -r -a ports < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(14)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
scheduler="127.0.0.1:${ports[0]}"

# What every pod has (deploy/k8s/base/*.yaml): its securityContext, the Secret, the TLS settings.
# The plaintext health and metrics listeners on loopback only: the host's network is the test's.
common=(--detach --network=host --user=10001:10001 --read-only --cap-drop=all
  --security-opt=no-new-privileges
  --env=PSTRAIN_TLS_CERT=/etc/pstrain-tls/cert.pem --env=PSTRAIN_TLS_KEY=/etc/pstrain-tls/key.pem
  --env=PSTRAIN_TLS_CA=/etc/pstrain-tls/ca.pem --env=PSTRAIN_JOB_TOKEN_FILE=/etc/pstrain-tls/token
  --env=PSTRAIN_HEALTH_HOST=127.0.0.1 --env=PSTRAIN_METRICS_HOST=127.0.0.1)

# run NAME PODMAN-ARGS...: starts container $prefix-NAME, with the Secret of its role (NAME up to
# the first '-').
run() {
  local name="$prefix-$1" role=${1%%-*}
  shift
  started+=("$name")
  podman run --name "$name" "${common[@]}" --volume="$work/secret-$role:/etc/pstrain-tls:ro" "$@" >/dev/null ||
    fail "podman run $name failed"
}

# The scheduler as its Job runs it, but listening on loopback, a 3 s linger instead of 30 s (only
# the test waits for it) and no PSTRAIN_SCALE_DOWN (no Kubernetes API to scale anything).
run scheduler \
  --volume="$work/job:/etc/pstrain:ro" --volume="$work/state:/state" \
  --volume="$work/scheduler-checkpoints:/checkpoints" \
  --env=PSTRAIN_HOST=127.0.0.1 --env=PSTRAIN_PORT="${ports[0]}" \
  --env=PSTRAIN_HEALTH_PORT="${ports[3]}" --env=PSTRAIN_METRICS_PORT="${ports[8]}" \
  --env=PSTRAIN_HTTP_PORT="${ports[13]}" --env=PSTRAIN_ADVERTISE_HOST=127.0.0.1 \
  --env=PSTRAIN_CONFIG=/etc/pstrain/job.textproto \
  --env=PSTRAIN_STATE_DIR=/state/scheduler --env=PSTRAIN_SUMMARY_JSON=/state/summary.json \
  --env=PSTRAIN_LINGER_MS=3000 --env=PSTRAIN_STARTUP_TIMEOUT_MS=300000 \
  --env=PSTRAIN_SCHEDULER_RECONNECT_MS=60000 \
  "$image" pstrain-scheduler-entrypoint

# server NAME INDEX: a server with the ports and checkpoint folder of StatefulSet pod INDEX.
server() {
  run "$1" --volume="$work/server-$2:/checkpoints" \
    --env=PSTRAIN_SCHEDULER="$scheduler" --env=PSTRAIN_HOST=127.0.0.1 \
    --env=PSTRAIN_PORT="${ports[1 + $2]}" --env=PSTRAIN_HEALTH_PORT="${ports[4 + $2]}" \
    --env=PSTRAIN_METRICS_PORT="${ports[9 + $2]}" --env=PSTRAIN_ADVERTISE_HOST=127.0.0.1 \
    "$image" pstrain-server
}
server server-0 0
server server-1 1
for i in 0 1; do
  run "worker-$i" \
    --env=PSTRAIN_SCHEDULER="$scheduler" --env=PSTRAIN_HEALTH_PORT="${ports[6 + i]}" \
    --env=PSTRAIN_METRICS_PORT="${ports[11 + i]}" --env=PSTRAIN_ADVERTISE_HOST=127.0.0.1 \
    --env=PSTRAIN_DEVICE=cpu --env=PSTRAIN_BLAS_THREADS=1 \
    "$image" pstrain-worker
done
echo "container_test: started the scheduler, 2 servers and 2 workers ($(elapsed) s)"

status() { podman inspect --format '{{.State.Status}}' "$prefix-$1" 2>/dev/null || echo gone; }
exit_code() { podman inspect --format '{{.State.ExitCode}}' "$prefix-$1"; }

# --- training under way: kill server 0 once it has written a checkpoint, and restart it as the
# kubelet restarts a crashed container in its pod: same address and ports, same checkpoint volume;
# at once the first time, then after 10 s, 20 s, ... (CrashLoopBackOff), at most 4 times ---
until compgen -G "$work/server-0/server-*-step-*.ckpt" >/dev/null; do
  [ "$(status scheduler)" = running ] || fail "the scheduler exited before server 0 wrote a checkpoint"
  sleep 0.1
done
podman kill --signal KILL "$prefix-server-0" >/dev/null
echo "container_test: server 0 killed after its checkpoint $(basename "$(compgen -G "$work/server-0/server-*-step-*.ckpt" | tail -1)") ($(elapsed) s)"
incarnation=server-0
restarts=0
while :; do
  until [ "$(status "$incarnation")" = exited ]; do sleep 0.2; done
  code=$(exit_code "$incarnation")
  if [ "$restarts" -gt 0 ]; then
    [ "$code" -ne 0 ] || break
    echo "container_test: $incarnation exited with status $code: $(podman logs --tail 1 "$prefix-$incarnation" 2>&1 | sed 's/^[^]]*] //')"
  fi
  [ "$(status scheduler)" = running ] || break
  [ "$restarts" -lt 4 ] || fail "server 0 still failing after $restarts restarts"
  if [ "$restarts" -gt 0 ]; then
    echo "container_test: restarting server 0 in $((10 << (restarts - 1))) s (back-off)"
    sleep $((10 << (restarts - 1))) &
    wait $!  # Not a foreground sleep: the watchdog's TERM must not wait for it.
  fi
  restarts=$((restarts + 1))
  incarnation="server-0-restart-$restarts"
  server "$incarnation" 0
  echo "container_test: restarted server 0 as $incarnation ($(elapsed) s)"
done

# --- the job's end ---
while [ "$(status scheduler)" = running ]; do sleep 0.5; done
echo "container_test: the scheduler exited with status $(exit_code scheduler) ($(elapsed) s)"
for name in server-1 worker-0 worker-1; do
  until [ "$(status "$name")" = exited ]; do sleep 0.5; done
done

# --- the checks ---
logs=$(podman logs "$prefix-scheduler" 2>&1)
[ "$(exit_code scheduler)" -eq 0 ] || fail "the scheduler exited with status $(exit_code scheduler), expected 0"
grep -q 'job FINISHED' <<<"$logs" || fail "the scheduler's log has no 'job FINISHED' line"
grep -q 'replaces the dead server' <<<"$logs" || fail "the scheduler never logged the replacement taking over the dead server's rank"
grep 'replaces the dead server' <<<"$logs" | sed 's/^[^]]*] /container_test: scheduler: /' | head -1
[ "$(exit_code server-0)" -eq 137 ] || fail "the killed server exited with status $(exit_code server-0), expected 137 (SIGKILL)"
for name in server-1 "$incarnation" worker-0 worker-1; do
  [ "$(exit_code "$name")" -eq 0 ] || fail "$name exited with status $(exit_code "$name"), expected 0"
done
[ -s "$work/state/summary.json" ] || fail "no run summary at /state/summary.json"
# The accuracy, and the seconds from the server's death (as the scheduler saw it) to the replacement's join.
read -r accuracy recovery < <(python3 - "$work/state/summary.json" <<'EOF'
import json, sys
summary = json.load(open(sys.argv[1]))
events = summary.get("membership_events", [])
died = [e for e in events if e["role"] == "server" and e["kind"] == "died"]
joined = [e for e in events if e["role"] == "server" and e["kind"] == "joined" and died and e["seconds"] > died[0]["seconds"]]
recovery = "%.1f" % (joined[0]["seconds"] - died[0]["seconds"]) if joined else "none"
print(summary.get("final_test_accuracy", 0), recovery)
EOF
)
echo "container_test: final test accuracy $accuracy; the replacement joined ${recovery} s after the server was declared dead"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)" "$accuracy" "$min_accuracy" ||
  fail "final test accuracy $accuracy, expected at least $min_accuracy"
[ "$recovery" != none ] || fail "the run summary has no server death followed by a server joining"

# The final model, evaluated as deploy/k8s/tools/read-state.yaml would: another container, the
# scheduler's volume read-only.
eval_out=$(podman run --rm --network=none --user=10001:10001 --read-only --cap-drop=all \
  --volume="$work/state:/state:ro" "$image" pstrain-eval --model=/state/model.bin 2>&1) ||
  fail "pstrain-eval on /state/model.bin failed: $eval_out"
eval_accuracy=$(sed -n 's/^test_accuracy=\([0-9.]*\) .*/\1/p' <<<"$eval_out")
echo "container_test: pstrain-eval of the final model: test accuracy ${eval_accuracy:-?}"
python3 -c "import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) < 0.005 else 1)" \
  "${eval_accuracy:-0}" "$accuracy" || fail "the final model evaluates to ${eval_accuracy:-nothing}, the summary says $accuracy"

echo "container_test: PASSED in $(elapsed) s"
passed=true
