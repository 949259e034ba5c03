"""The Lightning integration (oomless.lightning.OomRecovery) against the real Trainer on CPU:
an OOM injected into a tiny job under the real `oomless run`, which sees the clean stop (status
75, torch.OutOfMemoryError in the output) and relaunches at a smaller micro-batch with more
accumulation; the job resumes from the checkpoint the stop saved."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import missing  # noqa: E402
from relaunch import BIN, Relaunch  # noqa: E402


@unittest.skipIf(not BIN or missing("lightning"),
                 missing("lightning") or "no oomless binary (build it: make all)")
class Lightning(Relaunch, unittest.TestCase):
    job = "lightning_job.py"

    def test_forward_oom_at_an_epoch_start(self):
        # step 3 opens the second epoch: the relaunch resumes there exactly
        import torch
        got, want, doc, log = self.relaunch(3)
        self.assertEqual(doc["phase"], "forward")
        self.assertIn("finished 6 steps at micro-batch 2 x 4", log)
        for k in got:
            self.assertTrue(torch.allclose(got[k], want[k], rtol=1e-5, atol=1e-6), k)
        ck = torch.load(doc["checkpoint"], weights_only=False)
        self.assertEqual(ck["global_step"], 2)
        self.assertEqual(ck["callbacks"]["OomRecovery"],
                         {"micro_batch": 4, "accumulate_grad_batches": 2, "oom_stop": True})

    def test_counters_of_a_stop_inside_an_epoch(self):
        # a stop in the second micro-batch of step 2 (the first epoch's second step): the
        # saved loop has completed 3 micro-batches of 4; on load they become the step's start
        # (2 of 4, the third belonged to the failed step) in micro-batches of 2: 4
        import torch
        from oomless._lightning_recovery import OomRecovery
        _, _, doc, log = self.relaunch(2, "--skip-micro", "1", reference=False)
        self.assertIn("finished 6 steps at micro-batch 2 x 4", log)
        ck = torch.load(doc["checkpoint"], weights_only=False)
        progress = ck["loops"]["fit_loop"]["epoch_loop.batch_progress"]
        self.assertEqual((progress["current"]["completed"], progress["total"]["completed"]),
                         (3, 3))
        OomRecovery(micro_batch=2).on_load_checkpoint(None, None, ck)
        for c in (progress["current"], progress["total"]):
            self.assertEqual((c["ready"], c["started"], c["processed"], c["completed"]),
                             (4, 4, 4, 4))


if __name__ == "__main__":
    unittest.main()
