"""--checkpointing every:N (transformers' every_n_layers: layers 1, N+1, ..), nth:N (torchtitan's
layer-level selective AC: layers N, 2N, ..) and +offload (the checkpoints' inputs in host memory,
transformers' offload=True) traced, and the C estimator held to the trace per component on a
Llama-style model and GPT-2, full and LoRA (small batches: seconds); op-sac (torchtitan's op-level
selective policy on every layer) traced on Llama, Qwen3 and Gemma 3, full and LoRA."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_env import HAVE, REASON, assert_agrees  # noqa: E402

if HAVE:
    from oomless.trace import TraceError, Workload, trace_hf

POINT = {"batch": 2, "seq": 256}


@unittest.skipUnless(HAVE, REASON)
class CheckpointingTrace(unittest.TestCase):
    def trace(self, model, **kw):
        return trace_hf(Workload(model, **kw))["memory"]

    def test_layers_wrapped(self):
        # llama-3.2-1b has 16 layers: every:3 wraps 6 (1, 4, .., 16), nth:3 wraps 5 (3, .., 15)
        # (4 x 1024: the activations, not the optimizer step, make the peak)
        m, kw = "llama-3.2-1b", {"method": "full", "precision": "bf16", "batch": 4, "seq": 1024}
        none = self.trace(m, checkpointing="none", **kw)["activations"]
        full = self.trace(m, checkpointing="full", **kw)
        self.assertEqual(self.trace(m, checkpointing="every:1", **kw), full)
        layer = (none - full["activations"]) / 16  # what wrapping one layer frees
        every3 = self.trace(m, checkpointing="every:3", **kw)["activations"]
        nth3 = self.trace(m, checkpointing="nth:3", **kw)["activations"]
        self.assertAlmostEqual((nth3 - every3) / layer, 1.0, delta=0.05)
        self.assertAlmostEqual((none - nth3) / layer, 5.0, delta=0.25)
        # +offload: the 16 wrapped layers' inputs (4 x 1024 x 2048 bf16 each) leave the device
        off = self.trace(m, checkpointing="full+offload", **kw)["activations"]
        self.assertEqual(full["activations"] - off, 16 * 4 * 1024 * 2048 * 2)

    def test_estimator_agrees(self):
        for model in ("llama-3.2-1b", "gpt2"):
            for ck in ("every:2", "nth:3", "full+offload", "every:5+offload"):
                for method, precision in (("full", "amp-bf16"), ("full", "bf16"),
                                          ("lora", "bf16")):
                    assert_agrees(self, model, **dict(POINT, method=method,
                                                      precision=precision, checkpointing=ck))

    def test_op_sac_keeps(self):
        # Llama-3.2-1B (hidden 2048, 32 heads of 64, 8 key/value heads, MLP 8192), bf16: beside
        # each layer's input, the policy keeps the 1st, 3rd, 5th and 7th mm (q, v, gate, down:
        # 2048 + 512 + 8192 + 2048 elements per token) and flash attention's output (2048) and
        # fp32 log-sum-exp (32 heads), and its two RNG scalars (philox seed and offset, a 512-byte
        # block each); the k, o and up projections are recomputed
        kw = {"method": "full", "precision": "bf16", "batch": 4, "seq": 1024}
        full = self.trace("llama-3.2-1b", checkpointing="full", **kw)["activations"]
        op = self.trace("llama-3.2-1b", checkpointing="op-sac", **kw)["activations"]
        per_token = (2048 + 512 + 8192 + 2048 + 2048) * 2 + 32 * 4
        self.assertEqual(op - full, 16 * (4 * 1024 * per_token + 2 * 512))
        # LoRA on q_proj and v_proj (the default) runs A's then B's mm after each base mm: kept
        # are q, q.B, v, v.B, gate and down (the 1st, 3rd, .., 11th of 11), the B outputs in
        # fp32 (PEFT's adapter dtype)
        lora = dict(kw, method="lora")
        full = self.trace("llama-3.2-1b", checkpointing="full", **lora)["activations"]
        op = self.trace("llama-3.2-1b", checkpointing="op-sac", **lora)["activations"]
        per_token += (2048 + 512) * 4
        self.assertEqual(op - full, 16 * (4 * 1024 * per_token + 2 * 512))

    def test_op_sac_estimator_agrees(self):
        # full fine-tunes at 4 x 1024, where the activations make the peak; LoRA at 2 x 256
        cases = [("llama-3.2-1b", "full", "bf16", 4, 1024),
                 ("qwen3-0.6b", "full", "amp-bf16", 4, 1024),
                 ("llama-3.2-1b", "lora", "bf16", 2, 256), ("qwen3-0.6b", "lora", "bf16", 2, 256),
                 ("gemma-3-1b", "lora", "bf16", 2, 256)]
        for model, method, precision, batch, seq in cases:
            assert_agrees(self, model, method=method, precision=precision, batch=batch,
                          seq=seq, checkpointing="op-sac")

    def test_refused(self):
        for ck in ("every:0", "nth:x", "selective", "sometimes", "none+offload", "full+x",
                   "op-sac+offload"):
            with self.assertRaises(TraceError):
                trace_hf(Workload("gpt2", checkpointing=ck))


if __name__ == "__main__":
    unittest.main()
