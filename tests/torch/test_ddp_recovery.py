"""oomless.torch across ranks: two ranks under torchrun (gloo, CPU), and two "nodes" (two
torchrun agents with a c10d rendezvous on 127.0.0.1), with an OOM on one rank only, in the
forward or in the backward (ddp_worker.py simulates the allocator). Every process runs under a
timeout and is killed with its children when it outlives it: a hang fails the test."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import HERE, TORCH_REASON, Proc, free_port, torchrun  # noqa: E402

if TORCH_REASON is None:
    import torch
    import torch.distributed as dist
    REASON = None if dist.is_available() and dist.is_gloo_available() else \
        "this torch has no gloo backend"
else:
    REASON = TORCH_REASON

WORKER = os.path.join(HERE, "ddp_worker.py")
TIMEOUT = 150


def load(out, name, rank):
    return torch.load(os.path.join(out, "%s.rank%d.pt" % (name, rank)), weights_only=False)


def params_close(a, b):
    keys = [k for k in a if k != "shift"]
    return all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in keys)


@unittest.skipIf(REASON, REASON or "")
class TwoRanks(unittest.TestCase):
    """torchrun --nproc-per-node 2: the scenarios of ddp_worker.py in one process group."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = cls.tmp.name
        rc, cls.log = Proc(torchrun("--nproc-per-node", 2, "--master-addr", "127.0.0.1",
                                    "--master-port", free_port(), WORKER, cls.out, "forward",
                                    "backward", "halving", "ref2", "ref3", "ref4"),
                           TIMEOUT).wait()
        if rc != 0:
            raise AssertionError("torchrun exited %d:\n%s" % (rc, cls.log[-6000:]))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name, micro, steps, retries, phase, ref, basis="measured"):
        r0, r1 = load(self.out, name, 0), load(self.out, name, 1)
        for r in (r0, r1):
            self.assertEqual([s["micro_batch"] for s in r["steps"]], steps)
            self.assertEqual([s["retries"] for s in r["steps"]], retries)
            self.assertTrue(all(s["exact"] for s in r["steps"]))
            self.assertEqual(r["records"][-1]["micro_batch"], micro)
        failing = r0 if r0["fails"] else r1
        other = r1 if r0["fails"] else r0
        self.assertEqual(failing["records"][0]["phase"], phase)
        self.assertEqual(failing["records"][-1]["basis"], basis)
        self.assertIsNone(other["records"][0]["phase"])
        self.assertEqual(other["records"][0]["basis"], "agreed")
        self.assertEqual(failing["records"][0]["failed_ranks"], [failing["rank"]])
        self.assertEqual(other["records"][0]["failed_ranks"], [failing["rank"]])
        # both ranks hold the same weights, those of the run started at the smaller micro-batch
        self.assertTrue(params_close(r0["params"], r1["params"]))
        self.assertTrue(params_close(r0["params"], load(self.out, ref, 0)["params"]))
        # the losses of the steps after the recovery are those of the reference run
        ref_losses = [s["loss"] for s in load(self.out, ref, 0)["steps"]]
        for got, want in zip([s["loss"] for s in r0["steps"]][1:], ref_losses[1:]):
            self.assertAlmostEqual(got, want, places=5)
        return r0, r1

    def test_forward_oom_on_one_rank(self):
        # rank 1 fails in the forward of step 2 at micro-batch 6; its measured line gives 2
        self.check("forward", 2, [6, 2, 2, 2], [0, 1, 0, 0], "forward", "ref2")

    def test_backward_oom_on_one_rank(self):
        # rank 1 fails in the backward of step 2 at 6 while rank 0 completes its own: no rank
        # waits in a gradient all-reduce, both go to 4 (the line; halving would say 3)
        self.check("backward", 4, [6, 4, 4, 4], [0, 1, 0, 0], "backward", "ref4")

    def test_halving_twice_without_a_measurement(self):
        # rank 0 fails at 12 in the first step (nothing measured yet), then at 6 in the
        # backward: 3, after two re-runs of the same step, equal to a run started at 3
        r0, _ = self.check("halving", 3, [3, 3, 3, 3], [2, 0, 0, 0], "forward", "ref3",
                           basis="halved")
        self.assertEqual([(x["failed_micro_batch"], x["micro_batch"], x["phase"])
                          for x in r0["records"]], [(12, 6, "forward"), (6, 3, "backward")])
        self.assertTrue(torch.equal(r0["params"]["a.weight"],
                                    load(self.out, "ref3", 0)["params"]["a.weight"]))

    def test_buffers_are_rank_zeros(self):
        # rank 1's buffer was set apart after DDP's construction; each step broadcasts rank 0's
        for name in ("forward", "ref2"):
            self.assertTrue(torch.equal(load(self.out, name, 1)["params"]["shift"],
                                        torch.full((16,), 0.25)))

    def test_references_did_not_recover(self):
        for ref in ("ref2", "ref3", "ref4"):
            self.assertEqual(load(self.out, ref, 0)["records"], [])


@unittest.skipIf(REASON, REASON or "")
class TwoNodes(unittest.TestCase):
    """Two torchrun agents (--nnodes 2 --nproc-per-node 1) meeting through a c10d rendezvous;
    the process of the second launch runs out of memory in its backward at step 2."""

    def test_both_nodes_agree(self):
        with tempfile.TemporaryDirectory() as out:
            port = free_port()
            args = ("--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "oomless-%d" % port,
                    WORKER, out, "node", "ref4")
            a = Proc(torchrun(*args), TIMEOUT)
            b = Proc(torchrun(*args), TIMEOUT, OOMLESS_TEST_FAIL=1)
            (rc_a, log_a), (rc_b, log_b) = a.wait(), b.wait()
            self.assertEqual(rc_a, 0, log_a[-6000:])
            self.assertEqual(rc_b, 0, log_b[-6000:])
            r = [load(out, "node", rank) for rank in (0, 1)]
            self.assertEqual(sorted(x["fails"] for x in r), [False, True])
            failed_rank = [x["rank"] for x in r if x["fails"]]
            for x in r:
                self.assertEqual([s["micro_batch"] for s in x["steps"]], [6, 4, 4, 4])
                self.assertEqual(x["records"][0]["failed_ranks"], failed_rank)
                self.assertEqual(x["records"][0]["micro_batch"], 4)
            self.assertTrue(params_close(r[0]["params"], r[1]["params"]))
            self.assertTrue(params_close(r[0]["params"], load(out, "ref4", 0)["params"]))


if __name__ == "__main__":
    unittest.main()
