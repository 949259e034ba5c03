"""What the framework tests share: a tiny job run under the real `oomless run`, with an OOM
injected, and the same job run directly at the smaller micro-batch."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import HERE, oomless_bin, run  # noqa: E402

BIN = oomless_bin()
TIMEOUT = 240


def events(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def recovery_doc(log):
    lines = [l for l in log.splitlines() if l.startswith("OOMLESS_RECOVERY ")]
    return json.loads(lines[-1].split(" ", 1)[1]) if lines else None


class Relaunch:
    """Runs JOB under `oomless run` at batch 4 x 2 with an OOM above 2 from step `from_step`,
    and (with `reference`) the same job directly at 2 x 4."""

    job = None

    def relaunch(self, from_step, *extra, reference=True):
        import torch
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        out, ref = os.path.join(tmp.name, "out"), os.path.join(tmp.name, "ref")
        os.makedirs(out)
        os.makedirs(ref)
        ev = os.path.join(tmp.name, "events.jsonl")
        rc, log = run([BIN, "run", "--batch-size", "4", "--grad-accum", "2", "--events", ev,
                       "--", sys.executable, os.path.join(HERE, self.job), out,
                       "--oom-above", "2", "--from-step", str(from_step)] + list(extra), TIMEOUT,
                      XDG_CACHE_HOME=os.path.join(tmp.name, "cache"))
        self.assertEqual(rc, 0, log[-6000:])
        if reference:
            rc_ref, log_ref = run([sys.executable, os.path.join(HERE, self.job), ref], TIMEOUT,
                                  OOMLESS_BATCH_SIZE=2, OOMLESS_GRAD_ACCUM=4)
            self.assertEqual(rc_ref, 0, log_ref[-6000:])
        kinds = [(e["event"], e["batch"], e["grad_accum"]) for e in events(ev)]
        self.assertEqual(kinds, [("launch", 4, 2), ("oom", 4, 2), ("restart", 2, 4),
                                 ("launch", 2, 4), ("exit", 2, 4)])
        oom = events(ev)[1]
        self.assertEqual((oom["exit_code"], oom["step"]), (75, from_step))
        doc = recovery_doc(log)
        self.assertIsNotNone(doc, log[-4000:])
        self.assertEqual((doc["micro_batch"], doc["grad_accum"], doc["failed_micro_batch"],
                          doc["step"], doc["failed_ranks"]), (2, 4, 4, from_step, [0]))
        self.assertTrue(os.path.exists(doc["checkpoint"]), doc["checkpoint"])
        got = torch.load(os.path.join(out, "final.pt"))
        want = torch.load(os.path.join(ref, "final.pt")) if reference else None
        return got, want, doc, log


