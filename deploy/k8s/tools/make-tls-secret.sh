#!/usr/bin/env bash
# Makes the pstrain-tls Secret every pstrain pod mounts (deploy/k8s/base): a CA, one certificate it
# signs for every role, and a random job token. Needs openssl (and kubectl for --apply).
#
# Usage: make-tls-secret.sh [--dir DIR] [--days N] [--renew] [--apply] [NAMESPACE]
#   NAMESPACE  the job's namespace (default: pstrain, the overlays')
#   --dir DIR  where the files go (default: ./pstrain-tls). ca.pem, cert.pem, key.pem and token go
#              into the Secret; ca-key.pem, the CA's private key, stays here only (for --renew):
#              keep it safe or delete it
#   --days N   how long the certificate is valid (default: 90); the CA: 10 times as long
#   --renew    keep DIR's CA and token and issue a new certificate and key. Applied to a running
#              job, the roles take it up without a restart, once the kubelet has updated the
#              mounted Secret (about a minute) and they re-read it (10 s); a new CA or token would
#              need every role restarted at once
#   --apply    run the kubectl command instead of printing it
#
# The certificate names "pstrain" (what every role checks, --tls_server_name) and the scheduler's
# Service names as DNS subject alternative names, so tools such as grpcurl can also check it.
# The printed command creates the Secret, or replaces it when it exists (for --renew).
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
  for f in ca.pem ca-key.pem cert.pem key.pem token; do
    if [ -e "$dir/$f" ]; then
      echo "make-tls-secret.sh: $dir/$f exists; use --renew for a new certificate, or another --dir" >&2
      exit 2
    fi
  done
  quiet openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 \
    -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" -days $((days * 10)) \
    -subj "/O=pstrain job/CN=pstrain job CA" -addext "keyUsage = critical, keyCertSign, cRLSign"
  openssl rand -hex 32 >"$dir/token"
fi

# The role certificate: a fresh key, signed by the CA, usable as TLS server and client.
extensions=$(mktemp)
trap 'rm -f "$extensions" "$dir/cert.csr"' EXIT
cat >"$extensions" <<EXT
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:pstrain, DNS:pstrain-scheduler, DNS:pstrain-scheduler.$namespace.svc, DNS:pstrain-scheduler.$namespace.svc.cluster.local
EXT
quiet openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 \
  -keyout "$dir/key.pem.new" -out "$dir/cert.csr" -subj "/O=pstrain job/CN=pstrain"
quiet openssl x509 -req -in "$dir/cert.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -sha256 \
  -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$extensions" -out "$dir/cert.pem.new"
quiet openssl verify -CAfile "$dir/ca.pem" "$dir/cert.pem.new"
mv "$dir/key.pem.new" "$dir/key.pem"
mv "$dir/cert.pem.new" "$dir/cert.pem"
chmod 0644 "$dir/ca.pem" "$dir/cert.pem"

# create --dry-run | apply: creates the Secret, or replaces the one there.
command=(kubectl -n "$namespace" create secret generic pstrain-tls
  "--from-file=ca.pem=$dir/ca.pem" "--from-file=cert.pem=$dir/cert.pem"
  "--from-file=key.pem=$dir/key.pem" "--from-file=token=$dir/token" --dry-run=client -o yaml)
if $apply; then
  "${command[@]}" | kubectl apply -f -
else
  echo "# In $dir: ca.pem, cert.pem, key.pem, token (the Secret) and ca-key.pem (stays here). Create or replace it with:"
  printf '%q ' "${command[@]}"
  echo "| kubectl apply -f -"
fi
