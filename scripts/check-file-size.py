#!/usr/bin/env python3
"""check-file-size.py - no C source of the library, the tool or the page's API is over 800 lines.

Usage: scripts/check-file-size.py SOURCE_DIR

docs/HACKING.md keeps files under about 800 lines: a file past that mixes concerns, and is split
by concern (plan_search.c, plan_space.c, ...), not cut in halves. This checks every .c and .h
under lib/, cli/ and web/api/ against MAX_LINES. The one public header, include/oomless.h, is the
library's manual and is read top to bottom: it is not under these folders, and is left out on
purpose. Exit 1 with one line per file over the limit, 0 when none is.
"""
import os
import sys

MAX_LINES = 800
FOLDERS = ("lib", "cli", os.path.join("web", "api"))


def lines_of(path):
    with open(path, "rb") as f:
        return f.read().count(b"\n")


def check(src):
    errors = []
    for folder in FOLDERS:
        top = os.path.join(src, folder)
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(root, name)
                n = lines_of(path)
                if n > MAX_LINES:
                    errors.append("%s: %d lines, more than %d: split it by concern "
                                  "(docs/HACKING.md)" % (os.path.relpath(path, src), n, MAX_LINES))
    return errors


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    errors = check(argv[1])
    for e in errors:
        print(e)
    if errors:
        print("check-file-size: %d file(s) over %d lines" % (len(errors), MAX_LINES))
        return 1
    print("check-file-size: every C file of lib/, cli/ and web/api/ has at most %d lines"
          % MAX_LINES)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
