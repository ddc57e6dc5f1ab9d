#!/usr/bin/python3
"""Clang's thread-safety analysis over every C++ source of a GCC build, as a syntax-only pass.

The build is GCC, which ignores ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED and the other
lock annotations; only clang's -Wthread-safety reads them. Rather than a second full build, this
script takes the build's own compile commands (compile_commands.json, which CMake writes), swaps
the compiler for clang++ and compiles each translation unit with -fsyntax-only: the front end
parses and runs the analysis, and nothing is generated, so a pass costs parsing only (about a
fifth of a build). Every other warning is off, so that what fails is a lock rule, nothing else.

    scripts/thread_safety.py [--jobs N] [--tests] [--all] [--only REGEX] BUILD_DIR

Checks the sources of the product in the build that take part in locking: the libraries and
binaries, not the generated protobuf files nor CUDA sources, and of those the ones that name a
mutex or a lock annotation, themselves or in a header of the repository they include (absl's
mutex.h or thread_annotations.h, an ABSL_ annotation). The analysis has nothing to check in the
others: every rule it applies starts from a lockable type or an annotation, so a translation unit
with neither cannot break one. That skips about two thirds of the sources; --all checks them
anyway. --tests adds the tests, benchmarks and fuzz targets (about
twice the time; `make test` checks the product only). Prints each finding as clang does, and a summary.
Exits 0 when there is none, 1 when there is a finding or a source fails to parse, 2 on bad use,
77 when clang++ is missing (ctest reports a skip).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_db import (CompileDbError, clang_arguments, includes_matching, load_units,  # noqa: E402
                        run_checks, source_of)

# What the analysis adds. -Wno-everything first, so that only the lock rules can fail the pass.
ANALYSIS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]


def clang_command(entry, clang):
    """The entry's command for clang, made a syntax-only run of the analysis."""
    return clang_arguments(entry, clang) + ANALYSIS


# What marks a translation unit that takes part in locking: absl's mutex or annotations headers, or
# an annotation (the repository's own headers are followed; absl's define the lockable types).
LOCKING = re.compile(r'absl/synchronization/mutex\.h|absl/base/thread_annotations\.h|'
                     r'\bABSL_[A-Z_]*(GUARDED_BY|LOCKS?_|LOCKABLE|ACQUIRE|RELEASE|NO_THREAD_SAFETY)')

# A source the analysis must refuse (a guarded member read without its lock), checked first.
CANARY = os.path.join("tests", "lint", "guarded_member_without_lock.cc")


def canary_fails(entry, root, clang):
    """Whether the analysis, with this build's flags, refuses the canary as it should."""
    source = source_of(entry)
    command = [os.path.join(root, CANARY) if os.path.normpath(os.path.join(entry["directory"], a))
               == source else a for a in clang_command(entry, clang)]
    run = subprocess.run(command, cwd=entry["directory"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    return run.returncode != 0 and "requires holding mutex" in run.stdout, run.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tests", action="store_true", help="check the tests' sources too")
    parser.add_argument("--only", default="", help="check only sources whose path matches")
    parser.add_argument("--all", action="store_true",
                        help="check the sources that use no lock too (the analysis finds nothing there)")
    opts = parser.parse_args()

    clang = shutil.which("clang++")
    if clang is None:
        print("thread_safety.py: SKIP: needs clang++ (package clang; scripts/install-deps.sh)")
        return 77
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        units = load_units(opts.build_dir, root, opts.tests, opts.only)
    except CompileDbError as e:
        print(f"thread_safety.py: {e}", file=sys.stderr)
        return 2

    total = len(units)
    if not opts.all:
        units = {path: entry for path, entry in units.items()
                 if includes_matching(path, root, LOCKING)}
    if not units:
        print(f"thread_safety.py: none of the {total} sources uses a lock")
        return 0

    refused, output = canary_fails(next(iter(units.values())), root, clang)
    if not refused:
        sys.stdout.write(output)
        print(f"thread_safety.py: the analysis did not refuse {CANARY}, which reads a guarded "
              "member without its lock: it is not running (flags or compiler)")
        return 1

    failed, findings, seconds = run_checks(units, root, opts.jobs,
                                           lambda entry: clang_command(entry, clang))
    print(f"thread_safety.py: {len(units)} sources checked ({total - len(units)} of {total} use no "
          f"lock) in {seconds:.0f} s with {opts.jobs} jobs: {findings} findings in {len(failed)} "
          "sources")
    for rel in failed:
        print(f"  {rel}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
