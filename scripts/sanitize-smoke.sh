#!/usr/bin/env bash
# The sanitizer subset of `make test` (ctest sanitize_smoke, label sanitize): the unit tests of the
# code that holds a job's state and parses what crosses the wire, built with AddressSanitizer and
# UndefinedBehaviorSanitizer (clang, -O0) in the folder fuzz_smoke builds its targets in, whose
# libraries are compiled that way already, and run there: any report, a leak included, fails
# them. The parameter store (dense, sparse, deltas, checkpoints), the embedding table, the
# scheduler's core, leases and stream, the tensor wire codec and the chunk codecs.
#
#     scripts/sanitize-smoke.sh [BUILD_DIR]      default build/fuzz
#
# The whole runs, ThreadSanitizer's too, are scripts/sanitize.sh (docs/testing.md, "Sanitizers").
# Exits 77 (ctest reports a skip) without clang.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/fuzz}
tests=(server_parameter_store_test server_parameter_store_sparse_test server_parameter_store_delta_test
       server_embedding_table_test server_checkpoint_test server_table_delta_test
       scheduler_core_test scheduler_lease_pool_test scheduler_stream_test
       transport_tensor_wire_test common_chunk_codec_test)

"$root/scripts/sanitize/clang-configure.sh" "$build" || exit $?
nice cmake --build "$build" -j "${FUZZ_BUILD_JOBS:-2}" --target "${tests[@]}"

supp="$root/scripts/sanitize"
# Without the cases that measure glibc's allocator, which ASan replaces.
GTEST_FILTER=$(cat "$supp/gtest_filter.txt")
export GTEST_FILTER
. "$supp/address-options.sh" ""  # "": no options of its own (not this script's arguments)
regex="^($(IFS='|'; echo "${tests[*]}"))\$"
cd "$build"
ctest --output-on-failure -R "$regex"
