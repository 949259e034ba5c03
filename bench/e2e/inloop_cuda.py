#!/usr/bin/env python3
"""In-loop OOM recovery (oomless.torch.TrainStep) under a real CUDA out-of-memory error.

    python3 bench/e2e/inloop_cuda.py --out inloop.json            # one CUDA GPU, ~20-60 s
    python3 bench/e2e/inloop_cuda.py --device cpu --out dry.json  # dry run, OOM simulated

GPT-2 from data/models/gpt2.json (transformers, random weights, fp32 + TF32, eager attention,
dropout on), AdamW, synthetic tokens, per-step batch B=32 as micro-batches of M=16. Steps
1..K-1 (K = --oom-step, 3) hold --short (512) tokens, steps K..N (N = --steps, 7) --long (1024).
1. Cap: uncapped peaks of one step at (short, M), (long, M/2), (long, M); the per-process
   memory fraction is set half-way between the reserved peak of the first two (must fit) and
   the allocated peak of (long, M) (must not). Nothing is injected: the allocator refuses.
2. Run A: TrainStep(micro_batch=M) under the cap; at step K it catches the OOM, empties the
   cache, agrees on a smaller micro-batch and re-runs the step from its start.
3. Run B: same seed and data, no cap, M for steps 1..K-1, the agreed micro-batch from K.
Checks (stdout `PASS|FAIL|SKIP name: why`; exit 0 when none failed, else 1):
  oom_real         an allocator OutOfMemoryError (num_ooms grew) was caught; SKIP on CPU (simulated)
  rerun_agreed     step K re-ran at a smaller micro-batch splitting B exactly; later steps too
  memory_returned  memory_reserved() after the clean-up < at the OOM (read in TrainStep's
                   capacity() call, before empty_cache); SKIP on the CPU
  weights_equal    A, B bitwise equal (deterministic algorithms, CUBLAS_WORKSPACE_CONFIG); if
                   torch warned of a nondeterministic op, allclose(1e-4, 1e-5), said so
  deadline         done within --deadline s (85); a watchdog exits 1 (JSON written) at +8 s
Time lost to the OOM, as in bench/recovery: (end of step K) - (end of step K-1) - (median of
steps K+1..N of run A). --out: the cap and peaks, each step's wall time (after synchronize),
reserved memory at the OOM and after, num_ooms, the OOM message, the comparison, the checks.
"""
import os
import sys
import time

T0 = time.monotonic()
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA is initialised

import argparse, json, statistics, threading, warnings  # noqa: E401,E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
import simulated_oom  # noqa: E402  (beside this script)
import oomless.torch as ot  # noqa: E402

DOC = {"script": "bench/e2e/inloop_cuda.py", "checks": {}}
CAUGHT = []  # (type name, message) of every OOM TrainStep caught: it calls oomless.torch's
_release = ot._release  # _release(exc, ...) on each, looked up in the module at the call


def _recording_release(exc, *args, **kwargs):
    CAUGHT.append((type(exc).__name__, str(exc)[:600]))
    return _release(exc, *args, **kwargs)


ot._release = _recording_release


class AtOom(ot.CudaMemory):
    """Notes the reserved bytes when TrainStep asks the capacity: after an OOM, before the
    cache is emptied (the failed attempt's tensors are freed into the cache, still reserved)."""

    sink = []

    def capacity(self):
        self.sink.append({"reserved": torch.cuda.memory_reserved(),
                          "allocated": torch.cuda.memory_allocated()})
        return super().capacity()


def gib(x):
    return "%.2f" % (x / 2**30) if x is not None else "?"


