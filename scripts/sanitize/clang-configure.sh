#!/usr/bin/env bash
# Configures DIR, once, as the clang build of the libraries with libFuzzer's coverage hooks and
# AddressSanitizer + UndefinedBehaviorSanitizer (-DPSTRAIN_FUZZ=ON: the libraries, their unit
# tests and the fuzz targets, no roles' binaries). scripts/fuzz.sh builds its fuzz targets there,
# scripts/sanitize-smoke.sh some of the unit tests. Exits 77 (ctest reports a skip) without clang
# and libFuzzer.
#
#     scripts/sanitize/clang-configure.sh DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
if ! command -v clang++ >/dev/null || [ ! -e "$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; then
  echo "$(basename "$0"): SKIP: needs clang and libFuzzer (packages clang, libclang-rt-14-dev; scripts/install-deps.sh)"
  exit 77
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DPSTRAIN_FUZZ=ON -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; exit 1; }
fi
