#!/usr/bin/env bash
# Installs the Debian packages pstrain needs: `demo` for building and running the demo job, `all`
# (the default) for every test as well.
# Idempotent: installs only what is missing, so a second run is quick and offline.
set -euo pipefail

# What `make demo` needs: the compilers and libraries of the roles' binaries, the data set, and
# matplotlib for pstrain-plot. Nothing else, so that a first demo is quick.
demo_packages=(
  build-essential cmake pkg-config ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgoogle-glog-dev libgflags-dev
  libopenblas-dev zlib1g-dev libssl-dev
  # The HTTP server of /metrics and the dashboard.
  libcpp-httplib-dev
  # Small, and found by the CMake configure that both commands share.
  libgtest-dev libgmock-dev libbenchmark-dev
  # pstrain-plot (tools/plot/): run summaries as PNG figures.
  python3-matplotlib
  dataset-fashion-mnist
)

# What `make test` adds: everything else the tests, the Python package and the fuzz targets use.
test_packages=(
  python3-grpcio python3-protobuf
  # The Python package (python/): its bindings, and the NumPy and PyTorch it uses.
  pybind11-dev python3-dev python3-numpy python3-torch
  # Its wheel (python/pyproject.toml) built and installed into a venv, as python_wheel_test does.
  python3-pip python3-setuptools python3-wheel python3-venv
  # A real Prometheus and a real browser for the observability tests.
  prometheus chromium
  # The fuzz targets (fuzz/, scripts/fuzz.sh): clang with libFuzzer and the sanitizer runtimes.
  clang libclang-rt-14-dev
  # The lint tests (docs/testing.md): clang's thread-safety analysis (clang, above), the format,
  # and the Python package's type hints; clang-tidy for scripts/clang_tidy.py.
  clang-format mypy clang-tidy
  # ThreadSanitizer's subset (tsan_smoke, scripts/sanitize.sh): Debian's Abseil source fetched,
  # patched and unpacked to be built instrumented (GCC's libtsan2 comes with g++).
  curl patch xz-utils
)

usage="usage: $0 [demo|all]  (default: all)"
case "${1:-all}" in
  demo) packages=("${demo_packages[@]}") ;;
  all) packages=("${demo_packages[@]}" "${test_packages[@]}") ;;
  *) echo "install-deps: unknown set '$1'; $usage" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    sudo=sudo
  else
    sudo=
  fi
  echo "install-deps: installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
  $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
fi

# The dashboard's browser test drives Chromium through playwright-core (pinned by
# tests/dashboard/package-lock.json). Only where Node and npm are installed; the test skips without.
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-all}" = all ] && command -v node >/dev/null && command -v npm >/dev/null && [ ! -d "$here/tests/dashboard/node_modules" ]; then
  echo "install-deps: npm ci --prefix tests/dashboard"
  npm ci --prefix "$here/tests/dashboard" --no-audit --no-fund --loglevel=error
fi
