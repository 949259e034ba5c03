#!/usr/bin/env python3
"""measure.py - real peaks of the workloads of cases.tsv, measured on a GPU.

usage: measure.py [--cases FILE] [--out DIR] [--bin OOMLESS] [--jobs N] [--mem-cap GiB]
                  [--deadline SECONDS] [--only ID,ID...]

Runs on a machine with an NVIDIA GPU, PyTorch, transformers and PEFT; TRL for the preference
cases (--objective), bitsandbytes for --method qlora. For each case it starts a fresh Python
process (so peaks never mix) that builds the model exactly as `oomless trace` builds it
(bindings/python/oomless/trace/build.py, the same config, precision, LoRA, checkpointing -- op-sac
with the tracer's policy, prepare.op_sac_policy -- and optimizer code), on the GPU with random
weights (memory does not depend on the values), and runs three optimizer steps of real training
(forward, backward, optimizer step, zero_grad; `--grad-accum` micro-batches each) or, for
--method inference, the tracer's prefill. A preference case runs the tracer's loss
(trace/preference.py: TRL 1.16's fused head, the reference a copy or the disabled adapter); a
packed one (--packing padding-free) one row of --tokens-per-batch tokens whose position ids
restart every --seq tokens; a qlora one loads a random bf16 checkpoint (saved once per model in
$MEASURE_CKPT_DIR by a process of its own) with BitsAndBytesConfig(nf4, double quantization,
bf16 compute) and puts PEFT's LoRA on it. It records:

- allocated_peak / reserved_peak: torch.cuda.max_memory_allocated / max_memory_reserved;
- nvml_peak: the most NVML ever reported for the process (nvmlDeviceGetComputeRunningProcesses,
  sampled by this driver every 20 ms and read by the worker at its end), which is what
  nvidia-smi shows for the job;
- weights (allocated after the model is built), states (allocated at rest after the first step:
  weights + optimizer states), and the allocated peak of each phase of the last step;
- once, before the cases, the CUDA context alone (a process that only initialises CUDA) and
  after loading the cuBLAS, attention and loss kernels, with lazy module loading (the default)
  and with CUDA_MODULE_LOADING=EAGER (the .jsonl only);
- for a mixture-of-experts model, config._experts_implementation and how many grouped matmuls
  its experts ran through torch (F.grouped_mm / torch._grouped_mm) or transformers' fallback.

Cases run several at a time when their estimated device peaks (`oomless estimate`, when --bin is
given) fit under --mem-cap together: every counter is per process, so they do not mix. Results:
DIR/<gpu>-<date>.csv (one row per case; the columns are described in README.md here) and
DIR/<gpu>-<date>.jsonl (every worker's full document). Nothing here needs the network.
"""
import argparse
import csv
import datetime
import json
import os
import random
import shlex
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GiB = 2 ** 30

COLUMNS = ["id", "split", "args", "status", "allocated_peak", "reserved_peak", "nvml_peak",
           "weights", "states", "forward_peak", "backward_peak", "optimizer_peak",
           "context", "context_loaded", "step_seconds", "gpu", "driver", "cuda", "torch",
           "transformers", "peft", "date", "note"]


# ---- the worker: one case in this process ----------------------------------------------------
def parse_args_flags(text):
    """The estimate flags of a case -> keyword arguments of oomless.trace.run.Workload."""
    words = shlex.split(text)
    names = {"--model": "model", "--method": "method", "--precision": "precision",
             "--optimizer": "optimizer", "--batch": "batch", "--seq": "seq",
             "--grad-accum": "grad_accum", "--checkpointing": "checkpointing",
             "--attention": "attention", "--loss": "loss", "--lora-rank": "lora_rank",
             "--lora-targets": "lora_targets", "--lora-dropout": "lora_dropout",
             "--objective": "objective", "--reference": "reference", "--packing": "packing",
             "--tokens-per-batch": "tokens_per_batch"}
    ints = {"batch", "seq", "grad_accum", "lora_rank", "tokens_per_batch"}
    kw = {}
    for i in range(0, len(words), 2):
        key = names.get(words[i])
        if key is None or i + 1 >= len(words):
            raise SystemExit("measure.py: flag '%s' in '%s' is not understood" % (words[i], text))
        v = words[i + 1]
        kw[key] = int(v) if key in ints else float(v) if key == "lora_dropout" else v
    return kw


