#!/usr/bin/env python3
"""fit_confidence.py - how far the estimator is from measured peaks, per kind of workload.

    bench/accuracy/fit_confidence.py --bin build/oomless --out data/confidence.json   # fit
    bench/accuracy/fit_confidence.py --bin build/oomless --holdout   # fit on half, test the other
    bench/accuracy/fit_confidence.py --bin build/oomless --check     # the bounds oomless states
    bench/accuracy/fit_confidence.py --bin build/oomless --holdout-sources \
        --min-holdout-coverage 0.9                  # each source left out of the fit in turn
                                                    # (make check: accuracy.holdout_sources)

Inputs by default: the trace matrix and every CSV (the H100 set, published/cases.csv).
Every case pairs a measured peak with the estimate for the same workload, on the counter the
measurement read (allocated, reserved or device). Its error is u = measured / predicted - 1:
positive when the estimate was low. Inputs (all of them unless --only):

  published  public/cases.tsv: 18 of the published measurements, also in published/cases.csv
             (so not among the defaults)
  trace      ../trace/results.json: the tracer's allocated peak of each matrix cell
  csv        every other bench/accuracy/*.csv (and --csv FILE): one measurement per row, in one
             of two forms (columns are matched without case; '_' and '-' are the same):
             - generic: predicted, measured (bytes), kind ("method=lora attention=sdpa
               checkpointing=none quantization=none sharding=none"; a key left out is unknown),
               optional id, counter (allocated|reserved|device, default device);
             - workload: an `args` column with estimate flags ("--model llama-3.1-8b --batch 4"),
               or one column per estimate flag (model, method, batch, seq, ...), and one or more
               measured columns: max_memory_allocated, max_memory_reserved, nvml_peak (also
               nvml_process_peak, device_peak; allocated_peak and reserved_peak as
               measure.py writes them), in bytes, or in GiB/MiB with a _gib/_mib suffix.
               The estimate of each row is run again, so its error follows the estimator;
               a `gpu` column the catalog knows is passed as --gpu (the CUDA context);
               `@X` in args is the config bench/accuracy/X.json.
             Both forms: a `source_key` column names the row's source (default: the file).
             Both forms: a `status` other than ok skips the row; `split` = held keeps the row
             out of the fit, and its coverage under the bound fitted without it is reported.

A workload's class is method/attention/checkpointing/quantization/sharding (sharding: ZeRO
stage, "ddp" for plain data parallel on several GPUs, "+offload" with CPU offload). A class with
fewer than --min-cases cases takes the quantiles of the first broader class that has enough
(attention, then checkpointing, then quantization, then the method are left out, then all), but
never below its own cases' quantiles at the same level (the few it has count too).

The bound at level p is the k-th smallest error, k = ceil(p (n + 1)) (at most n): for a new case
drawn like the n, it is above the case's error with probability at least k / (n + 1) (a
distribution-free order-statistic bound; Wilks 1941, as used by split conformal prediction).

A user's job is not drawn like the measured cases, though: it runs on a setup (stack, versions,
GPU, what is counted) none of the sources shares, and the sources differ more from each other
than their cases within them (held out by source, the within-class bound alone covered 77 % of
the published cases). So the GPU measurements' bound is two parts, each at level p: the
quantile of the class's errors less their source's bias (its median error over all its cases),
the spread within one setup; plus the same order-statistic quantile over the sources' biases,
the bias a new setup may have (with fewer than 19 sources, the largest at 95 %). The trace
matrix is one setup, the tracer's: its bound is the plain quantile.

That second part is taken per stack (the training code that ran: stack_of(); the mapping is in
published/README.md, "Stacks"): a stack with at least --min-stack-sources sources of its own
(default 4) takes the quantile over its own sources' biases; any other stack (and `other`, code
oomless does not model) takes the quantile over every source's bias, the cross-stack spread.
Why 4: --stack-sources-curve holds each source of a stack out and takes the stack's term over k
of its other sources; on transformers-4's six sources (the one stack with enough) the held-out
cases covered are 80, 85, 89, 93, 96 % for k = 1 … 5: 4 is the fewest reaching 90 %.
data/confidence.json stores each class's two parts (`gpu_within`, `trace`), each stack's term
and the cross-stack one; `under` is the class's bound with the cross-stack term. The library
adds the term of the workload's --stack (lib/estimate/estimate_confidence.c). Held out by
source, a stack's term is recomputed from the sources that remain.

--check runs `oomless estimate --json` on every case it can rerun, reads memory.*_upper95 and
fails (exit 1) when fewer than --min-coverage of the measured peaks are under their bound.
Python 3 standard library only.
"""
import argparse
import csv
import glob
import importlib.machinery
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LEVELS = [0.5, 0.8, 0.9, 0.95, 0.99]
DIMS = ("method", "attention", "checkpointing", "quantization", "sharding")
# the dimensions left out (by index) at each broader level; the last level is "all"
FALLBACK = [(), (1,), (1, 2), (1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3, 4)]
COUNTER_KEY = {"allocated": "allocated_peak", "reserved": "reserved_peak", "device": "device_peak"}
MEASURED_COLUMNS = {"max_memory_allocated": "allocated", "allocated_peak": "allocated",
                    "max_memory_reserved": "reserved", "reserved_peak": "reserved",
                    "nvml_peak": "device", "nvml_process_peak": "device", "device_peak": "device"}
