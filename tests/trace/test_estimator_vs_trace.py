"""The C estimator held to the tracer on the CI subset of bench/trace (bands in bounds.json)."""
import json
import os
import subprocess
import sys
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import peft  # noqa: F401
    HAVE = True
except ImportError as exc:  # pragma: no cover
    HAVE, REASON = False, "torch/transformers/peft missing for %s (%s): `make venv`" % (
        sys.executable, exc)


@unittest.skipUnless(HAVE, "" if HAVE else REASON)
class EstimatorVsTrace(unittest.TestCase):
    def test_subset_within_bands(self):
        r = subprocess.run([sys.executable, os.path.join(SRC, "bench", "trace", "compare.py"),
                            "--bin", os.environ["OOMLESS_BIN"], "--subset", "--check"],
                           capture_output=True, text=True, timeout=800)
        sys.stdout.write(r.stdout)
        self.assertEqual(r.returncode, 0, r.stdout[-4000:] + r.stderr[-2000:])
        with open(os.path.join(SRC, "bench", "trace", "bounds.json"), encoding="utf-8") as f:
            n = len(json.load(f)["cells"])
        self.assertRegex(r.stdout, r"(?m)^%d passed, 0 failed$" % n)


if __name__ == "__main__":
    unittest.main()