def nvml_process_bytes(pid):
    import pynvml
    h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("MEASURE_GPU_INDEX", "0")))
    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
        if p.pid == pid and p.usedGpuMemory is not None:
            return int(p.usedGpuMemory)
    return None


def worker_context():
    """CUDA context alone, then with the kernels a training step loads (cuBLAS, attention, loss)."""
    import pynvml
    import torch
    pynvml.nvmlInit()
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    time.sleep(0.3)
    bare = nvml_process_bytes(os.getpid())
    reserved_bare = torch.cuda.memory_reserved()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    af = a.float()
    (af @ af).sum().item()
    q = torch.randn(2, 8, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    o = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    o.sum().backward()
    logits = torch.randn(1024, 50257, device="cuda", requires_grad=True)
    torch.nn.functional.cross_entropy(logits, torch.zeros(1024, dtype=torch.long,
                                                          device="cuda")).backward()
    torch.cuda.synchronize()
    del x, a, af, q, o, logits
    time.sleep(0.3)
    loaded = nvml_process_bytes(os.getpid())
    reserved_loaded = torch.cuda.memory_reserved()
    print("RESULT " + json.dumps({
        "context": bare - reserved_bare if bare is not None else None,
        "context_loaded": loaded - reserved_loaded if loaded is not None else None,
        "nvml_bare": bare, "reserved_bare": reserved_bare,
        "nvml_loaded": loaded, "reserved_loaded": reserved_loaded,
    }), flush=True)


class _NoCounters:
    """torch.cuda's memory counters on a dry run (MEASURE_DEVICE=cpu: the case list is checked
    for errors on a machine without a GPU; every counter reads 0)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: {} if name == "memory_stats" else 0


def _experts_spy(doc):
    """Counts the grouped matmuls an experts block runs (transformers' integrations/moe.py calls
    torch.nn.functional.grouped_mm, else torch._grouped_mm, else its own fallback op): which
    experts path CUDA really takes, beside the one config._experts_implementation names."""
    import torch
    calls = doc.setdefault("experts_calls", {})

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return wrapper
    if hasattr(torch.nn.functional, "grouped_mm"):
        torch.nn.functional.grouped_mm = counted("F.grouped_mm", torch.nn.functional.grouped_mm)
    if hasattr(torch, "_grouped_mm"):
        torch._grouped_mm = counted("torch._grouped_mm", torch._grouped_mm)
    try:
        import transformers.integrations.moe as moe
        if hasattr(moe, "_grouped_mm_fallback"):
            moe._grouped_mm_fallback = counted("fallback", moe._grouped_mm_fallback)
    except ImportError:
        pass


def checkpoint_path(model_name):
    """Where the random checkpoint of a --method qlora case is kept ($MEASURE_CKPT_DIR)."""
    return os.path.join(os.environ.get("MEASURE_CKPT_DIR", "/tmp/measure-ckpt"), model_name)


def _quantized(cfg_dict, w, dev):
    """--method qlora as users run it: the checkpoint (random weights, saved once per model in
    MEASURE_CKPT_DIR) loaded by from_pretrained with BitsAndBytesConfig(load_in_4bit, nf4,
    double quantization, bf16 compute), the LoRA adapter on it (PEFT's fp32 adapters)."""
    import torch
    import transformers
    from oomless.trace import build as tb, run as tr
    path = checkpoint_path(w.model)
    if not os.path.exists(os.path.join(path, "config.json")):
        # in a process of its own: NVML's peak of this one must be the training's (the H200 run
        # of 2026-11-28 built Llama-3.1-8B's 14.96 GiB here, and its nvml_peak was that build)
        subprocess.run([sys.executable, __file__, "--save-checkpoint", w.model, "--attention",
                        w.attention], check=True)
    q = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                        bnb_4bit_use_double_quant=True,
                                        bnb_4bit_compute_dtype=torch.bfloat16)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, quantization_config=q, dtype=torch.bfloat16,
        device_map={"": 0 if dev == "cuda" else dev},
        attn_implementation=w.attention)
    doc = {}
    if dev == "cuda":
        doc["load_peak"] = torch.cuda.max_memory_allocated()  # from_pretrained's, in 4 bits
        torch.cuda.reset_peak_memory_stats()
    model = tb.apply_lora(model, w.lora_rank, w.lora_targets, w.lora_dropout)
    return model, model.config, doc


