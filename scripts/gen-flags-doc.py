#!/usr/bin/python3
"""Writes docs/reference/flags.md from the binaries' own --helpxml, or checks that it is current.

    scripts/gen-flags-doc.py BIN_DIR OUT.md            # write
    scripts/gen-flags-doc.py --check BIN_DIR OUT.md    # exit 1 if OUT.md differs from the binaries

Only pstrain's own flags are listed (those defined in this repository's sources), not glog's or
gflags' built-in ones. Flags defined in a shared file (a *_flags.cc of common/ or transport/) are
listed once, under that file's heading, and each binary names the groups it takes.
"""
import difflib
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

# The binaries a user runs, in the order the page lists them.
BINARIES = [
    "pstrain-launch", "pstrain-scheduler", "pstrain-server", "pstrain-worker", "pstrain-eval",
    "pstrain-gen-ctr", "pstrain-export", "pstrain-serve", "pstrain-ctl",
]

# A shared flag file and the heading its group gets.
GROUPS = {
    "common/job_flags.cc": "Job flags",
    "transport/security_flags.cc": "Security flags",
    "common/metrics_flags.cc": "Metrics flags",
    "transport/health_flags.cc": "Health flags",
}

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def anchor(heading):
    """GitHub's anchor for a heading made of words, spaces and hyphens."""
    return "".join(c for c in heading.lower() if c.isalnum() or c in " -_").replace(" ", "-")


def read_flags(binary):
    """(usage, [flag dicts with a repository-relative 'file']) of one binary's own flags."""
    out = subprocess.run([binary, "--helpxml"], capture_output=True, text=True, timeout=60)
    # gflags exits 1 after printing help; the XML on stdout is what counts.
    if "<AllFlags>" not in out.stdout:
        sys.exit(f"gen-flags-doc: {binary} --helpxml printed no flags (exit {out.returncode}): "
                 f"{out.stderr.strip()[:300]}")
    root = ET.fromstring(out.stdout)
    flags = []
    for flag in root.iter("flag"):
        f = {child.tag: (child.text or "") for child in flag}
        path = f["file"]
        # Sources are compiled with absolute paths; keep what follows the checkout's root.
        for marker in ("/common/", "/transport/", "/server/", "/worker/", "/scheduler/", "/launch/", "/data/",
                       "/model/", "/tools/", "/bench/", "/serving/"):
            i = path.rfind(marker)
            if i >= 0 and os.path.exists(os.path.join(REPO, path[i + 1:])):
                f["file"] = path[i + 1:]
                break
        else:
            continue  # glog's or gflags' own.
        flags.append(f)
    return root.findtext("usage", ""), flags


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ").strip()


def table(flags):
    lines = ["| flag | type | default | what it does |", "|---|---|---|---|"]
    for f in sorted(flags, key=lambda f: f["name"]):
        value = f["default"]
        if f["type"] == "double":
            value = repr(float(value))  # 0.9, not gflags' 0.90000000000000002
        default = f"`{cell(value)}`" if value != "" else "(empty)"
        lines.append(f"| `--{f['name']}` | {f['type']} | {default} | {cell(f['meaning'])} |")
    return lines


def render(bin_dir):
    per_binary = {}
    groups = {}
    for name in BINARIES:
        path = os.path.join(bin_dir, name)
        if not os.path.exists(path):
            sys.exit(f"gen-flags-doc: {path} not found; build every binary first (make build)")
        usage, flags = read_flags(path)
        own = [f for f in flags if f["file"] not in GROUPS]
        shared = sorted({f["file"] for f in flags if f["file"] in GROUPS}, key=list(GROUPS).index)
        for f in flags:
            if f["file"] in GROUPS:
                groups.setdefault(f["file"], {})[f["name"]] = f
        per_binary[name] = (usage, own, shared)

    out = [
        "# Flags",
        "",
        "Every flag of pstrain's binaries, generated from their own `--helpxml` by",
        "`scripts/gen-flags-doc.py build/bin docs/reference/flags.md`; do not edit by hand. The test",
        "`flags_doc_test` fails when this page and the binaries differ. Every flag can also be given as",
        "an environment variable `PSTRAIN_<FLAG>` (see [job configuration](job-config.md)); a flag on",
        "the command line wins. glog's own flags (`--v`, `--vmodule`, `--logtostderr`, ...) work as",
        "usual and are not listed.",
        "",
    ]
    for name in BINARIES:
        usage, own, shared = per_binary[name]
        out += [f"## {name}", "", cell(usage) + ".", ""]
        if shared:
            links = ", ".join(f"[{GROUPS[g].lower()}](#{anchor(GROUPS[g])})" for g in shared)
            out += [f"It also takes the {links}.", ""]
        if own:
            out += table(own) + [""]
    for path, heading in GROUPS.items():
        if path not in groups:
            continue
        takers = [n for n in BINARIES if path in per_binary[n][2]]
        out += [f"## {heading}", "", f"Defined in `{path}`; taken by {', '.join('`' + t + '`' for t in takers)}.", ""]
        out += table(groups[path].values()) + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    if len(args) != 2:
        sys.exit(__doc__)
    bin_dir, target = args
    text = render(bin_dir)
    if not check:
        with open(target, "w") as f:
            f.write(text)
        print(f"gen-flags-doc: wrote {target}")
        return 0
    try:
        with open(target) as f:
            current = f.read()
    except OSError as e:
        current = ""
        print(f"flags doc: cannot read {target}: {e}")
    if current == text:
        print(f"flags doc: {target} matches the binaries")
        print("1 passed, 0 failed")
        return 0
    sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                               target, "generated from --helpxml"))
    print(f"flags doc: {target} is out of date; run scripts/gen-flags-doc.py {bin_dir} {target}")
    print("0 passed, 1 failed")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
