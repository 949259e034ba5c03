"""The multi-node layouts `oomless plan` writes, read by the engines' own code.

--format torchtitan-parallel: by torchtitan 0.3.0's ConfigManager as `torchtitan.train --module M
--config plan` does (config/manager.py: the module imported, the function called, the
Trainer.Config it returns put through tyro and Trainer.Config's checks). torchtitan lives in its
own environment (`OOMLESS_TORCHTITAN_PYTHON`, else build/venv-torchtitan); without it the test skips.
Its MoE dispatcher imports triton (no CPU wheel) through
torchtitan/distributed/minimal_async_ep/kernels.py: that one module is stubbed, nothing else.

--format megatron: by Megatron-LM's parse_args and validate_args (megatron/training/
arguments.py) over the plan's MODEL_PARALLEL_ARGS and TRAINING_ARGS beside the model's own
arguments, with the launch line's environment, in this (torch) interpreter, from a Megatron-LM
checkout named by `OOMLESS_MEGATRON_SRC` (checked at NVIDIA/Megatron-LM d98e8a64, 2026-08-22);
without one the test skips.

Every degree, the schedule, the micro-batch, the stages and the batch agree with the plan's
JSON, and the model is the planned one."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import SRC, oomless_bin, plan_format  # noqa: E402


def titan_python():
    path = os.environ.get("OOMLESS_TORCHTITAN_PYTHON") or os.path.join(
        os.path.dirname(oomless_bin() or os.path.join(SRC, "build", "oomless")), "venv-torchtitan",
        "bin", "python")
    return path if os.access(path, os.X_OK) else None


TITAN = titan_python()
REASON = (None if oomless_bin() else "no oomless binary (build first)") or \
    (None if TITAN else "no torchtitan environment (OOMLESS_TORCHTITAN_PYTHON or build/venv-torchtitan)")

LOAD = r"""
import dataclasses, json, sys
from unittest import mock
sys.modules["torchtitan.distributed.minimal_async_ep.kernels"] = mock.MagicMock()
from torchtitan.config.manager import ConfigManager
sys.path.insert(0, sys.argv[1])
got = {}
for name in sys.argv[2:]:
    c = ConfigManager().parse_args(["--module", name, "--config", "plan"])
    ac = c.activation_checkpoint
    got[name] = {"training": dataclasses.asdict(c.training),
                 "parallelism": dataclasses.asdict(c.parallelism),
                 "ac": None if ac is None else type(ac).__qualname__,
                 "model": c.model_spec.name, "flavor": c.model_spec.flavor,
                 "layers": len(c.model_spec.model.layers)}
