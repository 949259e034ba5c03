#!/usr/bin/env python3
"""The estimator held to each training stack's own code, traced on the meta device.

Run by the stack's Python (its virtual environment, `make venv-STACK`):

    build/venv-torchtune/bin/python bench/trace/stacks.py --stack torchtune --jobs 2
    build/venv-torchtune/bin/python bench/trace/stacks.py --stack torchtune --subset --check
    make bench-trace STACK=torchtune

writes bench/trace/STACK/results.json and RESULTS.md (the matrix: models x method x precision x
checkpointing x loss at one batch/sequence point, and a second point for a few cells) with the
versions and the date. Each cell is traced (oomless.trace with --stack STACK) and estimated
(`oomless estimate --json` with the same workload and --stack STACK: what the estimator models
of each stack, and what it does not yet, is in docs/stacks.md).

--subset --check is the CI test of a stack: the few cells of SUBSET are traced again and must give
the allocated peak committed in results.json, byte for byte (the trace is reproducible, so the
reference the estimator will be held to is the committed one). --check-estimate also holds the
estimator to each subset cell's trace within the band of STACK/bounds.json (the goal: 3 %); the
test registers the reproducibility check, the band check is what the estimator's stack model is
for.

Held out: the cells of each matrix's last model and of its second batch/sequence point are not
for fitting. A stack model is fitted on the other cells and judged on these; RESULTS.md gives the
error of both parts.
"""
import argparse
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (the estimator's flags, the report, the bands)

# method/precision/checkpointing/loss of each stack's cells; LoRA cells adapt attention and MLP
TUNE_TARGETS = "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
MATRIX = {
    "torchtune": {
        "models": ["llama-3.2-1b", "qwen2.5-0.5b", "qwen2.5-1.5b"],
        "points": [(2, 512)],
        "cells": (
            [dict(method="full", precision=p, checkpointing=c, loss=l)
             for p in ("bf16", "fp32") for c in ("none", "full") for l in ("chunked",)] +
            [dict(method="full", precision="bf16", checkpointing="full", loss="chunked",
                  optimizer_in_backward="yes")] +
            [dict(method="lora", precision="bf16", checkpointing=c, loss=l,
                  lora_targets=TUNE_TARGETS, lora_rank=64, lora_dropout=0.0)
             for c in ("none", "full", "full+offload") for l in ("chunked", "standard")] +
            [dict(method="qlora", checkpointing=c, loss="chunked", lora_targets=TUNE_TARGETS,
                  lora_rank=64, lora_dropout=0.0) for c in ("none", "full")]),
        "second": [(1, 2048)],
    },
    "torchtitan": {
        "models": ["llama-3.2-1b", "qwen3-0.6b", "qwen3-1.7b"],
        "points": [(2, 512)],
        "cells": [dict(method="full", precision=p, checkpointing=c, loss=l)
                  for p in ("amp-bf16", "fp32") for c in ("none", "full", "op-sac")
                  for l in ("chunked", "standard")],
        "second": [(1, 2048)],
    },
    "transformers-4": {
        "models": ["llama-3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b", "gpt2"],
        # the main matrix's point (bench/trace/results.json): the 5.23 trace of each cell is there
        "points": [(1, 512)],
        "cells": ([dict(method="inference", precision="bf16")] +
                  [dict(method="full", precision=p, checkpointing=c)
                   for p in ("fp32", "amp-bf16", "bf16") for c in ("none", "full")] +
                  [dict(method="lora", precision="bf16", attention=a) for a in ("eager", "sdpa")] +
                  [dict(method="lora", precision="bf16", loss="chunked"),
                   dict(method="lora", precision="bf16", checkpointing="full")]),
        "second": [],
    },
}
# the CI subset: dense models, whose traces do not depend on a router's choices
SUBSET = {
    "torchtune": [dict(model="llama-3.2-1b", batch=2, seq=256, method="lora", precision="bf16",
                       checkpointing="full", loss="chunked", lora_targets=TUNE_TARGETS,
                       lora_rank=64, lora_dropout=0.0),
                  dict(model="qwen2.5-0.5b", batch=2, seq=256, method="qlora",
                       checkpointing="full", loss="chunked", lora_targets=TUNE_TARGETS,
                       lora_rank=64, lora_dropout=0.0),
                  dict(model="qwen2.5-0.5b", batch=2, seq=256, method="full", precision="bf16",
                       checkpointing="none", loss="chunked")],
    "torchtitan": [dict(model="qwen3-0.6b", batch=2, seq=256, method="full",
                        precision="amp-bf16", checkpointing=c, loss="chunked")
                   for c in ("full", "op-sac")],
    "transformers-4": [dict(model="qwen2.5-0.5b", batch=2, seq=256, method=m, precision=p)
                       for m, p in (("lora", "bf16"), ("full", "amp-bf16"))],
}


def cells(stack, subset=False):
    if subset:
        return [dict(c) for c in SUBSET[stack]]
    m = MATRIX[stack]
    out = []
    for model in m["models"]:
        for batch, seq in m["points"]:
            for c in m["cells"]:
                out.append(dict(dict(model=model, batch=batch, seq=seq), **c))
    for model in m["models"][:2]:  # a longer sequence for a few cells
        for batch, seq in m["second"]:
            for c in m["cells"][:: max(1, len(m["cells"]) // 4)]:
                out.append(dict(dict(model=model, batch=batch, seq=seq), **c))
    return out


def estimate_cell(stack, cell):
    """The estimator's description of the cell: torchtune builds its adapters in the model's
    dtype (--adapter-dtype bf16) and quantizes QLoRA's base with torchao's NF4 (double
    quantization's bytes); torchtitan trains under FSDP2 with its default_adamw, whose
    implementation is "fused" (no foreach temporaries; the tracer steps it so whatever the
    --optimizer)."""
    est = dict(cell, stack=stack)
    if stack == "torchtune" and cell.get("method") in ("lora", "qlora"):
        est["adapter_dtype"] = "bf16"
        if cell["method"] == "qlora":
            est["double_quant"] = "yes"
    if stack == "torchtitan":
        est["sharding"] = "fsdp2"
        if est.get("optimizer", "adamw") == "adamw":
            est["optimizer"] = "adamw-fused"
    return est


def one(args):
    binary, stack, cell = args
    import time
    t0 = time.time()
    es, eerr = compare.estimate(binary, estimate_cell(stack, cell))
    tr, terr = compare.trace(dict(cell, stack=stack))
    return compare.make_row(cell, t0, tr, terr, es, eerr)


def estimate_again(binary, stack, row):
    """A committed row with the estimate made again (the trace kept)."""
    if "trace" not in row:
        return row
    es, eerr = compare.estimate(binary, estimate_cell(stack, row["cell"]))
    tr = {"memory": row["trace"], "peak_phase": row["trace_phase"]}
    import time
    new = compare.make_row(row["cell"], time.time(), tr, None, es, eerr)
    new["trace_s"] = row["trace_s"]
    return new


def run(binary, stack, subset, jobs):
    cells_to_trace = [(binary, stack, c) for c in cells(stack, subset)]
    if jobs <= 1:
        return [one(t) for t in cells_to_trace]
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        return pool.map(one, cells_to_trace, chunksize=1)


def held_out(stack, cell):
    """A cell kept from fitting: the matrix's last model, or its second batch/sequence point."""
    m = MATRIX[stack]
    return cell["model"] == m["models"][-1] or (cell["batch"], cell["seq"]) in m["second"]


def parts(stack, rows):
    """The error on the cells to fit and on the held-out ones, one line each."""
    fit = [r for r in rows if not held_out(stack, r["cell"])]
    out = [r for r in rows if held_out(stack, r["cell"])]
    m = MATRIX[stack]
    what = " and ".join(["%s" % m["models"][-1]] +
                        ["%d x %d" % (b, q) for b, q in m["second"]])
    return ("Cells to fit (%d): %s.\n\nHeld out (%d: %s): %s.\n" % (
        len(fit), summary(fit), len(out), what, summary(out)))


def summary(rows):
    errs = sorted(abs(r["peak_error"]) for r in rows if not r.get("error"))
    if not errs:
        return "no cell traced"
    worst = max((r for r in rows if not r.get("error")), key=lambda r: abs(r["peak_error"]))
    return ("estimator against the trace, allocated peak: median |error| %.1f%%, worst %+.1f%% "
            "(%s), %d of %d within 3%%" % (100 * errs[len(errs) // 2], 100 * worst["peak_error"],
                                            " ".join(compare.flags(worst["cell"])),
                                            sum(1 for e in errs if e <= 0.03), len(errs)))


def check_reference(rows, saved):
    """The subset's traces against the committed rows: the same allocated peak."""
    ref = {json.dumps(r["cell"], sort_keys=True): r for r in saved["rows"]}
    failures = []
    for r in rows:
        key = json.dumps(r["cell"], sort_keys=True)
        want = ref.get(key)
        if r.get("error"):
            failures.append("%s: %s" % (key, r["error"]))
        elif want is None or "trace" not in want:
            failures.append("%s: no committed trace (run the matrix with --subset-too)" % key)
        elif r["trace"]["allocated_peak"] != want["trace"]["allocated_peak"]:
            failures.append("%s: traced %d, committed %d" % (
                key, r["trace"]["allocated_peak"], want["trace"]["allocated_peak"]))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stack", required=True, choices=sorted(MATRIX))
    ap.add_argument("--bin", default=os.path.join(compare.ROOT, "build", "oomless"))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--subset", action="store_true", help="the CI cells only")
    ap.add_argument("--check", action="store_true",
                    help="with --subset: the traces must give the committed peaks")
    ap.add_argument("--check-estimate", action="store_true",
                    help="with --subset: the estimator within each cell's band (bounds.json)")
    ap.add_argument("--from-json", action="store_true", help="re-render RESULTS.md only")
    ap.add_argument("--estimate-only", action="store_true",
                    help="estimate the committed traces again (seconds: no tracing), for "
                         "iterating on the estimator; rewrites results.json and RESULTS.md")
    args = ap.parse_args()
    folder = os.path.join(HERE, args.stack)
    results = os.path.join(folder, "results.json")
    if args.from_json or args.estimate_only:
        with open(results, encoding="utf-8") as f:
            saved = json.load(f)
        if args.estimate_only:
            saved["rows"] = [estimate_again(args.bin, args.stack, r) for r in saved["rows"]]
            with open(results, "w", encoding="utf-8") as f:
                json.dump(saved, f, indent=1)
            print(summary(saved["rows"]))
        render(args.stack, saved, folder)
        return 0
    from oomless.trace import versions
    vers = versions()  # before the minutes of tracing
    rows = run(args.bin, args.stack, args.subset, args.jobs)
    if args.subset:
        failures = []
        if args.check:
            with open(results, encoding="utf-8") as f:
                failures += check_reference(rows, json.load(f))
        if args.check_estimate:
            failures += compare.check(rows, os.path.join(folder, "bounds.json"))
        for f in failures:
            print("FAIL " + f)
        print(summary(rows))
        print("%d passed, %d failed" % (len(rows) - len(failures), len(failures)))
        return 1 if failures else 0
    subset = run(args.bin, args.stack, True, args.jobs)
    known = {json.dumps(r["cell"], sort_keys=True) for r in rows}
    rows += [r for r in subset if json.dumps(r["cell"], sort_keys=True) not in known]
    saved = {"stack": args.stack, "date": datetime.date.today().isoformat(),
             "versions": vers, "rows": rows}
    os.makedirs(folder, exist_ok=True)
    with open(results, "w", encoding="utf-8") as f:
        json.dump(saved, f, indent=1)
    render(args.stack, saved, folder)
    print(summary(rows))
    return 0


def versus(rows, path):
    """transformers 4.57 against 5.23: each cell's trace here beside the same cell's in the main
    matrix (bench/trace/results.json), component by component where they differ."""
    with open(path, encoding="utf-8") as f:
        main = {json.dumps(r["cell"], sort_keys=True): r for r in json.load(f)["rows"]}
    lines = ["", "## transformers 4.57.6 against 5.23.0 (the main matrix's trace of the same cell)",
             "", "| cell | 4.57 peak (GiB) | 5.23 peak (GiB) | difference | components that differ "
             "(4.57 - 5.23, MiB) |", "|---|---|---|---|---|"]
    for r in rows:
        other = main.get(json.dumps(r["cell"], sort_keys=True))
        if r.get("error") or other is None or other.get("error"):
            continue
        a, b = r["trace"], other["trace"]
        diff = ", ".join("%s %+.1f" % (c, (a[c] - b[c]) / 2 ** 20) for c in compare.COMPONENTS
                         if a[c] != b[c])
        lines.append("| %s | %s | %s | %+.2f%% | %s |" % (
            " ".join(compare.flags(r["cell"])), compare.gib(a["allocated_peak"]),
            compare.gib(b["allocated_peak"]),
            100 * compare.err(a["allocated_peak"], b["allocated_peak"]), diff or "none"))
    return "\n".join(lines) + "\n"


def render(stack, saved, folder):
    """RESULTS.md: the table of compare.report, headed by the stack, its date and versions."""
    out = os.path.join(folder, "RESULTS.md")
    compare.report(saved["rows"], out, saved["versions"])
    with open(out, encoding="utf-8") as f:
        text = f.read()
    head = ("# The estimator against %s's own code (traced %s)\n\n"
            "Generated by `make bench-trace STACK=%s` (`bench/trace/stacks.py --stack %s`). "
            "Each cell estimated with `--stack %s` (what the estimator models of it: "
            "docs/stacks.md). %s.\n\n%s" % (stack, saved["date"], stack, stack, stack,
                                               summary(saved["rows"]),
                                               parts(stack, saved["rows"])))
    if stack == "transformers-4":
        text += versus(saved["rows"], os.path.join(HERE, "results.json"))
    text = text.replace("# The estimator against the tracer\n", head, 1)
    text = text.replace("the real transformers/PEFT code", "%s's own code" % stack, 1)
    text = text.replace("Generated by `bench/trace/compare.py --bin build/oomless --out "
                        "bench/trace/RESULTS.md` (`make bench-trace`) on %s."
                        % datetime.date.today().isoformat(), "Table of `compare.report`.", 1)
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