GiB = 2 ** 30
STACKS = ("transformers", "transformers-4", "liger", "torchtune", "torchtitan", "unsloth")
# the first release candidate of transformers 5 came out in December 2025: a transformers row
# dated no later than 2025 with no version ran 4.x
LAST_TRANSFORMERS4_YEAR = 2025



sys.dont_write_bytecode = True  # the scripts loaded below leave no __pycache__ in the tree


def load(name, path):
    """a script of the benches as a module (bench/accuracy/compare has no .py)"""
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


compare = load("accuracy_compare", os.path.join(HERE, "compare"))  # read_cases()
trace_compare = load("trace_compare", os.path.join(ROOT, "bench", "trace", "compare.py"))  # estimate_flags()


def classify(workload):
    """the class dimensions of an estimate's "workload" object"""
    p = workload.get("precision")
    quant = "4bit" if p == "4bit" else "int8" if p == "int8" else "none"
    shard = workload.get("sharding", "none")
    if shard == "none" and (workload.get("gpus", 1) > 1 or workload.get("tensor_parallel", 1) > 1):
        shard = "ddp" if workload.get("gpus", 1) > 1 else "tp"
    if workload.get("offload", "none") != "none":
        shard += "+offload"
    return (workload["method"], workload["attention"], workload["checkpointing"], quant, shard)


def class_key(dims, level):
    return "/".join("*" if i in FALLBACK[level] else d for i, d in enumerate(dims))


class Skip(Exception):
    """a CSV row that cannot be used (said on stderr; the others still count)"""


