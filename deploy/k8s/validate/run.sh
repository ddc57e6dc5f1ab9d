#!/usr/bin/env bash
# Checks the Kubernetes manifests without a cluster (ctest: k8s_manifests_test):
#   1. renders each overlay (deploy/k8s/overlays/*) with `kubectl kustomize` and validates it, with
#      the standalone manifests in deploy/k8s/tools/: every object must pass validate.mjs;
#   2. validates every negative fixture in testdata/: each must FAIL, printing every line its
#      `# expect: TEXT` comments name.
# Installs the validator's npm packages (npm ci, pinned by package-lock.json) when node_modules is
# missing or older than the lock file.
# Exit status: 0 all held, 1 something did not, 77 skipped (kubectl, node or npm missing).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
k8s=$(dirname "$here")

for tool in kubectl node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "k8s_manifests_test: SKIPPED: $tool is not installed (needs kubectl with kustomize, node >= 18, npm)"
    exit 77
  fi
done
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)'; then
  echo "k8s_manifests_test: SKIPPED: node $(node --version) is too old (needs >= 18)"
  exit 77
fi

# npm ci into a fresh folder, then one rename: a concurrent run never sees half a node_modules.
stamp="$here/node_modules/.pstrain-package-lock.json"
if ! cmp -s "$here/package-lock.json" "$stamp"; then
  staging=$(mktemp -d "$here/.npm-ci.XXXXXX")
  trap 'rm -rf "$staging"' EXIT
  cp "$here/package.json" "$here/package-lock.json" "$staging/"
  echo "k8s_manifests_test: npm ci (installing the validator's packages)"
  if ! (cd "$staging" && npm ci --no-audit --no-fund --loglevel=error >npm-ci.log 2>&1); then
    cat "$staging/npm-ci.log"
    echo "k8s_manifests_test: FAILED: npm ci in ${here#"$k8s/"} failed (see above)"
    exit 1
  fi
  cp "$here/package-lock.json" "$staging/node_modules/.pstrain-package-lock.json"
  rm -rf "$here/node_modules"
  mv "$staging/node_modules" "$here/node_modules" 2>/dev/null || true  # another run may have won
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" ${staging:+"$staging"}' EXIT
passed=0
failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

# Validates manifest file $2 (reported as $1), which must pass.
expect_valid() {
  if node "$here/validate.mjs" "$2" >"$tmp/out" 2>&1; then
    pass "$1: $(cat "$tmp/out")"
  else
    sed 's/^/    /' "$tmp/out"
    fail "$1: invalid"
  fi
}

# 1. What we deploy must be valid.
for overlay in "$k8s"/overlays/*/; do
  name="overlay $(basename "$overlay")"
  if ! kubectl kustomize "$overlay" >"$tmp/rendered.yaml" 2>"$tmp/kustomize.err"; then
    cat "$tmp/kustomize.err"
    fail "$name: kubectl kustomize failed"
  else
    expect_valid "$name" "$tmp/rendered.yaml"
  fi
done
for manifest in "$k8s"/tools/*.yaml; do
  expect_valid "tools/$(basename "$manifest")" "$manifest"
done

# 2. What is wrong must be caught, with the expected message.
for fixture in "$here"/testdata/*.yaml; do
  name="testdata/$(basename "$fixture")"
  status=0
  node "$here/validate.mjs" "$fixture" >"$tmp/out" 2>&1 || status=$?
  if [ "$status" -ne 1 ]; then
    sed 's/^/    /' "$tmp/out"
    fail "$name: expected the validator to fail (exit 1), it exited $status"
    continue
  fi
  expected=0
  missing=0
  while IFS= read -r line; do
    expected=$((expected + 1))
    if ! grep -qF -- "$line" "$tmp/out"; then
      echo "    expected: $line"
      missing=$((missing + 1))
    fi
  done < <(sed -n 's/^# expect: //p' "$fixture")
  if [ "$expected" -eq 0 ]; then
    fail "$name: has no '# expect:' line"
  elif [ "$missing" -gt 0 ]; then
    sed 's/^/    got: /' "$tmp/out"
    fail "$name: $missing of $expected expected messages missing"
  else
    pass "$name: rejected ($expected expected messages)"
  fi
done

echo "k8s_manifests_test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
