#!/usr/bin/env python3
"""run.py - runs the plan corpus (bench/corpus/commands.txt) and checks that the answers did not
change (bench/corpus/README.md).

    bench/corpus/run.py --bin build/oomless --check            # against bench/corpus/expected.txt
    bench/corpus/run.py --bin build/oomless --save FILE        # write the digests of this binary
    bench/corpus/run.py --bin build/oomless --out DIR          # keep every output, to diff two binaries
    bench/corpus/run.py --diff DIR_OLD DIR_NEW                 # what differs between two --out runs
    bench/corpus/run.py --bin build/oomless --check --quick    # the fast subset (make check)

Each command runs in the repository root with a clean environment: no GPU (OOMLESS_NVML_LIBRARY
points nowhere), the repository's data/, an empty home, cache and config. Its exit status, its
standard output and its standard error are compared byte for byte, except the one figure a faster
search is meant to change: the number of configurations it estimated (`"candidates": N` of the
JSON documents), which is recorded beside the digests instead.
"""

import argparse
import concurrent.futures
import hashlib
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COMMANDS = os.path.join(HERE, "commands.txt")
EXPECTED = os.path.join(HERE, "expected.txt")
CANDIDATES = re.compile(rb'"candidates": (\d+)')
# the fast subset: every command whose line number is a multiple of this (and none of the first,
# heavy ones: on the old code they took seconds)
QUICK_EVERY = 10
QUICK_SKIP = 11


def commands(quick):
    with open(COMMANDS, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#")]
    return [(i + 1, c) for i, c in enumerate(lines)
            if not quick or (i + 1 > QUICK_SKIP and (i + 1) % QUICK_EVERY == 0)]


def run_one(binary, home, item):
    n, cmd = item
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "XDG_CACHE_HOME": os.path.join(home, "cache"),
        "XDG_CONFIG_HOME": os.path.join(home, "config"),
        "OOMLESS_DATA_DIR": os.path.join(ROOT, "data"),
        "OOMLESS_NVML_LIBRARY": "/nonexistent",
        "LC_ALL": "C",
    }
    p = subprocess.run([binary] + cmd.split(), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    found = [int(x) for x in CANDIDATES.findall(p.stdout)]
    out = CANDIDATES.sub(b'"candidates": N', p.stdout)
    return n, cmd, p.returncode, out, p.stderr, found


def digest(b):
    return hashlib.sha256(b).hexdigest()[:16]


def line_of(n, rc, out, err, found):
    cand = ",".join(str(x) for x in found) if found else "-"
    return f"{n} {rc} {digest(out)} {digest(err)} {cand}"


def read_expected(path):
    exp = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            n, rc, out, err, cand = line.split()
            exp[int(n)] = (rc, out, err, cand)
    return exp


def run_all(args, items):
    binary = os.path.abspath(args.bin)
    with tempfile.TemporaryDirectory(prefix="oomless-corpus-") as home:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
            return sorted(ex.map(lambda it: run_one(binary, home, it), items))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--expected", default=EXPECTED)
    ap.add_argument("--save")
    ap.add_argument("--out")
    ap.add_argument("--diff", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()

    if args.diff:
        return diff_dirs(*args.diff)
    if not args.bin:
        ap.error("--bin is needed")
    items = commands(args.quick)
    results = run_all(args, items)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for n, cmd, rc, out, err, found in results:
            with open(os.path.join(args.out, f"{n:03d}.txt"), "wb") as f:
                f.write(f"$ oomless {cmd}\nexit {rc}\n--- stdout\n".encode())
                f.write(out + b"--- stderr\n" + err)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            f.write("# bench/corpus/run.py --save: line exit-status sha256(stdout)[:16] "
                    "sha256(stderr)[:16] candidates\n")
            for n, _, rc, out, err, found in results:
                f.write(line_of(n, rc, out, err, found) + "\n")
    if not args.check:
        return 0
    exp = read_expected(args.expected)
    bad, fewer, more = 0, 0, 0
    for n, cmd, rc, out, err, found in results:
        e = exp.get(n)
        got = (str(rc), digest(out), digest(err))
        if e is None or e[:3] != got:
            bad += 1
            print(f"CHANGED line {n}: oomless {cmd}\n  expected exit/stdout/stderr "
                  f"{e[:3] if e else None}, got {got}")
            continue
        old = [int(x) for x in e[3].split(",")] if e[3] != "-" else []
        fewer += sum(1 for a, b in zip(old, found) if b < a)
        more += sum(1 for a, b in zip(old, found) if b > a)
    print(f"{len(results) - bad} of {len(results)} commands unchanged (exit status, stdout but the "
          f"candidate count, stderr); {fewer} searches estimated fewer configurations than "
          f"recorded, {more} more")
    return 1 if bad else 0


def diff_dirs(old, new):
    import difflib
    names = sorted(set(os.listdir(old)) | set(os.listdir(new)))
    changed = 0
    for name in names:
        a = open(os.path.join(old, name), "rb").read().decode("utf-8", "replace").splitlines(True)
        b = open(os.path.join(new, name), "rb").read().decode("utf-8", "replace").splitlines(True)
        if a != b:
            changed += 1
            sys.stdout.writelines(difflib.unified_diff(a, b, os.path.join(old, name),
                                                       os.path.join(new, name)))
    print(f"{changed} of {len(names)} outputs differ")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
