#!/usr/bin/env bash
# Makes the Secrets the pstrain pods mount (deploy/k8s/base), one per role: a CA, one certificate
# (and key) it signs for each role, and a random job token. Needs openssl (and kubectl for --apply).
#
# Usage: make-tls-secret.sh [--dir DIR] [--days N] [--renew] [--apply] [NAMESPACE]
#   NAMESPACE  the job's namespace (default: pstrain, the overlays')
#   --dir DIR  where the files go (default: ./pstrain-tls): ca.pem, token, and ROLE.pem with
#              ROLE-key.pem for scheduler, server, worker and operator (the layout pstrain-launch
#              --tls_dir reads). Secret pstrain-tls-ROLE holds ca.pem, token and that role's
#              certificate and key as cert.pem and key.pem, for the scheduler, the servers and the
#              workers; the operator's files stay here, for tools you run (they can read the job's
#              status but act as no member). ca-key.pem, the CA's private key, stays here only
#              (for --renew): keep it safe or delete it
#   --days N   how long the certificates are valid (default: 90); the CA: 10 times as long
#   --renew    keep DIR's CA and token and issue new certificates and keys. Applied to a running
#              job, the roles take them up without a restart, once the kubelet has updated the
#              mounted Secrets (about a minute) and they re-read them (10 s); a new CA or token
#              would need every role restarted at once
#   --apply    run the kubectl commands instead of printing them
#
# Each certificate carries its role as the URI spiffe://pstrain/NAMESPACE/ROLE, which the peers
# check: a worker's certificate cannot register a server, nor act as one (see
# docs/guides/security.md). Each also names "pstrain" (what every role checks, --tls_server_name)
# and the scheduler's Service names as DNS subject alternative names, so tools such as grpcurl
# can check it. The printed commands create the Secrets, or replace them when they exist.
set -euo pipefail

dir=./pstrain-tls
days=90
renew=false
apply=false
namespace=pstrain
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=${2:?--dir needs a folder}; shift 2 ;;
    --dir=*) dir=${1#--dir=}; shift ;;
    --days) days=${2:?--days needs a number}; shift 2 ;;
    --days=*) days=${1#--days=}; shift ;;
    --renew) renew=true; shift ;;
    --apply) apply=true; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "make-tls-secret.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) namespace=$1; shift ;;
  esac
done
if ! [[ "$days" =~ ^[1-9][0-9]*$ ]]; then
  echo "make-tls-secret.sh: --days=$days, expected a positive number of days" >&2
  exit 2
fi
command -v openssl >/dev/null || { echo "make-tls-secret.sh: openssl is not installed" >&2; exit 2; }

# Runs openssl quietly; its output only when it fails.
quiet() {
  local out
  if ! out=$("$@" 2>&1); then
    echo "$out" >&2
    echo "make-tls-secret.sh: failed: $*" >&2
    return 1
  fi
}

umask 077  # The keys and the token: nobody else on this machine may read them.
mkdir -p "$dir"
if $renew; then
  for f in ca.pem ca-key.pem token; do
    [ -s "$dir/$f" ] || { echo "make-tls-secret.sh: --renew needs $dir/$f (made by an earlier run)" >&2; exit 2; }
  done
else
  for f in ca.pem ca-key.pem token scheduler.pem server.pem worker.pem operator.pem serving.pem; do
    if [ -e "$dir/$f" ]; then
      echo "make-tls-secret.sh: $dir/$f exists; use --renew for new certificates, or another --dir" >&2
      exit 2
    fi
  done
  quiet openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 \
    -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" -days $((days * 10)) \
    -subj "/O=pstrain job/CN=pstrain job CA" -addext "keyUsage = critical, keyCertSign, cRLSign"
  openssl rand -hex 32 >"$dir/token"
fi

roles=(scheduler server worker operator serving)
# A role's certificate: a fresh key, signed by the CA, usable as TLS server and client, carrying
# the role in its URI.
extensions=$(mktemp)
trap 'rm -f "$extensions" "$dir"/*.csr' EXIT
for role in "${roles[@]}"; do
  cat >"$extensions" <<EXT
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:pstrain, DNS:pstrain-scheduler, DNS:pstrain-scheduler.$namespace.svc, DNS:pstrain-scheduler.$namespace.svc.cluster.local, URI:spiffe://pstrain/$namespace/$role
EXT
  quiet openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 \
    -keyout "$dir/$role-key.pem.new" -out "$dir/$role.csr" -subj "/O=pstrain job/CN=pstrain $role"
  quiet openssl x509 -req -in "$dir/$role.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -sha256 \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$extensions" -out "$dir/$role.pem.new"
  quiet openssl verify -CAfile "$dir/ca.pem" "$dir/$role.pem.new"
  mv "$dir/$role-key.pem.new" "$dir/$role-key.pem"
  mv "$dir/$role.pem.new" "$dir/$role.pem"
done
chmod 0600 "$dir"/*.pem "$dir/token"

# create --dry-run | apply: creates each role's Secret, or replaces the one there.
if $apply; then
  for role in scheduler server worker serving; do
    kubectl -n "$namespace" create secret generic "pstrain-tls-$role" \
      "--from-file=ca.pem=$dir/ca.pem" "--from-file=cert.pem=$dir/$role.pem" \
      "--from-file=key.pem=$dir/$role-key.pem" "--from-file=token=$dir/token" --dry-run=client -o yaml |
      kubectl apply -f -
  done
else
  echo "# In $dir: ca.pem, token, and each role's ROLE.pem and ROLE-key.pem (the Secrets); the operator's files"
  echo "# and ca-key.pem stay here. Create or replace the Secrets pstrain-tls-scheduler, -server, -worker and"
  echo "# -serving (overlays/serving's pstrain-serve) with:"
  for role in scheduler server worker serving; do
    printf '%q ' kubectl -n "$namespace" create secret generic "pstrain-tls-$role" \
      "--from-file=ca.pem=$dir/ca.pem" "--from-file=cert.pem=$dir/$role.pem" \
      "--from-file=key.pem=$dir/$role-key.pem" "--from-file=token=$dir/token" --dry-run=client -o yaml
    echo "| kubectl apply -f -"
  done
fi
