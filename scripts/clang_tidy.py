#!/usr/bin/python3
"""clang-tidy's bug-finding checks (.clang-tidy at the root) over the C++ sources of a build.

Takes the build's own compile commands (compile_commands.json), as scripts/thread_safety.py does,
and runs clang-tidy on each source with them: the checks the root's .clang-tidy names (bugprone-*
with its noisy members off, and two more matchers of the kind), every finding an error. The project's own headers are checked as the sources include them.

    scripts/clang_tidy.py [--jobs N] [--tests] [--only REGEX] BUILD_DIR

Checks the product's sources (--tests: the tests', benchmarks' and fuzz targets' too). It takes
several times as long as a build, so `make test` does not run it: run it before a change that
touches many files, or with --only on the files a change touches. Prints each finding as
clang-tidy does, and a summary. Exits 0 when there is none, 1 when there is a finding or a source
fails to parse, 2 on bad use, 77 when clang-tidy is missing.
"""

import argparse
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_db import CompileDbError, clang_arguments, load_units, run_checks, source_of  # noqa: E402


def tidy_command(entry, tidy, clang):
    """clang-tidy on the entry's source, with the entry's flags (for clang) after the `--`."""
    source = source_of(entry)
    flags = [a for a in clang_arguments(entry, clang)[1:]
             if os.path.normpath(os.path.join(entry["directory"], a)) != source]
    return [tidy, "--quiet", source, "--", "-Wno-unknown-warning-option"] + flags


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tests", action="store_true", help="check the tests' sources too")
    parser.add_argument("--only", default="", help="check only sources whose path matches")
    opts = parser.parse_args()

    tidy = shutil.which("clang-tidy")
    clang = shutil.which("clang++") or "clang++"
    if tidy is None:
        print("clang_tidy.py: SKIP: needs clang-tidy (package clang-tidy; scripts/install-deps.sh)")
        return 77
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        units = load_units(opts.build_dir, root, opts.tests, opts.only)
    except CompileDbError as e:
        print(f"clang_tidy.py: {e}", file=sys.stderr)
        return 2

    def without_counts(text):
        # "N warnings generated." is clang-tidy's count, printed even when all were filtered out.
        return "".join(line for line in text.splitlines(keepends=True)
                       if not re.match(r"^\d+ (warning|error)s? (and \d+ (warning|error)s? )?generated\.$",
                                       line.strip()))

    failed, findings, seconds = run_checks(units, root, opts.jobs,
                                           lambda entry: tidy_command(entry, tidy, clang),
                                           without_counts)
    print(f"clang_tidy.py: {len(units)} sources checked in {seconds:.0f} s with {opts.jobs} "
          f"jobs: {findings} findings in {len(failed)} sources")
    for rel in failed:
        print(f"  {rel}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
