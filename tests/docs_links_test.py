#!/usr/bin/python3
"""Checks every relative link and anchor in README.md and docs/**/*.md, and the README's size.

    /usr/bin/python3 tests/docs_links_test.py [REPO_ROOT]

REPO_ROOT defaults to the repository this script is in. For each link `[text](path)`,
`[text](path#anchor)`, `[text](#anchor)` and image `![alt](path)` outside fenced code blocks and
inline code, it checks that the file (or folder) exists inside the repository and, for a link into
a markdown file, that the anchor is one of that file's headings as GitHub names them: the heading's
text in lower case, inline code's backticks dropped, every character but letters, digits, spaces,
hyphens and underscores removed, spaces turned into hyphens, and repeated headings suffixed -1, -2,
... in order. http(s) and mailto links are not checked. README.md must be at most 16,000 bytes: it is
the front door, and the rest belongs in docs/.

Prints each broken link as `FILE:LINE: link 'X': what is wrong`, then
`docs links: N passed, M failed` (the size check counts as one), and exits 1 if anything failed.
Standard library only. Before checking the repository it checks itself on a few made-up files, so a
checker that stopped finding broken links fails too.
"""

import os
import re
import sys
import tempfile
import urllib.parse

README_MAX_BYTES = 16000

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target); text may hold one level of brackets, target may be <...>.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"]*\")?\s*\)")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def _lines_outside_fences(text):
    """Yields (line number, line) for the lines of text that are not in a fenced code block."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                and not line.strip()[len(match.group(1)):].strip():
            fence = None


def slug(heading):
    """GitHub's anchor for a heading's text, before the -N suffix of repeated headings."""
    text = _INLINE_CODE.sub(lambda m: m.group(2).strip(), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text, not its target
    text = re.sub(r"<[^>]+>", "", text)                        # inline HTML
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text):
    """Every anchor a markdown text defines: its headings' slugs and <a name|id="..."> tags."""
    seen = {}
    result = set()
    for _, line in _lines_outside_fences(text):
        match = _HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else "%s-%d" % (base, count))
        for name in _HTML_ANCHOR.findall(line):
            result.add(name)
    return result


def _paragraphs(text):
    """Yields (first line number, lines) for each run of non-blank lines outside code fences."""
    block, first, previous = [], 0, None
    for number, line in _lines_outside_fences(text):
        if not line.strip() or (previous is not None and number != previous + 1):
            if block:
                yield first, block
            block = []
        if line.strip():
            if not block:
                first = number
            block.append(line)
        previous = number
    if block:
        yield first, block


def links(text):
    """Yields (line number, target) for every link of a markdown text worth checking.

    A link's text may run over a line break, so links are found per paragraph; inline code is
    blanked out first (a `[x](y)` inside backticks is not a link).
    """
    for first, block in _paragraphs(text):
        joined = " ".join(block)
        starts = []  # offset in joined where each line starts
        offset = 0
        for line in block:
            starts.append(offset)
            offset += len(line) + 1
        joined = _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), joined)
        for match in _LINK.finditer(joined):
            target = match.group(1)
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:, ...
                continue
            line_index = max(i for i, start in enumerate(starts) if start <= match.start())
            yield first + line_index, target


def markdown_files(root):
    """README.md and every .md file under docs/, as paths relative to root, sorted."""
    files = ["README.md"] if os.path.isfile(os.path.join(root, "README.md")) else []
    for folder, subfolders, names in os.walk(os.path.join(root, "docs")):
        subfolders.sort()
        for name in sorted(names):
            if name.endswith(".md"):
                files.append(os.path.relpath(os.path.join(folder, name), root))
    return files


def check(root):
    """Returns (passed, failures), failures being the lines to print."""
    root = os.path.realpath(root)
    passed = 0
    failures = []
    anchor_cache = {}

    def anchors_of(path):
        if path not in anchor_cache:
            with open(path, encoding="utf-8") as f:
                anchor_cache[path] = anchors(f.read())
        return anchor_cache[path]

    for name in markdown_files(root):
        source = os.path.join(root, name)
        with open(source, encoding="utf-8") as f:
            text = f.read()
        for number, target in links(text):
            path_part, _, anchor = target.partition("#")
            path_part = urllib.parse.unquote(path_part)
            anchor = urllib.parse.unquote(anchor)
            problem = None
            if not path_part and not anchor:
                problem = "empty link"
            if path_part:
                resolved = os.path.realpath(os.path.join(os.path.dirname(source), path_part))
                if os.path.commonpath([resolved, root]) != root:
                    problem = "%s is outside the repository" % path_part
                elif not os.path.exists(resolved):
                    problem = "%s does not exist" % os.path.relpath(resolved, root)
            else:
                resolved = source
            if problem is None and anchor:
                if not resolved.endswith(".md") or not os.path.isfile(resolved):
                    problem = "anchor #%s on %s, which is not a markdown file" % (
                        anchor, os.path.relpath(resolved, root))
                elif anchor not in anchors_of(resolved):
                    problem = "no heading in %s has the anchor #%s" % (
                        os.path.relpath(resolved, root), anchor)
            if problem:
                failures.append("%s:%d: link '%s': %s" % (name, number, target, problem))
            else:
                passed += 1

    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme):
        size = os.path.getsize(readme)
        if size > README_MAX_BYTES:
            failures.append("README.md: %d bytes, more than the %d allowed: move detail into docs/"
                            % (size, README_MAX_BYTES))
        else:
            passed += 1
    else:
        failures.append("README.md: missing")
    return passed, failures


def _self_test():
    """Checks the checker on made-up files; returns a list of what went wrong."""
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append("self-test %s: got %r, expected %r" % (what, got, want))

    expect("slug", slug("The server's store: protocol and storage"), "the-servers-store-protocol-and-storage")
    expect("slug with code", slug("Job flags (`pstrain-scheduler` and `pstrain-launch`)"),
           "job-flags-pstrain-scheduler-and-pstrain-launch")
    expect("slug keeps _ and -", slug("Files in `--data_dir`"), "files-in---data_dir")
    expect("duplicates", sorted(anchors("# A\n## A\n```\n# A\n```\n### A\n")), ["a", "a-1", "a-2"])
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("# Top\n[ok](docs/a.md#part-two) [bad file](docs/none.md) [bad anchor](docs/a.md#nope)\n"
                    "[self](#top) [web](https://example.com/x.md) `[code](docs/none.md)`\n"
                    "```\n[fenced](docs/none.md)\n```\n![img](docs/missing.png)\n")
        with open(os.path.join(root, "docs", "a.md"), "w") as f:
            f.write("# A\n## Part two\n[up](../README.md#top) [out](../../x.md) [own](#a) [split\n"
                    "over lines](b.md)\n")
        passed, failures = check(root)
        expect("passed", passed, 5)  # ok, self, up, own, and the size check
        expect("failures", [line.split(":")[1] + ":" + line.split("'")[1] for line in failures],
               ["2:docs/none.md", "2:docs/a.md#nope", "7:docs/missing.png", "3:../../x.md", "3:b.md"])
        with open(os.path.join(root, "README.md"), "a") as f:
            f.write("x" * README_MAX_BYTES)
        expect("size check", any("bytes, more than" in line for line in check(root)[1]), True)
    return errors


def main(argv):
    if len(argv) > 2:
        print("usage: %s [REPO_ROOT]" % argv[0], file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = _self_test()
    for error in errors:
        print(error)
    passed, failures = check(root)
    for failure in failures:
        print(failure)
    print("docs links: %d passed, %d failed" % (passed, len(failures) + len(errors)))
    return 1 if failures or errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
