"""The library reads and writes numbers with '.' even when the Python program switched to a
locale that writes 20,5 (locale.setlocale(locale.LC_ALL, "de_DE.UTF-8")): sizes parse, the
bundled catalog loads, and every document is the one the C locale gives, calibration records
included; and under tr_TR.UTF-8 (where 'I' does not lower-case to 'i') units and GPU ids match
in capitals. scripts/install-deps.sh generates both locales; without them the tests are
skipped."""
import json
import locale
import os
import tempfile
import unittest

import oomless

LOCALE = "de_DE.UTF-8"
TURKISH = "tr_TR.UTF-8"
# a traced record (valid on any GPU) with fractional numbers, as `oomless trace --calibrate`
# writes it
TRACED = {"time": 1700000000.25, "gpu": "", "command": ["oomless", "trace", "--model", "gpt2"],
          "workload": "", "fixed_bytes": 2147483648, "per_sample_bytes": 536870912,
          "per_sample2_bytes": 0.5, "recommended_batch": 0, "max_batch": 8, "usable_bytes": 0,
          "traced": True}


def documents(cal):
    """What each entry point returns, for the same inputs."""
    return {
        "size": oomless.parse_size("20.5GiB"),
        "bare": oomless.parse_size("1.5"),
        "catalog": oomless.catalog(),
        "gpus": oomless.gpus(gpu="a100-80gb", vram="20.5", vram_safety_margin="7.5%"),
        "estimate": oomless.estimate(model="gpt2", method="lora", batch=8, seq=1024,
                                     lora_dropout="0.05", gpu="rtx-4090"),
        "plan": oomless.plan(model="llama-3.1-8b", method="lora", seq=2048, gpu="rtx-4090",
                             target_effective_batch=32, vram_safety_margin="1.5GiB"),
        "calibrated": oomless.plan(gpu="a100-80gb", calibration=cal,
                                   calibration_command=json.dumps(TRACED["command"],
                                                                  separators=(",", ":")),
                                   target_effective_batch=16),
    }


class LocaleTest(unittest.TestCase):
    def setUp(self):
        os.environ["OOMLESS_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
        os.environ.pop("OOMLESS_BATCH_SIZE", None)
        self.tmp = tempfile.TemporaryDirectory()
        self.cal = os.path.join(self.tmp.name, "calibration.jsonl")
        with open(self.cal, "w") as f:
            f.write(json.dumps(TRACED) + "\n")
        self.saved = locale.setlocale(locale.LC_ALL)

    def tearDown(self):
        locale.setlocale(locale.LC_ALL, self.saved)
        self.tmp.cleanup()

    def switch(self, name=LOCALE):
        try:
            locale.setlocale(locale.LC_ALL, name)
        except locale.Error:
            self.skipTest("the locale %s is not installed (scripts/install-deps.sh generates it)"
                          % name)
        if name == LOCALE:
            # the locale really writes a decimal comma, or this test would prove nothing
            self.assertEqual(locale.str(20.5), "20,5")

    def test_case_in_turkish(self):
        self.switch(TURKISH)
        self.assertEqual(oomless.parse_size("16GIB"), 16 << 30)
        self.assertEqual(oomless.gpus(gpu="MI300X")["target"]["profile"], "mi300x")

    def test_same_documents_as_in_the_c_locale(self):
        locale.setlocale(locale.LC_ALL, "C")
        want = documents(self.cal)
        self.assertEqual(want["size"], 22011707392)
        self.switch()
        got = documents(self.cal)
        for key in want:
            with self.subTest(key=key):
                self.assertEqual(got[key], want[key])

    def test_decimal_comma_is_named(self):
        # what the locale writes, typed back: refused with the separator named, never read as 20
        self.switch()
        for text, call in (("20,5", lambda t: oomless.parse_size(t)),
                           ("1,5GiB", lambda t: oomless.gpus(gpu="a100-80gb", vram=t)),
                           ("0,05", lambda t: oomless.estimate(model="gpt2", method="lora",
                                                               lora_dropout=t))):
            with self.subTest(text=text):
                with self.assertRaises(oomless.InvalidValueError) as cm:
                    call(text)
                self.assertIn("'%s' has a comma: write the decimal separator as '.'" % text,
                              str(cm.exception))

    def test_catalog_numbers(self):
        self.switch()
        rtx2060 = [g for g in oomless.catalog()["gpus"] if g["id"] == "rtx-2060"][0]
        self.assertEqual(rtx2060["fp16_tflops"], 25.8)


if __name__ == "__main__":
    unittest.main()
