"""The multi-node layouts `oomless plan --format torchtitan-parallel` writes, read by torchtitan
0.3.0's own ConfigManager as `torchtitan.train --module M --config plan` does (config/manager.py:
the module imported, the function called, the Trainer.Config it returns put through tyro and
Trainer.Config's checks): every degree, the schedule, the micro-batch, each virtual stage's
modules and the batch agree with the plan's JSON, and the model is the planned one.

torchtitan lives in its own environment (`OOMLESS_TORCHTITAN_PYTHON`, else build/venv-titan);
without it the test skips. Its MoE dispatcher imports triton (no CPU wheel) through
torchtitan/distributed/minimal_async_ep/kernels.py: that one module is stubbed, nothing else."""
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
        os.path.dirname(oomless_bin() or os.path.join(SRC, "build", "oomless")), "venv-titan",
        "bin", "python")
    return path if os.access(path, os.X_OK) else None


TITAN = titan_python()
REASON = (None if oomless_bin() else "no oomless binary (build first)") or \
    (None if TITAN else "no torchtitan environment (OOMLESS_TORCHTITAN_PYTHON or build/venv-titan)")

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


if __name__ == "__main__":
    unittest.main()
