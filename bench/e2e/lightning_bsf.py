#!/usr/bin/env python3
"""lightning_bsf.py - Lightning's batch-size finder on the same model as train.py, for comparison
with `oomless probe` (tests/gpu/run.sh).

Runs Lightning's Tuner.scale_batch_size (the BatchSizeFinder's search) in `--mode` (binsearch by
default) from `--init-val`, `--steps-per-trial` steps per trial, on train.py's GPT-2 with
synthetic tokens, bf16-mixed precision, AdamW; `--memory-fraction` caps PyTorch's allocator as
train.py does. Prints one JSON document: {"mode", "batch_found", "trials", "seconds"}.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __init__(self, vocab, seq, n=1 << 20):
        self.vocab, self.seq, self.n = vocab, seq, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, self.vocab, (self.seq,), generator=g)


def main():
    import lightning as L
    from lightning.pytorch.tuner import Tuner

    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--mode", default="binsearch", choices=("binsearch", "power"))
    ap.add_argument("--init-val", type=int, default=2)
    ap.add_argument("--steps-per-trial", type=int, default=3)
    ap.add_argument("--max-trials", type=int, default=25)
    ap.add_argument("--memory-fraction", type=float, default=0)
    a = ap.parse_args()
    if a.memory_fraction and train.DEV == "cuda":
        torch.cuda.set_per_process_memory_fraction(a.memory_fraction)

    seen = []  # the batch size of each trial, in order

    class LM(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.batch_size = a.init_val
            self.model, self.config = train.build("fp32")

        def training_step(self, batch, _idx):
            if not seen or seen[-1] != batch.shape[0]:  # a new trial (binsearch never repeats)
                seen.append(batch.shape[0])
            return self.model(input_ids=batch, labels=batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(Tokens(self.config.vocab_size, a.seq),
                                               batch_size=self.batch_size, num_workers=2)

    trainer = L.Trainer(accelerator="gpu" if train.DEV == "cuda" else "cpu", devices=1, precision="bf16-mixed", max_steps=3,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    module = LM()
    t0 = time.time()
    found = Tuner(trainer).scale_batch_size(module, mode=a.mode, init_val=a.init_val,
                                            steps_per_trial=a.steps_per_trial,
                                            max_trials=a.max_trials)
    seconds = time.time() - t0
    print(json.dumps({"mode": a.mode, "batch_found": found, "trials": len(seen),
                      "trial_batches": seen, "seconds": round(seconds, 1),
                      "max_allocated": torch.cuda.max_memory_allocated() if train.DEV == "cuda" else 0}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
