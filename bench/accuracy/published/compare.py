#!/usr/bin/env python3
"""compare.py - oomless estimate against the published peak-memory measurements of cases.csv.

    bench/accuracy/published/compare.py --bin build/oomless            # per-source summary
    bench/accuracy/published/compare.py --bin build/oomless --cases    # and one line per case
    bench/accuracy/published/compare.py --bin build/oomless --modelled-only --source torchtune-readme

For every row of cases.csv (README.md beside this file: the columns and the sources) it runs
`oomless estimate --json ARGS` (ARGS = the row's `args`; `@X` is bench/accuracy/X.json), takes the
estimate of the counter the row measured (memory.allocated_peak, reserved_peak or device_peak:
the filled one of max_memory_allocated_gib, max_memory_reserved_gib, nvml_peak_gib) and the bound
the estimate states for it (memory.<counter>_upper95, docs/estimate.md "How sure the estimate
is"), and reports per source:

  n        cases compared
  median   median |error|, error = (estimate - measured) / measured (positive: estimate too high)
  under    cases whose estimate is below the measured peak
  bound    cases whose measured peak is at or under the stated 95 % bound

and the same over all cases. An inference row whose reading is below the least memory its stated
workload holds at once (the weights, the KV cache of its prompt and one MLP intermediate of the
prompt's prefill, which exists beside every layer's cache: `floor`) cannot be a reading of that
workload: it is listed and the exit status is 1 (such rows belong in rejected.csv). --modelled-only keeps the rows whose `not_modelled` column is empty
(nothing of the run is known to lie outside what the estimator models). The bound here is the
one data/confidence.json gives today, fitted with these cases unseen: an out-of-sample check of
the bound as it stands (bench/accuracy/fit_confidence.py --holdout-sources refits without each
source in turn).

Exit status: 0; 1 when an estimate failed, or a limit given (--max-median PCT, --min-coverage
FRACTION) is not met, or a reading is below its floor; 2 for a bad cases file. Python 3 standard library only.
"""
import argparse
import concurrent.futures
import csv
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ACC = os.path.dirname(HERE)
GiB = 2 ** 30
COUNTERS = (("max_memory_allocated_gib", "allocated", "allocated_peak"),
            ("max_memory_reserved_gib", "reserved", "reserved_peak"),
            ("nvml_peak_gib", "device", "device_peak"))


def resolve(args):
    """the argv of a row's args: '@X' becomes bench/accuracy/X.json"""
    return [os.path.join(ACC, w[1:] + ".json") if w.startswith("@") else w for w in args.split()]


def measured(row):
    """(counter, memory key, GiB) of the one counter a row measured"""
    filled = [(c, k, float(row[col])) for col, c, k in COUNTERS if row.get(col, "").strip()]
    if len(filled) != 1:
        raise ValueError("row %s: exactly one of the measured columns must be filled, got %d"
                         % (row.get("id"), len(filled)))
    return filled[0]


def read_cases(path):
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        measured(r)
        if not r.get("args", "").strip():
            raise ValueError("row %s: no args" % r.get("id"))
    return rows


def estimate(binary, row):
    p = subprocess.run([binary, "estimate", "--json"] + resolve(row["args"]),
                       capture_output=True, text=True)
    if p.returncode not in (0, 1):  # 1: does not fit the --gpu given; the estimate is there
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "exit %d" % p.returncode
    return json.loads(p.stdout), None


def floor(row, est):
    """GiB an inference row's stated workload holds at once: the weights, the KV cache of the
    prompt (the `seq_len` column's first number; the estimate's cache is for --seq tokens) and the
    output of one MLP projection over the prompt, made in the last layer's prefill while every
    layer's cache is kept (none for a MoE, whose experts may each take few of the tokens at a
    time). None for a training row."""
    wl, model, mem = est.get("workload", {}), est.get("model", {}), est.get("memory", {})
    if wl.get("method") != "inference" or "weights" not in mem:
        return None
    m = re.match(r"\s*(\d+)", row.get("seq_len", ""))
    seq = max(int(wl.get("seq") or 1), 1)
    prompt = min(int(m.group(1)), seq) if m else 0
    width = 0 if model.get("experts") else (model.get("ffn") or 0)
    elem = 4 if wl.get("precision") == "fp32" else 2
    return (mem["weights"] + mem.get("kv_cache", 0) * prompt / seq +
            (wl.get("batch") or 1) * prompt * width * elem) / GiB


