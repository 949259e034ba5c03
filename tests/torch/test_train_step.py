"""oomless.torch in one process: the micro-batch plan, the choice after an OOM, and re-runs of a
step that end where a run started at the smaller micro-batch ends."""
import collections
import json
import os
import subprocess
import sys
import tempfile
import unittest
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import TORCH_REASON, oomless_bin  # noqa: E402

if TORCH_REASON is None:
    import torch
    import oomless.torch as ot

MIB = 1 << 20


def close(a, b):
    return all(torch.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in zip(a, b))


@unittest.skipIf(TORCH_REASON, TORCH_REASON or "")
class Plan(unittest.TestCase):
    def test_divisors_first(self):
        self.assertEqual(ot.micro_batch_sizes(12, 5), ([4, 4, 4], True))
        self.assertEqual(ot.micro_batch_sizes(12, 12), ([12], True))
        self.assertEqual(ot.micro_batch_sizes(12, 40), ([12], True))
        self.assertEqual(ot.micro_batch_sizes(7, 3), ([1] * 7, True))

    def test_unequal_only_below_the_floor(self):
        # 7 has no divisor in [2, 3]: three micro-batches as equal as possible
        self.assertEqual(ot.micro_batch_sizes(7, 3, min_micro_batch=2), ([3, 2, 2], False))
        self.assertEqual(ot.micro_batch_sizes(97, 40, min_micro_batch=8), ([33, 32, 32], False))
        self.assertEqual(ot.micro_batch_sizes(96, 40, min_micro_batch=8), ([32, 32, 32], True))
        with self.assertRaises(ValueError):
            ot.micro_batch_sizes(12, 0)

    def test_measured_limit(self):
        # one size seen: the line goes through the memory held at the start (100 MiB)
        limit, basis, fixed, slope = ot.next_limit(6, {6: 160 * MIB}, 100 * MIB, 145 * MIB,
                                                   headroom=0.0)
        self.assertEqual((limit, basis), (4, "measured"))
        self.assertEqual((fixed, slope), (100 * MIB, 10 * MIB))
        # two sizes: fitted through both (the fixed part includes the gradients: 120 MiB)
        limit, _, fixed, slope = ot.next_limit(8, {2: 140 * MIB, 4: 160 * MIB}, 100 * MIB,
                                               200 * MIB, headroom=0.0)
        self.assertEqual((fixed, slope), (120 * MIB, 10 * MIB))
        self.assertEqual(limit, 7)
        # the headroom keeps a share of the capacity free
        self.assertEqual(ot.next_limit(8, {2: 140 * MIB, 4: 160 * MIB}, 100 * MIB, 200 * MIB,
                                       headroom=0.1)[0], 6)

    def test_the_failure_bounds_the_slope(self):
        # the line says 10 MiB a sample, but 6 failed in 250 MiB: at least (250-100)/6 = 25
        limit, basis, _, slope = ot.next_limit(6, {2: 120 * MIB}, 100 * MIB, 250 * MIB,
                                               headroom=0.0)
        self.assertEqual(basis, "measured")
        self.assertEqual(slope, 25 * MIB)
        self.assertEqual(limit, 5)

    def test_halving_without_a_measurement(self):
        self.assertEqual(ot.next_limit(12)[:2], (6, "halved"))
        self.assertEqual(ot.next_limit(7, {}, None, None)[:2], (3, "halved"))
        self.assertEqual(ot.next_limit(6, {6: 160 * MIB}, 100 * MIB, None)[:2], (3, "halved"))
        self.assertEqual(ot.next_limit(12, {6: 160 * MIB}, 100 * MIB, 145 * MIB,
                                       halve=True)[:2], (6, "halved"))
        self.assertEqual(ot.next_limit(1)[0], 0)

    def test_split(self):
        P = collections.namedtuple("P", "x y")
        batch = {"x": torch.arange(10).view(5, 2), "pair": P(torch.arange(5), torch.zeros(5)),
                 "n": 3}
        self.assertEqual(ot.batch_size_of(batch), 5)
        parts = ot.split_batch(batch, [3, 2])
        self.assertEqual(parts[1]["x"].tolist(), [[6, 7], [8, 9]])
        self.assertIsInstance(parts[0]["pair"], P)
        self.assertEqual(parts[0]["pair"].x.tolist(), [0, 1, 2])
        self.assertEqual(parts[1]["n"], 3)
        with self.assertRaises(ValueError):
            ot.batch_size_of((torch.zeros(3), torch.zeros(4)))
        with self.assertRaises(ValueError):
            ot.batch_size_of({"n": 1})

    def test_is_oom(self):
        self.assertTrue(ot.is_oom(torch.OutOfMemoryError("x")))
        self.assertTrue(ot.is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when")))
        self.assertFalse(ot.is_oom(RuntimeError("shape mismatch")))


class BatchNormDropout(torch.nn.Module if TORCH_REASON is None else object):
    """Draws random numbers (dropout) and updates buffers (BatchNorm) in every forward."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.norm = torch.nn.BatchNorm1d(8)
        self.drop = torch.nn.Dropout(0.3)
        self.b = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.norm(self.a(x)))))


@unittest.skipIf(TORCH_REASON, TORCH_REASON or "")
class ReRun(unittest.TestCase):
    def setUp(self):
        g = torch.Generator().manual_seed(5)
        self.batches = [(torch.randn(12, 4, generator=g), torch.randn(12, 1, generator=g))
                        for _ in range(3)]

    def train(self, micro, oom_above=None, where="backward", **kw):
        """Three steps; an OOM in `where` for micro-batches above `oom_above` (every step)."""
        torch.manual_seed(0)
        model = BatchNormDropout()
        opt = torch.optim.AdamW(model.parameters(), lr=0.05)
        step = ot.TrainStep(model, opt, micro, **kw)

        def loss_fn(m, mb):
            x, y = mb
            if where == "forward" and oom_above and x.shape[0] > oom_above:
                raise torch.OutOfMemoryError("injected in the forward")
            out = m(x)
            if where == "backward" and oom_above and x.shape[0] > oom_above:
                def hook(grad):
                    raise torch.OutOfMemoryError("injected in the backward")
                out.register_hook(hook)
            return torch.nn.functional.mse_loss(out, y)

        torch.manual_seed(1)  # the dropout stream
        results = [step.step(b, loss_fn) for b in self.batches]
        return model, results, step

    def test_backward_oom_rerun_equals_the_smaller_start(self):
        # the failed attempt drew dropout masks and moved the BatchNorm statistics before its
        # backward failed: the re-run must start from the step's own RNG state and buffers
        events = []
        model, results, step = self.train(6, oom_above=4, on_event=events.append)
        ref, ref_results, _ = self.train(3)
        self.assertEqual([r.micro_batch for r in results], [3, 3, 3])
        self.assertEqual([r.retries for r in results], [1, 0, 0])
        self.assertTrue(close(model.parameters(), ref.parameters()))
        self.assertTrue(close(model.buffers(), ref.buffers()))
        self.assertEqual([float(r.loss) for r in results], [float(r.loss) for r in ref_results])
        self.assertEqual([e["event"] for e in events], ["oom", "limit"])
        self.assertEqual(events[0]["phase"], "backward")
        record = step.records[0]
        self.assertEqual((record["failed_micro_batch"], record["micro_batch"],
                          record["micro_batches"], record["basis"], record["exact"]),
                         (6, 3, 4, "halved", True))

    def test_without_restoring_buffers_the_statistics_drift(self):
        # the control of the test above: without the buffer copy the BatchNorm statistics of
        # the failed attempt stay in, and the run no longer matches
        model, _, _ = self.train(6, oom_above=4, restore_buffers=False)
        ref, _, _ = self.train(3)
        self.assertFalse(close(model.buffers(), ref.buffers()))

    def test_forward_oom_twice_in_one_step(self):
        model, results, step = self.train(12, oom_above=3, where="forward")
        ref, _, _ = self.train(3)
        self.assertEqual([(r.micro_batch, r.retries) for r in results], [(3, 2), (3, 0), (3, 0)])
        self.assertEqual([(r["failed_micro_batch"], r["micro_batch"]) for r in step.records],
                         [(12, 6), (6, 3)])
        self.assertTrue(close(model.parameters(), ref.parameters()))

    def test_nothing_smaller_left(self):
        with self.assertRaisesRegex(torch.OutOfMemoryError, "no smaller micro-batch"):
            self.train(2, oom_above=0.5, where="forward")

    def test_other_errors_pass_through(self):
        model = torch.nn.Linear(2, 1)
        step = ot.TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1), 2)

        def broken(m, mb):
            raise KeyError("not an OOM")
        with self.assertRaises(KeyError):
            step.step(torch.zeros(4, 2), broken)

    def test_fsdp_is_refused(self):
        # fully_shard() swaps a module's class for one deriving from FSDPModule, as here
        from torch.distributed import fsdp
        model = torch.nn.Sequential(torch.nn.Linear(2, 2))
        model[0].__class__ = type("FSDPLinear", (fsdp.FSDPModule, torch.nn.Linear), {})
        with self.assertRaisesRegex(ValueError, "FSDP"):
            ot.TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1), 2)

    def test_measured_choice_is_not_halving(self):
        # a simulated allocator: 100 MiB held, 10 MiB a sample; capacity 145 MiB from step 2:
        # the measured line gives 4 (halving would give 3)
        class Mem:
            cap, top = 10 ** 12, 0

            def reset(self):
                self.top = 100 * MIB

            def peak(self):
                return self.top

            def current(self):
                return 100 * MIB

            def capacity(self):
                return self.cap

        mem = Mem()
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        step = ot.TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1), 6, memory=mem,
                            headroom=0.0)

        def loss_fn(m, mb):
            need = 100 * MIB + 10 * MIB * mb.shape[0]
            if need > mem.cap:
                raise torch.OutOfMemoryError("simulated")
            mem.top = max(mem.top, need)
            return m(mb).pow(2).mean()

        self.assertEqual(step.step(torch.randn(12, 4), loss_fn).micro_batch, 6)
        mem.cap = 145 * MIB
        r = step.step(torch.randn(12, 4), loss_fn)
        self.assertEqual((r.micro_batch, r.retries), (4, 1))
        rec = step.records[0]
        self.assertEqual((rec["basis"], rec["fixed_bytes"], rec["per_sample_bytes"],
                          rec["capacity_bytes"], rec["largest_ok_micro_batch"]),
                         ("measured", 100 * MIB, 10 * MIB, 145 * MIB, 6))

    def test_inexact_accumulation_weights_each_micro_batch(self):
        # 7 samples, no divisor between 2 and 3: [3, 2, 2]; the weighted losses make the
        # gradient of the mean over the 7 samples
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        ref = torch.nn.Linear(3, 1)
        ref.load_state_dict(model.state_dict())
        x, y = torch.randn(7, 3), torch.randn(7, 1)
        events = []
        step = ot.TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.5), 3,
                            min_micro_batch=2, on_event=events.append)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = step.step((x, y), lambda m, mb: torch.nn.functional.mse_loss(m(mb[0]), mb[1]))
        self.assertEqual((r.micro_batch, r.micro_batches, r.exact), (3, 3, False))
        self.assertTrue(any(issubclass(w.category, ot.InexactAccumulationWarning)
                            for w in caught))
        self.assertEqual(events[0]["event"], "inexact")
        self.assertEqual(events[0]["sizes"], [3, 2, 2])
        opt = torch.optim.SGD(ref.parameters(), lr=0.5)
        loss = torch.nn.functional.mse_loss(ref(x), y)
        loss.backward()
        opt.step()
        self.assertTrue(close(model.parameters(), ref.parameters()))
        self.assertAlmostEqual(float(r.loss), float(loss.detach()), places=6)

    def test_grad_scaler_and_before_step(self):
        # a power-of-two loss scale is exact in fp32: the same weights as without a scaler
        clipped = []
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
        model, _, _ = self.train(6, oom_above=4, scaler=scaler,
                                 before_step=lambda m, o: clipped.append(
                                     float(torch.nn.utils.clip_grad_norm_(m.parameters(), 1e9))))
        ref, _, _ = self.train(3)
        self.assertTrue(close(model.parameters(), ref.parameters()))
        self.assertEqual(len(clipped), 3)


@unittest.skipIf(TORCH_REASON, TORCH_REASON or "")
class Calibration(unittest.TestCase):
    RECORD = {"event": "oom-limit", "time": 12.5, "rank": 0, "world_size": 2, "step": 3,
              "per_step_batch": 12, "failed_micro_batch": 6, "micro_batch": 4,
              "micro_batches": 3, "exact": True, "failed_ranks": [1], "phase": "backward",
              "basis": "measured", "fixed_bytes": 100 * MIB, "per_sample_bytes": 10 * MIB,
              "capacity_bytes": 145 * MIB, "peak_bytes": 160 * MIB,
              "largest_ok_micro_batch": 6, "limit": 4}

    def test_line(self):
        cmd = ["python", "train.py", "--batch", "{batch}"]
        line = ot.calibration_line(self.RECORD, "NVIDIA A100 80GB", cmd, extra_fixed_bytes=MIB)
        self.assertEqual(line, {
            "time": 12.5, "gpu": "NVIDIA A100 80GB", "command": cmd, "workload": "",
            "fixed_bytes": 101 * MIB, "per_sample_bytes": 10 * MIB, "per_sample2_bytes": 0.0,
            "recommended_batch": 4, "max_batch": 4, "usable_bytes": 145 * MIB})
        self.assertIsNone(ot.calibration_line(dict(self.RECORD, fixed_bytes=None), "g", cmd))

    def test_the_cli_reads_the_line(self):
        binary = oomless_bin()
        if not binary:
            self.skipTest("no oomless binary (build it: make all)")
        cmd = ["python", "train.py", "--batch", "{batch}"]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sub", "calibration.jsonl")
            line = ot.calibration_line(self.RECORD, "NVIDIA A100 80GB", json.dumps(cmd))
            self.assertEqual(ot.append_calibration(line, path), path)
            ot.append_calibration(dict(line, recommended_batch=3), path)
            with open(path) as f:
                self.assertEqual(len(f.read().splitlines()), 2)
            out = subprocess.run([binary, "estimate", "--calibration", path, "--gpu", "a100-80gb",
                                  "--batch", "4", "--json", "--"] + cmd, capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            doc = json.loads(out.stdout)
            self.assertEqual(doc["calibration"]["fixed_bytes"], 100 * MIB)
            self.assertEqual(doc["memory"]["device_peak"], 140 * MIB)

    def test_relaunch_message(self):
        stop = ot.OomStop(self.RECORD, "/ck/checkpoint-2")
        text = ot.relaunch_message(stop, grad_accum=3)
        first, second = text.splitlines()
        self.assertIn("torch.OutOfMemoryError", first)
        self.assertIn("at step 3", first)
        self.assertTrue(second.startswith("OOMLESS_RECOVERY "))
        doc = json.loads(second.split(" ", 1)[1])
        self.assertEqual((doc["micro_batch"], doc["grad_accum"], doc["checkpoint"]),
                         (4, 3, "/ck/checkpoint-2"))


@unittest.skipIf(TORCH_REASON, TORCH_REASON or "")
class CudaCapacity(unittest.TestCase):
    """CudaMemory.capacity() with the device calls replaced: the H100 of 2026-11-25, 79.18 GiB to
    CUDA, 56.06 GiB free and 23.11 GiB reserved when a process capped at 0.3031 of it ran out."""

    GIB = 1 << 30

    def capacity(self, fraction):
        from unittest import mock
        props = mock.Mock(total_memory=int(79.18 * self.GIB))
        with mock.patch.object(torch.cuda, "mem_get_info",
                               return_value=(int(56.06 * self.GIB), props.total_memory)), \
                mock.patch.object(torch.cuda, "memory_reserved",
                                  return_value=int(23.11 * self.GIB)), \
                mock.patch.object(torch.cuda, "get_per_process_memory_fraction",
                                  return_value=fraction, create=True), \
                mock.patch.object(torch.cuda, "get_device_properties", return_value=props):
            return ot.CudaMemory(device="cuda:0").capacity()

    def test_the_fraction_caps_the_capacity(self):
        # 0.3031 of 79.18 GiB = 24.00 GiB allowed, not the 79.17 GiB free + reserved
        self.assertEqual(self.capacity(0.3031), int(0.3031 * int(79.18 * self.GIB)))

    def test_no_fraction(self):
        self.assertEqual(self.capacity(1.0), int(56.06 * self.GIB) + int(23.11 * self.GIB))


if __name__ == "__main__":
    unittest.main()
