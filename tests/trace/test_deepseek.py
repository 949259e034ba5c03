"""DeepSeek-V3 (multi-head latent attention, experts after a dense layer) traced and estimated:
the parameters transformers counts, the latent KV cache, and the estimator's components."""
import json
import os
import subprocess
import sys
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")
sys.path.insert(0, os.path.join(SRC, "bindings", "python"))

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import peft  # noqa: F401
    from oomless.trace import Workload, trace_hf
    HAVE = True
except ImportError as exc:  # pragma: no cover
    HAVE, REASON = False, "torch/transformers/peft missing for %s (%s): `make venv`" % (
        sys.executable, exc)

# DeepSeek-V3's widths cut to 3 layers and 16 experts (the trace matrix's cell, bench/trace)
CONFIG = os.path.join(SRC, "bench", "trace", "deepseek-v3-small.json")
GIB = 2 ** 30


@unittest.skipUnless(HAVE, "" if HAVE else REASON)
class DeepSeek(unittest.TestCase):
    def both(self, lora_targets=None, **kw):
        # PEFT has no default targets for DeepSeek: the tracer is given the estimator's
        extra = {"lora_targets": lora_targets} if lora_targets else {}
        tr = trace_hf(Workload(CONFIG, **dict(kw, **extra)))
        args = [os.environ["OOMLESS_BIN"], "estimate", "--json", "--model", CONFIG]
        for k, v in kw.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        es = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        return tr, es

    def near(self, tr, es, key, rel):
        t, e = tr["memory"][key], es["memory"][key]
        self.assertLessEqual(abs(e - t), rel * t, "%s: estimate %.3f GiB, trace %.3f GiB"
                             % (key, e / GIB, t / GIB))

    def test_prefill_latent_cache_and_working_set(self):
        tr, es = self.both(method="inference", precision="bf16", batch=2, seq=1024)
        # the parameters as transformers builds the model (DeepseekV3ForCausalLM)
        self.assertEqual(es["params"]["total"], tr["params"]["total"])
        # 3 layers x 2 x 1024 tokens x (512-wide latent + 64-wide RoPE key) x 2 bytes
        self.assertEqual(tr["memory"]["kv_cache"], 3 * 2048 * 576 * 2)
        self.assertEqual(es["memory"]["kv_cache"], tr["memory"]["kv_cache"])
        self.assertEqual(es["kv_cache_layers"]["elements_per_token"], 576)
        self.assertTrue(es["kv_cache_layers"]["latent"])
        # the attention moment of the expanded heads: 0.77 GiB, the MLP's would be 0.6
        self.near(tr, es, "activations", 0.02)

    def test_lora_activations(self):
        tr, es = self.both(method="lora", precision="bf16", batch=4, seq=1024,
                           lora_targets="q_b_proj,kv_b_proj")
        self.assertEqual(es["workload"]["lora_targets"], "q_b_proj,kv_b_proj")
        self.assertEqual(tr["params"]["trainable"], es["params"]["trainable"])
        self.near(tr, es, "activations", 0.04)
        self.near(tr, es, "logits", 0.01)
        self.near(tr, es, "allocated_peak", 0.02)


if __name__ == "__main__":
    unittest.main()
