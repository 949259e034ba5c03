"""The oom_snapshot event: the summary of a memory snapshot in the format
torch.cuda.memory._snapshot() returns (hand-made here: there is no GPU on CPU machines), the
append of two writers at once, TrainStep recording an injected OOM, and a job under the real
`oomless run --events` whose OOM ends the process: the event is in the file, run prints its
summary after the restart line and in --json (what `watch` shows of it: tests/unit/test_watch.c)."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import SRC, TORCH_REASON, oomless_bin, run  # noqa: E402

GiB, MiB = 1 << 30, 1 << 20
MODEL = "/work/project/model.py"


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


def block(size, state, frames=()):
    return {"size": size, "requested_size": size, "address": 0, "state": state,
            "frames": list(frames)}


# two segments: one with two live tensors from the model and a free hole (inactive split), one
# entirely free (releasable: not split); an OOM of 4 GiB at the end of the history
SNAPSHOT = {
    "segments": [
        {"address": 0, "total_size": 10 * GiB, "stream": 0, "segment_type": "large",
         "allocated_size": 7 * GiB, "active_size": 7 * GiB, "blocks": [
             block(4 * GiB, "active_allocated",
                   [frame("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 134,
                          "forward"), frame(MODEL, 88, "forward"),
                    frame("/work/project/train.py", 20, "main")]),
             block(2 * GiB, "inactive"),
             block(3 * GiB, "active_allocated", [frame(MODEL, 40, "forward")]),
             block(1 * GiB, "active_awaiting_free", [frame(MODEL, 40, "forward")])]},
        {"address": 1, "total_size": 2 * MiB, "stream": 0, "segment_type": "small",
         "allocated_size": 0, "active_size": 0, "blocks": [block(2 * MiB, "inactive")]},
        {"address": 2, "total_size": 2 * MiB, "stream": 0, "segment_type": "small",
         "allocated_size": 2 * MiB, "active_size": 2 * MiB, "blocks": [
             block(MiB, "active_allocated", [frame(MODEL, 40, "forward")]),
             block(MiB, "active_allocated", [frame(MODEL, 40, "forward")])]},
    ],
    "device_traces": [[
        {"action": "alloc", "addr": 0, "size": 4 * GiB, "stream": 0, "frames": []},
        {"action": "oom", "size": 4 * GiB, "device_free": 512 * MiB, "stream": 0, "frames": []},
    ]],
}


@unittest.skipIf(TORCH_REASON, TORCH_REASON or "")
class Summary(unittest.TestCase):
    def test_sizes_and_origins(self):
        from oomless.torch import summarize_snapshot
        s = summarize_snapshot(SNAPSHOT, source=lambda f, n: "line %s of %s" % (n, f[-8:]))
        self.assertEqual(s["allocated_bytes"], 7 * GiB + 2 * MiB)
        self.assertEqual(s["reserved_bytes"], 10 * GiB + 4 * MiB)
        self.assertEqual(s["inactive_split_bytes"], 2 * GiB)  # not the free small segment
        self.assertEqual((s["tried_bytes"], s["device_free_bytes"]), (4 * GiB, 512 * MiB))
        self.assertTrue(s["frames"])
        # the innermost frame in the user's code, not torch's linear.py
        self.assertEqual(s["largest"][0], {"bytes": 4 * GiB, "module": None,
                                           "where": "model.py:88 forward",
                                           "code": "line 88 of model.py"})
        self.assertFalse(s["tagged"])
        self.assertEqual([b["bytes"] for b in s["largest"]], [4 * GiB, 3 * GiB, MiB, MiB])
        self.assertEqual([(o["where"], o["bytes"], o["count"]) for o in s["origins"]],
                         [("model.py:88 forward", 4 * GiB, 1),
                          ("model.py:40 forward", 3 * GiB + 2 * MiB, 3)])

    def test_without_stacks_or_history(self):
        from oomless.torch import summarize_snapshot
        bare = {"segments": [{"total_size": 6 * GiB, "blocks": [
            block(5 * GiB, "active_allocated"), block(GiB, "inactive")]}], "device_traces": []}
        s = summarize_snapshot(bare, top=1)
        self.assertFalse(s["frames"])
        self.assertEqual((s["tried_bytes"], s["inactive_split_bytes"]), (None, GiB))
        self.assertEqual(s["largest"], [{"bytes": 5 * GiB, "module": None, "where": None,
                                          "code": None}])
        self.assertEqual(s["origins"], [{"module": None, "where": None, "code": None,
                                         "bytes": 5 * GiB, "count": 1}])

    def test_modules_tagged(self):
        # tag_modules names the storage each module's forward returned; a block at that address
        # is that module's (the innermost: Sequential's own output is its last layer's)
        import torch
        from oomless import _oom_snapshot
        from oomless.torch import summarize_snapshot, tag_modules
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                    torch.nn.Linear(8, 2))
        handles = tag_modules(model)
        try:
            hidden = model[0](torch.ones(3, 4))
            out = model(torch.ones(3, 4))
            out = model(torch.ones(3, 4))  # a second forward forgets the first one's
        finally:
            for h in handles:
                h.remove()
        tags = dict(_oom_snapshot._tags)
        self.assertEqual(tags[out.untyped_storage().data_ptr()], "2")
        # the second forward's three outputs (fewer addresses when the allocator gave a freed
        # one's block to a later output), never the Sequential's own name
        self.assertLessEqual(set(tags.values()), {"0", "1", "2"})
        self.assertIn(len(tags), (2, 3))
        snap = {"segments": [{"total_size": 8 * GiB, "blocks": [
            dict(block(3 * GiB, "active_allocated"), address=out.untyped_storage().data_ptr()),
            dict(block(GiB, "active_allocated"), address=1),
            dict(block(GiB, "active_allocated"), address=hidden.untyped_storage().data_ptr())]}]}
        s = summarize_snapshot(snap, tags=tags)
        self.assertTrue(s["tagged"])
        # `hidden` (a forward of model[0] alone, before the model's) is still alive: no later
        # output has its address, and the model's forward forgot its tag
        self.assertNotIn(hidden.untyped_storage().data_ptr(), tags)
        self.assertEqual([(b["module"], b["bytes"]) for b in s["largest"]],
                         [("2", 3 * GiB), (None, GiB), (None, GiB)])
        self.assertEqual([(o["module"], o["bytes"], o["count"]) for o in s["origins"]],
                         [("2", 3 * GiB, 1), (None, 2 * GiB, 2)])

    def test_reused_address_retagged(self):
        # a tensor freed within a forward leaves its block to the next one of that size: the
        # address takes the new tensor's module, while a live tensor's (a view, an outer
        # module's same output) keeps the innermost name
        import torch
        from oomless import _oom_snapshot
        buf = bytearray(64)
        _oom_snapshot._forget_tags()
        first = torch.frombuffer(buf, dtype=torch.uint8)
        address = first.untyped_storage().data_ptr()
        _oom_snapshot._tag(first, "inner")
        _oom_snapshot._tag(torch.frombuffer(buf, dtype=torch.uint8), "outer")
        self.assertEqual(_oom_snapshot._tags[address], "inner")
        del first
        second = torch.frombuffer(buf, dtype=torch.uint8)
        self.assertEqual(second.untyped_storage().data_ptr(), address)
        _oom_snapshot._tag(second, "later")
        self.assertEqual(_oom_snapshot._tags, {address: "later"})
        _oom_snapshot._forget_tags()


WRITER = """
import sys
sys.path.insert(0, %r)
from oomless._oom_snapshot import append_event
for i in range(300):
    append_event({"event": "oom_snapshot", "time": 1.0, "writer": sys.argv[2], "i": i,
                  "pad": "x" * 6000}, sys.argv[1])
