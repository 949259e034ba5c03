#!/usr/bin/env python3
"""train.py - a real training job for the end-to-end checks on a GPU (tests/gpu/run.sh).

A GPT-2-style language model built from data/models/gpt2.json (transformers' GPT2LMHeadModel,
random weights), synthetic tokens, AdamW, bf16 autocast by default. Options:

  --batch-size N --grad-accum N --steps N --seq N
  --checkpoint DIR     save model + optimizer + step after every step (atomically: a temporary
                       file renamed over the last); on start, resume from it when it is there
  --spike-step N --spike-seq L   from step N on, batches hold sequences of L tokens (a long
                       batch arriving mid-run)
  --memory-fraction F  torch.cuda.set_per_process_memory_fraction(F): PyTorch refuses
                       allocations past F of the card, an OOM as on a smaller card
  --stats FILE         write {"batch", "grad_accum", "steps", "max_allocated", "max_reserved",
                       "seconds_per_step"} at the end
  --precision amp-bf16|fp32|bf16

An out-of-memory error is not caught: the job dies with PyTorch's message, as real jobs do.
Prints one line per step: `step I/N batch B accum A seq S loss X`.
"""
import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# E2E_DEVICE=cpu: a dry run on a machine without a GPU (the memory counters read 0)
DEV = os.environ.get("E2E_DEVICE", "cuda")


def build(precision):
    import transformers
    with open(os.path.join(ROOT, "data", "models", "gpt2.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    for key in ("torch_dtype", "dtype", "architectures"):
        cfg.pop(key, None)
    config = transformers.GPT2Config(**{k: v for k, v in cfg.items() if k != "model_type"})
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    with torch.device(DEV):
        model = transformers.GPT2LMHeadModel(config).to(dtype)
    return model, config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=int(os.environ.get("OOMLESS_BATCH_SIZE", 8)))
    ap.add_argument("--grad-accum", type=int, default=int(os.environ.get("OOMLESS_GRAD_ACCUM", 1)))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--spike-step", type=int, default=0)
    ap.add_argument("--spike-seq", type=int, default=0)
    ap.add_argument("--memory-fraction", type=float, default=0)
    ap.add_argument("--stats", default=None)
    ap.add_argument("--precision", default="amp-bf16", choices=("amp-bf16", "fp32", "bf16"))
    a = ap.parse_args()
    if a.memory_fraction and DEV == "cuda":
        torch.cuda.set_per_process_memory_fraction(a.memory_fraction)
    torch.manual_seed(0)
    model, config = build(a.precision)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    start = 0
    ck = os.path.join(a.checkpoint, "state.pt") if a.checkpoint else None
    if ck and os.path.exists(ck):
        state = torch.load(ck, map_location=DEV, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = int(state["step"])
        print("resuming from step %d (checkpoint %s)" % (start, ck), flush=True)
    amp = a.precision == "amp-bf16"
    t0 = time.time()
    for step in range(start, a.steps):
        seq = a.spike_seq if a.spike_step and step + 1 >= a.spike_step else a.seq
        total = 0.0
        for _ in range(a.grad_accum):
            ids = torch.randint(0, config.vocab_size, (a.batch_size, seq), device=DEV)
            with torch.autocast(DEV, dtype=torch.bfloat16, enabled=amp):
                loss = model(input_ids=ids, labels=ids).loss / a.grad_accum
            loss.backward()
            total += loss.item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print("step %d/%d batch %d accum %d seq %d loss %.4f" % (
            step + 1, a.steps, a.batch_size, a.grad_accum, seq, total), flush=True)
        if ck:
            os.makedirs(a.checkpoint, exist_ok=True)
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step + 1},
                       ck + ".tmp")
            os.replace(ck + ".tmp", ck)
    if DEV == "cuda":
        torch.cuda.synchronize()
    steps_run = max(a.steps - start, 1)
    stats = {"batch": a.batch_size, "grad_accum": a.grad_accum, "steps": a.steps,
             "resumed_from": start, "max_allocated": torch.cuda.max_memory_allocated() if DEV == "cuda" else 0,
             "max_reserved": torch.cuda.max_memory_reserved() if DEV == "cuda" else 0,
             "seconds_per_step": (time.time() - t0) / steps_run}
    print("stats " + json.dumps(stats), flush=True)
    if a.stats:
        with open(a.stats, "w", encoding="utf-8") as f:
            json.dump(stats, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
