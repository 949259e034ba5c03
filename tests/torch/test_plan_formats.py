"""`oomless plan --format accelerate` read by accelerate's own loader and launcher (the config
file, the environment `accelerate launch` makes of it, the FSDP plugin built from that), and
`--format torchtitan` parsed as TOML: each setting agrees with the plan's JSON."""
import json
import os
import sys
import tempfile
import tomllib
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import missing, oomless_bin, plan_format as plan  # noqa: E402

REASON = missing("accelerate") or (None if oomless_bin() else "no oomless binary (build first)")

# a 7B full fine-tune on two 24 GB GPUs: ZeRO-3 with CPU offload and checkpointing; 8B on 8 A100s
PLANS = {
    "offload": ["--model", "llama-2-7b", "--seq", "1024", "--gpu", "rtx-4090", "--gpus", "2",
                "--allow", "checkpointing,offload,sharding", "--target-effective-batch", "8"],
    "fsdp": ["--model", "llama-3.1-8b", "--seq", "2048", "--gpu", "a100-80gb", "--gpus", "8",
             "--target-effective-batch", "64"],
    "single": ["--model", "qwen2.5-0.5b", "--seq", "512", "--gpu", "a100-80gb",
               "--target-effective-batch", "8"],
}


@unittest.skipIf(REASON, REASON or "")
class Accelerate(unittest.TestCase):
    def load(self, args):
        from accelerate.commands.config.config_args import load_config_from_file
        from accelerate.commands.launch import _validate_launch_command, launch_command_parser
        from accelerate.utils import prepare_multi_gpu_env
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "accelerate.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(plan(args, "accelerate"))
            cfg = load_config_from_file(path)  # refuses keys it does not know
            launch = launch_command_parser().parse_args(["--config_file", path, "train.py"])
            launch, _, _ = _validate_launch_command(launch)
            env = prepare_multi_gpu_env(launch) if cfg.num_processes > 1 else {}
        return cfg, env

    def fsdp_plugin(self, env):
        from accelerate.utils.dataclasses import FullyShardedDataParallelPlugin
        from accelerate.utils.environment import patch_environment
        with patch_environment(**{k: v for k, v in env.items() if k.startswith("FSDP")}):
            return FullyShardedDataParallelPlugin()

    def test_fsdp2_settings_follow_the_plan(self):
        for name in ("offload", "fsdp"):
            with self.subTest(plan=name):
                p = json.loads(plan(PLANS[name], "json"))["plan"]
                cfg, env = self.load(PLANS[name])
                self.assertEqual(cfg.distributed_type, "FSDP")
                self.assertEqual(cfg.num_processes, p["gpus"])
                self.assertEqual(cfg.num_machines, 1)
                self.assertEqual(cfg.mixed_precision, p["precision"])
                self.assertEqual(env["FSDP_VERSION"], "2")
                fsdp = self.fsdp_plugin(env)
                self.assertEqual(fsdp.fsdp_version, 2)
                self.assertEqual(fsdp.reshard_after_forward, p["sharding"] == "zero3")
                self.assertEqual(fsdp.cpu_offload is not None and
                                 type(fsdp.cpu_offload).__name__ == "CPUOffloadPolicy",
                                 p["offload"] != "none")
                self.assertEqual(fsdp.activation_checkpointing, p["checkpointing"] != "none")

    def test_one_gpu_without_sharding(self):
        p = json.loads(plan(PLANS["single"], "json"))["plan"]
        self.assertEqual(p["sharding"], "none")
        cfg, _ = self.load(PLANS["single"])
        self.assertEqual(cfg.distributed_type, "NO")
        self.assertEqual(cfg.num_processes, 1)
        self.assertEqual(cfg.fsdp_config, {})


@unittest.skipIf(oomless_bin() is None, "no oomless binary (build first)")
class Torchtitan(unittest.TestCase):
    def test_toml_follows_the_plan(self):
        for name, args in PLANS.items():
            with self.subTest(plan=name):
                p = json.loads(plan(args, "json"))["plan"]
                t = tomllib.loads(plan(args, "torchtitan"))
                self.assertEqual(set(t), {"training", "parallelism", "activation_checkpoint"})
                self.assertEqual(t["training"]["local_batch_size"], p["batch_size"])
                self.assertEqual(t["training"]["seq_len"], p["seq_len"])
                # torchtitan's accumulation: global / (local x data-parallel degree)
                par = t["parallelism"]
                dp = par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"]
                self.assertEqual(dp, p["gpus"])
                self.assertEqual(t["training"]["global_batch_size"] //
                                 (t["training"]["local_batch_size"] * dp), p["grad_accum"])
                self.assertEqual(t["activation_checkpoint"]["mode"], p["checkpointing"])
                self.assertEqual(t["training"]["enable_cpu_offload"], p["offload"] != "none")
                self.assertIn(t["training"]["mixed_precision_param"], ("bfloat16", "float32"))


if __name__ == "__main__":
    unittest.main()
