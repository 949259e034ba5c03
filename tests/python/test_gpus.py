"""The Python package's gpus()/catalog() return what the CLI prints, and errors map to classes."""
import json
import os
import subprocess
import tempfile
import unittest

import oomless

BIN = os.environ["OOMLESS_BIN"]
FAKE = os.environ["FAKE_NVML_LIB"]
SPEC = """driver 550.54.15
gpu name="NVIDIA GeForce RTX 4090" uuid=GPU-4090aaaa-1111-2222-3333-444444444444 total=25757220864 used=1073741824 cc=8.9
gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-a100bbbb-1111-2222-3333-444444444444 total=85899345920 used=0 cc=8.0
"""


def cli(*args):
    out = subprocess.run([BIN, *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


class GpusTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        spec = os.path.join(self.tmp.name, "spec")
        with open(spec, "w") as f:
            f.write(SPEC)
        self.env = dict(os.environ)
        os.environ["OOMLESS_NVML_LIBRARY"] = FAKE
        os.environ["FAKE_NVML_SPEC"] = spec
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)
        self.tmp.cleanup()

    def test_same_as_cli(self):
        self.assertEqual(oomless.gpus(), cli("gpus", "--json"))
        self.assertEqual(oomless.gpus(vram="20.5", vram_safety_margin="512"),
                         cli("gpus", "--json", "--vram", "20.5", "--vram-safety-margin", "512"))
        self.assertEqual(oomless.gpus(gpu="a100_80gb"), cli("gpus", "--json", "--gpu", "a100_80gb"))

    def test_values(self):
        doc = oomless.gpus(vram="20.5", vram_safety_margin="512")
        self.assertEqual(doc["budget"]["usable_bytes"], 20 * 2**30)
        self.assertEqual([g["total_bytes"] for g in doc["gpus"]], [25757220864, 85899345920])
        os.environ["CUDA_VISIBLE_DEVICES"] = "1"
        self.assertEqual([g["name"] for g in oomless.gpus()["gpus"]], ["NVIDIA A100-SXM4-80GB"])
        self.assertEqual(len(oomless.gpus(all=True)["gpus"]), 2)

    def test_no_nvml_falls_back(self):
        os.environ["OOMLESS_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
        doc = oomless.gpus()
        self.assertEqual(doc["gpus"], [])
        self.assertTrue(doc["target"]["fallback"])
        self.assertEqual(doc["target"]["profile"], "rtx-4090")

    def test_errors(self):
        with self.assertRaises(oomless.InvalidValueError) as cm:
            oomless.gpus(vram="banana")
        self.assertIn("'banana'", str(cm.exception))
        self.assertEqual(cm.exception.code, 1)
        self.assertIsInstance(cm.exception, ValueError)
        with self.assertRaises(oomless.NotFoundError) as cm:
            oomless.gpus(gpu="a100-81gb")
        self.assertIn("a100-80gb", str(cm.exception))
        with self.assertRaises(oomless.FileError):
            oomless.gpus(config="/nonexistent/config.yaml")
        with self.assertRaises(oomless.ParseError) as cm:
            bad = os.path.join(self.tmp.name, "bad.yaml")
            with open(bad, "w") as f:
                f.write("defaults: [\n")
            oomless.gpus(config=bad)
        self.assertIn("bad.yaml:", str(cm.exception))

    def test_catalog_and_sizes(self):
        self.assertEqual(oomless.catalog(), cli("gpus", "--catalog", "--json"))
        self.assertEqual(oomless.parse_size("16376MiB"), 16376 * 2**20)
        self.assertEqual(oomless.parse_size("512", bare_unit="MiB"), 512 * 2**20)
        with self.assertRaises(oomless.InvalidValueError):
            oomless.parse_size("16 XB")
        self.assertEqual(oomless.version(), "1.0.0")


if __name__ == "__main__":
    unittest.main()
