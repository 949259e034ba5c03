"""A tiny Lightning job for the recovery tests (CPU; a two-layer MLP).

    OOMLESS_BATCH_SIZE=4 OOMLESS_GRAD_ACCUM=2 python lightning_job.py OUT
        [--oom-above N --from-step S --skip-micro K]

Micro-batch and accumulation come from the environment, as ``oomless run`` sets them. With
--oom-above N, every training_step (the forward) of a micro-batch above N samples raises
torch.OutOfMemoryError from optimizer step S on (--skip-micro K: not in the first K
micro-batches of a step). 16 samples, an effective batch of 8: two steps
an epoch, three epochs. At the end the weights are saved to OUT/final.pt.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import end_distributed  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
import lightning.pytorch as pl  # noqa: E402
import oomless.lightning  # noqa: E402

SAMPLES, EPOCHS = 16, 3


class Net(pl.LightningModule):
    def __init__(self, oom_above, from_step, skip_micro):
        super().__init__()
        self.a = torch.nn.Linear(6, 12)
        self.b = torch.nn.Linear(12, 1)
        self.oom_above, self.from_step, self.skip_micro = oom_above, from_step, skip_micro

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.oom_above and x.shape[0] > self.oom_above and self.global_rank == \
                self.trainer.world_size - 1 and \
                self.trainer.global_step + 1 >= self.from_step and \
                batch_idx % self.trainer.accumulate_grad_batches >= self.skip_micro:
            raise torch.OutOfMemoryError("injected: micro-batch %d above %d"
                                         % (x.shape[0], self.oom_above))
        return torch.nn.functional.mse_loss(self.b(torch.tanh(self.a(x))), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.02)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--oom-above", type=int, default=0)
    p.add_argument("--from-step", type=int, default=1)
    p.add_argument("--skip-micro", type=int, default=0)
    a = p.parse_args()
    micro = int(os.environ["OOMLESS_BATCH_SIZE"])
    accum = int(os.environ.get("OOMLESS_GRAD_ACCUM", "1"))

    g = torch.Generator().manual_seed(3)
    data = torch.utils.data.TensorDataset(torch.randn(SAMPLES, 6, generator=g),
                                          torch.randn(SAMPLES, 1, generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=micro, shuffle=False)
    torch.manual_seed(0)
    model = Net(a.oom_above, a.from_step, a.skip_micro)
    # under torchrun: DDP over gloo, as many devices and nodes as torchrun started
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    nodes = int(os.environ.get("WORLD_SIZE", "1")) // local
    ddp = {"strategy": "ddp", "num_nodes": nodes} if "RANK" in os.environ else {}
    trainer = pl.Trainer(accelerator="cpu", devices=local, max_epochs=EPOCHS, **ddp,
                         accumulate_grad_batches=accum, default_root_dir=os.path.join(a.out, "run"),
                         enable_checkpointing=False, logger=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         callbacks=[oomless.lightning.OomRecovery()])
    oomless.lightning.fit(trainer, model, train_dataloaders=loader)
    if trainer.global_rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()},
                   os.path.join(a.out, "final.pt"))
    print("lightning_job: finished %d steps at micro-batch %d x %d"
          % (trainer.global_step, micro, accum))

    del trainer, model  # the DDP model goes before its process group (common.end_distributed)
    end_distributed()


if __name__ == "__main__":
    main()
