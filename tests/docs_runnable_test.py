#!/usr/bin/python3
"""Runs every shell block of README.md and docs/**/*.md that is marked runnable.

    /usr/bin/python3 tests/docs_runnable_test.py REPO_ROOT BUILD_DIR

A block is runnable when the line just above its ```sh fence is `<!-- runnable -->`. Each block
runs under `bash -euo pipefail`, one block at a time, in a scratch folder that mirrors the
repository (a symbolic link to each top-level entry) with `build` pointing at BUILD_DIR, so the
commands read as a newcomer types them (`build/bin/pstrain-launch ...`) whatever the build folder
is called. The blocks keep their settings small themselves (one epoch, a few thousand samples).

Prints each block's outcome and, for a failure, the tail of its output; then
`docs runnable blocks: N passed, M failed`. Exits 1 if any failed, and also when no block is
marked, so that losing the markers cannot pass unnoticed.
"""

import glob
import os
import re
import subprocess
import sys
import tempfile
import time

MARKER = "<!-- runnable -->"
TIMEOUT_S = 240
_FENCE = re.compile(r"^ {0,3}(`{3,})\s*(\w*)\s*$")


def runnable_blocks(path):
    """Yields (line number, text) of each marked ```sh (or bash) block in the file at `path`."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == MARKER and i + 1 < len(lines):
            fence = _FENCE.match(lines[i + 1])
            if not fence or fence.group(2) not in ("sh", "bash", "shell"):
                yield i + 1, None  # A marker on anything else is an error.
                i += 1
                continue
            body = []
            j = i + 2
            while j < len(lines) and not lines[j].strip().startswith(fence.group(1)):
                body.append(lines[j])
                j += 1
            yield i + 2, "\n".join(body) + "\n"
            i = j
        i += 1


def mirror(repo, build, scratch):
    """Fills `scratch` with links to the repository's top-level entries, `build` to BUILD_DIR."""
    for name in os.listdir(repo):
        if name in ("build", ".git"):
            continue
        os.symlink(os.path.join(repo, name), os.path.join(scratch, name))
    os.symlink(build, os.path.join(scratch, "build"))


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    repo, build = (os.path.abspath(a) for a in argv)
    files = [os.path.join(repo, "README.md")] + sorted(glob.glob(os.path.join(repo, "docs", "**", "*.md"),
                                                                 recursive=True))
    passed = failed = 0
    for path in files:
        rel = os.path.relpath(path, repo)
        for line, block in runnable_blocks(path):
            if block is None:
                print(f"{rel}:{line}: '{MARKER}' must stand right above a ```sh block")
                failed += 1
                continue
            with tempfile.TemporaryDirectory(prefix="pstrain-docs-") as scratch:
                mirror(repo, build, scratch)
                start = time.monotonic()
                try:
                    run = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=scratch,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                         timeout=TIMEOUT_S)
                    code, output = run.returncode, run.stdout
                except subprocess.TimeoutExpired as e:
                    code, output = "timeout", (e.stdout or b"").decode(errors="replace")
            took = time.monotonic() - start
            if code == 0:
                passed += 1
                print(f"{rel}:{line}: ok in {took:.1f} s")
            else:
                failed += 1
                tail = "\n".join(output.rstrip("\n").split("\n")[-15:])
                print(f"{rel}:{line}: FAILED (exit {code}) after {took:.1f} s:\n{block}--- last lines:\n{tail}\n---")
    if passed + failed == 0:
        print(f"no block is marked '{MARKER}' in README.md or docs/")
        failed = 1
    print(f"docs runnable blocks: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