def write(path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(DOC, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


def check(name, status, why):
    DOC["checks"][name] = {"status": status, "why": why}
    print("%s %s: %s" % (status, name, why), flush=True)


def build(dev, tiny):
    """GPT-2 (gpt2.json, or a tiny one for the CPU) and AdamW, seeded: every build is equal."""
    import transformers
    if tiny:
        cfg = dict(n_embd=32, n_layer=2, n_head=2, vocab_size=256, n_positions=128,
                   bos_token_id=0, eos_token_id=0)
    else:
        with open(os.path.join(ROOT, "data", "models", "gpt2.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        for key in ("torch_dtype", "dtype", "architectures", "model_type"):
            cfg.pop(key, None)
    config = transformers.GPT2Config(**cfg, attn_implementation="eager")
    torch.manual_seed(0)
    with torch.device(dev):
        model = transformers.GPT2LMHeadModel(config)
    return model.train(), torch.optim.AdamW(model.parameters(), lr=1e-4)


def loss_fn(model, ids):
    return model(input_ids=ids, labels=ids).loss


def sync(dev):
    torch.cuda.synchronize() if dev == "cuda" else None
    return time.monotonic()


def measure(a, vocab):
    """Uncapped peaks of one step (forward, backward, AdamW) at the three shapes; the cap."""
    model, opt = build("cuda", False)
    g = torch.Generator().manual_seed(9)
    peaks = {}
    for name, n, seq in (("short_M", a.micro, a.short), ("long_half", a.micro // 2, a.long),
                         ("long_M", a.micro, a.long)):
        torch.cuda.empty_cache(), torch.cuda.reset_peak_memory_stats()
        ids = torch.randint(0, vocab, (n, seq), generator=g).cuda()
        try:
            loss_fn(model, ids).backward()
            opt.step(), opt.zero_grad(set_to_none=True), sync("cuda")
            peaks[name] = {"allocated": torch.cuda.max_memory_allocated(),
                           "reserved": torch.cuda.max_memory_reserved()}
        except torch.OutOfMemoryError:  # not even uncapped: the card's capacity bounds it
            opt.zero_grad(set_to_none=True)
            peaks[name] = {"allocated": torch.cuda.get_device_properties(0).total_memory,
                           "reserved": None, "oom_uncapped": True}
        del ids
    del model, opt
    torch.cuda.empty_cache()
    lo = max(peaks["short_M"]["reserved"] or 0, peaks["long_half"]["reserved"] or 0)
    hi, total = peaks["long_M"]["allocated"], torch.cuda.get_device_properties(0).total_memory
    cap = (lo + hi) // 2
    return {"peaks": peaks, "fits_reserved_bytes": lo, "oom_allocated_bytes": hi,
            "cap_bytes": cap, "fraction": cap / total, "total_bytes": total,
            "gap_ok": hi > 1.08 * lo}


def run(a, dev, micro, data, memory, deadline, later=None):
    """N steps through TrainStep at `micro` (`later` from --oom-step on, when given); per-step
    results and the final weights (on the CPU)."""
    model, opt = build(dev, dev == "cpu")
    if dev == "cpu":  # the simulated OOM: long sequences above half the first micro-batch
        simulated_oom.raise_above(model, a.micro // 2, a.long)
    events = []

    def on_event(e):  # "oom" after the first empty_cache, "limit" after the second
        events.append(dict(e, t=time.monotonic(),
                           reserved=torch.cuda.memory_reserved() if dev == "cuda" else None))

    step = ot.TrainStep(model, opt, micro, memory=memory, on_event=on_event)
    torch.manual_seed(1)  # the dropout stream
    steps, t_prev = [], sync(dev)
    for i, ids in enumerate(data, 1):
        if time.monotonic() > deadline:
            raise TimeoutError("deadline reached before step %d" % i)
        step.micro_batch = later if later is not None and i == a.oom_step else step.micro_batch
        r = step.step(ids.to(dev), loss_fn)
        t = sync(dev)
        steps.append({"step": i, "seq": ids.shape[1], "micro_batch": r.micro_batch,
                      "micro_batches": r.micro_batches, "retries": r.retries, "exact": r.exact,
                      "loss": float(r.loss), "seconds": t - t_prev, "t_end": t - T0})
        print("  step %d seq %d micro %d x %d retries %d %.3f s" % (
            i, ids.shape[1], r.micro_batch, r.micro_batches, r.retries, t - t_prev), flush=True)
        t_prev = t
    weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    del step, model, opt
    torch.cuda.empty_cache() if dev == "cuda" else None
    return {"steps": steps, "events": events}, weights


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="the JSON document")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    for name, default in (("--micro", 16), ("--batch", 32), ("--steps", 7), ("--oom-step", 3)):
        p.add_argument(name, type=int, default=default)
    p.add_argument("--short", type=int), p.add_argument("--long", type=int)  # 512/1024; CPU 32/64
    p.add_argument("--deadline", type=float, default=85.0, help="seconds from the start")
    a = p.parse_args()
    dev, cpu = a.device, a.device == "cpu"
    a.short, a.long = a.short or (32 if cpu else 512), a.long or (64 if cpu else 1024)
    if not 2 <= a.oom_step <= a.steps - 2 or a.batch % a.micro or a.micro < 2:
        p.error("need 2 <= --oom-step <= --steps - 2 and --micro (>= 2) dividing --batch")
    deadline = T0 + a.deadline
    def hard_stop():  # noqa: E306
        time.sleep(max(1.0, deadline + 8 - time.monotonic()))
        DOC["deadline_hit"] = "watchdog"
        check("deadline", "FAIL", "still running %.0f s after the start" % (a.deadline + 8))
        try:
            write(a.out)
        finally:
            os._exit(1)
    threading.Thread(target=hard_stop, daemon=True).start()

    if dev == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device (use --device cpu for the dry run)")
    torch.set_num_threads(min(4, os.cpu_count() or 1)) if cpu else None
    import transformers
    DOC.update(device=dev, simulated=cpu, args=vars(a), versions={
        "torch": torch.__version__, "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(0) if dev == "cuda" else None})
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    vocab = 256 if cpu else 50257
    g = torch.Generator().manual_seed(1234)
    data = [torch.randint(0, vocab, (a.batch, a.short if i < a.oom_step else a.long),
                          generator=g) for i in range(1, a.steps + 1)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if not cpu:
                c = DOC["cap"] = measure(a, vocab)
                print("cap %s GiB (fraction %.4f) between %s and %s GiB" % (gib(c["cap_bytes"]),
                      c["fraction"], gib(c["fits_reserved_bytes"]), gib(c["oom_allocated_bytes"])))
                torch.cuda.set_per_process_memory_fraction(c["fraction"])
                ooms0 = torch.cuda.memory_stats().get("num_ooms", 0)
            print("run A: micro-batch %d, batch %d" % (a.micro, a.batch), flush=True)
            DOC["run_a"], wa = run(a, dev, a.micro, data, None if cpu else AtOom(), deadline)
            DOC["run_a"]["caught"] = [{"type": t, "message": m} for t, m in CAUGHT]
            DOC["run_a"]["at_oom"] = AtOom.sink
            if not cpu:
                DOC["run_a"]["num_ooms"] = torch.cuda.memory_stats().get("num_ooms", 0) - ooms0
                torch.cuda.set_per_process_memory_fraction(1.0)
            agreed, n_caught = DOC["run_a"]["steps"][-1]["micro_batch"], len(CAUGHT)
            print("run B: micro-batch %d, %d from step %d" % (a.micro, agreed, a.oom_step))
            DOC["run_b"], wb = run(a, dev, a.micro, data, None, deadline, later=agreed)
        except TimeoutError as exc:
            DOC["deadline_hit"] = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported in the JSON, exit 1
            DOC["error"] = "%s: %s" % (type(exc).__name__, str(exc)[:2000])
    nondet = sorted({str(w.message)[:200] for w in caught if "determinis" in str(w.message)})
    DOC["nondeterministic_ops"] = nondet
    if "deadline_hit" in DOC or "error" in DOC:
        check("deadline" if "deadline_hit" in DOC else "error", "FAIL",
              DOC.get("deadline_hit") or DOC["error"][:300])
        DOC["elapsed_s"] = time.monotonic() - T0
        write(a.out)
        return 1

    A, K = DOC["run_a"], a.oom_step
    sk = A["steps"][K - 1]  # the step that ran out of memory
    normal = statistics.median(s["seconds"] for s in A["steps"][K:])
    b_normal = statistics.median(s["seconds"] for s in DOC["run_b"]["steps"][K:])
    DOC.update(time_lost_s=sk["t_end"] - A["steps"][K - 2]["t_end"] - normal, normal_step_s=normal,
               run_b_median_step_s=b_normal, ooms_caught=n_caught, agreed_micro_batch=agreed)
    print("time lost to the OOM %.3f s (normal step %.3f s)" % (DOC["time_lost_s"], normal))
    if cpu:
        check("oom_real", "SKIP", "simulated: %d OutOfMemoryError, forward pre-hook" % n_caught)
    else:
        real = [c for c in CAUGHT if c[0] == "OutOfMemoryError" and "simulated" not in c[1]]
        ok = bool(real) and A["num_ooms"] >= 1
        check("oom_real", "PASS" if ok else "FAIL", "%d OutOfMemoryError caught, allocator "
              "num_ooms +%d: %s" % (len(real), A["num_ooms"], (real or [("", "none")])[0][1][:160]))
    later = {s["micro_batch"] for s in A["steps"][K:]}
    ok = (sk["retries"] >= 1 and sk["micro_batch"] < a.micro and sk["exact"]
          and sk["micro_batch"] * sk["micro_batches"] == a.batch and later == {sk["micro_batch"]}
          and all(s["retries"] == 0 for s in A["steps"][:K - 1]))
    check("rerun_agreed", "PASS" if ok else "FAIL", "step %d: %d OOM(s), re-run at %d x %d = %d "
          "(batch %d, exact %s), later steps at %s" % (K, sk["retries"], sk["micro_batch"],
          sk["micro_batches"], sk["micro_batch"] * sk["micro_batches"], a.batch, sk["exact"],
          sorted(later)))
    if cpu:
        check("memory_returned", "SKIP", "no CUDA caching allocator on the CPU")
    else:
        before = A["at_oom"][0]["reserved"] if A["at_oom"] else None
        after = DOC["reserved_after_cleanup"] = next(
            (e["reserved"] for e in A["events"] if e["event"] == "limit"), None)
        DOC["reserved_at_oom"] = before
        ok = before is not None and after is not None and after < before
        check("memory_returned", "PASS" if ok else "FAIL", "reserved %s GiB at the OOM, %s GiB "
              "after the clean-up" % (gib(before), gib(after)))
    diff = max((wa[k].float() - wb[k].float()).abs().max().item() for k in wa)
    bitwise = all(torch.equal(wa[k], wb[k]) for k in wa)
    close = all(torch.allclose(wa[k].float(), wb[k].float(), rtol=1e-4, atol=1e-5) for k in wa)
    b_clean = all(s["retries"] == 0 for s in DOC["run_b"]["steps"])
    DOC["weights"] = dict(max_abs_diff=diff, bitwise_equal=bitwise, allclose=close,
                          run_b_without_oom=b_clean)
    if bitwise and b_clean:
        check("weights_equal", "PASS", "A and B bitwise equal (%d tensors)" % len(wa))
    elif nondet and close and b_clean:
        check("weights_equal", "PASS", "allclose(rtol=1e-4, atol=1e-5), max |diff| %.3g: not "
              "bitwise, torch has no deterministic %s" % (diff, "; ".join(nondet)[:300]))
    else:
        check("weights_equal", "FAIL", "max |diff| %.3g, bitwise %s, run B without OOM %s, "
              "nondeterministic ops %s" % (diff, bitwise, b_clean, nondet or "none"))
    DOC["elapsed_s"] = time.monotonic() - T0
    check("deadline", "PASS", "%.1f s of %.0f" % (DOC["elapsed_s"], a.deadline))
    write(a.out)
    return 1 if any(c["status"] == "FAIL" for c in DOC["checks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
