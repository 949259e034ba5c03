"""The package writes the calibration store through liboomless, its one writer: oomless.calibration
(what `oomless trace --calibrate` and oomless.torch.append_calibration call) appends a record all
or nothing when the disk fills, on a fresh line, never through a symbolic link or into a FIFO,
under $HOME/.cache when $XDG_CACHE_HOME is relative, never creating a missing $HOME; the line is
byte for byte what the package's own writers wrote (members beyond the store's own kept after
them), and the C tool reads what it writes. No torch needed here."""
import importlib
import json
import os
import resource
import signal
import subprocess
import tempfile
import types
import unittest
import warnings

import oomless
from oomless import calibration

tm = importlib.import_module("oomless.trace.__main__")

RECORD = {"time": 1700000000.25, "gpu": "", "command": ["oomless", "trace", "--model", "gpt2"],
          "workload": "", "fixed_bytes": 1, "per_sample_bytes": 2, "per_sample2_bytes": 0.0,
          "recommended_batch": 0, "max_batch": 4, "usable_bytes": 0, "traced": True}
# the line as the package's own writers wrote it (json.dumps, compact): the library's must match
LINE = (json.dumps(RECORD, separators=(",", ":")) + "\n").encode()


class StoreTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "calibration.jsonl")
        self.env = {k: os.environ.get(k) for k in ("XDG_CACHE_HOME", "HOME")}

    def tearDown(self):
        for k, v in self.env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.tmp.cleanup()

    def write(self, data):
        with open(self.path, "wb") as f:
            f.write(data)

    def read(self, path=None):
        with open(path or self.path, "rb") as f:
            return f.read()

    def test_the_line_is_the_package_writers_line(self):
        self.assertEqual(calibration.save(RECORD, self.path), self.path)
        self.assertEqual(self.read(), LINE)
        # further members after the store's own, as the tracer's record has them; a fitted
        # curvature written as Python writes it
        rec = dict(RECORD, per_sample2_bytes=1234.5678901234, counter="allocated", seq=512,
                   points=[[1, 10], [2, 20.5]], versions={"torch": "2.13.0"})
        calibration.save(rec, self.path)
        self.assertEqual(self.read(), LINE + (json.dumps(rec, separators=(",", ":")) + "\n").encode())
        got = calibration.lookup("any GPU", RECORD["command"], path=self.path)
        self.assertEqual(got, rec)

    def test_the_tool_reads_what_it_writes(self):
        cmd = ["python", "train.py", "--batch", "{batch}"]
        rec = dict(RECORD, gpu="NVIDIA A100 80GB", command=cmd, traced=False,
                   fixed_bytes=100 * 2 ** 20, per_sample_bytes=10 * 2 ** 20, recommended_batch=4,
                   max_batch=4, usable_bytes=145 * 2 ** 20)
        del rec["traced"]
        calibration.save(rec, self.path)
        out = subprocess.run([os.environ["OOMLESS_BIN"], "estimate", "--calibration", self.path,
                              "--gpu", "a100-80gb", "--batch", "4", "--json", "--"] + cmd,
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["memory"]["device_peak"], 140 * 2 ** 20)

    def test_the_tracer_writes_through_the_store(self):
        """trace --calibrate's record: the fit of three traced batches, with the trace's own
        members, appended by the library"""
        peaks = {2: 300, 4: 500, 8: 900}

        class Workload:
            def __init__(self, model, method, precision, optimizer, batch, *rest, **kw):
                self.batch = batch

        fake = types.SimpleNamespace(Workload=Workload, versions=lambda: {"torch": "x"},
                                     trace_hf=lambda w: {"memory": {"allocated_peak": peaks[w.batch]}})
        argv = ["--model", "gpt2", "--batch", "2", "--calibrate", "--calibration", self.path]
        args = tm._parser().parse_args(argv)
        record, path = tm.calibrate(args, argv, fake)
        self.assertEqual(path, self.path)
        line = json.loads(self.read())
        self.assertEqual(line, record)
        self.assertEqual((line["fixed_bytes"], line["per_sample_bytes"], line["max_batch"]),
                         (100, 100, 8))
        self.assertEqual(line["command"], ["oomless", "trace", "--model", "gpt2"])
        self.assertEqual(list(line)[-5:], ["traced", "counter", "seq", "points", "versions"])

    def test_short_write_leaves_the_file_unchanged(self):
        self.write(LINE)
        old = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(LINE) + 25, old[1]))
        try:  # Python ignores SIGXFSZ: write() stops at the limit, then fails with EFBIG
            with self.assertRaises(oomless.FileError) as cm:
                calibration.save(RECORD, self.path)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, old)
        self.assertEqual(str(cm.exception), "cannot save the calibration record to '%s': File too "
                                            "large (nothing was saved)" % self.path)
        self.assertEqual(self.read(), LINE)

    def test_append_starts_a_fresh_line(self):
        self.write(LINE[:40])
        calibration.save(RECORD, self.path)
        self.assertEqual(self.read(), LINE[:40] + b"\n" + LINE)

    def test_symlink_is_refused(self):
        target = os.path.join(self.tmp.name, "target")
        with open(target, "w") as f:
            f.write("keep\n")
        os.symlink(target, self.path)
        with self.assertRaises(oomless.FileError) as cm:
            calibration.save(RECORD, self.path)
        self.assertIn("is a symbolic link: refused", str(cm.exception))
        self.assertEqual(self.read(target), b"keep\n")

    def test_fifo_is_refused_without_waiting(self):
        os.mkfifo(self.path)
        signal.alarm(20)  # a hang fails the test
        try:
            with self.assertRaises(oomless.FileError) as cm:
                calibration.save(RECORD, self.path)
        finally:
            signal.alarm(0)
        self.assertIn("is a FIFO, not a regular file", str(cm.exception))

    def test_relative_xdg_cache_home_is_ignored(self):
        home = os.path.join(self.tmp.name, "home")
        os.mkdir(home)
        os.environ["XDG_CACHE_HOME"] = "relcache"
        os.environ["HOME"] = home
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            path = calibration.save(RECORD)
        self.assertEqual(path, os.path.join(home, ".cache", "oomless", "calibration.jsonl"))
        self.assertIn("$XDG_CACHE_HOME 'relcache' is not an absolute path: ignored",
                      " ".join(str(w.message) for w in caught if w.category is oomless.Notice))
        self.assertEqual(self.read(path), LINE)
        self.assertEqual(os.stat(os.path.join(home, ".cache")).st_mode & 0o777, 0o700)

    def test_missing_home_is_not_created(self):
        home = os.path.join(self.tmp.name, "nonexistent")
        os.environ.pop("XDG_CACHE_HOME", None)
        os.environ["HOME"] = home
        with self.assertRaises(oomless.FileError) as cm:
            calibration.save(RECORD)
        self.assertIn("$HOME '%s' does not exist; not creating it" % home, str(cm.exception))
        self.assertFalse(os.path.exists(home))


if __name__ == "__main__":
    unittest.main()
