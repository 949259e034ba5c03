"""The Hugging Face Trainer integration (oomless.hf.recover_oom) against the real Trainer on CPU:
an OOM injected into a tiny GPT-2 job under the real `oomless run`, which sees the clean stop
(status 75, torch.OutOfMemoryError in the output) and relaunches at a smaller micro-batch with
more accumulation; the job resumes from the checkpoint the stop saved and ends with the weights
of a run started at the smaller micro-batch."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import missing  # noqa: E402
from relaunch import BIN, Relaunch  # noqa: E402


@unittest.skipIf(not BIN or missing("transformers"),
                 missing("transformers") or "no oomless binary (build it: make all)")
class HuggingFace(Relaunch, unittest.TestCase):
    job = "hf_job.py"

    def test_backward_oom_stop_and_relaunch(self):
        # the LM head's backward fails at micro-batch 4 in step 3: checkpoint-2 is saved, the
        # relaunch at 2 x 4 skips the 16 samples of steps 1-2 and runs steps 3-4
        import torch
        from safetensors.torch import load_file
        got, want, doc, log = self.relaunch(3)
        self.assertEqual(doc["phase"], "training_step")
        self.assertTrue(doc["checkpoint"].endswith("checkpoint-2"))
        self.assertIn("finished 4 steps at micro-batch 2 x 4", log)
        for k in got:
            # Adam normalises the updates, so fp32 summation order shows at ~1e-6
            self.assertTrue(torch.allclose(got[k], want[k], rtol=1e-4, atol=1e-5), k)
        # the tolerance is far below what a step more or less would change
        saved = load_file(os.path.join(doc["checkpoint"], "model.safetensors"))
        moved = max((saved[k] - got[k]).abs().max().item() for k in saved)
        self.assertGreater(moved, 1e-3)


if __name__ == "__main__":
    unittest.main()
