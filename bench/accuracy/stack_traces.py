#!/usr/bin/env python3
"""stack_traces.py - today's estimator against each stack's committed trace matrix.

    bench/accuracy/stack_traces.py [--bin build/oomless] [STACK ...]

For every stack with a bench/trace/STACK/results.json (written by bench/trace/stacks.py, which
traces the stack's own code on the meta device), reruns `oomless estimate --json` on each traced
cell, described as stacks.py describes it (--stack STACK and the stack's own defaults), and prints
the allocated peak's median |error|, the worst cell and how many are within 3 %. Nothing is traced
again: the traces are the committed ones, so this needs no stack installed. Python 3 standard
library only.
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(os.path.dirname(HERE), "trace")
sys.path.insert(0, TRACE)
sys.dont_write_bytecode = True
import compare  # noqa: E402  (the estimator's flags of a cell)
import stacks  # noqa: E402  (each stack's description of a cell)


def errors(binary, stack):
    with open(os.path.join(TRACE, stack, "results.json"), encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    out, failed = [], 0
    for r in rows:
        if r.get("error") or not r.get("trace"):
            continue
        est, err = compare.estimate(binary, stacks.estimate_cell(stack, r["cell"]))
        if err:
            failed += 1
            continue
        out.append((compare.err(est["memory"]["allocated_peak"], r["trace"]["allocated_peak"]),
                    " ".join(compare.flags(r["cell"]))))
    return out, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(TRACE), "..", "build", "oomless"))
    ap.add_argument("stacks", nargs="*")
    a = ap.parse_args()
    names = a.stacks or sorted(s for s in stacks.MATRIX
                               if os.path.exists(os.path.join(TRACE, s, "results.json")))
    if not names:
        print("no stack has a committed matrix (bench/trace/STACK/results.json)")
    for s in names:
        errs, failed = errors(a.bin, s)
        if not errs:
            print("%s: no cell estimated (%d failed)" % (s, failed))
            continue
        size = sorted(abs(e) for e, _ in errs)
        worst = max(errs, key=lambda t: abs(t[0]))
        print("%s: %d cells, median |error| %.2f%%, worst %+.2f%% (%s), %d within 3%%%s" % (
            s, len(errs), 100 * statistics.median(size), 100 * worst[0], worst[1],
            sum(e <= 0.03 for e in size), ", %d estimates failed" % failed if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
