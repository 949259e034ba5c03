"""The mixture-of-experts path the tracer runs is the one a GPU runs, and the trace says which
(issue 33, "The trace itself"). transformers 5.23 dispatches an experts block to
config._experts_implementation: "grouped_mm" for a model loaded or built from a config (what
CUDA runs on compute capability 8.0 and later), "batched_mm" on request, and the eager loop for a
model constructed directly (data-dependent shapes the meta device cannot run)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_env import HAVE, REASON  # noqa: E402  (the package from the source tree)

if HAVE:
    import torch
    import transformers
    import peft
    from oomless.trace import document
    from oomless.trace.workload import _unpacked_batches
    from oomless.trace.emulate import CudaEmulation
    from oomless.trace.tracker import Tracker

MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
       "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
       "num_experts_per_tok": 2, "vocab_size": 512, "max_position_embeddings": 1024,
       "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
       "tie_word_embeddings": False}


def independent(impl, batch=1, seq=128):
    """transformers' own Qwen3-MoE on the meta device with the experts implementation `impl`,
    PEFT LoRA on the attention, one step as the Trainer runs it (the outputs dropped before the
    backward), under the same CUDA emulation: the allocated peak."""
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in MOE.items()
                                               if k != "architectures"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, dtype=torch.bfloat16, attn_implementation="sdpa", experts_implementation=impl)
    model = peft.get_peft_model(model, peft.LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "k_proj", "v_proj",
                                                                "o_proj"]))
    model.train()
    tracker = Tracker()
    tracker.register(list(model.parameters()) + list(model.buffers()))
    ids = torch.randint(0, 512, (batch, seq), device="meta")
    with _unpacked_batches(), tracker, CudaEmulation(None, tracker=tracker):
        tracker.set_phase("forward", 0)
        loss = model(input_ids=ids, labels=ids).loss
        tracker.set_phase("backward", 0)
        loss.backward()
    return tracker.peak(0)["allocated_peak"]


@unittest.skipUnless(HAVE, REASON)
class ExpertsPath(unittest.TestCase):
    def trace(self):
        import json
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "config.json")
            with open(path, "w") as f:
                json.dump(MOE, f)
            return document(path, method="lora", precision="bf16", batch=1, seq=128, steps=1,
                            lora_targets="q_proj,k_proj,v_proj,o_proj")

    def test_trace_runs_and_names_grouped_mm(self):
        r = self.trace()
        self.assertEqual(r["moe_experts"], "grouped_mm")
        # the same peak as transformers' own code on its grouped_mm path, and not the batched one
        self.assertEqual(r["memory"]["allocated_peak"], independent("grouped_mm"))
        self.assertNotEqual(r["memory"]["allocated_peak"], independent("batched_mm"))

    def test_dense_model_names_no_experts(self):
        r = document("gpt2", method="lora", precision="bf16", batch=1, seq=32, steps=1)
        self.assertNotIn("moe_experts", r)


if __name__ == "__main__":
    unittest.main()
