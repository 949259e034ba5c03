"""One rank of the FSDP2 memory test (started by torchrun; gloo on CPU).

    torchrun --nproc-per-node 2 fsdp2_worker.py CONFIG OUT fp32:yes bf16:no ...

For each PARAM_DTYPE:RESHARD it builds the Llama model of CONFIG (transformers, random weights) in
the sharded parameters' dtype, applies torch's fully_shard to every decoder layer and then to the
root with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=the parameters' dtype), as
torchtitan's parallelize_llama does, and runs two training steps (AdamW, batch 1 x SEQ tokens).
The second is measured with torch's FSDPMemTracker (torch.distributed._tools.fsdp2_mem_tracker):
a dispatch mode that follows every tensor storage made on this thread, by FSDP category (sharded
and unsharded parameters and gradients, all-gather and reduce-scatter buffers, optimizer states,
activations, temporaries). On the CPU, whose allocator keeps no cache, the bytes of the live
storages are the bytes allocated. Rank 0 writes OUT: per configuration the snapshots at the end
of the forward, before the optimizer step, at the peak and after the step."""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import LlamaConfig, LlamaForCausalLM

SEQ = 16


def flat(snapshot):
    """{category: bytes} summed over devices (all on the CPU here)."""
    out = {}
    for per_dev in snapshot.values():
        for k, v in per_dev.items():
            out[str(k)] = out.get(str(k), 0) + v
    return out


def measure(cfg, param_dtype, reshard):
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(param_dtype)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=param_dtype)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, mp_policy=mp)  # the root: reshard_after_forward False
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (1, SEQ))
    snaps = {}

    def step(fmt=None):
        loss = model(input_ids=ids, labels=ids).loss
        if fmt:
            snaps["forward_end"] = flat(fmt.get_tracker_snapshot("current"))
        loss.backward()
        if fmt:
            snaps["before_step"] = flat(fmt.get_tracker_snapshot("current"))
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # the optimizer states exist from here on
    fmt = FSDPMemTracker(model, opt)
    fmt.track_inputs((ids,))
    with fmt:
        step(fmt)
        snaps["peak"] = flat(fmt.get_tracker_snapshot("peak"))
        snaps["after_step"] = flat(fmt.get_tracker_snapshot("current"))
    return snaps


def main():
    config, out, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
    dist.init_process_group("gloo")
    with open(config, encoding="utf-8") as f:
        cfg = LlamaConfig(**json.load(f))
    result = {}
    for run in runs:
        dtype, reshard = run.split(":")
        result[run] = measure(cfg, {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype],
                              reshard == "yes")
    if dist.get_rank() == 0:
        result["versions"] = {"torch": torch.__version__,
                              "transformers": __import__("transformers").__version__}
        with open(out + ".tmp", "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        os.replace(out + ".tmp", out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
