"""Every head the estimator accepts traced with its own targets (issue 33, "The trace itself"):
BertForSequenceClassification full fp32 at 4 x 512 once failed with "Expected input batch_size
(4) to match target batch_size (2048)" (the tokens were given as its labels)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_env import HAVE, REASON  # noqa: E402  (the package from the source tree)

if HAVE:
    import torch
    import transformers
    from oomless.trace import Workload, trace_hf

BERT = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 500,
        "max_position_embeddings": 512, "type_vocab_size": 2}
LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 500, "max_position_embeddings": 1024}
T5 = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 64,
      "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_heads": 4, "vocab_size": 500,
      "decoder_start_token_id": 0, "pad_token_id": 0}


@unittest.skipUnless(HAVE, REASON)
class Heads(unittest.TestCase):
    def trace(self, cfg, arch, **kw):
        cfg = dict(cfg, architectures=[arch]) if arch else cfg
        kw = dict(dict(method="full", precision="fp32", batch=4, seq=512, steps=1), **kw)
        return trace_hf(Workload("tiny", **kw), cfg_dict=cfg)

    def test_sequence_classifier_at_4_by_512(self):
        # the failing case of the issue: one label per sequence, not one per token
        r = self.trace(BERT, "BertForSequenceClassification", attention="eager")
        self.assertGreater(r["memory"]["activations"], 0)
        self.assertEqual(r["peak_phase"], "backward")

    def test_each_head_gets_its_own_targets(self):
        from oomless.trace.heads import targets
        ids = torch.zeros(4, 512, dtype=torch.long, device="meta")
        shapes = {}
        for arch, cfg in (("BertForSequenceClassification", BERT),
                          ("BertForTokenClassification", BERT),
                          ("BertForQuestionAnswering", BERT), ("BertForMaskedLM", BERT),
                          ("LlamaForCausalLM", LLAMA), ("LlamaForSequenceClassification", LLAMA)):
            model = getattr(transformers, arch)(transformers.AutoConfig.for_model(**cfg))
            shapes[arch] = {k: tuple(v.shape) for k, v in targets(model, ids).items()}
        self.assertEqual(shapes["BertForSequenceClassification"], {"labels": (4,)})
        self.assertEqual(shapes["BertForTokenClassification"], {"labels": (4, 512)})
        self.assertEqual(shapes["BertForQuestionAnswering"],
                         {"start_positions": (4,), "end_positions": (4,)})
        self.assertEqual(shapes["BertForMaskedLM"], {"labels": (4, 512)})
        self.assertEqual(shapes["LlamaForCausalLM"], {"labels": (4, 512)})
        self.assertEqual(shapes["LlamaForSequenceClassification"], {"labels": (4,)})

    def test_every_head_traces(self):
        for arch, cfg, kw in (("BertForTokenClassification", BERT, {}),
                              ("BertForQuestionAnswering", BERT, {}),
                              ("BertForMaskedLM", BERT, {}), ("BertModel", BERT, {}),
                              ("LlamaForCausalLM", LLAMA, {}),
                              # a decoder's classifier needs a pad token: the tracer sets one
                              ("LlamaForSequenceClassification", LLAMA, {"method": "lora",
                                                                         "precision": "bf16"}),
                              (None, T5, {"seq": 64})):
            with self.subTest(arch=arch or "T5ForConditionalGeneration"):
                r = self.trace(cfg, arch, **kw)
                self.assertGreater(r["memory"]["allocated_peak"], r["memory"]["weights"])
                self.assertIn(r["peak_phase"], ("backward", "optimizer"))

    def test_regression_head_gets_float_targets(self):
        r = self.trace(dict(BERT, num_labels=1), "BertForSequenceClassification")
        self.assertGreater(r["memory"]["activations"], 0)


if __name__ == "__main__":
    unittest.main()
