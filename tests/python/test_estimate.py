"""oomless.estimate() returns the CLI's document; errors map to classes; nothing leaks."""
import json
import os
import subprocess
import unittest

import oomless

BIN = os.environ["OOMLESS_BIN"]


def cli(*args):
    proc = subprocess.run([BIN, *args], capture_output=True, text=True)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class EstimateTest(unittest.TestCase):
    def setUp(self):
        os.environ["OOMLESS_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"

    def test_same_numbers_as_cli(self):
        cases = [
            (dict(model="llama-3.1-8b", method="lora", batch=1, seq=2048, checkpointing="full"),
             ["--model", "llama-3.1-8b", "--method", "lora", "--batch", "1", "--seq", "2048",
              "--checkpointing", "full"]),
            (dict(model="gpt2", batch=8, seq=1024, precision="amp-bf16", optimizer="adamw-8bit"),
             ["--model", "gpt2", "--batch", "8", "--seq", "1024", "--precision", "amp-bf16",
              "--optimizer", "adamw-8bit"]),
            (dict(model="mistral-7b", method="inference", batch=4, seq=4096, gpu="a100-80gb"),
             ["--model", "mistral-7b", "--method", "inference", "--batch", "4", "--seq", "4096",
              "--gpu", "a100-80gb"]),
            (dict(model="llama-2-7b", gpus=8, sharding="zero3", vram="80",
                  vram_safety_margin="2048"),
             ["--model", "llama-2-7b", "--gpus", "8", "--sharding", "zero3", "--vram", "80",
              "--vram-safety-margin", "2048"]),
        ]
        for kwargs, args in cases:
            with self.subTest(args=args):
                rc, doc = cli("estimate", "--json", *args)
                self.assertEqual(rc, 0)
                self.assertEqual(oomless.estimate(**kwargs), doc)

    def test_budget_and_fit(self):
        doc = oomless.estimate(model="llama-3.1-8b", batch=8, seq=4096, gpu="rtx-4090")
        self.assertFalse(doc["budget"]["fits"])
        self.assertGreater(doc["memory"]["device_peak"], doc["budget"]["usable_bytes"])
        self.assertNotIn("budget", oomless.estimate(model="gpt2"))

    def test_errors(self):
        with self.assertRaises(oomless.InvalidValueError) as cm:
            oomless.estimate(model="gpt2", batch="banana")
        self.assertIn("banana", str(cm.exception))
        with self.assertRaises(oomless.NotFoundError):
            oomless.estimate(model="no-such-model")
        with self.assertRaises(oomless.InvalidValueError):
            oomless.estimate(model="llama-3.1-8b", method="qlora", precision="fp32")
        with self.assertRaises(oomless.InvalidValueError):
            oomless.estimate(model="gpt2", gpus=0)
        with self.assertRaises(oomless.NotFoundError) as cm:
            oomless.estimate(model="gpt2", no_such_option=1)
        self.assertIn("no_such_option", str(cm.exception))

    def test_workload_close_is_idempotent(self):
        w = oomless.Workload(model="gpt2")
        w.close()
        w.close()
        with self.assertRaises(oomless.InvalidValueError):
            w.handle

    def test_models_and_options(self):
        models = oomless.list_models()
        # a list of {name, family, params}, one per preset, the CLI's --list-models --json
        self.assertIsInstance(models, list)
        self.assertGreater(len(models), 10)
        for m in models:
            self.assertEqual(sorted(m), ["family", "name", "params"], m)
        names = [m["name"] for m in models]
        self.assertEqual(len(set(names)), len(names), "preset names are unique")
        llama = [m for m in models if m["name"] == "llama-3.1-8b"]
        # Llama 3.1 8B: 8,030,261,248 parameters as published with the model
        self.assertEqual(llama, [{"name": "llama-3.1-8b", "family": "llama", "params": 8030261248}])
        rc, doc = cli("estimate", "--list-models", "--json")
        self.assertEqual(rc, 0)
        self.assertEqual(models, doc)
        self.assertIn(("lora-rank", "R", "LoRA rank (default 16)"), oomless.workload_options())

    def test_no_leak_over_10000_calls(self):
        for _ in range(200):  # warm up caches and the allocator
            oomless.estimate(model="gpt2", batch=4, seq=512)
        before = rss_kib()
        for i in range(10000):
            oomless.estimate(model="gpt2", batch=1 + i % 8, seq=512)
            if i % 7 == 0:
                with self.assertRaises(oomless.InvalidValueError):
                    oomless.estimate(model="gpt2", seq="-1")
        grown = rss_kib() - before
        self.assertLess(grown, 4096, "RSS grew by %d KiB over 10,000 calls" % grown)


if __name__ == "__main__":
    unittest.main()
