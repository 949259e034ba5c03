"""oomless.watch() (through the library), oomless.probe() and oomless.run() (through the CLI)
give the documents the CLI prints; their errors map to the exception classes and carry the
program's message. Arguments C would read as something else are refused first, naming them: a
string with a NUL character (C reads it cut short there), an integer outside its range (strtoll
reads 2**64 as 9223372036854775807; a c_uint64 wraps -1)."""
import contextlib
import io
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


class FakeGpuTest(unittest.TestCase):
    """The fake NVML with one RTX 4090, the program of this build, no batch in the environment."""

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
        for key in ("OOMLESS_BATCH_SIZE", "OOMLESS_GRAD_ACCUM", "OOMLESS_SUPERVISOR"):
            os.environ.pop(key, None)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)
        self.tmp.cleanup()


class VerbsTest(FakeGpuTest):
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


class ArgumentsTest(FakeGpuTest):
    def refused(self, call, *named):
        """call() raises InvalidValueError (a ValueError) whose message holds each of `named`."""
        with self.assertRaises(ValueError) as cm:
            call()
        self.assertIsInstance(cm.exception, oomless.InvalidValueError)
        for text in named:
            self.assertIn(text, str(cm.exception))
        return cm.exception

    def test_nul_is_refused_naming_the_argument(self):
        # before: "gpt2\0anything" was estimated as gpt2, "lora\0x" as lora
        self.refused(lambda: oomless.estimate(model="gpt2\0anything"), "model=", "NUL")
        self.refused(lambda: oomless.estimate(model="gpt2", method="lora\0x"), "method=", "NUL")
        self.refused(lambda: oomless.plan(model="gpt2", vram="24\0GiB"), "vram=", "NUL")
        self.refused(lambda: oomless.gpus(gpu="0\0"), "gpu=", "NUL")
        self.refused(lambda: oomless.parse_size("16\0GiB"), "text=", "NUL")
        self.refused(lambda: oomless.watch(vram_safety_margin="1GiB\0"), "vram_safety_margin=")
        self.refused(lambda: oomless.probe(["true", "a\0b"], calibration="off"), "command[1]=")
        self.refused(lambda: oomless.run(["true"], batch_size=1, workload="w\0"), "workload=")
        self.refused(lambda: oomless.run(["true"], batch_size=1, set=["seq=1\0"]), "set=")
        with oomless.Workload() as w:
            self.refused(lambda: w.set("lora_rank\0", 8), "key=")
        # an ordinary string still passes
        self.assertGreater(oomless.estimate(model="gpt2")["memory"]["device_peak"], 0)

    def test_integers_are_range_checked(self):
        # before: index 9223372036854775807 was reported for 2**64 (and for 2**63)
        for gpu in (2 ** 64, 2 ** 63, 2 ** 31, -1):
            self.refused(lambda: oomless.gpus(gpu=gpu), "gpu=%d is out of range" % gpu,
                         "0 to 2147483647")
        self.refused(lambda: oomless.plan(model="gpt2", gpu=2 ** 64), "gpu=18446744073709551616")
        with self.assertRaises(oomless.InvalidValueError) as cm:
            oomless.gpus(gpu=5)  # in range: the library's own message, the index as given
        self.assertIn("index 5 is not visible", str(cm.exception))
        self.assertEqual(oomless.gpus(gpu=0)["gpus"][0]["index"], 0)
        for value in (2 ** 64, -(2 ** 63) - 1):
            self.refused(lambda: oomless.estimate(model="gpt2", batch=value),
                         "batch=%d is out of range" % value)
            self.refused(lambda: oomless.gpus(vram=value), "vram=%d" % value)
            self.refused(lambda: oomless.probe(["true"], max_trials=value), "max_trials=")
        # a c_uint64 argument: -1 would wrap to 18446744073709551615, 2**64 to 0
        for peak in (-1, 2 ** 64):
            self.refused(lambda: oomless.watch(plan=peak), "plan=%d is out of range" % peak)
            self.refused(lambda: oomless.watch(plan={"memory": {"device_peak": peak}}), "plan=")
        self.assertEqual(oomless.watch(plan=80 << 30)["plan_peak_bytes"], 80 << 30)

    def test_cli_errors_carry_the_message(self):
        # before: "oomless probe exited with status 2 and no result (its message is on stderr)"
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            e = self.refused(lambda: oomless.probe(["true"], max_trials=0),
                             "oomless probe: --max-trials '0' must be a whole number >= 1",
                             "(exit status 2)")
        self.assertEqual(e.exit_status, 2)
        self.assertIn("--max-trials '0'", err.getvalue())  # still on stderr too
        with contextlib.redirect_stderr(io.StringIO()):
            e = self.refused(lambda: oomless.run(["true"], batch_size="many"),
                             "oomless run: --batch-size 'many' must be a whole number >= 1")
            self.refused(lambda: oomless.probe(["true"], model="no-such-model",
                                               calibration="off"), "no-such-model")

    def test_job_output_still_passes_through(self):
        job = [sys.executable, "-c",
               "import sys; print('the job on stdout'); sys.stderr.write('the job on stderr\\n')"]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            doc = oomless.run(job, batch_size=2, calibration="off")
        self.assertEqual(doc["exit_code"], 0)
        text = err.getvalue()
        self.assertIn("the job on stdout", text)  # --json sends the job's stdout to stderr
        self.assertIn("the job on stderr", text)
        self.assertIn("oomless run: the job exited 0 after 1 attempt(s)", text)
        # and to the real stream when sys.stderr has one
        path = os.path.join(self.tmp.name, "stderr")
        with open(path, "w+b") as raw:
            stream = io.TextIOWrapper(raw, encoding="utf-8")
            with contextlib.redirect_stderr(stream):
                oomless.run(job, batch_size=2, calibration="off")
            stream.flush()
            raw.seek(0)
            self.assertIn(b"the job on stderr", raw.read())
            stream.detach()


if __name__ == "__main__":
    unittest.main()
