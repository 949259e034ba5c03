"""`oomless run` on each node of a two-node torchrun job whose training script is plain PyTorch
(plain_job.py: no oomless.torch, nothing catches the error). Two torchrun agents on 127.0.0.1
(--nnodes 2 --nproc-per-node 1, a c10d rendezvous), each under its own `oomless run`; the
process of node B runs out of memory at step 2 above micro-batch 2 (injected). With
--sync-dir both nodes relaunch at the batch B chose and finish; without it each says at the start
that it cannot recover, and B's relaunched torchrun gives up at its rendezvous, which is said.
Every process runs under a timeout and is killed with its children when it outlives it."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import HERE, TORCH_REASON, Proc, free_port, oomless_bin, torchrun  # noqa: E402

JOB = os.path.join(HERE, "plain_job.py")
BIN = oomless_bin()
TIMEOUT = 240
REASON = TORCH_REASON or (None if BIN else "no oomless binary (build it first)")


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


@unittest.skipIf(REASON, REASON or "")
class PlainTwoNodes(unittest.TestCase):

    def nodes(self, tmp, options, *torchrun_args):
        """Starts node A and node B (the one that runs out of memory); their (status, output)."""
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        port = free_port()
        cmd = torchrun("--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "plain%d" % port,
                       *torchrun_args, JOB, out, "--oom-above", 2)
        run = [BIN, "run", "--batch-size", "4", "--grad-accum", "2"] + options + ["--"] + cmd
        cache = os.path.join(tmp, "cache")
        a = Proc(run, TIMEOUT, XDG_CACHE_HOME=cache)
        b = Proc(run, TIMEOUT, XDG_CACHE_HOME=cache, OOMLESS_TEST_OOM=1)
        return a.wait(), b.wait(), b.p.pid, out, port

    def test_both_nodes_relaunch_through_the_sync_dir(self):
        with tempfile.TemporaryDirectory() as tmp:
            sync = os.path.join(tmp, "sync")
            os.makedirs(sync)
            (rc_a, log_a), (rc_b, log_b), pid_b, out, port = self.nodes(tmp, ["--sync-dir", sync])
            self.assertEqual(rc_a, 0, log_a[-6000:])
            self.assertEqual(rc_b, 0, log_b[-6000:])
            # each rank finished once, at micro-batch 2 x 4, in the second attempt
            for rank in (0, 1):
                self.assertEqual(lines(os.path.join(out, "rank%d.jsonl" % rank)),
                                 [{"batch": 2, "grad_accum": 4, "attempt": "2", "steps": 3,
                                   "finished": True}])
            self.assertIn("out of memory at step 2 (peak N/A): restarting with batch 4 -> 2, "
                          "accumulation 2 -> 4 (effective 8)", log_b)
            self.assertIn("relaunching with the other nodes, batch 4 -> 2, accumulation 2 -> 4 "
                          "(effective 8); the batch node ", log_a)
            self.assertIn("the job exited 0 after 2 attempt(s), 1 restart(s)", log_a)
            recs = lines(os.path.join(sync, "oomless-sync-plain%d.jsonl" % port))
            ooms = [r for r in recs if r["event"] == "oom"]
            self.assertEqual([(r["attempt"], r["failed_batch"], r["batch"], r["grad_accum"])
                              for r in ooms], [(1, 4, 2, 4)])
            self.assertTrue(ooms[0]["node"].endswith(":%d" % pid_b), ooms[0]["node"])
            self.assertEqual(sorted(r["attempt"] for r in recs if r["event"] == "launch"),
                             [1, 1, 2, 2])
            self.assertEqual([r["exit_code"] for r in recs if r["event"] == "exit"], [0, 0])
            self.assertNotIn("one part of a job", log_a + log_b)

    def test_without_a_sync_dir_said_at_the_start(self):
        with tempfile.TemporaryDirectory() as tmp:
            (rc_a, log_a), (rc_b, log_b), _, out, _ = self.nodes(
                tmp, [], "--rdzv-conf", "join_timeout=10")
            notice = ("oomless: this is one part of a job spread over several nodes (torchrun "
                      "--nnodes 2), each under its own supervisor")
            for log in (log_a, log_b):
                self.assertTrue(log.startswith(notice), log[:2000])
            # A's job died of B's death without an error of its own: not relaunched
            self.assertEqual(rc_a, 1, log_a[-6000:])
            self.assertIn("the job exited 1 after 1 attempt(s), 0 restart(s)", log_a)
            # B relaunched alone; its torchrun gave up at the rendezvous (or found it closed)
            self.assertEqual(rc_b, 1, log_b[-6000:])
            self.assertIn("restarting with batch 4 -> 2", log_b)
            self.assertRegex(log_b, r"oomless: attempt 2: torchrun (gave up waiting for the other "
                             r"nodes at its rendezvous|found its rendezvous closed)")
            self.assertIn("give every node's 'oomless run' the same --sync-dir", log_b)
            self.assertFalse(os.path.exists(os.path.join(out, "rank0.jsonl")))


if __name__ == "__main__":
    unittest.main()
