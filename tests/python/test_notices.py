"""The library's notices reach Python as warnings of the class oomless.Notice, pointing at the
caller's line: here a relative $XDG_CONFIG_HOME, which the XDG Base Directory spec says to ignore
(the config under $HOME/.config is read instead), and a damaged calibration file."""
import json
import os
import tempfile
import unittest
import warnings

import oomless

CONFIG = "gpus:\n  - {id: lab-card, name: Lab card, memory: 20GiB}\n"
TRACED = {"time": 1700000000.25, "gpu": "", "command": ["oomless", "trace", "--model", "gpt2"],
          "workload": "", "fixed_bytes": 2147483648, "per_sample_bytes": 536870912,
          "per_sample2_bytes": 0, "recommended_batch": 0, "max_batch": 8, "usable_bytes": 0,
          "traced": True}


class NoticeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "HOME")}
        self.cwd = os.getcwd()
        os.environ["OOMLESS_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"

    def tearDown(self):
        os.chdir(self.cwd)
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.tmp.cleanup()

    def test_relative_xdg_config_home(self):
        home = os.path.join(self.tmp.name, "home")
        os.makedirs(os.path.join(home, ".config", "oomless"))
        with open(os.path.join(home, ".config", "oomless", "config.yaml"), "w") as f:
            f.write(CONFIG)
        os.makedirs(os.path.join(self.tmp.name, "rel", "oomless"))
        with open(os.path.join(self.tmp.name, "rel", "oomless", "config.yaml"), "w") as f:
            f.write("gpus: [\n")  # would fail if it were read
        os.chdir(self.tmp.name)
        os.environ["XDG_CONFIG_HOME"] = "rel"
        os.environ["HOME"] = home
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            doc = oomless.gpus(gpu="lab-card")
        self.assertEqual(doc["budget"]["target_bytes"], 20 << 30)
        notices = [w for w in caught if issubclass(w.category, oomless.Notice)]
        self.assertEqual(len(notices), 1, [str(w.message) for w in caught])
        self.assertEqual(str(notices[0].message),
                         "$XDG_CONFIG_HOME 'rel' is not an absolute path: ignored, as the XDG "
                         "Base Directory specification says; using %s/.config" % home)
        self.assertEqual(notices[0].filename, os.path.abspath(__file__))

    def test_damaged_calibration_file(self):
        cal = os.path.join(self.tmp.name, "calibration.jsonl")
        with open(cal, "wb") as f:
            f.write(b'{"time": 1, "gpu": "x"\x00\x00\x00\x00' + json.dumps(TRACED).encode() + b"\n")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            doc = oomless.plan(gpu="a100-80gb", calibration=cal, target_effective_batch=16,
                               calibration_command=json.dumps(TRACED["command"],
                                                              separators=(",", ":")))
        self.assertEqual(doc["model"], "measured line")
        notices = [str(w.message) for w in caught if issubclass(w.category, oomless.Notice)]
        self.assertEqual(notices, ["calibration file '%s': skipped 1 damaged line (the first is "
                                   "line 1: a record cut short or NUL bytes, as a full disk or a "
                                   "crash leaves)" % cal])


if __name__ == "__main__":
    unittest.main()
