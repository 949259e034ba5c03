#!/usr/bin/env python3
"""check-docs.py - the links, paths and quoted files of README.md and docs/*.md hold.

Usage: scripts/check-docs.py [SOURCE_DIR] [FILE.md...]

Each problem is one line naming the file and line; exit 1 when there is any, 0 otherwise.
  1. links: every relative link `[text](path#anchor)` or image leads to a file or folder of the
     repository, and its anchor to a heading of that Markdown file (GitHub's anchors: lower case,
     punctuation dropped, spaces to hyphens, `-1`, `-2` for repeated headings);
  2. paths: every repository path in backquotes in the prose (`bench/accuracy/compare`,
     `tests/fault/`) exists; paths with a placeholder (`<gpu>`, `N`, `*`, `{}`) are skipped;
  3. quotes: a code block after `<!-- quote: PATH -->` shows lines of PATH, in order (`...` for
     lines left out; indentation aside, so that a quote may be dedented);
  4. code: every other ```python block compiles, and every ```json block parses.
Console examples are checked by scripts/examples.py.
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import examples  # noqa: E402  (the matching of lines with gaps, the list of documents)

SRC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
TOP = ("bench", "bindings", "cli", "data", "docs", "examples", "include", "lib", "scripts",
       "tests", "web", ".ci")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<lang>[\w+-]*)\s*$")
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`([^`\n]+)`")
QUOTE = re.compile(r"^\s*<!--\s*quote:\s*(?P<path>\S+)\s*-->\s*$")
ANCHOR_TAG = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
GAP = "..."


def slug(heading):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = re.sub(r"[*_]{1,2}(\S[^*_]*?)[*_]{1,2}", r"\1", text) if "__" not in text else text
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def split_markdown(lines):
    """(prose lines with their numbers, code blocks as (line number, lang, indent, body, marker))"""
    prose, blocks, i = [], [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        indent = len(m.group("indent"))
        close = re.compile(r"^ {0,%d}%s\s*$" % (indent, re.escape(m.group("fence"))))
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [ln[min(indent, len(ln) - len(ln.lstrip(" "))):] for ln in lines[i + 1:j]]
        marker = lines[i - 1] if i > 0 else ""
        blocks.append((i + 1, m.group("lang"), indent, body, marker))
        i = j + 1
    return prose, blocks


def anchors(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            prose, _ = split_markdown(f.read().split("\n"))
        seen, found = {}, set()
        for _, line in prose:
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
            found.update(ANCHOR_TAG.findall(line))
        cache[path] = found
    return cache[path]


def check_link(doc, n, target):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return None
    path, _, anchor = target.partition("#")
    dest = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
    if not os.path.exists(dest):
        return f"link to {target}: no {os.path.relpath(dest, SRC)}"
    if not os.path.realpath(dest).startswith(os.path.realpath(SRC) + os.sep):
        return f"link to {target}: outside the repository"
    if anchor and dest.endswith(".md") and anchor not in anchors(dest):
        return f"link to {target}: no heading '#{anchor}' in {os.path.relpath(dest, SRC)}"
    return None


def repo_path(token):
    """The repository path a backquoted token names, or None."""
    t = token.strip().rstrip(".,;:)")
    t = re.sub(r":\d+$", "", t)  # file:line
    first = t.split()[0] if t.split() else ""
    if not first.startswith(tuple(p + "/" for p in TOP)) or first != t:
        return None
    if re.search(r"[<>*{}\[\]|$]|\bN\b|\.\.\.|…|X\b", t):
        return None
    return t


def quote_line(want, got):
    """A quoted line against the file's: indentation aside, `...` inside it for any text."""
    want, got = want.strip(), got.strip()
    if GAP in want:
        return re.fullmatch(".*".join(map(re.escape, want.split(GAP))), got) is not None
    return want == got


def check_block(doc, start, lang, body, marker):
    problems = []
    q = QUOTE.match(marker)
    if q:
        path = os.path.join(SRC, q.group("path"))
        if not os.path.isfile(path):
            problems.append((start, f"quotes {q.group('path')}, which does not exist"))
        else:
            with open(path, encoding="utf-8") as f:
                got = f.read().split("\n")
            if not examples.lines_match([GAP] + body + [GAP], got, quote_line):
                problems.append((start, f"its lines are not, in this order, in {q.group('path')}"))
    text = "\n".join(body)
    if lang == "python" and not q:  # a quote is checked against its file, which runs
        try:
            compile(text, f"{doc}:{start}", "exec")
        except SyntaxError as e:
            problems.append((start + (e.lineno or 0), f"python block does not compile: {e.msg}"))
    elif lang == "json" and GAP not in text:
        try:
            json.loads(text)
        except ValueError as e:
            problems.append((start, f"json block does not parse: {e}"))
    return problems


def check(doc):
    with open(doc, encoding="utf-8") as f:
        lines = f.read().split("\n")
    prose, blocks = split_markdown(lines)
    problems = []
    for n, line in prose:
        if QUOTE.match(line) and not (n < len(lines) and FENCE.match(lines[n])):
            problems.append((n, "quote marker not followed by a code block"))
        for m in LINK.finditer(CODE.sub(lambda c: " " * len(c.group(0)), line)):
            why = check_link(doc, n, m.group("target"))
            if why:
                problems.append((n, why))
        for m in CODE.finditer(line):
            path = repo_path(m.group(1))
            if path and not os.path.exists(os.path.join(SRC, path)):
                problems.append((n, f"`{m.group(1)}`: no such path in the repository"))
    for start, lang, _, body, marker in blocks:
        problems += check_block(doc, start, lang, body, marker)
    rel = os.path.relpath(doc, SRC)
    return [f"{rel}:{n}: {why}" for n, why in problems]


def main():
    docs = examples.documents(SRC, sys.argv[2:])
    problems = [p for d in docs for p in check(d)]
    for p in problems:
        print(p)
    print(f"check-docs: {len(docs)} document(s), {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
