"""The build's compile commands (compile_commands.json), rewritten for clang's checking tools.

scripts/thread_safety.py and scripts/clang_tidy.py share it: both take the GCC build's own
commands, so that what they check is compiled with the flags, defines and include paths the
build uses, and swap in clang's front end.

    load_units(build_dir, root, tests=False, only=None) -> {source path: entry}
    clang_arguments(entry, clang) -> [clang, flags..., source]: the entry's command for clang,
        with no output, dependency file or GCC-only option
    includes_matching(path, root, pattern) -> whether the source, or a header of the repository
        it includes (directly or through other such headers), matches the pattern
    run_checks(units, root, jobs, command, clean=None) -> (failed sources, findings, seconds):
        runs command(entry) on every source, `jobs` at a time, and prints what each one says
"""

import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import time

# GCC options clang does not know; dropped from the build's commands.
GCC_ONLY = re.compile(r"^-(fno-fat-lto-objects|flto=auto|fconcepts-diagnostics-depth=.*|"
                      r"Wno-maybe-uninitialized|Wno-stringop-.*|Wno-class-memaccess|"
                      r"Wno-dangling-reference|Wno-array-bounds|fdiagnostics-color=.*)$")


class CompileDbError(Exception):
    """The compile commands cannot be read, or name no source of the repository."""


def source_of(entry):
    """The absolute, normalized path of the entry's source."""
    return os.path.normpath(os.path.join(entry["directory"], entry["file"]))


def clang_arguments(entry, clang):
    """The entry's command with `clang` in place of the compiler, making no output file."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    # A compiler launcher (ccache) comes first; the compiler is the first word that is not one.
    while args and os.path.basename(args[0]) in ("ccache", "sccache", "distcc"):
        args = args[1:]
    out = [clang]
    skip_next = False
    for arg in args[1:]:
        if skip_next:
            skip_next = False
            continue
        if arg in ("-o", "-MF", "-MT", "-MQ"):
            skip_next = True
            continue
        if arg in ("-c", "-MD", "-MMD") or GCC_ONLY.match(arg):
            continue
        out.append(arg)
    return out


def wanted(path, root, tests):
    """A source of the repository, not generated and not CUDA; a test's only with `tests`."""
    if not path.startswith(root + os.sep):
        return False
    rel = os.path.relpath(path, root)
    if rel.startswith("build") or rel.endswith((".pb.cc", ".cu")) or not rel.endswith(".cc"):
        return False
    is_test = (re.search(r"_test(_[a-z_]+)?\.cc$|_test_util\.cc$", rel) is not None
               or rel.split(os.sep)[0] in ("tests", "bench", "fuzz"))
    return tests or not is_test


def load_units(build_dir, root, tests=False, only=None):
    """Each product source of `root` in the build's commands (the tests' too with `tests`; only
    those whose path matches the regex `only`), one command per source."""
    db_path = os.path.join(build_dir, "compile_commands.json")
    try:
        with open(db_path) as f:
            db = json.load(f)
    except (OSError, ValueError) as e:
        raise CompileDbError(f"cannot read {db_path}: {e} (configure the build first)")
    pattern = re.compile(only) if only else None
    units = {}
    for entry in db:
        path = source_of(entry)
        if wanted(path, root, tests) and (pattern is None or pattern.search(path)):
            units[path] = entry  # A source built twice is checked once.
    if not units:
        raise CompileDbError(f"no source of {root} in {db_path}")
    return units


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes_matching(path, root, pattern, _seen=None):
    """Whether `path`, or a header of the repository it includes (quoted, relative to `root`,
    followed through the headers it includes in turn), matches `pattern`. Headers outside the
    repository (system, generated) are not followed."""
    seen = set() if _seen is None else _seen
    if path in seen:
        return False
    seen.add(path)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    if pattern.search(text):
        return True
    for header in _INCLUDE.findall(text):
        candidate = os.path.join(root, header)
        if os.path.isfile(candidate) and includes_matching(candidate, root, pattern, seen):
            return True
    return False


def run_checks(units, root, jobs, command, clean=None):
    """Runs `command(entry)` (an argument list) in each entry's directory, `jobs` at a time, in the
    sources' order. A source fails when its run exits non-zero or prints anything (after
    `clean(text)`, which may drop lines that say nothing); its output is printed. Returns the
    failed sources (relative to `root`), the count of "error:"/"warning:" lines and the seconds."""
    def check(item):
        path, entry = item
        run = subprocess.run(command(entry), cwd=entry["directory"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        return path, run.returncode, clean(run.stdout) if clean else run.stdout

    start = time.monotonic()
    failed = []
    findings = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for path, rc, output in pool.map(check, sorted(units.items())):
            if rc != 0 or output.strip():
                failed.append(os.path.relpath(path, root))
                findings += len(re.findall(r"\b(error|warning): ", output))
                sys.stdout.write(output)
    return failed, findings, time.monotonic() - start
