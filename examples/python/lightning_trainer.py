"""Plan with oomless inside a Lightning script: Trainer and DataLoader keywords from the plan.

Run where lightning is installed:  PYTHONPATH=bindings/python python3 lightning_trainer.py
"""
import oomless
import oomless.lightning


def main():
    plan = oomless.plan(model="gpt2", seq=1024, target_effective_batch=64)
    print("peak %.2f GiB of %.2f GiB usable" % (plan["memory"]["device_peak"] / 2**30,
                                                plan["budget"]["usable_bytes"] / 2**30))

    import lightning  # imported late: oomless itself needs no PyTorch
    from torch.utils.data import DataLoader, TensorDataset
    import torch

    trainer = lightning.Trainer(max_steps=10, **oomless.lightning.trainer_kwargs(plan))
    data = TensorDataset(torch.randint(0, 50257, (256, plan["plan"]["seq_len"])))
    loader = DataLoader(data, **oomless.lightning.dataloader_kwargs(plan))
    print(trainer.accumulate_grad_batches, loader.batch_size)


if __name__ == "__main__":
    main()
