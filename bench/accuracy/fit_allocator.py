#!/usr/bin/env python3
"""fit_allocator.py - the allocator and context coefficients of data/coefficients.json, from the
peaks measured on a GPU (measure.py's CSV).

usage: bench/accuracy/fit_allocator.py [--bin OOMLESS] [--csv FILE] [--max-under GiB]

What a case's reserved peak holds beyond its allocated peak is the caching allocator's blocks it
keeps but cannot hand to the request that makes the peak; what NVML shows beyond the reserved
peak is the CUDA context and the kernels loaded. The estimator models (lib/estimate/estimate_run.c,
reserved()):

  training, forward/backward peak:  floor + logits_blocks x one fp32 logits tensor
  training, optimizer peak:         floor + optimizer_blocks x the step's temporaries
  no logits to train (prefill...):  transient_blocks x (activations + logits + KV + temporaries)

and the context as one figure for training and one for a prefill. This script takes the
estimator's allocated peak and components for every measured case (`oomless estimate --json`: they
do not depend on these coefficients), searches the grid of the four coefficients for the smallest
median |error| of the device peak over the cases not held back (split `fit`) that under-predicts
none of them by more than --max-under GiB (default 0.4: half of what the default 1 GiB safety
margin leaves to noise), and prints the coefficients with the errors on the fitted and the
held-back cases. The context figures are the means of NVML - reserved. It writes nothing:
copy what it prints into data/coefficients.json ("allocator", and "context" for the GPU's
compute capability). Python 3 standard library only.
"""
import argparse
import importlib.machinery
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 2 ** 30
sys.dont_write_bytecode = True


def load_compare():
    """bench/accuracy/compare (no .py) as a module: its reader of the measured CSVs"""
    loader = importlib.machinery.SourceFileLoader("accuracy_compare", os.path.join(HERE, "compare"))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    return mod


def frange(lo, hi, step):
    n = int(round((hi - lo) / step))
    return [round(lo + i * step, 4) for i in range(n + 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("OOMLESS_BIN", "oomless"))
    ap.add_argument("--csv", default=None)
    ap.add_argument("--max-under", type=float, default=0.4)
    a = ap.parse_args()
    compare = load_compare()
    path = a.csv or compare.measured_paths()[-1]
    cases = []
    for row in compare.measured_rows([path]):
        if row["status"] != "ok" or not row["nvml_peak"]:  # a device peak left out (its note)
            continue
        argv = shlex.split(row["args"])
        p = subprocess.run([a.bin, "estimate", "--json", "--gpu", row["gpu"]] + argv,
                           capture_output=True, text=True, check=True)
        e = json.loads(p.stdout)
        m, kv = e["memory"], dict(zip(argv[::2], argv[1::2]))
        train = kv.get("--method") != "inference"
        tokens = int(kv.get("--batch", 1)) * int(kv.get("--seq", 512))
        lm = e["model"]["head"] not in ("seq-cls", "base")
        cases.append({
            "id": row["id"], "split": row["split"], "train": train, "phase": e["peak_phase"],
            "alloc": m["allocated_peak"] / GiB,
            "transient": (m["activations"] + m["logits"] + m["kv_cache"] + m["temporaries"]) / GiB,
            "temps": m["temporaries"] / GiB,
            "lt": tokens * e["model"]["vocab"] * 4 / GiB if train and lm else 0.0,
            "reserved": float(row["reserved_peak"]) / GiB,
            "nvml": float(row["nvml_peak"]) / GiB,
        })
    ctx_train = statistics.mean(c["nvml"] - c["reserved"] for c in cases if c["train"])
    ctx_infer = statistics.mean(c["nvml"] - c["reserved"] for c in cases if not c["train"])

    def device(c, floor, lb, ob, tb):
        if c["train"] and c["phase"] == "optimizer":
            cache = floor + ob * c["temps"]
        elif c["train"] and c["lt"] > 0:
            cache = floor + lb * c["lt"]
        else:
            cache = tb * c["transient"]
        return c["alloc"] + cache + (ctx_train if c["train"] else ctx_infer)

    def score(sel, coef):
        errs = [device(c, *coef) - c["nvml"] for c in sel]
        rel = [100 * abs(device(c, *coef) - c["nvml"]) / c["nvml"] for c in sel]
        return statistics.median(rel), min(errs), max(rel)

    fit = [c for c in cases if c["split"] != "held"]
    held = [c for c in cases if c["split"] == "held"]
    best = None
    for floor in frange(0, 1, 0.05):
        for lb in frange(0.3, 2.0, 0.05):
            for ob in frange(0.5, 2.0, 0.1):
                for tb in frange(0.1, 0.6, 0.05):
                    med, under, _mx = score(fit, (floor, lb, ob, tb))
                    if under < -a.max_under:
                        continue
                    if best is None or med < best[0] - 1e-9:
                        best = (med, (floor, lb, ob, tb))
    if best is None:
        print("no coefficients under-predict every fitted case by less than %g GiB" % a.max_under)
        return 1
    floor, lb, ob, tb = best[1]
    print("%s: %d cases (%d fitted, %d held back)" % (os.path.basename(path), len(cases), len(fit),
                                                      len(held)))
    print(json.dumps({"training_floor_bytes": round(floor * GiB), "logits_blocks": lb,
                      "optimizer_blocks": ob, "transient_blocks": tb}, indent=1))
    print("context: training %.0f MiB, prefill %.0f MiB (NVML - reserved, means)" % (
        ctx_train * 1024, ctx_infer * 1024))
    for label, sel in (("fitted", fit), ("held back", held)):
        med, under, mx = score(sel, best[1])
        print("%-9s device peak: median |error| %.1f%%, max %.1f%%, worst under-prediction "
              "%.2f GiB" % (label, med, mx, -under if under < 0 else 0.0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
