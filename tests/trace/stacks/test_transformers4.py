"""transformers 4.57 traced by the transformers tracer, in build/venv-transformers4: the stack
detected, its rotary embeddings' autocast regions on the meta device, its per-expert loop
refused with the reason, the chunked loss on GPT-2 (whose decoder 4.57's get_decoder misses)."""
import json
import os
import sys
import tempfile
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")
sys.path.insert(0, os.path.join(SRC, "bindings", "python"))

from oomless.trace import TraceError, document  # noqa: E402

MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
       "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
       "num_experts_per_tok": 2, "vocab_size": 512, "max_position_embeddings": 1024,
       "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []}


class Transformers4Trace(unittest.TestCase):
    def test_llama_traces_with_its_autocast_regions(self):
        # LlamaRotaryEmbedding opens torch.autocast(device_type="meta", enabled=False)
        r = document("llama-3.2-1b", method="full", precision="amp-bf16", batch=1, seq=64,
                     steps=1)
        self.assertEqual(r["stack"]["name"], "transformers-4")
        self.assertIn("transformers 4.57.6", r["stack"]["version"])
        self.assertEqual(r["peak_phase"], "optimizer")

    def test_chunked_loss_finds_gpt2s_decoder(self):
        # 4.57's get_decoder answers GPT2LMHeadModel itself; its decoder is `transformer`
        r = document("gpt2", method="lora", precision="bf16", loss="chunked", batch=1, seq=64,
                     steps=1)
        self.assertEqual(r["stack"]["name"], "transformers-4")
        self.assertEqual(r["peak_phase"], "backward")

    def test_per_expert_loop_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "config.json")
            with open(path, "w") as f:
                json.dump(MOE, f)
            with self.assertRaisesRegex(TraceError, "reads tensor values"):
                document(path, method="lora", precision="bf16", batch=1, seq=32, steps=1)


if __name__ == "__main__":
    unittest.main()