print(json.dumps(got))
"""

# the acceptance plan (issue 37), a dense interleaved one, and MLA + MoE over 32 nodes
PLANS = {
    "qwen3-235b-a22b": ["--model", "qwen3-235b-a22b", "--nodes", "8", "--gpus-per-node", "8",
                        "--gpu", "h100", "--engine", "torchtitan"],
    "llama-3.1-8b": ["--model", "llama-3.1-8b", "--nodes", "1", "--gpus-per-node", "8",
                     "--gpu", "rtx-4090", "--seq", "4096", "--engine", "torchtitan"],
    "deepseek-v3": ["--model", "deepseek-v3", "--nodes", "32", "--gpus-per-node", "8",
                    "--gpu", "h100", "--engine", "torchtitan"],
}
FLAVORS = {"qwen3-235b-a22b": ("qwen3", "235B-A22B", 94), "llama-3.1-8b": ("llama3", "8B", 32),
           "deepseek-v3": ("deepseek_v3", "671B", 61)}


def load_all():
    """each plan's JSON and what torchtitan made of its config function, in one interpreter"""
    docs, names = {}, []
    with tempfile.TemporaryDirectory() as d:
        for i, (name, args) in enumerate(PLANS.items()):
            docs[name] = json.loads(plan_format(args, "json"))
            names.append("oomless_plan_%d" % i)
            with open(os.path.join(d, names[-1] + ".py"), "w", encoding="utf-8") as f:
                f.write(plan_format(args, "torchtitan-parallel"))
        out = subprocess.run([TITAN, "-c", LOAD, d] + names, cwd=d, capture_output=True,
                             text=True, timeout=300,
                             env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    if out.returncode:
        raise AssertionError("torchtitan refused a plan:\n" + out.stderr[-3000:])
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {name: (docs[name], got[names[i]]) for i, name in enumerate(PLANS)}


@unittest.skipIf(REASON, REASON or "")
class TorchtitanParallel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.loaded = load_all()

    def check(self, name):
        doc, got = self.loaded[name]
        p, lay = doc["plan"], doc["layout"]
        par, t = got["parallelism"], got["training"]
        self.assertEqual((got["model"], got["flavor"], got["layers"]), FLAVORS[name])
        self.assertEqual(lay["engine"], "torchtitan")
        self.assertEqual(par["tensor_parallel_degree"], lay["tensor_parallel"])
        self.assertEqual(par["enable_sequence_parallel"], lay["sequence_parallel"])
        self.assertEqual(par["context_parallel_degree"], lay["context_parallel"])
        self.assertEqual(par["pipeline_parallel_degree"], lay["pipeline_parallel"])
        self.assertEqual(par["expert_parallel_degree"], max(1, lay["expert_parallel"]))
        self.assertEqual(par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"],
                         lay["data_parallel"])
        self.assertEqual(lay["gpus"], lay["tensor_parallel"] * lay["context_parallel"] *
                         lay["pipeline_parallel"] * lay["data_parallel"])
        # the whole effective batch in one step: micro-batches through the pipeline, no further
        # accumulation (torchtitan's: global / (local x data-parallel degree), trainer.py)
        self.assertEqual(t["global_batch_size"], p["effective_batch"])
        self.assertEqual(t["global_batch_size"] // (t["local_batch_size"] * lay["data_parallel"]),
                         1 if lay["pipeline_parallel"] > 1 else p["grad_accum"])
        self.assertEqual(t["seq_len"], p["seq_len"])
        self.assertEqual(got["ac"], "FullAC.Config" if p["checkpointing"] == "full" else None)
        if lay["pipeline_parallel"] > 1:
            self.assertEqual(par["pipeline_parallel_microbatch_size"], p["batch_size"])
            self.assertEqual(t["local_batch_size"] // par["pipeline_parallel_microbatch_size"],
                             lay["microbatches"])
            self.assertEqual(par["pipeline_parallel_schedule"],
                             "Interleaved1F1B" if lay["virtual_stages"] > 1 else "1F1B")
            parts = par["module_fqns_per_model_part"]
            self.assertEqual(len(parts), lay["pipeline_parallel"] * lay["virtual_stages"])
            self.assertEqual([sum(m.startswith("layers.") for m in part) for part in parts],
                             [int(n) for n in lay["stage_layers"].split(",")])
            flat = [m for part in parts for m in part]
            layers = ["layers.%d" % i for i in range(got["layers"])]
            self.assertEqual(flat, ["tok_embeddings"] + layers + ["norm", "lm_head"])
        return lay

    def test_qwen3_235b_on_8_nodes(self):
        lay = self.check("qwen3-235b-a22b")
        # a layout in more than data parallelism: the 128 experts over an expert-parallel group
        self.assertGreater(lay["expert_parallel"], 1)
        self.assertGreater(lay["tensor_parallel"] * lay["pipeline_parallel"], 1)

    def test_interleaved_stages_of_a_dense_model(self):
        self.assertEqual(self.check("llama-3.1-8b")["virtual_stages"], 2)

    def test_deepseek_v3_uneven_stages(self):
        lay = self.check("deepseek-v3")
        self.assertGreater(lay["pipeline_parallel"], 1)


MEGATRON = os.environ.get("OOMLESS_MEGATRON_SRC")
MEGATRON_REASON = (None if oomless_bin() else "no oomless binary (build first)") or (
    None if MEGATRON and os.path.isfile(os.path.join(MEGATRON, "megatron", "training",
                                                     "arguments.py"))
    else "no Megatron-LM checkout (OOMLESS_MEGATRON_SRC)")

# megatron.training's package __init__ (the trainer: it imports triton, which has no CPU wheel)
# is bypassed: arguments.py is loaded alone, with its print helpers, the GPU's architecture
# (Hopper) and update_use_dist_ckpt (common_utils.py's one line) stubbed; the pipeline schedules'
# triton kernel module and the hybrid (Mamba) model builder (SSM kernels in triton) are mocked;
# typing.override is Python 3.12's
MEGATRON_CHECK = r"""
import json, os, re, shlex, sys, types, typing
from unittest import mock
pkg = types.ModuleType("megatron.training")
pkg.__path__ = [os.path.join("megatron", "training")]
sys.modules["megatron.training"] = pkg
utils = types.ModuleType("megatron.training.utils")
utils.get_device_arch_version = lambda: 9
utils.is_rank0 = lambda: False
utils.print_rank_0 = utils.warn_rank_0 = lambda *a, **k: None
utils.update_use_dist_ckpt = lambda a: setattr(a, "use_dist_ckpt", a.ckpt_format != "torch")
sys.modules["megatron.training.utils"] = utils
gv = types.ModuleType("megatron.training.global_vars")
gv.set_global_variables = lambda *a, **k: None
sys.modules["megatron.training.global_vars"] = gv
sys.modules["megatron.core.transformer.moe.ops.paged_stash"] = mock.MagicMock()
sys.modules["megatron.training.models.hybrid"] = mock.MagicMock()
typing.override = lambda f: f
sys.path.insert(0, os.getcwd())
from megatron.core.transformer.enums import LayerType
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
from megatron.training.arguments import parse_args, validate_args
keys = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size", "expert_model_parallel_size",
        "expert_tensor_parallel_size", "context_parallel_size", "data_parallel_size",
        "sequence_parallel", "micro_batch_size", "global_batch_size", "seq_length",
        "recompute_granularity", "recompute_method", "recompute_num_layers",
        "optimizer_cpu_offload", "optimizer_offload_fraction", "use_distributed_optimizer")
out = {}
for name, path, model, world in json.loads(sys.argv[1]):
    text = open(path).read()
    plan = []
    for block in re.findall(r"=\(\n(.*?)\n\)", text, re.S):
        for line in block.splitlines():
            plan += shlex.split(line)
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    for var, value in re.findall(r"^(?:srun )?(?:env )?([A-Z_]+)=(\S+) torchrun", text, re.M):
        os.environ[var] = value
    os.environ["WORLD_SIZE"], os.environ["RANK"] = str(world), "0"
    sys.argv = ["pretrain_gpt.py"] + shlex.split(model) + plan
    a = validate_args(parse_args())
    got = {k: getattr(a, k, None) for k in keys}
    if a.pipeline_model_parallel_layout is not None:  # decoder layers of each virtual stage
        lay = PipelineParallelLayerLayout(str(a.pipeline_model_parallel_layout),
                                          a.pipeline_model_parallel_size).layout
        got["stage_layers"] = [sum(t == LayerType.decoder for t in lay[p][v])
                               for v in range(len(lay[0])) for p in range(len(lay))]
    out[name] = got
print(json.dumps(out))
"""

# the model's own arguments (MODEL_ARGS), from each config.json
MEGATRON_MODELS = {
    "qwen3-235b-a22b": "--num-layers 94 --hidden-size 4096 --ffn-hidden-size 12288 "
    "--num-attention-heads 64 --group-query-attention --num-query-groups 4 --kv-channels 128 "
    "--qk-layernorm --num-experts 128 --moe-ffn-hidden-size 1536 --moe-router-topk 8 "
    "--max-position-embeddings 40960 --vocab-size 151936 --swiglu --normalization RMSNorm "
    "--position-embedding-type rope --untie-embeddings-and-output-weights",
    "deepseek-v3": "--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 "
    "--num-attention-heads 128 --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 "
    "--qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --num-experts 256 "
    "--moe-ffn-hidden-size 2048 --moe-router-topk 8 --moe-shared-expert-intermediate-size 2048 "
    "--moe-layer-freq ([0]*3+[1]*58) --max-position-embeddings 163840 --vocab-size 129280 "
    "--swiglu --normalization RMSNorm --position-embedding-type rope "
    "--untie-embeddings-and-output-weights",
    "llama-3.1-70b": "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 "
    "--num-attention-heads 64 --group-query-attention --num-query-groups 8 "
    "--max-position-embeddings 131072 --vocab-size 128256 --swiglu --normalization RMSNorm "
    "--position-embedding-type rope --untie-embeddings-and-output-weights",
}
MEGATRON_PLANS = {
    # the acceptance plan: SP, an uneven interleaved split, experts over 2 GPUs
    "qwen3-235b-a22b": ["--model", "qwen3-235b-a22b", "--nodes", "8", "--gpus-per-node", "8",
                        "--gpu", "h100"],
    # only with the optimizer's states on the CPU: distributed optimizer, full recomputation
    "deepseek-v3": ["--model", "deepseek-v3", "--nodes", "8", "--gpus-per-node", "8",
                    "--gpu", "h100", "--allow", "checkpointing,sharding,layout,offload"],
    # an even interleaved split: virtual stages without a layout
    "llama-3.1-70b": ["--model", "llama-3.1-70b", "--nodes", "4", "--gpus-per-node", "8",
                      "--gpu", "h100", "--engine", "megatron"],
}


@unittest.skipIf(MEGATRON_REASON, MEGATRON_REASON or "")
class MegatronArguments(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        """each plan's JSON and what Megatron-LM made of its arguments, in one interpreter"""
        cls.docs, jobs = {}, []
        with tempfile.TemporaryDirectory() as d:
            for name, args in MEGATRON_PLANS.items():
                cls.docs[name] = json.loads(plan_format(args, "json"))
                path = os.path.join(d, name + ".sh")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(plan_format(args, "megatron"))
                jobs.append([name, path, MEGATRON_MODELS[name] + " --train-iters 10 --lr 1e-4",
                             cls.docs[name]["layout"]["gpus"]])
            out = subprocess.run([sys.executable, "-c", MEGATRON_CHECK, json.dumps(jobs)],
                                 cwd=MEGATRON, capture_output=True, text=True, timeout=300,
                                 env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        if out.returncode:
            raise AssertionError("Megatron-LM refused a plan:\n" + out.stderr[-3000:])
        cls.got = json.loads(out.stdout.strip().splitlines()[-1])

    def check(self, name):
        p, lay = self.docs[name]["plan"], self.docs[name]["layout"]
        a = self.got[name]
        self.assertEqual(a["tensor_model_parallel_size"], lay["tensor_parallel"])
        self.assertEqual(a["sequence_parallel"], lay["sequence_parallel"])
        self.assertEqual(a["pipeline_model_parallel_size"], lay["pipeline_parallel"])
        self.assertEqual(a["virtual_pipeline_model_parallel_size"] or 1, lay["virtual_stages"])
        self.assertEqual(a["expert_model_parallel_size"], max(1, lay["expert_parallel"]))
        self.assertEqual(a["context_parallel_size"], lay["context_parallel"])
        self.assertEqual(a["data_parallel_size"], lay["data_parallel"])
        self.assertEqual(a["micro_batch_size"], p["batch_size"])
        self.assertEqual(a["global_batch_size"], p["effective_batch"])
        self.assertEqual(a["seq_length"], p["seq_len"])
        per_step = a["micro_batch_size"] * a["data_parallel_size"]
        self.assertEqual(a["global_batch_size"] // per_step, lay["microbatches"])
        self.assertEqual(a["recompute_granularity"],
                         None if p["checkpointing"] == "none" else p["checkpointing"])
        self.assertEqual(a["use_distributed_optimizer"], p["sharding"] == "zero1")
        self.assertEqual(a["optimizer_cpu_offload"], lay["optimizer_cpu_offload"])
        if lay["optimizer_cpu_offload"]:
            self.assertEqual(a["optimizer_offload_fraction"], 1.0)
        if "stage_layers" in a:
            self.assertEqual(a["stage_layers"], [int(n) for n in lay["stage_layers"].split(",")])
        return a, lay

    def test_qwen3_235b_on_8_nodes(self):
        a, lay = self.check("qwen3-235b-a22b")
        self.assertIn("stage_layers", a)
        self.assertGreater(lay["expert_parallel"], 1)

    def test_deepseek_v3_with_the_optimizer_on_the_cpu(self):
        a, lay = self.check("deepseek-v3")
        self.assertTrue(a["optimizer_cpu_offload"])

    def test_even_interleaved_split(self):
        a, lay = self.check("llama-3.1-70b")
        self.assertEqual(a["virtual_pipeline_model_parallel_size"], 2)
        self.assertNotIn("stage_layers", a)


if __name__ == "__main__":
    unittest.main()
