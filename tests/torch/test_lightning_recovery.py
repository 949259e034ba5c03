"""The Lightning integration (oomless.lightning.OomRecovery) against the real Trainer on CPU: a
tiny job under the real `oomless run`, the last rank running out of memory (injected) in a
forward. Every rank stops at that step, saves oomless-recovery.ckpt and exits 75; `oomless run`
sees the OOM and relaunches at a smaller micro-batch with more accumulation, and the job resumes
from the checkpoint."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import missing  # noqa: E402
from relaunch import BIN, TIMEOUT, Proc, Relaunch, recovery_doc  # noqa: E402

REASON = missing("lightning") or (None if BIN else "no oomless binary (build it: make all)")


@unittest.skipIf(REASON, REASON or "")
class Lightning(Relaunch, unittest.TestCase):
    job = "lightning_job.py"

    def test_two_nodes_each_under_oomless_run(self):
        # two torchrun agents (one rank each) at a c10d rendezvous, each under its own
        # `oomless run` as on two Slurm nodes: the rank of one node fails in step 2 (the second
        # epoch's first step: 16 samples, 8 per rank); both nodes stop, both `oomless run`
        # relaunch at 2 x 4, the agents meet again and the weights end as a run started there
        import torch
        got, doc, log = self.relaunch("nodes", 2)
        want = self.reference(world=2)
        # the report of the first node: its rank failed in the forward, or agreed
        self.assertEqual(doc["phase"], "forward" if doc["rank"] == 1 else None)
        for k in got:
            self.assertTrue(torch.allclose(got[k], want[k], rtol=1e-5, atol=1e-6), k)
        ck = torch.load(doc["checkpoint"], weights_only=False)
        self.assertEqual(ck["global_step"], 1)
        self.assertEqual(ck["callbacks"]["OomRecovery"],
                         {"micro_batch": 4, "accumulate_grad_batches": 2, "oom_stop": True})

    def test_stop_inside_an_epoch_alone(self):
        # one process, run directly (what `oomless run` would start): a stop in the second
        # micro-batch of step 2 (the first epoch's second step) exits 75 with the report; the
        # saved loop has completed 3 micro-batches of 4, which on load become the step's start
        # (2 of 4: the third belonged to the failed step) in micro-batches of 2: 4
        import torch
        from oomless._lightning_recovery import OomRecovery
        out = self.tmpdir()
        events = os.path.join(out, "recovery.jsonl")
        rc, log = Proc(self.command(out, "single", "--oom-above", "2", "--from-step", "2",
                                    "--skip-micro", "1"), TIMEOUT, OOMLESS_BATCH_SIZE=4,
                       OOMLESS_GRAD_ACCUM=2, OOMLESS_RECOVERY_EVENTS=events).wait()
        self.assertEqual(rc, 75, log[-4000:])
        with open(events) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual([(e["event"], e["micro_batch"], e["grad_accum"], e["step"])
                          for e in lines], [("oom-stop", 2, 4, 2)])
        self.assertIn("torch.OutOfMemoryError on rank(s) [0] at step 2", log)
        doc = recovery_doc(log)
        self.assertEqual((doc["micro_batch"], doc["grad_accum"], doc["phase"], doc["basis"]),
                         (2, 4, "forward", "halved"))
        ck = torch.load(doc["checkpoint"], weights_only=False)
        self.assertEqual(ck["global_step"], 1)
        progress = ck["loops"]["fit_loop"]["epoch_loop.batch_progress"]
        self.assertEqual((progress["current"]["completed"], progress["total"]["completed"]),
                         (3, 3))
        OomRecovery(micro_batch=2).on_load_checkpoint(None, None, ck)
        for c in (progress["current"], progress["total"]):
            self.assertEqual((c["ready"], c["started"], c["processed"], c["completed"]),
                             (4, 4, 4, 4))
        # a checkpoint that is not an OOM stop is left alone
        ck["callbacks"]["OomRecovery"]["oom_stop"] = False
        OomRecovery(micro_batch=1).on_load_checkpoint(None, None, ck)
        self.assertEqual(progress["current"]["completed"], 4)

if __name__ == "__main__":
    unittest.main()
