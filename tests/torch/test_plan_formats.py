"""Each format of `oomless plan` read by the framework it is for, at the pinned versions:
`--format accelerate` by accelerate's own loader and launcher (the config file, the environment
`accelerate launch` makes of it, the FSDP plugin built from that); `--format args` by
transformers' HfArgumentParser into TrainingArguments, with no deprecated key; `--format trl`
(SFT packing) into TRL's SFTConfig; `--format torchtitan` for 0.3 by torchtitan's own config
classes and tyro (in the environment of `make venv-torchtitan`), for 0.2 as TOML; `--format
torchtune` by torchtune's config loader over an upstream recipe config (`make venv-torchtune`).
Each setting agrees with the plan's JSON, and each names the framework's version it follows."""
import json
import os
import shlex
import sys
import tempfile
import tomllib
import unittest
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (SRC, framework_python, missing, oomless_bin,  # noqa: E402
                    plan_format as plan, plan_stderr, run_python)

UPSTREAM = os.path.join(SRC, "tests", "data", "apply", "upstream")

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
                t = tomllib.loads(plan(args + ["--format-version", "0.2.2"], "torchtitan"))
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


TITAN, TITAN_REASON = framework_python("OOMLESS_TORCHTITAN_PYTHON", "venv-torchtitan", "torchtitan")

# In torchtitan's environment: the plan's module applied to a Trainer.Config made of
# torchtitan's own config classes, then read back through tyro as torchtitan.train's
# ConfigManager does (a wrong key, type or value fails there). Trainer.Config itself lives in
# torchtitan/trainer.py, which imports triton (no CPU wheel): its fields are read from the
# source and must be the three the plan sets, of those types.
TITAN_CHECK = r"""
import ast, dataclasses, json, os, sys
from dataclasses import dataclass, field
import torchtitan, tyro
from torchtitan.config import ParallelismConfig, TrainingConfig
from torchtitan.config.manager import custom_registry
from torchtitan.distributed.activation_checkpoint import ActivationCheckpointingConfig, SelectiveAC
tree = ast.parse(open(os.path.join(os.path.dirname(torchtitan.__file__), "trainer.py")).read())
trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
config = next(n for n in trainer.body if isinstance(n, ast.ClassDef) and n.name == "Config")
fields = {n.target.id: ast.unparse(n.annotation) for n in config.body if isinstance(n, ast.AnnAssign)}
want = {"training": "TrainingConfig", "parallelism": "ParallelismConfig",
        "activation_checkpoint": "ActivationCheckpointingConfig"}
assert all(fields.get(k) == v for k, v in want.items()), fields

@dataclass(kw_only=True, slots=True)
class Config:
    training: TrainingConfig = field(default_factory=TrainingConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    activation_checkpoint: ActivationCheckpointingConfig = field(default_factory=SelectiveAC.Config)

ns = {}
exec(compile(open(sys.argv[1]).read(), "oomless_plan.py", "exec"), ns)
c = tyro.cli(Config, args=[], default=ns["plan"](Config()), registry=custom_registry)
ac = c.activation_checkpoint
print(json.dumps({"training": dataclasses.asdict(c.training),
                  "parallelism": dataclasses.asdict(c.parallelism),
                  "ac": None if ac is None else type(ac).__qualname__}))
"""


