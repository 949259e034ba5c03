"""torchtune's own code traced (oomless/trace/tune.py), in build/venv-torchtune: the stack
detected, NF4 weights counted by what the device holds, the optimizer in the backward, the
refusals."""
import os
import sys
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")
sys.path.insert(0, os.path.join(SRC, "bindings", "python"))

import torch  # noqa: E402
from oomless.trace import TraceError, document  # noqa: E402

W = dict(batch=1, seq=64, steps=1, lora_rank=8, lora_dropout=0.0,
         lora_targets="q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")


class TorchtuneTrace(unittest.TestCase):
    def test_detected_and_named(self):
        r = document("qwen2.5-0.5b", method="lora", precision="bf16", **W)
        self.assertEqual(r["stack"]["name"], "torchtune")
        self.assertIn("torchtune 0.6.1", r["stack"]["version"])
        self.assertEqual(r["stack"]["models"], "torchtune 0.6.1, torchao 0.15.0")

    def test_nf4_base_counted_by_its_inner_tensors(self):
        # Qwen2.5-0.5B: 24 layers of q, k, v, o (896 x 896, 128 x 896 twice, 896 x 896) and the
        # MLP (3 x 4864 x 896) quantized; embedding (tied head) and norms stay bf16
        lora = document("qwen2.5-0.5b", method="lora", precision="bf16", **W)["memory"]
        qlora = document("qwen2.5-0.5b", method="qlora", **W)["memory"]
        quantized = 24 * (896 * 896 * 2 + 128 * 896 * 2 + 3 * 4864 * 896)
        saved = lora["weights"] - qlora["weights"]
        # bf16 (2 B) against NF4 codes (0.5 B) + int8 scalers per 64 + bf16 factors per 64 x 256
        per_weight = 2 - (0.5 + 1 / 64 + 2 / (64 * 256))
        self.assertAlmostEqual(saved / (quantized * per_weight), 1.0, delta=0.01)

    def test_optimizer_in_backward_frees_gradients(self):
        kw = dict(W, method="full", precision="bf16")
        plain = document("qwen2.5-0.5b", **kw)
        fused = document("qwen2.5-0.5b", optimizer_in_backward="yes", **kw)
        self.assertEqual(fused["workload"]["optimizer_in_backward"], "yes")
        self.assertNotEqual(fused["peak_phase"], "optimizer")
        self.assertLess(fused["memory"]["allocated_peak"], plain["memory"]["allocated_peak"])
        self.assertGreater(fused["memory"]["optimizer"], 0)

    def test_load_quantizes_as_the_estimate_counts(self):
        # loading a QLoRA base: torchao's copy_ into an NF4Tensor brings the bf16 weight to the
        # device (2n) and NF4Tensor.from_tensor quantizes it; the estimate's load transient is
        # those 2n and from_tensor's own bytes. Traced here on the meta device, from_tensor of
        # Llama 3.2 1B's largest linear (8192 x 2048) holds, beyond its input, what the
        # estimate counts to 2 %.
        from torchao.dtypes.nf4tensor import NF4Tensor
        import oomless
        from oomless.trace.tracker import Tracker
        n = 8192 * 2048
        tracker = Tracker()
        with tracker:
            x = torch.empty((8192, 2048), dtype=torch.bfloat16, device="meta")
            base = tracker.live_bytes()
            NF4Tensor.from_tensor(x, 64, 256)
        traced = max(total for _, total in tracker.timeline()) - base
        load = oomless.estimate(model="llama-3.2-1b", method="qlora", stack="torchtune")["load"]
        self.assertIn("torchao", load["how"])
        counted = load["transient_bytes"] - 2 * n
        self.assertAlmostEqual(counted / traced, 1.0, delta=0.02)

    def test_refusals(self):
        for kw, words in ((dict(checkpointing="nth:2"), "checkpointing 'nth:2'"),
                          (dict(lora_targets="q_proj,gate_proj"), "whole MLP")):
            with self.subTest(**kw), self.assertRaisesRegex(TraceError, words):
                document("qwen2.5-0.5b", method="lora", precision="bf16", **dict(W, **kw))
        with self.assertRaisesRegex(TraceError, "no torchtune builder"):
            document("gpt2", method="lora", precision="bf16", **W)
        with self.assertRaisesRegex(TraceError, "stack 'transformers' needs"):
            document("gpt2", method="lora", precision="bf16", stack="transformers", **W)


if __name__ == "__main__":
    torch.manual_seed(0)
    unittest.main()
