#!/usr/bin/env python3
"""The Hugging Face Trainer integration (oomless.hf) under `oomless run`, with a real CUDA OOM.

    python3 bench/e2e/hf_cuda.py --drive build/oomless --out DIR [--device cpu]   # all of it
runs from the repository root, 95 s at most (DIR must not exist yet), the equivalent of

    build/oomless run --json --batch-size 32 --grad-accum 1 --events DIR/events.jsonl -- \\
        python3 bench/e2e/hf_cuda.py --batch-size {batch} --grad-accum {accum} \\
        --memory-fraction auto --out DIR  > DIR/run.json 2> DIR/run.log
then `hf_cuda.py --check --out DIR` (which can also be run by hand after that command).

The job: GPT-2 (data/models/gpt2.json, random weights, fp32, eager attention), Trainer, --steps
(5) steps of E = batch x accum (32) samples of a synthetic torch Dataset read in order: steps
before K (--oom-step, 3) hold --short (256) tokens, later ones --long (1024). `--memory-fraction
auto`: launch 1 measures uncapped peaks of one step at (short, E), (long, E/2), (long, E) and
caps the process half-way between what must fit and (long, E) (DIR/cap.json, reused by the
relaunch). At step K micro-batch 32 really runs out of memory: oomless.hf.recover_oom catches
it, saves checkpoint-(K-1), the job exits 75 printing OOMLESS_RECOVERY (the agreed micro-batch);
`oomless run` relaunches at it with the accumulation that keeps E; the job resumes from the
checkpoint. --device cpu (dry run): tiny GPT-2, no cap, a forward pre-hook simulates the OOM.

Each launch writes DIR/attempt-N.json (batch, accum, the stop record and the OOM it caught,
allocator num_ooms, steps done, step times). Checks (`PASS|FAIL|SKIP name: why`, DIR/checks.json,
exit 0 when none failed): exit_0 (oomless run exited 0), recovered (launch, oom, restart, launch,
exit in the events; attempt 1 stopped at step K, the last one resumed from checkpoint-(K-1) and
reached --steps), effective_batch_kept (every launch and run.json: batch x accum = E, the
relaunch at a smaller batch), oom_real (the caught OOM is an allocator OutOfMemoryError; SKIP on
the CPU), deadline (every launch ended within --deadline, 85 s, of the first one's start; a
watchdog ends a launch 5 s later, and --drive kills the whole run after 95 s).
"""
import os, sys, time  # noqa: E401
T_LAUNCH = time.time()
import argparse, json, shutil, subprocess, threading  # noqa: E401,E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
import simulated_oom  # noqa: E402  (beside this script)

def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def dump(path, doc):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


def build(cpu):
    import transformers
    if cpu:
        cfg = dict(n_embd=32, n_layer=2, n_head=2, vocab_size=256, n_positions=1024,
                   bos_token_id=0, eos_token_id=0)
    else:
        cfg = load(os.path.join(ROOT, "data", "models", "gpt2.json"))
        for key in ("torch_dtype", "dtype", "architectures", "model_type"):
            cfg.pop(key, None)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg,
                                                                attn_implementation="eager"))