def save_checkpoint(model_name, attention):
    """The random bf16 checkpoint a --method qlora case loads, saved once per model."""
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    import torch
    from oomless.trace import run as tr
    cfg_dict, _path = tr.find_config(model_name)
    dev = os.environ.get("MEASURE_DEVICE", "cuda")
    path = checkpoint_path(model_name)
    model, _cfg = tr.build_hf(cfg_dict, torch.bfloat16, attention, device=dev)
    model.save_pretrained(path + ".tmp", safe_serialization=True)
    os.replace(path + ".tmp", path)


def op_sac_contexts(checkpointing):
    """checkpoint's context_fn for torchtitan's op-level policy (the tracer's op_sac_policy, with
    no CUDA emulation around it: this runs on the GPU); None for any other checkpointing."""
    if checkpointing != "op-sac":
        return None
    from torch.utils.checkpoint import create_selective_checkpoint_contexts
    from oomless.trace.prepare import op_sac_policy
    return lambda: create_selective_checkpoint_contexts(op_sac_policy())


def worker_case(args_text):
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    import torch
    from oomless.trace import build as tb, run as tr
    from oomless.trace.prepare import enable_checkpointing

    dev = os.environ.get("MEASURE_DEVICE", "cuda")
    cuda = torch.cuda if dev == "cuda" else _NoCounters()

    kw = parse_args_flags(args_text)
    w = tr.Workload(**kw)
    if w.method != "qlora":  # the tracer refuses qlora (meta device); built here on CUDA
        w.check()
    cfg_dict, _path = tr.find_config(w.model)
    # qlora's precision is its storage (4bit): it computes in bf16 without autocast
    wdtype, amp = ("bf16", None) if w.method == "qlora" else tr.PRECISIONS[w.precision]
    cuda.init()
    torch.manual_seed(0)
    doc = {}
    _experts_spy(doc)
    ref_call = None
    if w.method == "qlora":
        model, cfg, loaded = _quantized(cfg_dict, w, dev)
        doc.update(loaded)
    elif w.objective != "sft":  # the tracer's policy and reference, on this device
        from oomless.trace import preference as pf
        model, cfg, ref_call = pf._preference_models(w, cfg_dict, wdtype, None, device=dev)
    else:
        model, cfg = tr.build_hf(cfg_dict, tr.DTYPES[wdtype], w.attention, device=dev)
    can_set = getattr(model, "_can_set_experts_implementation", None)
    if can_set is not None and can_set():  # a dispatched experts block: the path it takes
        doc["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
    vocab = getattr(cfg, "vocab_size", None) or cfg.get_text_config().vocab_size
    if getattr(cfg, "is_encoder_decoder", False) and \
            getattr(model.config, "decoder_start_token_id", None) is None:
        # T5 starts its decoder with the pad token (the published configs say 0); the presets
        # leave the key out, and labels need it to be shifted into decoder inputs
        model.config.decoder_start_token_id = getattr(cfg, "pad_token_id", None) or 0
    if w.method == "lora" and w.objective == "sft":
        model = tb.apply_lora(model, w.lora_rank, w.lora_targets, w.lora_dropout)
    cuda.synchronize()
    doc["weights"] = cuda.memory_allocated()
    amp_dtype = tr.DTYPES[amp] if amp else None
    running = {"alloc": 0, "res": 0}

    def phase_end(name):
        cuda.synchronize()
        a, r = cuda.max_memory_allocated(), cuda.max_memory_reserved()
        doc[name + "_peak"] = a
        running["alloc"] = max(running["alloc"], a)
        running["res"] = max(running["res"], r)
        cuda.reset_peak_memory_stats()

    rows, tokens = w.rows()

    def sample(batch, seq):
        return torch.randint(0, vocab, (batch, seq), device=dev)

    def packed_positions():
        # documents of --seq tokens each, their position ids restarting (as TRL's padding-free
        # collator makes them): transformers finds the packed sequences from these values
        return torch.arange(tokens, device=dev).remainder(w.seq).expand(rows, tokens)

    t0 = time.time()
    if w.method == "inference":
        model.eval()
        with torch.no_grad():
            ids = sample(w.batch, w.seq)
            can_generate = getattr(model, "can_generate", None)
            if can_generate is not None and not can_generate():
                out = model(input_ids=ids)
            else:
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            cuda.synchronize()
            del out
        phase_end("inference")
        steps = 1
    else:
        enable_checkpointing(model, w.checkpointing, op_sac_contexts(w.checkpointing))
        model.train()
        trainable = [p for p in model.parameters() if p.requires_grad]
        if w.optimizer == "adafactor":
            opt = torch.optim.Adafactor(trainable, lr=1e-3, foreach=True)
        elif w.optimizer == "adamw-fused":
            opt = torch.optim.AdamW(trainable, lr=1e-4, fused=True)
        else:
            opt = tr.make_optimizer(w.optimizer, trainable)
        steps = 3
        for step in range(steps):
            for _micro in range(w.grad_accum):
                with torch.autocast(dev, dtype=amp_dtype, enabled=amp_dtype is not None):
                    if ref_call is not None:  # the tracer's loss, its batches on this device
                        loss = pf._preference_loss(w, vocab, model, ref_call,
                                                   lambda _vocab, b, t: sample(b, t))
                    elif w.loss == "chunked":
                        loss = tr.chunked_causal_loss(model, sample(rows, tokens), w.chunk_tokens)
                    elif w.packing != "none":
                        ids = sample(rows, tokens)
                        loss = model(input_ids=ids, labels=ids, position_ids=packed_positions(),
                                     use_cache=False).loss
                    else:
                        ids = sample(rows, tokens)
                        loss = model(input_ids=ids, labels=ids).loss
                loss = loss / w.grad_accum
                phase_end("forward")
                loss.backward()
                del loss
                phase_end("backward")
            if opt is not None:
                opt.step()
                opt.zero_grad(set_to_none=True)
            phase_end("optimizer")
            if step == 0:
                doc["states"] = cuda.memory_allocated()
    cuda.synchronize()
    doc["step_seconds"] = (time.time() - t0) / steps
    doc["allocated_peak"] = running["alloc"]
    doc["reserved_peak"] = running["res"]
    doc["reserved_end"] = cuda.memory_reserved()
    try:
        import pynvml
        pynvml.nvmlInit()
        doc["nvml_end"] = nvml_process_bytes(os.getpid())
    except Exception as exc:  # noqa: BLE001 - recorded, the driver's samples remain
        doc["nvml_error"] = str(exc)
    doc["stats"] = {k: v for k, v in cuda.memory_stats().items()
                    if k in ("num_alloc_retries", "num_ooms", "num_device_alloc",
                             "num_device_free")}
    doc["versions"] = tr.versions()
    print("RESULT " + json.dumps(doc), flush=True)


# ---- the driver ------------------------------------------------------------------------------
class Sampler(threading.Thread):
    """The largest NVML process reading of every running case's pid, every 20 ms."""

    def __init__(self, handle):
        super().__init__(daemon=True)
        self.handle, self.peaks, self.lock, self.stop = handle, {}, threading.Lock(), False

    def run(self):
        import pynvml
        while not self.stop:
            try:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
            except pynvml.NVMLError:
                procs = []
            with self.lock:
                for p in procs:
                    if p.usedGpuMemory is not None and p.pid in self.peaks:
                        self.peaks[p.pid] = max(self.peaks[p.pid], int(p.usedGpuMemory))
            time.sleep(0.02)

    def watch(self, pid):
        with self.lock:
            self.peaks[pid] = 0

    def take(self, pid):
        with self.lock:
            return self.peaks.pop(pid, 0)


def read_cases(path, only):
    cases = []
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        cid, split, args = line.rstrip("\n").split("\t")
        if only and cid not in only:
            continue
        cases.append({"id": cid, "split": split, "args": args})
    return cases


def predicted_gib(binary, args):
    if not binary:
        return 20.0
    p = subprocess.run([binary, "estimate", "--json"] + shlex.split(args), capture_output=True,
                       text=True)
    if p.returncode != 0:
        return 20.0
    return json.loads(p.stdout)["memory"]["device_peak"] / GiB


def result_of(stdout):
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return None


def last_error(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln:
            return ln.strip()[:300]
    return lines[-1].strip()[:300] if lines else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=os.path.join(HERE, "cases.tsv"))
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--bin", default=None, help="oomless binary, to order and pack the cases")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--mem-cap", type=float, default=70.0, help="GiB the running cases may share")
    ap.add_argument("--deadline", type=float, default=0, help="seconds: launch nothing after")
    ap.add_argument("--timeout", type=float, default=180, help="seconds one case may take")
    ap.add_argument("--only", default="")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--context", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--save-checkpoint", help=argparse.SUPPRESS)
    ap.add_argument("--attention", default="sdpa", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.context:
        return worker_context()
    if a.save_checkpoint:
        return save_checkpoint(a.save_checkpoint, a.attention)
    if a.one:
        return worker_case(a.one)

    import pynvml
    import torch
    import transformers
    try:
        import peft
        peft_version = peft.__version__
    except ImportError:
        peft_version = ""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("MEASURE_GPU_INDEX", "0")))
    gpu = pynvml.nvmlDeviceGetName(handle)
    gpu = gpu.decode() if isinstance(gpu, bytes) else gpu
    driver = pynvml.nvmlSystemGetDriverVersion()
    driver = driver.decode() if isinstance(driver, bytes) else driver
    date = datetime.date.today().isoformat()
    common = {"gpu": gpu, "driver": driver, "cuda": torch.version.cuda, "torch": torch.__version__,
              "transformers": transformers.__version__, "peft": peft_version, "date": date}
    os.makedirs(a.out, exist_ok=True)
    slug = "h100" if "H100" in gpu else "h200" if "H200" in gpu else gpu.split()[-1].lower()
    csv_path = os.path.join(a.out, "%s-%s.csv" % (slug, date))
    jsonl = open(csv_path[:-4] + ".jsonl", "a", encoding="utf-8")
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    t_start = time.time()
    p = subprocess.run([sys.executable, __file__, "--context"], capture_output=True, text=True,
                       env=env, timeout=120)
    ctx = result_of(p.stdout) or {}
    # the same with every module loaded at once (CUDA_MODULE_LOADING=EAGER, what CUDA did before
    # 11.7 and PyTorch before 1.13): how much of an old stack's context the lazy loading saves
    p = subprocess.run([sys.executable, __file__, "--context"], capture_output=True, text=True,
                       env=dict(env, CUDA_MODULE_LOADING="EAGER"), timeout=120)
    ctx_eager = result_of(p.stdout) or {}
    jsonl.write(json.dumps({"context": ctx, "context_eager": ctx_eager, **common,
                            "idle_used": pynvml.nvmlDeviceGetMemoryInfo(handle).used}) + "\n")
    jsonl.flush()
    print("context: %s; eager module loading: %s" % (json.dumps(ctx), json.dumps(ctx_eager)),
          flush=True)

    cases = read_cases(a.cases, set(a.only.split(",")) - {""})
    for c in cases:
        c["pred"] = predicted_gib(a.bin, c["args"])
    # the largest last (they may run alone), the rest in a fixed shuffled order, so that a
    # deadline that cuts the list short still leaves every family measured
    big = [c for c in cases if c["pred"] * 1.1 + 0.5 > a.mem_cap / 2]
    queue = [c for c in cases if c not in big]
    random.Random(7).shuffle(queue)
    queue += sorted(big, key=lambda c: c["pred"])
    sampler = Sampler(handle)
    sampler.start()
    running, rows = [], []

    def finish(c, proc, out, err, status_override=None):
        nv = sampler.take(proc.pid)
        doc = result_of(out)
        row = dict(common, id=c["id"], split=c["split"], args=c["args"],
                   context=ctx.get("context", ""), context_loaded=ctx.get("context_loaded", ""))
        if doc is None:
            text = err + out
            oom = "out of memory" in text.lower()
            row["status"] = status_override or ("oom" if oom else "error")
            row["note"] = last_error(text)
        else:
            row["status"] = "ok"
            nv = max(nv, doc.get("nvml_end") or 0)
            for k in ("allocated_peak", "reserved_peak", "weights", "states", "forward_peak",
                      "backward_peak", "optimizer_peak", "step_seconds"):
                row[k] = doc.get(k, doc.get("inference_peak") if k == "forward_peak" else "")
            row["step_seconds"] = round(doc["step_seconds"], 4)
            row["nvml_peak"] = nv or ""
            row["note"] = "" if nv else "no NVML process reading"
        rows.append(row)
        jsonl.write(json.dumps({"id": c["id"], "row": row, "worker": doc}) + "\n")
        jsonl.flush()
        with open(csv_path + ".tmp", "w", newline="", encoding="utf-8") as f:
            wr = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            wr.writeheader()
            order = {cc["id"]: i for i, cc in enumerate(cases)}
            for r in sorted(rows, key=lambda r: order[r["id"]]):
                wr.writerow(r)
        os.replace(csv_path + ".tmp", csv_path)
        print("%-4s %-6s alloc %7.2f res %7.2f nvml %7.2f pred %6.2f GiB  %5.1f s  %s" % (
            c["id"], row["status"], (row.get("allocated_peak") or 0) / GiB,
            (row.get("reserved_peak") or 0) / GiB, (row.get("nvml_peak") or 0) / GiB, c["pred"],
            time.time() - c["t0"], row.get("note", "")), flush=True)

    def load():
        return sum(c["pred"] * 1.1 + 0.5 for c, _p in running)

    while queue or running:
        late = a.deadline and time.time() - t_start > a.deadline
        if late and queue:
            for c in queue:
                print("%-4s skipped: past the deadline" % c["id"], flush=True)
            queue = []
        while queue and len(running) < a.jobs and (not running or (
                not queue[0].get("alone") and not any(r.get("alone") for r, _p in running)
                and load() + queue[0]["pred"] * 1.1 + 0.5 <= a.mem_cap)):
            c = queue.pop(0)
            c["shared"] = bool(running)
            c["t0"] = time.time()
            proc = subprocess.Popen([sys.executable, __file__, "--one", c["args"]],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=env)
            sampler.watch(proc.pid)
            c["reader"] = threading.Thread(target=lambda c=c, proc=proc: c.update(
                io=proc.communicate()), daemon=True)
            c["reader"].start()
            running.append((c, proc))
        time.sleep(0.05)
        for c, proc in list(running):
            if proc.poll() is None and time.time() - c["t0"] > a.timeout:
                proc.kill()
                c["timed_out"] = True
            if proc.poll() is not None:
                c["reader"].join()
                out, err = c.get("io", ("", ""))
                running.remove((c, proc))
                if (result_of(out) is None and "out of memory" in (err + out).lower()
                        and c.get("shared") and not c.get("alone")):
                    # it shared the GPU: measured again alone before an OOM is believed
                    sampler.take(proc.pid)
                    print("%-4s out of memory beside other cases: again alone" % c["id"], flush=True)
                    c["alone"] = True
                    queue.append(c)
                    continue
                finish(c, proc, out, err, "timeout" if c.get("timed_out") else None)
    sampler.stop = True
    ok = sum(1 for r in rows if r["status"] == "ok")
    print("measured %d of %d cases in %.0f s -> %s" % (ok, len(cases), time.time() - t_start,
                                                      csv_path), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main() or 0)
