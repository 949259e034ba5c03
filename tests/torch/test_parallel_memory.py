"""`oomless estimate --engine torchtitan` with tensor, sequence, pipeline and expert parallelism
against real training steps: parallel_worker.py under torchrun on 2 and 4 gloo ranks (CPU) lays
the small Llama-shaped model of parallel_model.py out as torchtitan does and counts every tensor
storage of the second step, per rank (bench/parallel/README.md).

What is compared, per run and rank:
- the weights on the rank, to the byte, and the optimizer states (AdamW's two states; the rank's
  4-byte step counters, one per parameter tensor, are torch's and left out of the estimate);
- the allocated peak of the rank, which the estimate JSON lists per pipeline rank
  (parallel.ranks), within 3 %: leaving out one micro-batch in flight, the pipeline's receive
  buffers, the gathered inputs of sequence parallelism, a layer recomputed under checkpointing,
  the loss's fp32 tensors or the interleaved schedule's kept sends moves it by more."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import HERE, free_port, missing, oomless_bin, run, torchrun  # noqa: E402

REASON = None if oomless_bin() else "no oomless binary (build first)"
if not REASON:
    REASON = missing("torch.distributed.pipelining")
if not REASON:
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_gloo_available()):
        REASON = "this torch has no gloo backend"

TWO = ["tp:2", "tp:2:sp", "tp:2:sp:ac", "pp:2:1f1b:4", "pp:2:1f1b:4:ac", "pp:2:interleaved:2:4",
       "pp:2:interleaved:2:8", "ep:2"]
FOUR = ["pp:4:1f1b:4"]
TOLERANCE = 0.03


def estimate_args(spec):
    """the estimate of a run of parallel_worker.py: its model and layout"""
    s = spec.split(":")
    args = ["--engine", "torchtitan", "--precision", "bf16", "--optimizer", "adamw",
            "--batch", "2", "--seq", "256", "--cublas-workspace", ":0:1"]
    if s[0] == "tp":
        args += ["--tensor-parallel", s[1], "--sequence-parallel", "yes" if "sp" in s else "no"]
    elif s[0] == "pp":
        args += ["--pipeline-parallel", s[1]]
        if s[2] == "interleaved":
            args += ["--pp-schedule", "interleaved:" + s[3], "--grad-accum", s[4]]
        else:
            args += ["--grad-accum", s[3]]
    else:  # ep: the experts over the ranks, which are data parallel for the rest
        args += ["--expert-parallel", s[1], "--gpus", s[1]]
    if s[-1] == "ac":
        args += ["--checkpointing", "full"]
    return args


@unittest.skipIf(REASON, REASON or "")
class ParallelMemory(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.measured = {}
        for ranks, runs in ((2, TWO), (4, FOUR)):
            out = os.path.join(cls.tmp.name, "measured-%d.json" % ranks)
            rc, log = run(torchrun("--nproc-per-node", ranks, "--master-addr", "127.0.0.1",
                                   "--master-port", free_port(),
                                   os.path.join(HERE, "parallel_worker.py"), out, *runs), 300)
            if rc != 0 or not os.path.exists(out):
                raise AssertionError("parallel_worker.py failed (%s):\n%s" % (rc, log[-4000:]))
            with open(out, encoding="utf-8") as f:
                cls.measured.update(json.load(f))
        cls.configs = {}
        for name in ("dense", "moe"):
            cls.configs[name] = os.path.join(cls.tmp.name, name + ".json")
            with open(cls.configs[name], "w", encoding="utf-8") as f:
                json.dump(cls.measured["configs"][name], f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def estimate(self, spec):
        model = self.configs["moe" if spec.startswith("ep") else "dense"]
        out = subprocess.run([oomless_bin(), "estimate", "--model", model, *estimate_args(spec),
                              "--json"], capture_output=True, text=True, timeout=60, check=True)
        return json.loads(out.stdout)

    def each(self):
        for spec in TWO + FOUR:
            est = self.estimate(spec)
            for rank, m in sorted(self.measured[spec].items()):
                yield spec, int(rank), m, est

    def test_weights_and_states(self):
        for spec, rank, m, est in self.each():
            with self.subTest(run=spec, rank=rank):
                if len(est["parallel"]["ranks"]) == 1:  # no pipeline: every rank alike
                    mem = est["memory"]
                else:
                    mem = est["parallel"]["ranks"][rank]
                self.assertEqual(mem["weights"], m["params"])
                self.assertEqual(mem["optimizer"] + 4 * m["tensors"], m["optimizer"])

    def test_peak_per_rank(self):
        for spec, rank, m, est in self.each():
            with self.subTest(run=spec, rank=rank):
                ranks = est["parallel"]["ranks"]
                want = ranks[rank if len(ranks) > 1 else 0]["allocated_peak"]
                got = m["snapshots"]["peak"]
                self.assertLess(abs(want / got - 1), TOLERANCE,
                                "%s rank %d: estimate %d B, measured %d B (%+.1f %%)"
                                % (spec, rank, want, got, 100 * (want / got - 1)))

    def test_limiting_rank(self):
        """the estimate's figures are the pipeline rank that peaks highest, as measured"""
        for spec in TWO + FOUR:
            est = self.estimate(spec)
            peaks = {int(r): m["snapshots"]["peak"] for r, m in self.measured[spec].items()}
            if len(est["parallel"]["ranks"]) > 1:
                with self.subTest(run=spec):
                    self.assertEqual(est["parallel"]["limiting_rank"], max(peaks, key=peaks.get))


if __name__ == "__main__":
    unittest.main()
