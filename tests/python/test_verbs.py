"""oomless.watch() (through the library), oomless.probe() and oomless.run() (through the CLI)
give the documents the CLI prints; their errors map to the exception classes."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import oomless

BIN = os.environ["OOMLESS_BIN"]
FAKE = os.environ["FAKE_NVML_LIB"]
SPEC = """driver 550.54.15
gpu name="NVIDIA GeForce RTX 4090" uuid=GPU-4090aaaa-1111-2222-3333-444444444444 total=25757220864 used=1073741824 cc=8.9
"""


def cli(*args, env=None):
    proc = subprocess.run([BIN, *args], capture_output=True, text=True, env=env)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None


class VerbsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.env = dict(os.environ)
        spec = os.path.join(self.tmp.name, "spec")
        with open(spec, "w") as f:
            f.write(SPEC)
        os.environ["OOMLESS_NVML_LIBRARY"] = FAKE
        os.environ["FAKE_NVML_SPEC"] = spec
        os.environ["OOMLESS_CLI"] = BIN
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        for key in ("OOMLESS_BATCH_SIZE", "OOMLESS_GRAD_ACCUM"):
            os.environ.pop(key, None)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)
        self.tmp.cleanup()

    def test_watch_is_the_cli_snapshot(self):
        doc = oomless.watch(vram_safety_margin="2GiB", plan=10 << 30)
        rc, expected = cli("watch", "--once", "--json", "--vram-safety-margin", "2GiB")
        self.assertEqual(rc, 0)
        self.assertEqual(doc["plan_peak_bytes"], 10 << 30)
        for d in (doc, expected):
            d.pop("time")
            d.pop("plan_peak_bytes")
            for gpu in d["gpus"]:
                gpu.pop("band")  # the CLI's run had no plan peak: another band
        self.assertEqual(doc, expected)
        gpu = doc["gpus"][0]
        self.assertEqual(gpu["budget"]["usable_bytes"], 25757220864 - (2 << 30))
        plan = {"memory": {"device_peak": 12345}}
        self.assertEqual(oomless.watch(plan=plan)["plan_peak_bytes"], 12345)

    def test_watch_without_nvml(self):
        os.environ["OOMLESS_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
        with self.assertRaises(oomless.NoDeviceError):
            oomless.watch()
        with self.assertRaises(oomless.InvalidValueError):
            os.environ["OOMLESS_NVML_LIBRARY"] = FAKE
            oomless.watch(vram_safety_margin="lots")

    def test_run(self):
        job = [sys.executable, "-c", "import os, sys; sys.exit(int(os.environ['OOMLESS_BATCH_SIZE']) % 7)"]
        doc = oomless.run(job, batch_size=4, grad_accum=2, calibration="off")
        rc, expected = cli("run", "--json", "--batch-size", "4", "--grad-accum", "2",
                           "--calibration", "off", "--", *job)
        self.assertEqual(rc, 4)
        for d in (doc, expected):
            d.pop("peak_bytes")
        self.assertEqual(doc, expected)
        self.assertEqual((doc["exit_code"], doc["batch"], doc["effective_batch"]), (4, 4, 8))

    def test_probe(self):
        # an out-of-memory error above batch 4, as PyTorch prints it
        job = [sys.executable, "-c",
               "import os, sys\nif int(os.environ['OOMLESS_BATCH_SIZE']) > 4:\n"
               "    sys.exit('torch.OutOfMemoryError: CUDA out of memory.')"]
        doc = oomless.probe(job, max_trials=6, calibration="off", max_batch=16)
        rc, expected = cli("probe", "--json", "--max-trials", "6", "--calibration", "off",
                           "--max-batch", "16", "--", *job)
        self.assertEqual(rc, 0)
        for d in (doc, expected):
            for trial in d["trials"]:
                trial.pop("duration_s")
                trial.pop("peak_bytes")
        self.assertEqual(doc, expected)
        self.assertEqual(doc["recommended_batch"], 4)
        self.assertTrue(any(t["oom"] for t in doc["trials"]))

    def test_cli_errors(self):
        with self.assertRaises(oomless.InvalidValueError) as cm:
            oomless.run(["true"], batch_size="many")
        self.assertEqual(cm.exception.exit_status, 2)
        with self.assertRaises(oomless.InvalidValueError):
            oomless.run("true")  # a string is not an argument list
        os.environ["OOMLESS_CLI"] = os.path.join(self.tmp.name, "no-such-oomless")
        with self.assertRaises(oomless.FileError):
            oomless.run(["true"], batch_size=1)

    def test_cli_path(self):
        os.environ.pop("OOMLESS_CLI")
        path = oomless.cli_path()
        self.assertTrue(os.access(path, os.X_OK), path)
        self.assertEqual(os.path.basename(path), "oomless")

    def test_trace_is_the_package_and_callable(self):
        import oomless.trace
        self.assertTrue(callable(oomless.trace))
        self.assertIs(oomless.trace, sys.modules["oomless.trace"])
        with mock.patch("oomless.trace.trace", return_value={"allocated_peak": 1}) as fn:
            self.assertEqual(oomless.trace("gpt2", batch=2), {"allocated_peak": 1})
        fn.assert_called_once_with("gpt2", batch=2)


if __name__ == "__main__":
    unittest.main()
