"""A tiny Hugging Face Trainer job for the recovery tests (CPU; GPT-2 with one 16-wide layer).

    OOMLESS_BATCH_SIZE=4 OOMLESS_GRAD_ACCUM=2 python hf_job.py OUT [--oom-above N --from-step S]

Micro-batch and accumulation come from the environment, as ``oomless run`` sets them. With
--oom-above N, every backward of a micro-batch above N samples raises torch.OutOfMemoryError
(a hook on the LM head) from optimizer step S on, on the last rank. Under torchrun the Trainer
runs DDP over gloo. At the end the trained weights are saved to
OUT/final.pt.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import end_distributed  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
import oomless.hf  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

SAMPLES, SEQ, STEPS = 32, 8, 4


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(7)
        self.ids = torch.randint(0, 64, (SAMPLES, SEQ), generator=g)

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--oom-above", type=int, default=0)
    p.add_argument("--from-step", type=int, default=1)
    a = p.parse_args()
    micro = int(os.environ["OOMLESS_BATCH_SIZE"])
    accum = int(os.environ.get("OOMLESS_GRAD_ACCUM", "1"))

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=os.path.join(a.out, "run"), use_cpu=True, per_device_train_batch_size=micro,
        gradient_accumulation_steps=accum, max_steps=STEPS, learning_rate=1e-2,
        lr_scheduler_type="linear", warmup_steps=1, save_strategy="no", report_to=[],
        logging_steps=1, disable_tqdm=True, seed=0, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())

    if a.oom_above:
        def backward_hook(module, grad_input, grad_output):
            if grad_output[0].shape[0] > a.oom_above and \
                    trainer.state.global_step + 1 >= a.from_step and \
                    trainer.args.process_index == trainer.args.world_size - 1:
                raise torch.OutOfMemoryError("injected: micro-batch %d above %d"
                                             % (grad_output[0].shape[0], a.oom_above))
        model.lm_head.register_full_backward_hook(backward_hook)

    oomless.hf.recover_oom(trainer)
    oomless.hf.train(trainer)
    if trainer.args.process_index == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()},
                   os.path.join(a.out, "final.pt"))
    print("hf_job: finished %d steps at micro-batch %d x %d"
          % (trainer.state.global_step, micro, accum))

    del trainer, model  # the DDP model goes before its process group (common.end_distributed)
    end_distributed()


if __name__ == "__main__":
    main()
