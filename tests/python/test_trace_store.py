"""`oomless trace --calibrate` appends its record as liboomless does (no torch needed here): all or
nothing when the disk fills, on a fresh line, never through a symbolic link or into a FIFO, under
$HOME/.cache when $XDG_CACHE_HOME is relative, and never creating a missing $HOME."""
import contextlib
import importlib
import io
import json
import os
import resource
import signal
import tempfile
import unittest

tm = importlib.import_module("oomless.trace.__main__")

RECORD = {"time": 1700000000.25, "gpu": "", "command": ["oomless", "trace", "--model", "gpt2"],
          "workload": "", "fixed_bytes": 1, "per_sample_bytes": 2, "per_sample2_bytes": 0.0,
          "recommended_batch": 0, "max_batch": 4, "usable_bytes": 0, "traced": True}
LINE = (json.dumps(RECORD, separators=(",", ":")) + "\n").encode()


class TraceStoreTest(unittest.TestCase):
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

    def test_short_write_leaves_the_file_unchanged(self):
        self.write(LINE)
        old = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(LINE) + 25, old[1]))
        try:  # Python ignores SIGXFSZ: write() stops at the limit, then fails with EFBIG
            with self.assertRaises(tm.StoreError) as cm:
                tm.append_record(self.path, RECORD)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, old)
        self.assertEqual(str(cm.exception), "cannot save the calibration record to '%s': File too "
                                            "large (nothing was saved)" % self.path)
        self.assertEqual(self.read(), LINE)

    def test_append_starts_a_fresh_line(self):
        self.write(LINE[:40])
        tm.append_record(self.path, RECORD)
        self.assertEqual(self.read(), LINE[:40] + b"\n" + LINE)

    def test_symlink_is_refused(self):
        target = os.path.join(self.tmp.name, "target")
        with open(target, "w") as f:
            f.write("keep\n")
        os.symlink(target, self.path)
        with self.assertRaises(tm.StoreError) as cm:
            tm.append_record(self.path, RECORD)
        self.assertIn("is a symbolic link: refused", str(cm.exception))
        self.assertEqual(self.read(target), b"keep\n")

    def test_fifo_is_refused_without_waiting(self):
        os.mkfifo(self.path)
        signal.alarm(20)  # a hang fails the test
        try:
            with self.assertRaises(tm.StoreError) as cm:
                tm.append_record(self.path, RECORD)
        finally:
            signal.alarm(0)
        self.assertIn("is a FIFO, not a regular file", str(cm.exception))

    def test_relative_xdg_cache_home_is_ignored(self):
        home = os.path.join(self.tmp.name, "home")
        os.mkdir(home)
        os.environ["XDG_CACHE_HOME"] = "relcache"
        os.environ["HOME"] = home
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            path, got_home = tm.calibration_path(None)
        self.assertEqual(path, os.path.join(home, ".cache", "oomless", "calibration.jsonl"))
        self.assertEqual(got_home, home)
        self.assertIn("$XDG_CACHE_HOME 'relcache' is not an absolute path: ignored", err.getvalue())
        tm.append_record(path, RECORD, got_home, private=True)
        self.assertEqual(self.read(path), LINE)
        self.assertEqual(os.stat(os.path.join(home, ".cache")).st_mode & 0o777, 0o700)

    def test_missing_home_is_not_created(self):
        home = os.path.join(self.tmp.name, "nonexistent")
        os.environ.pop("XDG_CACHE_HOME", None)
        os.environ["HOME"] = home
        path, got_home = tm.calibration_path(None)
        with self.assertRaises(tm.StoreError) as cm:
            tm.append_record(path, RECORD, got_home, private=True)
        self.assertIn("$HOME '%s' does not exist; not creating it" % home, str(cm.exception))
        self.assertFalse(os.path.exists(home))


if __name__ == "__main__":
    unittest.main()
