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

# One clang-format for every file; then a diff for each it names. A file it cannot read, or a
# failure with no file named (a bad .clang-format), fails the check too: it never passes by
# reading nothing.
count=$(echo "$files" | wc -l)
unreadable=$(for f in $files; do [ -r "$f" ] || echo "$f"; done)
if [ -n "$unreadable" ]; then
  echo "format.sh: tracked sources that cannot be read:" $unreadable >&2
  exit 1
fi
status=0
report=$(echo "$files" | xargs clang-format --dry-run --Werror 2>&1) || status=$?
unformatted=$(echo "$report" |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ "$status" != 0 ] && [ -z "$unformatted" ]; then
  echo "format.sh: clang-format failed (exit $status) without naming an unformatted file:" >&2
  echo "$report" | head -20 >&2 || true
  exit 1
fi
bad=0
for f in $unformatted; do
  bad=$((bad + 1))
  echo "== $f is not formatted (scripts/format.sh formats it):"
  clang-format "$f" | diff -u --label "$f" --label "$f (formatted)" "$f" - | sed -n '3,14p' || true
done
echo "format.sh: $count sources, $bad not formatted ($(clang-format --version | head -1))"
[ "$bad" = 0 ]
