#!/usr/bin/env bash
# ThreadSanitizer over the tests: scripts/sanitize.sh thread, under the name the docs use.
#
#     scripts/tsan.sh [--quick] [BUILD_DIR]
#
# See scripts/sanitize.sh (and docs/testing.md, "Sanitizers") for what it builds and runs.
exec "$(dirname "$0")/sanitize.sh" thread "$@"
