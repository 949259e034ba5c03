"""`oomless plan --format trl` read by TRL itself: the YAML becomes a GRPOConfig (TRL's own
validation runs in its __post_init__), and what TRL derives from it, the generation batch and
the max_num_seqs it gives its colocated vLLM engine, agrees with the plan's JSON."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import missing, oomless_bin, plan_format as plan  # noqa: E402

REASON = missing("trl") or missing("yaml") or (
    None if oomless_bin() else "no oomless binary (build first)")

BASE = ["--model", "qwen2.5-1.5b", "--objective", "grpo", "--rollout", "vllm-colocate",
        "--seq", "1024", "--gpu", "a100-80gb", "--target-effective-batch", "64"]


@unittest.skipIf(REASON, REASON or "")
class TrlConfig(unittest.TestCase):
    def check(self, extra):
        import torch
        import yaml
        from trl import GRPOConfig

        keys = yaml.safe_load(plan(BASE + extra, "trl"))
        p = json.loads(plan(BASE + extra, "json"))
        with tempfile.TemporaryDirectory() as out:
            # bf16 is refused by TrainingArguments on a machine without a GPU
            c = GRPOConfig(output_dir=out, use_cpu=not torch.cuda.is_available(), **keys)
        self.assertTrue(c.use_vllm)
        self.assertEqual(c.vllm_mode, "colocate")
        self.assertEqual(c.vllm_gpu_memory_utilization, p["rollout"]["gpu_memory_utilization"])
        self.assertEqual(c.vllm_enable_sleep_mode, p["rollout"]["sleep_mode"] > 0)
        self.assertEqual(c.per_device_train_batch_size, p["plan"]["batch_size"])
        self.assertEqual(c.gradient_accumulation_steps, p["plan"]["grad_accum"])
        # one generation batch per optimizer step: the effective batch, in completions
        self.assertEqual(c.generation_batch_size, p["plan"]["effective_batch"])
        # VLLMGeneration's max_num_seqs (trl/trainer/grpo_trainer.py)
        self.assertEqual(c.per_device_train_batch_size * c.vllm_tensor_parallel_size *
                         c.steps_per_generation, p["rollout"]["max_num_seqs"])
        self.assertEqual(c.vllm_max_model_length, p["rollout"]["max_model_len"])
        self.assertEqual(c.max_completion_length, 512)
        self.assertEqual(c.num_generations, 8)
        return c

    def test_awake(self):
        self.check([])

    def test_sleep_mode(self):
        c = self.check(["--sleep-mode", "2"])
        self.assertTrue(c.vllm_enable_sleep_mode)


if __name__ == "__main__":
    unittest.main()