def run_estimate(binary, argv, error=SystemExit):
    p = subprocess.run([binary, "estimate", "--json"] + argv, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise error("oomless estimate %s: %s" % (" ".join(argv), p.stderr.strip()))
    return json.loads(p.stdout)


def case(source, cid, counter, measured, est=None, predicted=None, dims=None, argv=None,
         held=False, stack="other"):
    if est is not None:
        predicted, dims = est["memory"][COUNTER_KEY[counter]], classify(est["workload"])
    return {"source": source, "id": cid, "counter": counter, "measured": float(measured),
            "predicted": float(predicted), "dims": dims, "argv": argv, "estimate": est,
            "held": held, "stack": stack}


def stack_of(row, est=None):
    """the oomless stack whose code ran a CSV row (normalised keys), or "other" for code oomless
    does not model or whose version cannot be told: from its `stack` and `stack_version`
    columns (published/cases.csv), else its `transformers` version column (measure.py's CSVs),
    else the stack its estimate modelled"""
    text = row.get("stack", "").lower()
    version = row.get("stack_version", "")
    if "lit-gpt" in text or "litgpt" in text:
        return "other"
    for s in ("liger", "unsloth", "torchtune", "torchtitan"):
        if s in text:
            return s
    if text and not re.search(r"transformers|peft|trl\b", text):
        return "other"
    m = re.search(r"transformers (\d+)\.", version) or \
        re.match(r"(\d+)\.", row.get("transformers", ""))
    if m:
        return "transformers" if int(m.group(1)) >= 5 else "transformers-4"
    years = [int(y) for y in re.findall(r"\b(20\d\d)\b", version)]
    if text:
        return "transformers-4" if years and max(years) <= LAST_TRANSFORMERS4_YEAR else "other"
    stack = ((est or {}).get("workload") or {}).get("stack")
    return stack if stack in STACKS else "other"


def published_cases(binary, path):
    out = []
    for cid, counter, measured, argv, _ in compare.read_cases(path):
        if counter != "excluded":
            out.append(case("published", cid, counter, measured * GiB, run_estimate(binary, argv),
                            argv=argv))
    return out


def trace_cases(binary, path):
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    out = []
    for r in rows:
        if r.get("error") is None and r.get("trace"):
            argv = trace_compare.estimate_flags(r["cell"])
            est = run_estimate(binary, argv)
            out.append(case("trace", " ".join(argv), "allocated", r["trace"]["allocated_peak"],
                            est, argv=argv, stack=stack_of({}, est)))
    return out


def norm(name):
    return name.strip().lower().replace("-", "_")


def size_value(column, text):
    v = float(text)
    return v * GiB if column.endswith("_gib") else v * 2 ** 20 if column.endswith("_mib") else v


def estimate_flags(binary):
    """the workload and GPU flags `oomless estimate --help` lists"""
    p = subprocess.run([binary, "estimate", "--help"], capture_output=True, text=True)
    return {norm(m) for m in re.findall(r"^  --([a-z0-9-]+)", p.stdout + p.stderr, re.M)}


def csv_cases(binary, path, flag_names):
    name = os.path.basename(path)
    out = []
    with open(path, encoding="utf-8", newline="") as f:
        for n, row in enumerate(csv.DictReader(f), 2):
            try:
                out += csv_row(binary, name, n, row, flag_names)
            except (Skip, ValueError) as exc:
                sys.stderr.write("%s:%d: skipped: %s\n" % (path, n, exc))
    return out


def csv_row(binary, name, n, row, flag_names):
    """the cases of one CSV row (module docstring: the two forms); a row with a source_key (a
    set of published measurements, published/cases.csv) is marked keyed"""
    out = csv_row_cases(binary, name, n, row, flag_names)
    for c in out:
        c["keyed"] = bool((row.get("source_key") or "").strip())
    return out


def csv_row_cases(binary, name, n, row, flag_names):
    out = []
    row = {norm(k): (v or "").strip() for k, v in row.items() if k}
    cid = row.get("id") or "%s:%d" % (name, n)
    source = row.get("source_key") or name  # a CSV of several sources names each row's
    held = row.get("split") == "held"
    if row.get("status", "ok") not in ("ok", ""):
        raise Skip("status '%s' (%s)" % (row["status"], row.get("note", "")))
    if "predicted" in row and "measured" in row and "kind" in row:
        kv = dict(w.split("=", 1) for w in row["kind"].split() if "=" in w)
        dims = tuple(kv.get(d, "*") for d in DIMS)
        counter = row.get("counter") or "device"
        if counter not in COUNTER_KEY:
            raise Skip("counter '%s' is not allocated, reserved or device" % counter)
        return [case(source, cid, counter, float(row["measured"]),
                     predicted=float(row["predicted"]), dims=dims, held=held,
                     stack=stack_of(row))]
    if row.get("args"):  # @X: the config bench/accuracy/X.json
        argv = [os.path.join(HERE, w[1:] + ".json") if w.startswith("@") else w
                for w in row["args"].split()]
    else:
        argv = []
        for k, v in row.items():
            if k in flag_names and k not in ("json", "help", "list_models", "gpu") and v:
                argv += ["--" + k.replace("_", "-"), v]
    measured = [(k, c) for k in row for m, c in MEASURED_COLUMNS.items()
                if re.fullmatch(m + r"(_bytes|_gib|_mib)?", k) and row[k]]
    if not argv or not measured:
        raise Skip("neither predicted,measured,kind nor estimate flags with a measured "
                   "column")
    est = None
    if row.get("gpu") and "--gpu" not in argv:
        try:  # the GPU it ran on sets the CUDA context of the device peak, when the catalog knows it
            est = run_estimate(binary, argv + ["--gpu", row["gpu"]], Skip)
            argv = argv + ["--gpu", row["gpu"]]
        except Skip:
            sys.stderr.write("%s:%d: GPU '%s' is not in the catalog: estimated without it\n" %
                             (name, n, row["gpu"]))
    est = est or run_estimate(binary, argv, Skip)
    stack = stack_of(row, est)
    modelled = est["workload"].get("stack")
    if stack != "other" and modelled is not None and modelled != stack:
        raise SystemExit("%s:%d: the row ran %s but its arguments estimate --stack %s" %
                         (name, n, stack, modelled))
    for k, counter in measured:
        out.append(case(source, "%s %s" % (cid, counter), counter, size_value(k, row[k]),
                        est, argv=argv, held=held, stack=stack))
    return out


def error(c):
    return c["measured"] / c["predicted"] - 1.0


def up4(x):
    """x rounded up to 4 decimals (a bound stored rounded must stay a bound)"""
    return math.ceil(round(x * 1e4, 6)) / 1e4


def quantile(sorted_u, p):
    """the k-th smallest, k = ceil(p (n + 1)) at most n (module docstring)"""
    k = min(len(sorted_u), math.ceil(p * (len(sorted_u) + 1) - 1e-9))
    return sorted_u[max(k, 1) - 1]


def source_bias(cases):
    """each source's median error: how far its setup (stack, versions, GPU, what it counts) is
    from the estimator as a whole, whatever the workload"""
    by = {}
    for c in cases:
        by.setdefault(c["source"], []).append(error(c))
    return {s: statistics.median(u) for s, u in by.items()}


def between_sources(bias):
    """at each level, the bias a source not among them may have: the order-statistic rule of
    quantile() with the sources as the draws (a new setup is exchangeable with the m sources,
    not its cases with theirs); with fewer than 19 sources the 95 % level is their largest"""
    b = sorted(bias.values())
    return [quantile(b, p) if b else 0.0 for p in LEVELS]


def resolve(own, dims, min_cases):
    """the first key of dims' chain (from its own level up) whose class has min_cases, or None"""
    start = max(i for i, f in enumerate(FALLBACK)
                if all(dims[j] == "*" for j in f) and
                all(dims[j] != "*" for j in range(len(DIMS)) if j not in f))
    return next((class_key(dims, lv) for lv in range(start, len(FALLBACK))
                 if own.get(class_key(dims, lv), {}).get("cases", 0) >= min_cases), None)


def stack_terms(cases, bias, min_sources):
    """the bias a new setup of each stack may have (between_sources): over its own sources'
    biases when it has min_sources of them, else over every source's (the cross-stack spread)"""
    stack_of_source = {c["source"]: c["stack"] for c in cases}
    cross = {"under": [up4(x) for x in between_sources(bias)], "sources": len(bias)}
    stacks = {}
    for st in STACKS:
        own = {s: b for s, b in bias.items() if stack_of_source[s] == st}
        if len(own) >= min_sources:
            stacks[st] = {"basis": "stack", "sources": len(own),
                          "under": [up4(x) for x in between_sources(own)]}
        else:
            stacks[st] = {"basis": "cross-stack", "sources": len(own), "under": cross["under"]}
    return {"min_sources": min_sources, "cross_stack": cross, "stacks": stacks}


def fit_tier(cases, bias=None):
    """the error statistics of every class key the cases reach; with `bias` (source_bias of the
    cases), each quantile is that of the errors less their source's bias (the spread within a
    setup; stack_terms() has the spread across setups)"""
    groups = {}
    for c in cases:
        for level in range(len(FALLBACK)):
            if all(c["dims"][i] != "*" for i in range(len(DIMS)) if i not in FALLBACK[level]):
                groups.setdefault(class_key(c["dims"], level), []).append(c)
    own = {}
    for key, members in groups.items():
        u = sorted(error(c) for c in members)
        r = sorted(error(c) - bias[c["source"]] for c in members) if bias else u
        own[key] = {"cases": len(u),
                    "sources": {s: sum(1 for c in members if c["source"] == s)
                                for s in sorted({c["source"] for c in members})},
                    "max_under": round(u[-1], 4), "max_over": round(-u[0], 4),
                    "under": [up4(quantile(r, p)) for p in LEVELS]}
    return own


def fit(cases, min_cases):
    """{"classes", "widest", "spread"}: classes per key, each tier's own statistics and the class
    it takes its quantiles from; a bound is the larger of the tiers' (it must hold for GPU
    measurements and the tracer): gpu_within plus the stack's term of `spread`, and trace.
    `under` is that with the cross-stack term."""
    gpu = [c for c in cases if tier(c) == "gpu"]
    bias = source_bias(gpu)
    spread = stack_terms(gpu, bias, min_cases["stack_sources"])
    cross = spread["cross_stack"]["under"]
    tiers = {"gpu": fit_tier(gpu, bias),
             "trace": fit_tier([c for c in cases if tier(c) == "trace"])}
    classes = {}
    for key in sorted(set().union(*tiers.values())):
        dims = key.split("/")
        entry, unders = {"tiers": {}}, {}
        for t, own in tiers.items():
            used = resolve(own, dims, min_cases[t])
            if not any(class_key(dims, lv) in own for lv in range(len(FALLBACK) - 1)):
                continue  # this tier has nothing on this kind of workload
            te = dict(own.get(key, {"cases": 0}))
            te.pop("under", None)
            if used is not None:
                te["from"] = used
                col = own[used]["under"]
                if used != key and key in own:
                    # too few cases of its own, but they count: never below their quantiles
                    col = [max(a, b) for a, b in zip(col, own[key]["under"])]
                unders[t] = col
            entry["tiers"][t] = te
        entry["cases"] = sum(te["cases"] for te in entry["tiers"].values())
        if not unders:
            entry["basis"] = "none"
        else:
            own_enough = [t for t, te in entry["tiers"].items() if te.get("from") == key]
            entry["basis"] = "measured" if own_enough else "fallback"
            if "gpu" in unders:
                entry["gpu_within"] = unders["gpu"]
            if "trace" in unders:
                entry["trace"] = unders["trace"]
            entry["under"] = combine(entry, cross)
            entry["errors_of"] = "; ".join("%s: %s" % (t, te["from"])
                                           for t, te in sorted(entry["tiers"].items())
                                           if "from" in te)
        classes[key] = entry
    q95 = LEVELS.index(0.95)
    measured = [k for k, e in classes.items() if e["basis"] == "measured"]
    widest = max(measured, key=lambda k: classes[k]["under"][q95]) if measured else None
    return {"classes": classes, "widest": widest, "spread": spread}


def combine(entry, term):
    """a class's bound per level with a stack's term: the larger of gpu_within + term and trace"""
    cols = []
    if "gpu_within" in entry:
        cols.append([up4(w + d) for w, d in zip(entry["gpu_within"], term)])
    if "trace" in entry:
        cols.append(entry["trace"])
    return [max(col) for col in zip(*cols)]


def term_of(spread, stack):
    """the stack's term (`other` and stacks without a term: the cross-stack spread)"""
    st = spread["stacks"].get(stack)
    return (st or spread["cross_stack"])["under"]


def tier(c):
    return "trace" if c["source"] == "trace" else "gpu"


def bound(c, f, ctx, p=0.95):
    """the Python twin of the library's bound (lib/estimate/estimate_confidence.c) for a case of
    fit f, with its stack's term"""
    classes, widest = f["classes"], f["widest"]
    entry = None
    for level in range(len(FALLBACK) - 1):
        entry = classes.get(class_key(c["dims"], level))
        if entry and "under" in entry:
            break
        entry = None
    under = combine(entry or classes[widest], term_of(f["spread"], c["stack"]))
    i = LEVELS.index(p)
    extra = ctx if c["counter"] == "device" and c["estimate"] and \
        "overhead" not in c["estimate"]["workload"] else 0
    return c["predicted"] * (1 + max(under[i], 0.0)) + extra


def context_uncertainty():
    """CTX-02 (the context with every CUDA module loaded) above the smallest default context"""
    with open(os.path.join(HERE, "published-measurements.csv"), encoding="utf-8") as f:
        ctx02 = next(float(r["measured_GiB"]) for r in csv.DictReader(f) if r["id"] == "CTX-02")
    with open(os.path.join(ROOT, "data", "coefficients.json"), encoding="utf-8") as f:
        c = json.load(f)["context"]
    smallest = min([c["generic"]] + [e["bytes"] for e in c["by_compute_capability"]])
    return max(0, round(ctx02 * GiB - smallest)), ctx02, smallest


def coverage(cases, f, ctx):
    inside = [c["measured"] <= bound(c, f, ctx) for c in cases]
    widths = [bound(c, f, ctx) / c["predicted"] - 1 for c in cases]
    return sum(inside), len(inside), statistics.median(widths) if widths else 0.0


def held_split(cases, min_cases, ctx):
    """the rows a CSV marks split=held, under the bound fitted without them; per source"""
    f = fit([c for c in cases if not c["held"]], min_cases)
    per = {}
    for c in cases:
        if c["held"]:
            s = per.setdefault(c["source"], [0, 0])
            s[0] += c["measured"] <= bound(c, f, ctx)
            s[1] += 1
    return per


def holdout(cases, min_cases, ctx):
    """two halves by a hash of the case id: fit on one, count the other's coverage; per source"""
    halves = [[c for c in cases if zlib.crc32(c["id"].encode()) % 2 == h] for h in (0, 1)]
    per = {}
    for h in (0, 1):
        f = fit(halves[h], min_cases)
        for c in halves[1 - h]:
            ok = c["measured"] <= bound(c, f, ctx)
            s = per.setdefault(c["source"], [0, 0])
            s[0] += ok
            s[1] += 1
    return per


def holdout_sources(cases, min_cases, ctx):
    """each source in turn left out of the fit and measured under the bound fitted on the others
    (its stack's term from the stack's remaining sources): per case (case, covered, width of its
    bound), and per source the basis of its term (rows marked split=held stay out of every fit)"""
    out, basis = [], {}
    for s in sorted({c["source"] for c in cases}):
        f = fit([c for c in cases if c["source"] != s and not c["held"]], min_cases)
        for c in (c for c in cases if c["source"] == s):
            b = bound(c, f, ctx)
            out.append((c, c["measured"] <= b, b / c["predicted"] - 1))
            st = f["spread"]["stacks"].get(c["stack"])
            basis[s] = "trace matrix: its own quantile" if tier(c) == "trace" else \
                "%s: %s" % (c["stack"], "its %d other sources" % st["sources"]
                            if st and st["basis"] == "stack" else "cross-stack")
    return out, basis


def pooled_line(name, rows):
    """covered/cases (%), median |error|, median width of the bound, of (case, covered, width)"""
    i, n = sum(ok for _, ok, _ in rows), len(rows)
    med = statistics.median(abs(error(c) / (1 + error(c))) for c, _, _ in rows)
    width = statistics.median(w for _, _, w in rows)
    print("  %-36s %4d/%-4d %5.1f%%   %5.1f%%   %+6.1f%%" %
          (name, i, n, 100.0 * i / n, 100 * med, 100 * width))


def print_holdout_sources(cases, min_cases, ctx):
    """--holdout-sources: per source, per stack and pooled over the GPU sources (all but the trace
    matrix) and the published ones; the lower of the two pooled coverages (1 when none)"""
    rows, basis = holdout_sources(cases, min_cases, ctx)
    lowest = 1.0
    head = "covered    median |error|  median bound width"
    print("source held out (fit on all the others)  %s   (spread across setups)" % head)
    for s in sorted(basis):
        pooled_line(s, [r for r in rows if r[0]["source"] == s])
        print("  %38s(%s)" % ("", basis[s]))
    print("stack (each source held out as above)    " + head)
    for st in STACKS + ("other",):
        mine = [r for r in rows if tier(r[0]) == "gpu" and r[0]["stack"] == st]
        if mine:
            pooled_line("%s (%d sources)" % (st, len({r[0]["source"] for r in mine})), mine)
    for what, pick in (("GPU", lambda c: tier(c) == "gpu"),
                       ("published (source_key)", lambda c: c.get("keyed"))):
        mine = [r for r in rows if pick(r[0])]
        if not mine:
            continue
        i, n = sum(ok for _, ok, _ in mine), len(mine)
        lowest = min(lowest, i / n)
        print("pooled over %d %s sources: %d/%d under the bound fitted without their source "
              "(%.1f%%), median |error| %.1f%%, median bound width %+.1f%%" %
              (len({r[0]["source"] for r in mine}), what, i, n, 100.0 * i / n,
               100 * statistics.median(abs(error(c) / (1 + error(c))) for c, _, _ in mine),
               100 * statistics.median(w for _, _, w in mine)))
    return lowest


def print_stack_sources_curve(cases, min_cases, ctx):
    """--stack-sources-curve: how a stack's term does with k of its sources, for --min-stack-sources.
    For each stack with at least 3 GPU sources, each of them held out and each k-subset of its
    others: the term is over the subset's biases (the rest of the fit on all but the held-out
    source); prints, per k, the held-out cases' coverage averaged over (source, subset) draws"""
    import itertools
    for st in STACKS:
        srcs = sorted({c["source"] for c in cases if tier(c) == "gpu" and c["stack"] == st})
        if len(srcs) < 3:
            continue
        fits = {s: fit([c for c in cases if c["source"] != s and not c["held"]], min_cases)
                for s in srcs}
        bias = source_bias([c for c in cases if tier(c) == "gpu" and not c["held"]])
        print("%s (%d sources): the stack's term over k of its sources, a source held out" %
              (st, len(srcs)))
        for k in range(1, len(srcs)):
            cov = []
            for s in srcs:
                f, mine = fits[s], [c for c in cases if c["source"] == s]
                for sub in itertools.combinations([o for o in srcs if o != s], k):
                    f["spread"]["stacks"][st] = {"basis": "stack", "sources": k, "under":
                                                 between_sources({o: bias[o] for o in sub})}
                    cov.append(sum(c["measured"] <= bound(c, f, ctx) for c in mine) / len(mine))
            print("  k = %d: %5.1f%% of the held-out source's cases covered (mean of %d draws)" %
                  (k, 100 * statistics.mean(cov), len(cov)))


def collect(a):
    cases = []
    if "published" in a.only:
        cases += published_cases(a.bin, a.cases)
    if "trace" in a.only:
        cases += trace_cases(a.bin, a.trace)
    if "csv" in a.only:
        flag_names = estimate_flags(a.bin)
        seen = {}
        for path in sorted(set(a.csv)):
            for c in csv_cases(a.bin, path, flag_names):
                # the same workload measured to the byte in an earlier file (the H200 of
                # 2026-11-28 repeated the H100's 50 cases exactly: same torch, same allocator)
                # is one measurement, not two: counted once, in the first file
                argv = c.get("argv") or []
                key = (tuple(w for i, w in enumerate(argv) if w != "--gpu" and
                             (i == 0 or argv[i - 1] != "--gpu")), c["counter"], c["measured"])
                if argv and seen.get(key, path) != path:
                    sys.stderr.write("%s: %s skipped: the same measurement as %s\n"
                                     % (os.path.basename(path), c["id"],
                                        os.path.basename(seen[key])))
                    continue
                seen.setdefault(key, path)
                cases.append(c)
    return cases


def check(a):
    """coverage of the bounds `oomless estimate` states (memory.*_upper95)"""
    inside, total, widths, per, missed = 0, 0, [], {}, []
    for c in collect(a):
        if c["estimate"] is None:
            continue  # a generic row: nothing to rerun
        m = c["estimate"]["memory"]
        up = m.get(COUNTER_KEY[c["counter"]] + "_upper95")
        if up is None:
            raise SystemExit("estimate %s: no memory.%s_upper95" %
                             (" ".join(c["argv"]), COUNTER_KEY[c["counter"]]))
        ok = c["measured"] <= up
        inside, total = inside + ok, total + 1
        s = per.setdefault(c["source"], [0, 0])
        s[0], s[1] = s[0] + ok, s[1] + 1
        widths.append(up / c["predicted"] - 1)
        if not ok:
            missed.append("%s (%s): measured %.3f GiB > bound %.3f GiB" %
                          (c["id"], c["counter"], c["measured"] / GiB, up / GiB))
    for m in missed:
        print("outside:", m)
    for s, (i, n) in sorted(per.items()):
        print("%-28s %d/%d under the 95%% bound (%.1f%%)" % (s, i, n, 100.0 * i / n))
    if not total:
        print("no cases")
        return 1
    cov = inside / total
    print("coverage %.1f%% (%d/%d cases), median band width %+.1f%% of the estimate; limit %.0f%%" %
          (100 * cov, inside, total, 100 * statistics.median(widths), 100 * a.min_coverage))
    return 0 if cov >= a.min_coverage else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("OOMLESS_BIN", "oomless"))
    ap.add_argument("--cases", default=os.path.join(HERE, "public", "cases.tsv"))
    ap.add_argument("--trace", default=os.path.join(ROOT, "bench", "trace", "results.json"))
    ap.add_argument("--csv", action="append", default=None,
                    help="a CSV of measurements (default: every bench/accuracy/*.csv but "
                         "published-measurements.csv, and published/cases.csv)")
    ap.add_argument("--only", default="trace,csv",
                    help="inputs (published, trace, csv; default trace,csv: published/cases.csv "
                         "holds the published rows)")
    ap.add_argument("--min-gpu-cases", type=int, default=5,
                    help="cases a class needs in GPU measurements (published, CSV; default 5)")
    ap.add_argument("--min-trace-cases", type=int, default=20,
                    help="cases a class needs in the trace matrix (default 20)")
    ap.add_argument("--min-stack-sources", type=int, default=4,
                    help="sources of its own a stack needs for its own spread across setups "
                         "(default 4, see --stack-sources-curve; fewer: the cross-stack spread)")
    ap.add_argument("--stack-sources-curve", action="store_true",
                    help="the held-out coverage of a stack's term over k of its sources, per k")
    ap.add_argument("--min-coverage", type=float, default=0.95)
    ap.add_argument("--out", help="write the fit here (data/confidence.json)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--holdout", action="store_true")
    ap.add_argument("--holdout-sources", action="store_true",
                    help="fit without each source in turn, measure on it (a CSV's source_key "
                         "column names a row's source; the trace matrix and each other file "
                         "are one source each)")
    ap.add_argument("--min-holdout-coverage", type=float, default=0.0,
                    help="with --holdout-sources: exit 1 when fewer than this fraction of the "
                         "GPU cases or of the published cases are under the bound fitted without "
                         "their source")
    a = ap.parse_args()
    a.only = a.only.split(",")
    a.min_cases = {"gpu": a.min_gpu_cases, "trace": a.min_trace_cases,
                   "stack_sources": a.min_stack_sources}
    if a.csv is None:
        a.csv = [p for p in glob.glob(os.path.join(HERE, "*.csv"))
                 if os.path.basename(p) != "published-measurements.csv"]
        a.csv.append(os.path.join(HERE, "published", "cases.csv"))
    if a.check:
        return check(a)
    cases = collect(a)
    ctx, ctx02, smallest = context_uncertainty()
    f = fit([c for c in cases if not c["held"]], a.min_cases)
    inside, total, width = coverage(cases, f, ctx)
    print("fitted on %d cases (%d held out): %d classes; coverage of the 95%% bound %d/%d, "
          "median band width %+.1f%%" % (sum(not c["held"] for c in cases),
                                         sum(c["held"] for c in cases), len(f["classes"]), inside,
                                         total, 100 * width))
    for s in sorted({c["source"] for c in cases}):
        sub = [c for c in cases if c["source"] == s]
        i, n, w = coverage(sub, f, ctx)
        print("  %-24s %d/%d (%.1f%%), median width %+.1f%%" % (s, i, n, 100.0 * i / n, 100 * w))
    for s, (i, n) in sorted(held_split(cases, a.min_cases, ctx).items()):
        print("split=held rows of %s: %d/%d under the 95%% bound fitted without them (%.1f%%)"
              % (s, i, n, 100.0 * i / n))
    if a.holdout:
        for s, (i, n) in sorted(holdout(cases, a.min_cases, ctx).items()):
            print("held out %-20s %d/%d under the 95%% bound (%.1f%%)" % (s, i, n, 100.0 * i / n))
    if a.stack_sources_curve:
        print_stack_sources_curve(cases, a.min_cases, ctx)
    if a.holdout_sources and \
            print_holdout_sources(cases, a.min_cases, ctx) < a.min_holdout_coverage:
        print("held-out coverage below %.0f%%" % (100 * a.min_holdout_coverage))
        return 1
    if a.out:
        doc = {
            "about": "The estimator's relative error against measured peaks per workload class, "
                     "made by bench/accuracy/fit_confidence.py (its docstring has the method). "
                     "under[i]: the error u = measured / predicted - 1 not exceeded with "
                     "confidence levels[i], with the cross-stack spread; for a stack, "
                     "max(gpu_within[i] + spread.stacks[stack].under[i], trace[i]). A bound is "
                     "estimate x (1 + max(under, 0)), plus context_uncertainty_bytes on the "
                     "device peak when --overhead is not given.",
            "class": "/".join(DIMS),
            "levels": LEVELS,
            "min_cases": a.min_cases,
            "context_uncertainty_bytes": ctx,
            "context_uncertainty_source":
                "CTX-02 of bench/accuracy/published-measurements.csv (%.3f GiB: the CUDA context "
                "with every module loaded, PyTorch PR #86509) minus the smallest default context "
                "of data/coefficients.json (%d bytes): the most a context can exceed the default "
                "on CUDA >= 11.7" % (ctx02, smallest),
            "sources": {s: sum(1 for c in cases if c["source"] == s and not c["held"])
                        for s in sorted({c["source"] for c in cases})},
            "held_out": {s: sum(1 for c in cases if c["source"] == s and c["held"])
                         for s in sorted({c["source"] for c in cases if c["held"]})},
            "spread": f["spread"],
            "widest": f["widest"],
            "classes": f["classes"],
        }
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
