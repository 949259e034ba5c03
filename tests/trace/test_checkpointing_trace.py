"""--checkpointing every:N (transformers' every_n_layers: layers 1, N+1, ..), nth:N (torchtitan's
layer-level selective AC: layers N, 2N, ..) and +offload (the checkpoints' inputs in host memory,
transformers' offload=True) traced, and the C estimator held to the trace per component on a
Llama-style model and GPT-2, full and LoRA (small batches: seconds)."""
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

    def test_refused(self):
        for ck in ("every:0", "nth:x", "selective", "sometimes", "none+offload", "full+x"):
            with self.assertRaises(TraceError):
                trace_hf(Workload("gpt2", checkpointing=ck))


if __name__ == "__main__":
    unittest.main()
