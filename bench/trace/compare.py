#!/usr/bin/env python3
"""The C estimator held to the tracer, component by component, over a matrix of workloads.

    build/venv/bin/python bench/trace/compare.py --bin build/oomless --out bench/trace/RESULTS.md
    build/venv/bin/python bench/trace/compare.py --bin build/oomless --subset --check

Each cell is traced on the meta device (oomless.trace) and estimated (`oomless estimate --json`)
with the same flags; the table gives both allocated peaks and the difference of every component
(weights, gradients, optimizer, activations, logits, KV cache, temporaries). The C estimator's
"temporaries" include what it counts at its peak phase only, so components are compared where the
peaks are in the same phase and the totals always.

--check (with --subset, the CI test) fails when a cell's allocated-peak error leaves the band
recorded in bench/trace/bounds.json: the estimator may get better, never worse.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache",
              "temporaries")

# DeepSeek-V3's widths (multi-head latent attention, 1 dense layer then experts) cut to three
# layers and 16 experts, 4 per token: a config file beside this script, named from the root
DEEPSEEK = "bench/trace/deepseek-v3-small.json"
# Llama 4 Maverick's widths cut to four layers (three of chunked attention, one full) and 16
# experts on every other layer, with Scout's qk-norm: Llama4ForCausalLM's text model
LLAMA4 = "bench/trace/llama4-small.json"

# architectures as transformers implements them (presets in data/models/)
ARCHS = ["llama-3.2-1b", "llama-3.1-8b", "mistral-7b", "qwen2.5-0.5b", "qwen2.5-7b", "qwen3-0.6b",
         "qwen3-8b", "gemma-2-2b", "gemma-3-1b",
         "phi-3-mini", "mixtral-8x7b", "qwen3-30b-a3b", "gpt2", "gpt2-medium", "falcon-7b",
         "bert-base", DEEPSEEK, LLAMA4]
SUBSET_ARCHS = ["llama-3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b", "gpt2", DEEPSEEK, LLAMA4]
# checkpointing every:N / nth:N cells (cells() below)
CKPT_ARCHS = ["llama-3.2-1b", "mistral-7b", "qwen2.5-0.5b", "qwen3-0.6b", "gpt2", "gpt2-medium"]
CKPT_SUBSET_ARCHS = ["llama-3.2-1b", "gpt2"]
# sequence packing cells: one row of the micro-batch's tokens with restarting position ids
# (padding-free: SDPA with transformers' document mask, flash's varlen path) and rows of packs
# with eager attention's whole-row scores (block-mask)
PACK_ARCHS = ["llama-3.2-1b", "mistral-7b", "qwen2.5-0.5b", "qwen3-0.6b", "gpt2"]
PACK_SUBSET_ARCHS = ["llama-3.2-1b", "gpt2"]
# torchtitan's op-level selective checkpointing (--checkpointing op-sac): dense Llama-style blocks
OPSAC_ARCHS = ["llama-3.2-1b", "mistral-7b", "qwen2.5-0.5b", "qwen3-0.6b", "gemma-3-1b"]
OPSAC_SUBSET_ARCHS = ["llama-3.2-1b", "qwen3-0.6b"]


def cells(subset):
    archs = SUBSET_ARCHS if subset else ARCHS
    points = [(1, 512), (4, 1024)] if not subset else [(2, 256)]
    out = []
    for arch in archs:
        # BERT has 512 positions: its points stay within them
        for batch, seq in ([(b, min(s, 512)) for b, s in points] if arch.startswith("bert")
                           else points):
            base = {"model": arch, "batch": batch, "seq": seq}
            # transformers 5 runs Gemma 2 with eager attention only (it refuses sdpa)
            gemma2 = arch.startswith("gemma-2")
            if gemma2:
                base["attention"] = "eager"
            out.append(dict(base, method="inference", precision="bf16"))
            # transformers' grouped-matmul experts want bf16: DeepSeek has no fp32 cells
            for precision in ("amp-bf16", "bf16") if arch == DEEPSEEK else ("fp32", "amp-bf16",
                                                                             "bf16"):
                for ckpt in ("none", "full"):
                    out.append(dict(base, method="full", precision=precision, checkpointing=ckpt))
            for attention in (() if gemma2 else ("eager", "sdpa")):
                out.append(dict(base, method="lora", precision="bf16", attention=attention))
            if gemma2:
                out.append(dict(base, method="lora", precision="bf16"))
            out.append(dict(base, method="lora", precision="bf16", loss="chunked"))
            out.append(dict(base, method="lora", precision="bf16", checkpointing="full"))
            # one layer in N checkpointed: transformers' every_n_layers (the first of each N)
            # and torchtitan's layer-level selective AC (the N-th); the checkpoints' inputs in
            # host memory (+offload); on a few architectures
            if arch in (CKPT_SUBSET_ARCHS if subset else CKPT_ARCHS):
                out.append(dict(base, method="full", precision="amp-bf16", checkpointing="every:2"))
                out.append(dict(base, method="lora", precision="bf16", checkpointing="nth:3"))
                out.append(dict(base, method="lora", precision="bf16",
                                checkpointing="full+offload"))
            if arch in (PACK_SUBSET_ARCHS if subset else PACK_ARCHS):
                out.append(dict(base, method="full", precision="amp-bf16", packing="padding-free"))
                out.append(dict(base, method="lora", precision="bf16", packing="padding-free",
                                attention="flash"))
                out.append(dict(base, method="lora", precision="bf16", packing="block-mask",
                                attention="eager"))
            if arch in (OPSAC_SUBSET_ARCHS if subset else OPSAC_ARCHS):
                out.append(dict(base, method="full", precision="bf16", checkpointing="op-sac"))
                out.append(dict(base, method="lora", precision="bf16", checkpointing="op-sac"))
            if subset:
                break
    return out


def flags(cell):
    out = []
    for k, v in cell.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


def model_path(model):
    """A preset name as it is; a config file named from the repository root, made absolute"""
    return os.path.join(ROOT, model) if model.endswith(".json") else model


def estimate_flags(cell):
    """The estimator's flags for a cell: its config file's path made absolute, and for a prefill
    transformers' KV cache, which keeps every token of every layer as the tracer sees it (the
    estimator's default is a serving engine's: sliding-window layers keep their window); and no
    cuBLAS workspace: the meta device runs no cuBLAS (a GPU's workspace is in the estimate's
    temporaries)"""
    stack = ["--kv-cache", "transformers"] if cell.get("method") == "inference" else []
    return (flags(dict(cell, model=model_path(cell["model"]))) + stack +
            ["--cublas-workspace", ":0:1"])


def estimate(binary, cell):
    r = subprocess.run([binary, "estimate", "--json"] + estimate_flags(cell), capture_output=True,
                       text=True)
    if r.returncode not in (0, 1):
        return None, r.stderr.strip()
    return json.loads(r.stdout), None


def trace(cell, lora_targets=None):
    from oomless.trace import TraceError, Workload, trace_hf
    kw = dict(cell)
    model = model_path(kw.pop("model"))
    if lora_targets and kw.get("method") == "lora":
        kw["lora_targets"] = lora_targets  # the modules the estimator adapted (PEFT's defaults)
    try:
        return trace_hf(Workload(model, **kw)), None
    except TraceError as exc:
        return None, str(exc)
    except Exception as exc:  # a model transformers cannot run on meta: reported in the table
        return None, "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:160])


def err(est, ref):
    if ref == 0:
        return 0.0 if est == 0 else float("inf")
    return (est - ref) / ref


def one(args):
    binary, cell = args
    t0 = time.time()
    es, eerr = estimate(binary, cell)
    targets = es["workload"].get("lora_targets") if es else None
    tr, terr = trace(cell, targets)
    return make_row(cell, t0, tr, terr, es, eerr)


def make_row(cell, t0, tr, terr, es, eerr):
    """One cell's row: the trace (or why not) beside the estimate, and the peak's error."""
    row = {"cell": cell, "trace_s": round(time.time() - t0, 2)}
    if tr is None or es is None:
        row["error"] = "; ".join(e for e in ("estimate: " + eerr if eerr else "",
                                             "trace: " + terr if terr else "") if e)
    else:
        row["trace"] = tr["memory"]
        row["trace_phase"] = tr["peak_phase"]
        row["estimate"] = {k: es["memory"][k] for k in COMPONENTS + ("allocated_peak",)}
        row["estimate_phase"] = es.get("peak_phase")
        row["error"] = None
        row["peak_error"] = err(row["estimate"]["allocated_peak"], tr["memory"]["allocated_peak"])
    sys.stderr.write("%-70s %s\n" % (" ".join(flags(cell)),
                                     row.get("error") or "%+.1f%%" % (100 * row["peak_error"])))
    return row


def run(binary, subset, jobs=1, archs=None):
    jobs_list = [(binary, c) for c in cells(subset) if not archs or c["model"] in archs]
    if jobs <= 1:
        return [one(t) for t in jobs_list]
    # fresh interpreters (spawn), one cell at a time each, the table kept in matrix order
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(jobs, maxtasksperchild=8) as pool:
        return pool.map(one, jobs_list, chunksize=1)


def gib(b):
    return "%.2f" % (b / 2 ** 30)


def same_phase(row):
    """The tracer names a prefill's moment "inference", the estimator "prefill"."""
    est = "inference" if row["estimate_phase"] == "prefill" else row["estimate_phase"]
    return row["trace_phase"] == est


