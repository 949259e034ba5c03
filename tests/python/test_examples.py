"""The Python examples compile (they need PyTorch to run, which CI lacks) and their oomless
part runs."""
import glob
import os
import unittest

import oomless

ROOT = os.environ["OOMLESS_SRC"]


class ExamplesTest(unittest.TestCase):
    def test_examples_compile(self):
        files = glob.glob(os.path.join(ROOT, "examples", "python", "*.py"))
        self.assertGreaterEqual(len(files), 2)
        for path in files:
            with self.subTest(path=path):
                with open(path, encoding="utf-8") as f:
                    compile(f.read(), path, "exec")

    def test_example_plans_fit(self):
        os.environ["OOMLESS_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
        plan = oomless.plan(model="llama-3.1-8b", method="lora", seq=2048,
                            target_effective_batch=32)
        self.assertEqual(plan["plan"]["effective_batch"], 32)
        self.assertLessEqual(plan["memory"]["device_peak"], plan["budget"]["usable_bytes"])


if __name__ == "__main__":
    unittest.main()