class Tokens(torch.utils.data.Dataset):
    """steps x E samples in order: short sequences for steps before K, long from K on."""

    def __init__(self, a, vocab):
        self.a, self.vocab, self.n = a, vocab, a.steps * a.effective
    def __len__(self):  # noqa: E301
        return self.n

    def __getitem__(self, i):
        seq = self.a.short if i < (self.a.oom_step - 1) * self.a.effective else self.a.long
        ids = torch.randint(0, self.vocab, (seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def measure(a, vocab):
    """Uncapped peaks of one step at (short, E), (long, E/2), (long, E); the cap between."""
    model = build(False).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    peaks = {}
    for name, n, seq in (("short_E", a.effective, a.short),
                         ("long_half", a.effective // 2, a.long), ("long_E", a.effective, a.long)):
        torch.cuda.empty_cache(), torch.cuda.reset_peak_memory_stats()
        ids = torch.randint(0, vocab, (n, seq)).cuda()
        try:
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step(), opt.zero_grad(set_to_none=True), torch.cuda.synchronize()
            peaks[name] = [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()]
        except torch.OutOfMemoryError:  # not even uncapped: the card's capacity bounds it
            opt.zero_grad(set_to_none=True)
            peaks[name] = [torch.cuda.get_device_properties(0).total_memory, None]
        del ids
    del model, opt
    torch.cuda.empty_cache()
    lo, hi = max(peaks["short_E"][1] or 0, peaks["long_half"][1] or 0), peaks["long_E"][0]
    total = torch.cuda.get_device_properties(0).total_memory
    return {"peaks_allocated_reserved": peaks, "fits_reserved_bytes": lo,
            "oom_allocated_bytes": hi, "cap_bytes": (lo + hi) // 2,
            "fraction": (lo + hi) // 2 / total, "gap_ok": hi > 1.08 * lo}


def job(a):
    """One launch under `oomless run` (micro-batch and accumulation from {batch} {accum})."""
    import transformers
    import oomless.hf
    import oomless._hf_recovery as hr
    from oomless.torch import OomStop, exit_for_relaunch
    cpu, attempt = a.device == "cpu", int(os.environ.get("OOMLESS_ATTEMPT", "1"))
    a.effective = a.batch_size * a.grad_accum
    os.makedirs(a.out, exist_ok=True)
    trainer_dir, start = os.path.join(a.out, "trainer"), os.path.join(a.out, "start.json")
    if attempt == 1:
        shutil.rmtree(trainer_dir, ignore_errors=True)
        dump(start, {"t0": T_LAUNCH, "effective": a.effective})
    deadline = load(start)["t0"] + a.deadline
    doc = {"attempt": attempt, "batch": a.batch_size, "accum": a.grad_accum, "pid": os.getpid(),
           "effective": a.effective, "device": a.device, "simulated": cpu, "steps": [],
           "t_launch": T_LAUNCH, "versions": {"torch": torch.__version__,
                                              "transformers": transformers.__version__}}
    out = os.path.join(a.out, "attempt-%d.json" % attempt)

    def watchdog():
        time.sleep(max(1.0, deadline + 5 - time.time()))
        print("hf_cuda: deadline passed, stopping", file=sys.stderr, flush=True)
        try:
            dump(out, dict(doc, deadline_hit=True))
        finally:
            os._exit(1)
    threading.Thread(target=watchdog, daemon=True).start()
    vocab = 256 if cpu else 50257
    if not cpu:
        cap_path = os.path.join(a.out, "cap.json")
        if a.memory_fraction != "auto":
            doc["cap"] = {"fraction": float(a.memory_fraction)}
        elif attempt == 1 or not os.path.exists(cap_path):
            doc["cap"] = measure(a, vocab)
            dump(cap_path, doc["cap"])
        else:
            doc["cap"] = load(cap_path)
        torch.cuda.set_per_process_memory_fraction(doc["cap"]["fraction"])
        ooms0 = torch.cuda.memory_stats().get("num_ooms", 0)
    model = build(cpu)
    if cpu:  # the simulated OOM
        simulated_oom.raise_above(model, a.effective // 2, a.long)
    caught, release = [], hr._release

    def recording_release(exc, *rest, **kw):  # the integration's release of each OOM it caught
        caught.append({"type": type(exc).__name__, "message": str(exc)[:600]})
        return release(exc, *rest, **kw)
    hr._release = recording_release

    class InOrder(transformers.Trainer):  # the samples in order: the long ones from step K
        def _get_train_sampler(self, *args, **kwargs):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    class Steps(transformers.TrainerCallback):  # `step N` for oomless run; times; the deadline
        t = time.time()
        def on_step_end(self, args, state, control, **kw):
            t = time.time()
            doc["steps"].append({"step": state.global_step, "seconds": t - Steps.t})
            Steps.t = t
            print("step %d/%d batch %d accum %d" % (state.global_step, a.steps, a.batch_size,
                                                     a.grad_accum), flush=True)
            if t > deadline:
                raise RuntimeError("hf_cuda: deadline passed after step %d" % state.global_step)

    args = transformers.TrainingArguments(
        output_dir=trainer_dir, use_cpu=cpu, per_device_train_batch_size=a.batch_size,
        gradient_accumulation_steps=a.grad_accum, max_steps=a.steps, learning_rate=1e-4,
        save_strategy="no", report_to=[], logging_steps=1, disable_tqdm=True, seed=0,
        dataloader_num_workers=0)
    trainer = InOrder(model=model, args=args, train_dataset=Tokens(a, vocab), callbacks=[Steps()])
    oomless.hf.recover_oom(trainer)  # + oomless.hf.train: the integration's documented use
    from transformers.trainer_utils import get_last_checkpoint
    doc["resumed_from"] = get_last_checkpoint(trainer_dir) if os.path.isdir(trainer_dir) else None
    stopped = None
    try:
        oomless.hf.train(trainer, exit=False)
    except OomStop as stop:
        stopped = stop
        doc["stop"] = dict(stop.record, checkpoint=stop.checkpoint)
    doc["completed"] = stopped is None
    doc.update(global_step=trainer.state.global_step, caught=caught,
               num_ooms=None if cpu else torch.cuda.memory_stats().get("num_ooms", 0) - ooms0,
               seconds=time.time() - T_LAUNCH)
    dump(out, doc)
    if stopped is not None:  # as oomless.hf.train(exit=True) does, after the record above
        exit_for_relaunch(stopped, grad_accum=a.effective // max(stopped.micro_batch, 1))
    return 0


def check(a):
    """The checks, from DIR/run.json (oomless run --json), DIR/events.jsonl, DIR/attempt-*.json."""
    results = {}

    def say(name, ok, why):
        status = ok if isinstance(ok, str) else ("PASS" if ok else "FAIL")
        results[name] = {"status": status, "why": why}
        print("%s %s: %s" % (status, name, why), flush=True)
    try:
        run = load(os.path.join(a.out, "run.json"))
        with open(os.path.join(a.out, "events.jsonl"), encoding="utf-8") as f:
            ev = [json.loads(line) for line in f if line.strip()]
        att = [load(os.path.join(a.out, "attempt-%d.json" % i))
               for i in range(1, 1 + run.get("attempts", 0))]
        start = load(os.path.join(a.out, "start.json"))
    except (OSError, ValueError) as exc:
        say("outputs", False, "missing or unreadable: %s" % exc)
        return 1
    E, first, last = start["effective"], att[0] if att else {}, att[-1] if att else {}
    say("exit_0", run.get("exit_code") == 0, "oomless run exit_code %s after %s attempt(s)"
        % (run.get("exit_code"), run.get("attempts")))
    kinds = [e["event"] for e in ev if e["event"] in ("launch", "oom", "restart", "exit")]
    stop = first.get("stop") or {}
    ck = "checkpoint-%d" % (a.oom_step - 1)
    ok = (kinds == ["launch", "oom", "restart", "launch", "exit"] and len(att) == 2
          and stop.get("step") == a.oom_step and (stop.get("checkpoint") or "").endswith(ck)
          and bool(last.get("completed")) and last.get("global_step") == a.steps
          and (last.get("resumed_from") or "").endswith(ck))
    say("recovered", ok, "events %s; attempt 1 stopped at step %s (%s), last attempt resumed "
        "from %s and reached step %s of %d" % (kinds, stop.get("step"), stop.get("checkpoint"),
                                               last.get("resumed_from"), last.get("global_step"),
                                               a.steps))
    prods = [x["batch"] * x["accum"] for x in att]
    ok = (bool(att) and all(p == E for p in prods) and run.get("effective_batch") == E
          and run.get("target_effective_batch") == E and last["batch"] < first["batch"]
          and stop.get("micro_batch") == last["batch"])
    say("effective_batch_kept", ok, "launches %s (batch x accum = %s), agreed micro-batch %s, "
        "run.json effective %s of %d" % ([(x["batch"], x["accum"]) for x in att], prods,
                                         stop.get("micro_batch"), run.get("effective_batch"), E))
    got = first.get("caught") or [{}]
    if first.get("simulated"):
        say("oom_real", "SKIP", "simulated on the CPU: %s" % got[0].get("message"))
    else:
        ok = got[0].get("type") == "OutOfMemoryError" and (first.get("num_ooms") or 0) >= 1
        say("oom_real", ok, "%s caught, allocator num_ooms +%s: %s" % (
            got[0].get("type"), first.get("num_ooms"), (got[0].get("message") or "")[:160]))
    ends = [x["t_launch"] + x["seconds"] - start["t0"] for x in att if "seconds" in x]
    ok = len(ends) == len(att) and not any(x.get("deadline_hit") for x in att) \
        and max(ends or [0]) <= a.deadline
    say("deadline", ok, "launches ended %s s after the first start (limit %.0f)"
        % (["%.1f" % t for t in ends], a.deadline))
    dump(os.path.join(a.out, "checks.json"), results)
    return 1 if any(r["status"] == "FAIL" for r in results.values()) else 0


def drive(a):
    """Runs the documented `oomless run` command, then the checks."""
    os.makedirs(a.out)
    cmd = [a.drive, "run", "--json", "--batch-size", "32", "--grad-accum", "1", "--events",
           os.path.join(a.out, "events.jsonl"), "--", sys.executable, os.path.abspath(__file__),
           "--batch-size", "{batch}", "--grad-accum", "{accum}", "--memory-fraction",
           a.memory_fraction, "--out", a.out, "--device", a.device, "--steps", str(a.steps),
           "--oom-step", str(a.oom_step), "--deadline", str(a.deadline)]
    print("hf_cuda: " + " ".join(cmd), flush=True)
    with open(os.path.join(a.out, "run.json"), "w") as so, open(os.path.join(a.out, "run.log"),
                                                                "w") as se:
        try:
            rc = subprocess.run(cmd, stdout=so, stderr=se, timeout=a.deadline + 10,
                                cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout after %.0f s" % (a.deadline + 10)
    print("hf_cuda: oomless run exited %s (log %s)" % (rc, os.path.join(a.out, "run.log")))
    return check(a)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="the output folder")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--batch-size", type=int, default=int(os.environ.get("OOMLESS_BATCH_SIZE", 32)))
    p.add_argument("--grad-accum", type=int, default=int(os.environ.get("OOMLESS_GRAD_ACCUM", 1)))
    p.add_argument("--memory-fraction", default="auto", help="'auto' (measured) or a fraction")
    for name, default in (("--steps", 5), ("--oom-step", 3)):
        p.add_argument(name, type=int, default=default)
    p.add_argument("--short", type=int), p.add_argument("--long", type=int)  # 256/1024; CPU 32/64
    p.add_argument("--deadline", type=float, default=85.0, help="seconds from the first launch")
    p.add_argument("--check", action="store_true", help="only the checks of a finished run")
    p.add_argument("--drive", metavar="OOMLESS", help="run `OOMLESS run ...`, then the checks")
    a = p.parse_args()
    cpu = a.device == "cpu"  # the job's own defaults; the rest is the same code on both
    a.short, a.long = a.short or (32 if cpu else 256), a.long or (64 if cpu else 1024)
    if not 2 <= a.oom_step < a.steps:
        p.error("need 2 <= --oom-step < --steps")
    if a.check or a.drive:
        return check(a) if a.check else drive(a)
    if not cpu and not torch.cuda.is_available():
        p.error("no CUDA device (use --device cpu for the dry run)")
    return job(a)


if __name__ == "__main__":
    sys.exit(main())