def report(rows, out, versions):
    ok = [r for r in rows if not r.get("error")]
    errs = sorted(abs(r["peak_error"]) for r in ok)
    within3 = sum(1 for e in errs if e <= 0.03)
    lines = ["# The estimator against the tracer", "",
             "Generated by `bench/trace/compare.py --bin build/oomless --out bench/trace/RESULTS.md`"
             " (`make bench-trace`) on %s." % datetime.date.today().isoformat(),
             "Versions: %s." % ", ".join("%s %s" % kv for kv in versions.items() if kv[1]), "",
             "The tracer's allocated peak (oomless.trace, the real transformers/PEFT code on the "
             "meta device) is the reference; the estimator's is `oomless estimate --json` "
             "`memory.allocated_peak`. Sizes in GiB; error = (estimate - trace) / trace.", "",
             "Cells: %d traced and estimated, %d not expressible (listed at the end)." %
             (len(ok), len(rows) - len(ok))]
    if errs:
        med = errs[len(errs) // 2]
        lines += ["Allocated peak: median |error| %.1f%%, %d of %d cells (%.0f%%) within ±3%%, "
                  "worst %.1f%%." % (100 * med, within3, len(errs), 100.0 * within3 / len(errs),
                                     100 * errs[-1])]
        big = []
        for comp in COMPONENTS:
            n = bad = 0
            for r in ok:
                ref = r["trace"][comp]
                if ref > 2 ** 30 and same_phase(r):
                    n += 1
                    if abs(err(r["estimate"][comp], ref)) > 0.10:
                        bad += 1
            big.append("%s %d/%d" % (comp, bad, n))
        lines += ["Components over 1 GiB off by more than 10%% (same peak phase): %s." %
                  ", ".join(big)]
        # stricter: over 1 GiB on either side, whatever moment each picked as its peak
        strict = []
        for comp in COMPONENTS:
            n = bad = 0
            for r in ok:
                ref, est = r["trace"][comp], r["estimate"][comp]
                if max(ref, est) > 2 ** 30:
                    n += 1
                    if abs(est - ref) > 0.10 * ref:
                        bad += 1
            strict.append("%s %d/%d" % (comp, bad, n))
        lines += ["Stricter, over 1 GiB in the trace or the estimate, any peak phase: %s." %
                  ", ".join(strict)]
    lines += ["", "| cell | trace phase | est. phase | trace peak | est. peak | error | " +
              " | ".join("%s t/e" % c for c in COMPONENTS) + " |",
              "|---" * (6 + len(COMPONENTS)) + "|"]
    for r in ok:
        comp = " | ".join("%s/%s" % (gib(r["trace"][c]), gib(r["estimate"][c])) for c in COMPONENTS)
        lines.append("| %s | %s | %s | %s | %s | %+.1f%% | %s |" % (
            " ".join(flags(r["cell"])), r["trace_phase"], r["estimate_phase"],
            gib(r["trace"]["allocated_peak"]), gib(r["estimate"]["allocated_peak"]),
            100 * r["peak_error"], comp))
    bad = [r for r in rows if r.get("error")]
    if bad:
        lines += ["", "## Not traced", ""]
        for r in bad:
            lines.append("- `%s`: %s" % (" ".join(flags(r["cell"])), r["error"]))
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def check(rows, bounds_path):
    with open(bounds_path, encoding="utf-8") as f:
        bounds = json.load(f)
    failures = []
    for r in rows:
        key = " ".join(flags(r["cell"]))
        if r.get("error"):
            failures.append("%s: not traced or not estimated: %s" % (key, r["error"]))
            continue
        band = bounds["cells"].get(key)
        if band is None:
            failures.append("%s: no band in %s (add one)" % (key, bounds_path))
            continue
        e = r["peak_error"]
        if not band[0] <= e <= band[1]:
            failures.append("%s: allocated-peak error %+.1f%% left its band [%+.1f%%, %+.1f%%]"
                            % (key, 100 * e, 100 * band[0], 100 * band[1]))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "oomless"))
    ap.add_argument("--out", help="write the markdown table here")
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--subset", action="store_true", help="the small CI matrix")
    ap.add_argument("--check", action="store_true", help="fail outside bench/trace/bounds.json")
    ap.add_argument("--jobs", type=int, default=1, help="cells traced at once (processes)")
    ap.add_argument("--archs", help="only these presets, comma-separated")
    ap.add_argument("--from-json", metavar="FILE",
                    help="report the rows a --json run wrote instead of tracing again")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as f:
            saved = json.load(f)
        rows, vers = saved["rows"], saved["versions"]
    else:
        from oomless.trace import versions
        rows, vers = run(args.bin, args.subset, args.jobs,
                         args.archs.split(",") if args.archs else None), versions()
    if args.out:
        report(rows, args.out, vers)
    if args.json and not args.from_json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"versions": vers, "rows": rows}, f, indent=1)
    if args.check:
        failures = check(rows, os.path.join(HERE, "bounds.json"))
        for f in failures:
            print("FAIL " + f)
        print("%d passed, %d failed" % (len(rows) - len(failures), len(failures)))
        return 1 if failures else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
