#!/usr/bin/env bash
# The C++ sources in the house format (.clang-format at the root: Google's style at 120 columns).
#
#   scripts/format.sh          formats every tracked C++ source in place
#   scripts/format.sh --check  changes nothing; lists each file clang-format would change, with
#                              the first lines of its diff, and exits 1 if there is one
#
# `make test` runs the check (ctest format_test, label lint). Exits 77 without clang-format (ctest
# reports a skip; scripts/install-deps.sh installs it) and 2 outside a git checkout.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if ! command -v clang-format >/dev/null; then
  echo "format.sh: SKIP: needs clang-format (package clang-format; scripts/install-deps.sh)"
  exit 77
fi
if ! files=$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' 2>/dev/null); then
  echo "format.sh: $root is not a git checkout: no list of tracked sources" >&2
  exit 2
fi

if [ "${1:-}" != "--check" ]; then
  echo "$files" | xargs clang-format -i
  exit 0
fi

# One clang-format for every file; then a diff for each it names.
count=$(echo "$files" | wc -l)
unformatted=$( (echo "$files" | xargs clang-format --dry-run --Werror 2>&1 || true) |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
bad=0
for f in $unformatted; do
  bad=$((bad + 1))
  echo "== $f is not formatted (scripts/format.sh formats it):"
  clang-format "$f" | diff -u --label "$f" --label "$f (formatted)" "$f" - | sed -n '3,14p' || true
done
echo "format.sh: $count sources, $bad not formatted ($(clang-format --version | head -1))"
[ "$bad" = 0 ]