"""


@unittest.skipIf(TORCH_REASON, TORCH_REASON or "")
class Append(unittest.TestCase):
    def test_two_writers_never_interleave(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ev.jsonl")
            code = WRITER % os.path.join(SRC, "bindings", "python")
            procs = [subprocess.Popen([sys.executable, "-c", code, path, w]) for w in "ab"]
            for p in procs:
                self.assertEqual(p.wait(timeout=120), 0)
            with open(path) as f:
                docs = [json.loads(line) for line in f]
        for w in "ab":
            self.assertEqual([d["i"] for d in docs if d["writer"] == w], list(range(300)))

    def test_train_step_records_the_oom(self):
        import torch
        import oomless.torch as ot

        model = torch.nn.Linear(4, 1)
        failed = []

        def loss_fn(m, mb):
            if mb.shape[0] > 2 and not failed:
                failed.append(mb.shape[0])
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB.")
            return m(mb).pow(2).mean()

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ev.jsonl")
            previous = ot.set_snapshot_source(lambda: SNAPSHOT)
            os.environ["OOMLESS_RECOVERY_EVENTS"] = path
            try:
                step = ot.TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                    micro_batch=4)
                step.step(torch.ones(8, 4), loss_fn)
                step.step(torch.ones(8, 4), loss_fn)
            finally:
                del os.environ["OOMLESS_RECOVERY_EVENTS"]
                ot.set_snapshot_source(previous)
            with open(path) as f:
                docs = [json.loads(line) for line in f]
        self.assertEqual(len(docs), 1)  # one OOM, recorded once
        doc = docs[0]
        self.assertEqual((doc["event"], doc["step"], doc["rank"], doc["pid"]),
                         ("oom_snapshot", 1, 0, os.getpid()))
        self.assertEqual(doc["reason"], "CUDA out of memory. Tried to allocate 4.00 GiB.")
        self.assertEqual(doc["origins"][0]["where"], "model.py:88 forward")

    def test_giving_up_is_not_recorded_again(self):
        # every micro-batch fails: each caught OOM is recorded, the error raised when nothing
        # smaller is left is not (the exception hook would record it after the step was freed)
        import torch
        import oomless.torch as ot

        def loss_fn(m, mb):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB.")

        model = torch.nn.Linear(4, 1)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ev.jsonl")
            previous = ot.set_snapshot_source(lambda: SNAPSHOT)
            try:
                step = ot.TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                    micro_batch=2)
                os.environ["OOMLESS_RECOVERY_EVENTS"] = path
                with self.assertRaises(torch.OutOfMemoryError) as caught:
                    step.step(torch.ones(2, 4), loss_fn)
                self.assertIsNone(ot.record_oom(caught.exception))
            finally:
                os.environ.pop("OOMLESS_RECOVERY_EVENTS", None)
                ot.set_snapshot_source(previous)
            with open(path) as f:
                self.assertEqual([json.loads(line)["event"] for line in f],
                                 ["oom_snapshot", "oom_snapshot"])  # micro-batches 2 and 1


JOB = """
import os, sys
sys.path.insert(0, %r)
import torch
import oomless.torch as ot
ot.set_snapshot_source(lambda: %r)
if os.environ["OOMLESS_ATTEMPT"] == "1":
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB.")
print("history", os.environ.get("OOMLESS_MEMORY_HISTORY"))
"""

LINE = ("oomless run: at the out of memory, largest: 4.00 GiB model.py:88 forward, 3.00 GiB "
        "model.py:40 forward (3 tensors); allocated 7.00 GiB of 10.00 GiB reserved, 2.00 GiB "
        "inactive split; tried 4.00 GiB")


@unittest.skipIf(TORCH_REASON or not oomless_bin(), TORCH_REASON or "no oomless binary")
class UnderRun(unittest.TestCase):
    def test_uncaught_oom_under_run(self):
        with tempfile.TemporaryDirectory() as d:
            job, events = os.path.join(d, "job.py"), os.path.join(d, "ev.jsonl")
            with open(job, "w") as f:
                f.write(textwrap.dedent(JOB % (os.path.join(SRC, "bindings", "python"),
                                               SNAPSHOT)))
            rc, out = run([oomless_bin(), "run", "--batch-size", "8", "--events", events,
                           "--memory-history", "1000", "--json", "--", sys.executable, job],
                          timeout=300)
            self.assertEqual(rc, 0, out)
            with open(events) as f:
                docs = [json.loads(line) for line in f]
        kinds = [d["event"] for d in docs]
        self.assertEqual(kinds, ["launch", "oom_snapshot", "oom", "restart", "launch", "exit"])
        snap = docs[1]
        self.assertEqual((snap["pid"], snap["rank"], snap["step"]), (docs[0]["pid"], None, None))
        self.assertEqual(snap["reserved_bytes"], 10 * GiB + 4 * MiB)
        lines = out.splitlines()
        restart = next(i for i, line in enumerate(lines) if "restarting with batch 8 -> 4" in line)
        self.assertEqual(lines[restart + 1], LINE)
        self.assertIn("history 1000", out)  # --memory-history reaches the job
        doc = json.loads(lines[-1])
        self.assertEqual(doc["oom_snapshot"], snap)


if __name__ == "__main__":
    unittest.main()
