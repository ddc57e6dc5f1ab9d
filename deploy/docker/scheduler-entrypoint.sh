#!/usr/bin/env bash
# The scheduler's entry point in Kubernetes: runs `pstrain-scheduler "$@"` and exits with its status.
#
# When the scheduler ends the job itself (exit 0: finished, 1: failed, 2: bad job) and
# PSTRAIN_SCALE_DOWN lists StatefulSets (comma-separated, e.g. pstrain-server,pstrain-worker), it
# first scales each of them to 0 replicas through the Kubernetes API, with the pod's service
# account: a StatefulSet restarts every pod that exits, even with status 0, so without this the
# servers and workers of a finished job would be started again forever.
#
# Nothing is scaled when the scheduler was stopped by a signal (SIGTERM is forwarded to it: the pod
# is being deleted, evicted or drained) or died of one (a crash): then the Job starts the scheduler
# again, it goes on from --state_dir, and the servers and workers must still be there.
#
# Environment: PSTRAIN_SCALE_DOWN (optional), POD_NAMESPACE (default: the service account's),
# KUBERNETES_SERVICE_HOST/PORT (set by Kubernetes in every pod), SERVICE_ACCOUNT_DIR (default: where
# Kubernetes mounts the service account's token, CA and namespace).
set -u

readonly sa_dir=${SERVICE_ACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}

log() { echo "scheduler-entrypoint: $*" >&2; }

# Scales StatefulSet $1 to 0 replicas; non-zero (and a log line) if the API refused or was unreachable.
scale_to_zero() {
  local name=$1 namespace token url
  namespace=${POD_NAMESPACE:-$(cat "$sa_dir/namespace")} || return 1
  token=$(cat "$sa_dir/token") || return 1
  url="https://${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}/apis/apps/v1/namespaces/${namespace}/statefulsets/${name}/scale"
  # The token goes in on stdin, not on the command line, where any process could read it.
  if printf 'Authorization: Bearer %s\n' "$token" |
    curl --silent --show-error --fail --output /dev/null --max-time 10 --retry 5 --retry-connrefused \
      --cacert "$sa_dir/ca.crt" --header @- \
      --header 'Content-Type: application/merge-patch+json' \
      --request PATCH --data '{"spec":{"replicas":0}}' "$url"; then
    log "scaled statefulset ${namespace}/${name} to 0"
  else
    log "could not scale statefulset ${namespace}/${name} to 0 (see curl's message above)"
    return 1
  fi
}

scheduler_pid=
got_signal=
# shellcheck disable=SC2317  # called by the traps below
forward() {
  got_signal=$1
  if [ -n "$scheduler_pid" ]; then kill -s "$1" "$scheduler_pid" 2>/dev/null; fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT

pstrain-scheduler "$@" &
scheduler_pid=$!
# A trapped signal interrupts `wait` (status > 128) while the scheduler is still stopping: wait again
# until it is gone, then once more for its own exit status.
while kill -0 "$scheduler_pid" 2>/dev/null; do
  wait "$scheduler_pid"
done
wait "$scheduler_pid"
status=$?

if [ -n "$got_signal" ]; then
  log "pstrain-scheduler exited with status $status after SIG$got_signal; not scaling anything down"
elif [ "$status" -gt 2 ]; then
  log "pstrain-scheduler exited with status $status (a crash?); it will be started again, not scaling anything down"
elif [ -n "${PSTRAIN_SCALE_DOWN:-}" ]; then
  log "pstrain-scheduler exited with status $status: the job is over; scaling down ${PSTRAIN_SCALE_DOWN}"
  IFS=, read -r -a names <<<"$PSTRAIN_SCALE_DOWN"
  for name in "${names[@]}"; do
    name=${name//[[:space:]]/}
    if [ -n "$name" ]; then scale_to_zero "$name" || true; fi
  done
fi
exit "$status"
