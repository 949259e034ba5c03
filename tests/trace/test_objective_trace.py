"""DPO, IPO, SimPO, ORPO, KTO and reward-model steps traced as TRL's trainers run them, and the C estimator
held to the trace per component (SmolLM2-135M, small batches: a few seconds each)."""
import os
import sys
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")
sys.path.insert(0, os.path.join(SRC, "bindings", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_env import estimate as estimate_for  # noqa: E402

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import peft  # noqa: F401
    import trl  # noqa: F401
    from oomless.trace import Workload, trace_hf
    HAVE = True
except ImportError as exc:  # pragma: no cover
    HAVE, REASON = False, "torch/transformers/peft/trl missing for %s (%s): `make venv`" % (
        sys.executable, exc)

MODEL = "smollm2-135m"
COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "temporaries",
              "allocated_peak")
# a component agrees when within 3 % of the trace, or within 2 MiB where it is small
REL, ABS = 0.03, 2 << 20


def estimate(**kw):
    return estimate_for(MODEL, **kw)


@unittest.skipUnless(HAVE, "" if HAVE else REASON)
class ObjectiveTrace(unittest.TestCase):
    def trace(self, **kw):
        return trace_hf(Workload(MODEL, **kw))

    def compare(self, **kw):
        t = self.trace(**kw)
        e = estimate(**kw)
        for c in COMPONENTS:
            got, want = e["memory"][c], t["memory"][c]
            self.assertLessEqual(abs(got - want), max(REL * want, ABS),
                                 "%s %s: estimate %d, trace %d" % (kw, c, got, want))
        self.assertEqual(e["peak_phase"], t["peak_phase"], kw)
        return t

    def test_dpo_lora(self):
        self.compare(method="lora", objective="dpo", batch=2, seq=128)

    def test_dpo_full(self):
        self.compare(method="full", precision="bf16", objective="dpo", batch=2, seq=128)

    def test_kto_lora(self):
        self.compare(method="lora", objective="kto", batch=2, seq=128)

    def test_kto_full(self):
        self.compare(method="full", precision="bf16", objective="kto", batch=2, seq=128)

    def test_dpo_lora_checkpointed(self):
        self.compare(method="lora", objective="dpo", batch=2, seq=128, checkpointing="full")

    def test_ipo_lora(self):
        self.compare(method="lora", objective="ipo", batch=2, seq=128)

    def test_ipo_full(self):
        self.compare(method="full", precision="bf16", objective="ipo", batch=2, seq=128)

    def test_simpo_lora(self):
        self.compare(method="lora", objective="simpo", batch=2, seq=128)

    def test_simpo_full(self):
        self.compare(method="full", precision="bf16", objective="simpo", batch=4, seq=256)

    def test_orpo_lora(self):
        self.compare(method="lora", objective="orpo", batch=2, seq=128)

    def test_orpo_full_autocast(self):
        # under autocast ORPO's cross-entropy of the chosen half works in fp32
        self.compare(method="full", precision="amp-bf16", objective="orpo", batch=4, seq=256)

    def reward(self, **kw):
        t = self.trace(objective="reward", **kw)
        e = estimate(objective="reward", **kw)
        # RewardTrainer's model: a score Linear (hidden x 1) in place of the LM head
        self.assertEqual(e["params"]["trainable"], t["params"]["trainable"], kw)
        adapters = t["params"]["trainable"] if kw["method"] == "lora" else 0
        self.assertEqual(e["params"]["total"], t["params"]["total"] - adapters, kw)
        # the trace's forward ends with the final norm's fp32 working set (a few MiB), which
        # the estimate leaves out: the peak within 2 %, the components within 3 %
        for c in ("weights", "gradients", "optimizer", "activations", "logits"):
            got, want = e["memory"][c], t["memory"][c]
            self.assertLessEqual(abs(got - want), max(REL * want, ABS),
                                 "%s %s: estimate %d, trace %d" % (kw, c, got, want))
        got, want = e["memory"]["allocated_peak"], t["memory"]["allocated_peak"]
        self.assertLessEqual(abs(got - want), 0.02 * want, kw)
        self.assertEqual(t["memory"]["logits"], 0)

    def test_reward_lora(self):
        self.reward(method="lora", batch=4, seq=256)

    def test_reward_full(self):
        self.reward(method="full", precision="bf16", batch=2, seq=128)

    def test_reference_copy_is_a_second_model(self):
        sft = self.trace(method="full", precision="bf16", batch=4, seq=64)
        dpo = self.trace(method="full", precision="bf16", objective="dpo", batch=2, seq=64)
        self.assertEqual(dpo["memory"]["weights"], 2 * sft["memory"]["weights"])
        lora = self.trace(method="lora", objective="dpo", batch=2, seq=64)
        plain = self.trace(method="lora", batch=4, seq=64)
        self.assertEqual(lora["memory"]["weights"], plain["memory"]["weights"])

    def test_dpo_concatenates_chosen_and_rejected(self):
        # the policy's saved activations of 2 pairs are those of 4 sequences
        dpo = self.trace(method="lora", objective="dpo", batch=2, seq=64)
        sft = self.trace(method="lora", batch=4, seq=64)
        self.assertAlmostEqual(dpo["memory"]["activations"] / sft["memory"]["activations"], 1,
                               delta=0.02)


if __name__ == "__main__":
    unittest.main()
