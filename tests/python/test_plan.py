"""oomless.plan() returns the CLI's document, raises DoesNotFitError with the report, and the
HF/Lightning helpers accept its result."""
import json
import os
import subprocess
import unittest

import oomless
import oomless.hf
import oomless.lightning

BIN = os.environ["OOMLESS_BIN"]


def cli(*args):
    proc = subprocess.run([BIN, "plan", "--json", *args], capture_output=True, text=True)
    return proc.returncode, json.loads(proc.stdout)


class PlanTest(unittest.TestCase):
    def setUp(self):
        os.environ["OOMLESS_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
        os.environ.pop("OOMLESS_BATCH_SIZE", None)

    def test_same_as_cli(self):
        cases = [
            (dict(model="llama-3.1-8b", method="lora", seq=2048, gpu="rtx-4090"),
             ["--model", "llama-3.1-8b", "--method", "lora", "--seq", "2048", "--gpu", "rtx-4090"]),
            (dict(model="llama-2-7b", gpus=8, gpu="a100-80gb", seq=4096,
                  target_effective_batch=256),
             ["--model", "llama-2-7b", "--gpus", "8", "--gpu", "a100-80gb", "--seq", "4096",
              "--target-effective-batch", "256"]),
            (dict(model="gpt2", seq=1024, vram="8", vram_safety_margin="10%"),
             ["--model", "gpt2", "--seq", "1024", "--vram", "8", "--vram-safety-margin", "10%"]),
        ]
        for kwargs, args in cases:
            with self.subTest(args=args):
                rc, doc = cli(*args)
                self.assertEqual(rc, 0)
                self.assertEqual(oomless.plan(**kwargs), doc)

    def test_plan_keys_and_helpers(self):
        doc = oomless.plan(model="gpt2", seq=1024, gpu="rtx-3090", target_effective_batch=64)
        p = doc["plan"]
        for key in ("batch_size", "grad_accum", "effective_batch", "seq_len", "checkpointing",
                    "precision", "optimizer", "sharding", "offload", "gpus"):
            self.assertIn(key, p)
        self.assertEqual(p["batch_size"] * p["grad_accum"] * p["gpus"], 64)
        self.assertLessEqual(doc["memory"]["device_peak"], doc["budget"]["usable_bytes"])
        args = oomless.hf.training_arguments(doc)
        self.assertEqual(args["per_device_train_batch_size"], p["batch_size"])
        self.assertEqual(oomless.lightning.trainer_kwargs(doc)["accumulate_grad_batches"],
                         p["grad_accum"])

    def test_does_not_fit(self):
        with self.assertRaises(oomless.DoesNotFitError) as cm:
            oomless.plan(model="llama-2-70b", method="full", seq=4096, gpu="rtx-3060")
        self.assertEqual(cm.exception.code, 7)
        self.assertIn("memory", cm.exception.document)
        rc, doc = cli("--model", "llama-2-70b", "--method", "full", "--seq", "4096",
                      "--gpu", "rtx-3060")
        self.assertEqual(rc, 1)
        self.assertEqual(cm.exception.document, doc)

    def test_bad_values(self):
        with self.assertRaises(oomless.InvalidValueError) as cm:
            oomless.plan(model="gpt2", target_effective_batch="many")
        self.assertIn("many", str(cm.exception))
        with self.assertRaises(oomless.NotFoundError):
            oomless.plan(model="gpt2", gpu="no-such-gpu")
        names = [o[0] for o in oomless.plan_options()]
        self.assertIn("target-effective-batch", names)


if __name__ == "__main__":
    unittest.main()
