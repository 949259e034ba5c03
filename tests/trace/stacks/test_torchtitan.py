"""torchtitan's own code traced (oomless/trace/titan.py), in build/venv-torchtitan: the stack
detected, FSDP2 on one rank, weight tying kept, the refusals."""
import os
import sys
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")
sys.path.insert(0, os.path.join(SRC, "bindings", "python"))

from oomless.trace import TraceError, document  # noqa: E402

W = dict(method="full", precision="amp-bf16", batch=1, seq=128, steps=1)


class TorchtitanTrace(unittest.TestCase):
    def test_llama_3_2_1b_ties_embedding_and_head(self):
        r = document("llama-3.2-1b", checkpointing="full", **W)
        self.assertEqual(r["stack"]["name"], "torchtitan")
        # 1.24 B parameters: the 128256 x 2048 embedding is the head's (Decoder.init_states)
        self.assertEqual(r["params"]["total"], 1235814400)
        # fp32 parameters, FSDP2's fp32 gradients and two AdamW states: the step's floor
        self.assertGreaterEqual(r["memory"]["allocated_peak"], 4 * 4 * 1235814400)

    def test_op_sac_keeps_more_than_full(self):
        # 4096 tokens: at 512 the gradients and states make the peak whatever is checkpointed
        # (10.17 GiB each; the activations are freed before it)
        full = document("qwen3-0.6b", checkpointing="full", loss="standard",
                        **dict(W, seq=4096))["memory"]
        sac = document("qwen3-0.6b", checkpointing="op-sac", loss="standard",
                       **dict(W, seq=4096))["memory"]
        none = document("qwen3-0.6b", checkpointing="none", loss="standard",
                        **dict(W, seq=4096))["memory"]
        self.assertLess(full["allocated_peak"], sac["allocated_peak"])
        self.assertLess(sac["allocated_peak"], none["allocated_peak"])

    def test_refusals(self):
        with self.assertRaisesRegex(TraceError, "method full"):
            document("qwen3-0.6b", **dict(W, method="lora", precision="bf16"))
        with self.assertRaisesRegex(TraceError, "layer-level selective mode is gone"):
            document("qwen3-0.6b", checkpointing="nth:2", **W)


if __name__ == "__main__":
    unittest.main()
