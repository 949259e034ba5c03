"""What the framework tests share: a tiny job run under the real `oomless run` (alone, as two
torchrun ranks, or as two torchrun "nodes" each under its own `oomless run`) with an OOM injected
on the last rank, and the same job run directly at the smaller micro-batch (the reference)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import HERE, Proc, free_port, oomless_bin, torchrun  # noqa: E402

BIN = oomless_bin()
TIMEOUT = 240


def events(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def recovery_doc(log):
    lines = [l for l in log.splitlines() if l.startswith("OOMLESS_RECOVERY ")]
    return json.loads(lines[-1].split(" ", 1)[1]) if lines else None


class Relaunch:
    """Mixed into a unittest.TestCase; `job` is the script in tests/torch."""

    job = None

    def tmpdir(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        return tmp.name

    def command(self, out, launcher, *args):
        script = [os.path.join(HERE, self.job), out] + list(args)
        if launcher == "single":
            return [sys.executable] + script
        if launcher == "ranks":
            return torchrun("--nproc-per-node", 2, "--master-addr", "127.0.0.1",
                            "--master-port", free_port(), *script)
        port = free_port()   # "nodes": one agent per node, meeting at a c10d rendezvous
        return torchrun("--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
                        "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "t%d" % port,
                        *script)

    def reference(self, world=1):
        """The final weights of the job started at micro-batch 2 (no OOM), in one process: with
        accumulation 4 x `world`, the steps average the same samples as `world` DDP ranks at
        2 x 4 (one process is cheaper to start than torchrun and its ranks)."""
        import torch
        out = self.tmpdir()
        rc, log = Proc(self.command(out, "single"), TIMEOUT, OOMLESS_BATCH_SIZE=2,
                       OOMLESS_GRAD_ACCUM=4 * world).wait()
        self.assertEqual(rc, 0, log[-6000:])
        return torch.load(os.path.join(out, "final.pt"))

    def relaunch(self, launcher, from_step, *extra):
        """`oomless run --batch-size 4 --grad-accum 2 -- JOB` with an OOM above micro-batch 2
        from step `from_step` ("nodes": two `oomless run`, one per torchrun agent). Checks
        what every `oomless run` did; returns (final weights, the OOMLESS_RECOVERY document,
        the output of the first `oomless run`)."""
        import torch
        tmp = self.tmpdir()
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        cmd = self.command(out, launcher, "--oom-above", "2", "--from-step", str(from_step),
                           *extra)
        runs = []
        for i in range(2 if launcher == "nodes" else 1):
            ev = os.path.join(tmp, "events%d.jsonl" % i)
            runs.append((ev, Proc([BIN, "run", "--batch-size", "4", "--grad-accum", "2",
                                   "--events", ev, "--"] + cmd, TIMEOUT,
                                  XDG_CACHE_HOME=os.path.join(tmp, "cache"))))
        logs = []
        for ev, proc in runs:
            rc, log = proc.wait()
            logs.append(log)
            self.assertEqual(rc, 0, log[-6000:])
            every = events(ev)
            # the ranks' own records (OOMLESS_RECOVERY_EVENTS is the --events path): one per
            # rank of this node's torchrun, each with the agreed micro-batch
            stops = [e for e in every if e["event"] == "oom-stop"]
            evs = [e for e in every if e["event"] != "oom-stop"]
            self.assertEqual(len(stops), 1 if launcher == "single" else
                             (1 if launcher == "nodes" else 2), stops)
            self.assertTrue(all(e["micro_batch"] == 2 for e in stops), stops)
            self.assertEqual([(e["event"], e["batch"], e["grad_accum"]) for e in evs],
                             [("launch", 4, 2), ("oom", 4, 2), ("restart", 2, 4),
                              ("launch", 2, 4), ("exit", 2, 4)])
            # torchrun reports a failed worker as 1; alone, the job's own status
            self.assertEqual(evs[1]["exit_code"], 75 if launcher == "single" else 1)
            self.assertEqual(evs[1]["step"], from_step)
            # every node's output names the OOM and the agreed micro-batch
            doc = recovery_doc(log)
            self.assertIsNotNone(doc, log[-4000:])
            world = 1 if launcher == "single" else 2
            self.assertEqual((doc["micro_batch"], doc["grad_accum"], doc["failed_micro_batch"],
                              doc["step"], doc["failed_ranks"], doc["world_size"]),
                             (2, 4, 4, from_step, [world - 1], world))
            self.assertTrue(os.path.exists(doc["checkpoint"]), doc["checkpoint"])
            # the events log names the failed rank (from the recovery line) and the OOM's line
            self.assertEqual(evs[1].get("rank"), str(world - 1))
            self.assertIn("OutOfMemoryError", evs[1].get("reason") or "")
        return torch.load(os.path.join(out, "final.pt")), recovery_doc(logs[0]), logs[0]
