#!/usr/bin/env python3
"""check-c-locale.py - the library reads and writes numbers in the C locale only.

Usage: scripts/check-c-locale.py SOURCE_DIR BUILD_DIR

A host program may call setlocale(LC_ALL, "de_DE.UTF-8"): strtod then stops at the '.' of "20.5"
and printf writes "20,5"; under tr_TR.UTF-8, tolower('I') is not 'i'. lib/core/clocale.c wraps
the C library's conversions (oomi_strtod, oomi_snprintf, oomi_vsnprintf) in the C locale and
folds case in ASCII (oomi_tolower, oomi_strcasecmp, oomi_isalpha...); every other file of lib/
must use those. Two checks:
  1. symbols: no object file of liboomless but clocale.c's uses strtod, the printf family
     (snprintf, vsnprintf, sprintf..., their _chk forms), the scanf family but sscanf, or the
     host's case folding (tolower, toupper, strcasecmp, strncasecmp);
  2. sources: no sscanf in lib/ reads a floating-point conversion (%f, %g, %e, %a), and no file
     but clocale.c calls isalpha, isalnum, isupper or islower (macros: no symbol to see).
Exit 1 with one line per use, 0 when the library is clean.
"""
import os
import re
import subprocess
import sys

ALLOWED_FILE = "lib/core/clocale.c"
BANNED = {
    "strtod", "strtof", "strtold", "atof",
    "printf", "fprintf", "dprintf", "sprintf", "snprintf", "asprintf",
    "vprintf", "vfprintf", "vdprintf", "vsprintf", "vsnprintf", "vasprintf",
    "__printf_chk", "__fprintf_chk", "__dprintf_chk", "__sprintf_chk", "__snprintf_chk",
    "__asprintf_chk", "__vprintf_chk", "__vfprintf_chk", "__vdprintf_chk", "__vsprintf_chk",
    "__vsnprintf_chk", "__vasprintf_chk",
    "scanf", "fscanf", "vscanf", "vfscanf", "vsscanf",
    "__isoc99_scanf", "__isoc99_fscanf", "__isoc99_vscanf", "__isoc99_vfscanf",
    "__isoc99_vsscanf", "__isoc23_scanf", "__isoc23_fscanf", "__isoc23_vsscanf",
    "strfmon",
    "tolower", "toupper", "__ctype_tolower_loc", "__ctype_toupper_loc",
    "strcasecmp", "strncasecmp",
}
SSCANF = re.compile(r"\bsscanf\s*\((.*?)\)\s*[;!=<>|&]", re.S)
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
FLOAT_CONV = re.compile(r"%\*?[0-9]*(?:l|L|ll)?[aefgAEFG]")
CTYPE_LETTERS = re.compile(r"(?<![\w.])is(alpha|alnum|upper|lower)\s*\(")


def library_objects(build):
    # only the target's own folder: elsewhere in the build tree, the checker's tests build fake
    # trees (under the tests' TMPDIR) while this runs
    top = os.path.join(build, "CMakeFiles", "oomless_objs.dir")
    found = []
    for root, _dirs, files in os.walk(top):
        for name in files:
            if name.endswith(".c.o"):
                full = os.path.join(root, name)
                found.append((os.path.relpath(full, top).replace(os.sep, "/")[:-2], full))
    return sorted(found)


def undefined(path):
    out = subprocess.run(["nm", "-u", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def check_symbols(build):
    objs = library_objects(build)
    if not objs:
        return ["%s: no object files of liboomless found (build first)" % build]
    errors = []
    for src, path in objs:
        if src == ALLOWED_FILE:
            continue
        for sym in sorted(undefined(path) & BANNED):
            errors.append("%s uses %s: numbers and case go through oomi_strtod, "
                          "oomi_snprintf, oomi_tolower... (core/core.h), in the C locale"
                          % (src, sym))
    return errors


def check_sources(src):
    errors = []
    for root, _dirs, files in os.walk(os.path.join(src, "lib")):
        for name in sorted(files):
            if not name.endswith(".c"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            if rel != ALLOWED_FILE:
                for m in CTYPE_LETTERS.finditer(text):
                    errors.append("%s:%d: is%s() classifies letters in the host's locale: use "
                                  "oomi_is%s" % (rel, text.count("\n", 0, m.start()) + 1,
                                                 m.group(1), m.group(1)))
            for call in SSCANF.finditer(text):
                fmt = "".join(LITERAL.findall(call.group(1)))
                if FLOAT_CONV.search(fmt):
                    line = text.count("\n", 0, call.start()) + 1
                    errors.append("%s:%d: sscanf reads a floating-point number in the host's "
                                  "locale: use oomi_strtod" % (os.path.relpath(path, src), line))
    return errors


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    errors = check_sources(argv[1]) + check_symbols(argv[2])
    for e in errors:
        print(e)
    if errors:
        print("check-c-locale: %d problem(s)" % len(errors))
        return 1
    print("check-c-locale: every number in lib/ is read and written in the C locale, and case "
          "is ASCII")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