def compare(binary, rows, jobs):
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        done = list(pool.map(lambda r: estimate(binary, r), rows))
    out = []
    for r, (est, err) in zip(rows, done):
        counter, key, meas = measured(r)
        c = {"id": r["id"], "source": r["source_key"], "counter": counter, "measured": meas,
             "modelled": not r.get("not_modelled", "").strip(), "error": err}
        if est is not None:
            mem = est["memory"]
            c["predicted"] = mem[key] / GiB
            c["bound"] = mem[key + "_upper95"] / GiB if mem.get(key + "_upper95") else None
            c["rel"] = (c["predicted"] - meas) / meas
            c["phase"] = est.get("peak_phase", "")
            c["floor"] = floor(r, est)
        out.append(c)
    return out


def summary(cases):
    ok = [c for c in cases if c["error"] is None]
    if not ok:
        return None
    errs = [abs(c["rel"]) for c in ok]
    bounded = [c for c in ok if c["bound"] is not None]
    return {"n": len(ok), "failed": len(cases) - len(ok),
            "median": statistics.median(errs), "max": max(errs),
            "under": sum(c["rel"] < 0 for c in ok),
            "covered": sum(c["measured"] <= c["bound"] for c in bounded), "bounded": len(bounded)}


def line(name, s):
    return ("%-28s %4d %8.1f%% %8.1f%% %6d %6d/%-4d %6.1f%%" %
            (name, s["n"], 100 * s["median"], 100 * s["max"], s["under"], s["covered"],
             s["bounded"], 100.0 * s["covered"] / s["bounded"] if s["bounded"] else 0.0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("OOMLESS_BIN", "oomless"))
    ap.add_argument("--file", default=os.path.join(HERE, "cases.csv"))
    ap.add_argument("--source", action="append", help="only this source_key (repeatable)")
    ap.add_argument("--modelled-only", action="store_true",
                    help="only rows with an empty not_modelled column")
    ap.add_argument("--cases", action="store_true", help="one line per case")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--max-median", type=float, help="exit 1 above this median |error| (percent)")
    ap.add_argument("--min-coverage", type=float, help="exit 1 below this fraction under the bound")
    a = ap.parse_args()
    try:
        rows = read_cases(a.file)
    except (OSError, ValueError, KeyError) as exc:
        sys.stderr.write("compare.py: %s\n" % exc)
        return 2
    if a.source:
        rows = [r for r in rows if r["source_key"] in a.source]
    if a.modelled_only:
        rows = [r for r in rows if not r.get("not_modelled", "").strip()]
    cases = compare(a.bin, rows, a.jobs)
    if a.cases:
        print("%-10s %-26s %-9s %9s %9s %8s %9s  %s" % ("case", "source", "counter", "measured",
                                                      "estimate", "error", "bound95", "peak phase"))
        for c in cases:
            if c["error"] is not None:
                print("%-10s %-26s %-9s %9.3f    FAILED  %s" % (c["id"], c["source"], c["counter"],
                                                               c["measured"], c["error"]))
                continue
            print("%-10s %-26s %-9s %9.3f %9.3f %+7.1f%% %9s  %s%s" % (
                c["id"], c["source"], c["counter"], c["measured"], c["predicted"], 100 * c["rel"],
                "%.3f" % c["bound"] if c["bound"] is not None else "-", c["phase"],
                "" if c["modelled"] else " (not all modelled)"))
        print()
    print("%-28s %4s %9s %9s %6s %11s %7s" % ("source", "n", "median", "max", "under", "under bound", ""))
    for s in sorted({c["source"] for c in cases}):
        sm = summary([c for c in cases if c["source"] == s])
        if sm:
            print(line(s, sm))
    for c in cases:
        if c["error"] is not None:
            print("failed: %s: %s" % (c["id"], c["error"]))
    total = summary(cases)
    if total is None:
        print("no case compared")
        return 1
    print(line("all", total))
    meds = [summary([c for c in cases if c["source"] == s])["median"]
            for s in {c["source"] for c in cases if c["error"] is None}]
    print("(GiB; error = (estimate - measured) / measured; %d sources, median of the per-source "
          "medians %.1f%%; %d estimates failed)" % (len(meds), 100 * statistics.median(meds),
                                                   total["failed"]))
    low = [c for c in cases if c.get("floor") is not None and c["measured"] < c["floor"]]
    for c in low:
        print("below its floor: %s: measured %.3f GiB < %.3f GiB (weights, the prompt's KV cache "
              "and one MLP intermediate of its prefill)" % (c["id"], c["measured"], c["floor"]))
    bad = total["failed"] > 0 or bool(low)
    if a.max_median is not None and 100 * total["median"] > a.max_median:
        bad = True
    if a.min_coverage is not None and total["covered"] < a.min_coverage * total["bounded"]:
        bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