@unittest.skipIf(TITAN_REASON or oomless_bin() is None, TITAN_REASON or "no oomless binary")
class Torchtitan03(unittest.TestCase):
    def check(self, args):
        p = json.loads(plan(args, "json"))["plan"]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "oomless_plan.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(plan(args, "torchtitan"))
            got = run_python(TITAN, TITAN_CHECK, path)
        t, par = got["training"], got["parallelism"]
        self.assertEqual(t["local_batch_size"], p["batch_size"])
        self.assertEqual(t["seq_len"], p["seq_len"])
        dp = par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"]
        self.assertEqual(dp, p["gpus"])
        # torchtitan's accumulation: global / (local x data-parallel degree) (trainer.py)
        self.assertEqual(t["global_batch_size"] // (t["local_batch_size"] * dp), p["grad_accum"])
        self.assertEqual(t["enable_cpu_offload"], p["offload"] != "none")
        self.assertEqual(t["mixed_precision_param"],
                         "bfloat16" if p["precision"] in ("bf16", "4bit", "int8") else "float32")
        self.assertEqual(t["dtype"], "bfloat16" if p["exact_precision"] == "bf16" else "float32")
        if p["sharding"] != "none":
            self.assertEqual(par["fsdp_reshard_after_forward"],
                             "always" if p["sharding"] == "zero3" else "never")
        want = {"none": None, "full": "FullAC.Config", "selective": "FullAC.Config",
                "op-sac": "SelectiveAC.Config"}[p["checkpointing"]]
        self.assertEqual(got["ac"], want)
        self.assertIn("the keys of torchtitan 0.3", plan_stderr(args, "torchtitan"))
        return p

    def test_config_function_follows_the_plan(self):
        for name, args in PLANS.items():
            with self.subTest(plan=name):
                self.check(args)

    def test_op_level_checkpointing_and_pure_bf16(self):
        p = self.check(["--model", "qwen3-1.7b", "--gpu", "a100-40gb", "--seq", "4096",
                        "--gpus", "2", "--precision", "bf16", "--checkpointing", "op-sac",
                        "--target-effective-batch", "32"])
        self.assertEqual(p["checkpointing"], "op-sac")


TUNE, TUNE_REASON = framework_python("OOMLESS_TORCHTUNE_PYTHON", "venv-torchtune", "torchtune")

# In torchtune's environment: a recipe config and key=value overrides through `tune run`'s own
# parser and merge (torchtune/config/_parse.py, _utils.py); the config it hands the recipe
TUNE_CHECK = r"""
import json, sys
from omegaconf import OmegaConf
from torchtune.config._parse import TuneRecipeArgumentParser
from torchtune.config._utils import _merge_yaml_and_cli_args
overrides = open(sys.argv[2]).read().split() if len(sys.argv) > 2 else []
yaml_args, cli_args = TuneRecipeArgumentParser().parse_known_args(["--config", sys.argv[1]] + overrides)
print(json.dumps(OmegaConf.to_container(_merge_yaml_and_cli_args(yaml_args, cli_args))))
"""


def tune_config(path, overrides=None):
    """The config torchtune's `tune run` makes of `path` and the overrides' text."""
    if overrides is None:
        return run_python(TUNE, TUNE_CHECK, path)
    with tempfile.TemporaryDirectory() as d:
        o = os.path.join(d, "overrides")
        with open(o, "w", encoding="utf-8") as f:
            f.write(overrides)
        return run_python(TUNE, TUNE_CHECK, path, o)


@unittest.skipIf(TUNE_REASON or oomless_bin() is None, TUNE_REASON or "no oomless binary")
class Torchtune(unittest.TestCase):
    CONFIG = os.path.join(UPSTREAM, "torchtune", "1B_lora_single_device.yaml")

    def check(self, args):
        p = json.loads(plan(args, "json"))
        c = tune_config(self.CONFIG, plan(args, "torchtune"))
        k = p["plan"]
        self.assertEqual(c["batch_size"], k["batch_size"])
        self.assertEqual(c["gradient_accumulation_steps"], k["grad_accum"])
        self.assertEqual(c["tokenizer"]["max_seq_len"], k["seq_len"])
        self.assertEqual(c["dataset"]["packed"], p.get("packing") is not None)
        self.assertEqual(c["dtype"], "fp32" if k["precision"] == "fp32" else "bf16")
        ck = k["checkpointing"]
        self.assertEqual(c["enable_activation_checkpointing"],
                         ck != "none" and not ck.startswith("nth:") and ck != "op-sac")
        self.assertEqual(c["enable_activation_offloading"], ck.endswith("+offload"))
        # the rest of the recipe's config is the upstream file's
        self.assertEqual(c["model"]["lora_rank"], 64)
        self.assertIn("the keys of torchtune 0.6", plan_stderr(args, "torchtune"))
        return c

    def test_overrides_follow_the_plan(self):
        self.check(["--model", "llama-3.2-1b", "--method", "lora", "--seq", "2048",
                    "--gpu", "rtx-4090", "--precision", "bf16"])
        self.check(["--model", "llama-3.2-1b", "--method", "lora", "--seq", "8192",
                    "--gpu", "rtx-4090", "--precision", "bf16", "--checkpointing", "full+offload"])
        c = self.check(["--model", "llama-3.2-1b", "--method", "lora", "--seq", "4096",
                        "--gpu", "h100", "--precision", "bf16", "--packing", "block-mask",
                        "--tokens-per-batch", "16384"])
        self.assertTrue(c["dataset"]["packed"])

    def test_apply_preset_writes_what_the_overrides_say(self):
        # `oomless apply --preset torchtune` on the upstream file, read by torchtune's loader,
        # holds what tune run makes of the same file with --format torchtune's overrides
        import shutil
        import subprocess
        args = ["--model", "llama-3.2-1b", "--method", "lora", "--seq", "2048", "--gpu", "rtx-4090",
                "--precision", "bf16", "--checkpointing", "full"]
        with tempfile.TemporaryDirectory() as d:
            doc, cfg = os.path.join(d, "plan.json"), os.path.join(d, "config.yaml")
            with open(doc, "w", encoding="utf-8") as f:
                f.write(plan(args, "json"))
            shutil.copy(self.CONFIG, cfg)
            subprocess.run([oomless_bin(), "apply", "--plan", doc, "--preset", "torchtune",
                            "--no-backup", cfg], check=True, capture_output=True, timeout=60)
            applied = tune_config(cfg)
        overridden = tune_config(self.CONFIG, plan(args, "torchtune"))
        for key in ("batch_size", "gradient_accumulation_steps", "enable_activation_checkpointing",
                    "enable_activation_offloading"):
            self.assertEqual(applied[key], overridden[key], key)
        self.assertEqual(applied["tokenizer"]["max_seq_len"], overridden["tokenizer"]["max_seq_len"])
        self.assertTrue(applied["enable_activation_checkpointing"])

    def test_selective_checkpointing_of_the_distributed_recipes(self):
        c = self.check(["--model", "llama-3.2-1b", "--seq", "4096", "--gpu", "a100-40gb",
                        "--gpus", "2", "--precision", "bf16", "--checkpointing", "nth:2"])
        self.assertEqual((c["ac_mode"], c["ac_option"]), ("selective", 2))
        self.assertFalse(c["enable_activation_checkpointing"])


@unittest.skipIf(missing("transformers") or oomless_bin() is None,
                 missing("transformers") or "no oomless binary")
class TrainingArgumentsFlags(unittest.TestCase):
    """--format args through transformers' own argument parser: each flag is a field the
    installed transformers reads, none of them a deprecated one."""

    ARGS = ["--model", "llama-3.1-8b", "--method", "lora", "--seq", "4096", "--gpu", "a100-40gb",
            "--checkpointing", "every:2", "--target-effective-batch", "16"]

    def parse(self, flags):
        import transformers
        with tempfile.TemporaryDirectory() as d, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            parser = transformers.HfArgumentParser(transformers.TrainingArguments)
            args, = parser.parse_args_into_dataclasses(
                args=shlex.split(flags) + ["--output_dir", d, "--use_cpu", "--report_to", "none"])
        return args, [str(w.message) for w in caught if "deprecated" in str(w.message)]

    def test_the_keys_of_the_installed_transformers(self):
        import transformers
        p = json.loads(plan(self.ARGS, "json"))["plan"]
        args, deprecated = self.parse(plan(self.ARGS, "args"))
        self.assertEqual(deprecated, [])
        self.assertEqual(args.per_device_train_batch_size, p["batch_size"])
        self.assertEqual(args.gradient_accumulation_steps, p["grad_accum"])
        self.assertTrue(args.activation_checkpointing)
        self.assertEqual(args.activation_checkpointing_kwargs, {"every_n_layers": 2})
        self.assertIn("the keys of Hugging Face transformers %s"
                      % ".".join(transformers.__version__.split(".")[:2]),
                      plan_stderr(self.ARGS, "args"))

    def test_the_keys_of_an_older_transformers_still_read(self):
        # 4.x's switch: the installed transformers reads it as a deprecated alias
        old = ["full" if a == "every:2" else a for a in self.ARGS]
        args, deprecated = self.parse(plan(old + ["--format-version", "4.57"], "args"))
        self.assertTrue(args.activation_checkpointing)
        self.assertEqual(len(deprecated), 1, deprecated)


@unittest.skipIf(missing("trl") or missing("yaml") or oomless_bin() is None,
                 missing("trl") or missing("yaml") or "no oomless binary")
class TrlSft(unittest.TestCase):
    def test_sft_config_of_a_packed_plan(self):
        import torch
        import yaml
        from trl import SFTConfig
        args = ["--model", "llama-3.2-1b", "--gpu", "h100", "--seq", "4096", "--packing",
                "padding-free", "--tokens-per-batch", "16384", "--checkpointing", "full"]
        p = json.loads(plan(args, "json"))["plan"]
        text = plan(args, "trl")
        first, second = text.splitlines()[:2]  # the stack modelled, then the config's own line
        self.assertTrue(first.startswith("# memory modelled for the transformers stack"), first)
        self.assertTrue(second.startswith("# TRL 1.16 on Hugging Face transformers 5.23: SFTConfig"),
                        second)
        with tempfile.TemporaryDirectory() as d, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c = SFTConfig(output_dir=d, use_cpu=not torch.cuda.is_available(),
                          **yaml.safe_load(text))
        self.assertEqual([str(w.message) for w in caught if "deprecated" in str(w.message)], [])
        self.assertEqual(c.per_device_train_batch_size, p["batch_size"])
        self.assertEqual(c.gradient_accumulation_steps, p["grad_accum"])
        self.assertEqual(c.max_length, p["seq_len"])
        self.assertTrue(c.packing and c.padding_free)
        self.assertTrue(c.activation_checkpointing and c.gradient_checkpointing)


if __name__ == "__main__":
    unittest.main()
