"""The published peak-memory measurements of bench/accuracy/published/cases.csv are data the
estimator is checked against: every row names its source, stack and GPU, holds one measured
counter whose GiB are the published number in its published unit, gives estimate arguments whose
model configs are in the repository, and keeps the numbers of the cases it shares with
published-measurements.csv. rejected.csv says why each left-out measurement was left out."""
import csv
import os
import re
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")
ACC = os.path.join(SRC, "bench", "accuracy")
PUB = os.path.join(ACC, "published")
GiB = 2 ** 30
UNITS = {"GiB": GiB, "GB": 1e9, "MiB": 2 ** 20, "B": 1}
MEASURED = ("max_memory_allocated_gib", "max_memory_reserved_gib", "nvml_peak_gib")
REQUIRED = ("id", "source_key", "source", "place", "stack", "stack_version", "versions_basis",
            "gpu_published", "model", "method", "precision", "counter", "measured_as", "published",
            "args", "confidence")


def read(name):
    with open(os.path.join(PUB, name), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def gib_of_published(text):
    """the GiB of a 'published' cell: a number and one of UNITS, or 'N GB (read as GiB)' where
    the source prints GB without saying which"""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?) (GiB|GB|MiB|B)( \(read as GiB\))?", text)
    if not m or (m.group(3) and m.group(2) != "GB"):
        raise ValueError("published '%s' is not 'NUMBER UNIT'" % text)
    return float(m.group(1)) * (GiB if m.group(3) else UNITS[m.group(2)]) / GiB


def config_paths(args):
    """the bench/accuracy/X.json files the @X arguments of args name"""
    return [os.path.join(ACC, w[1:] + ".json") for w in args.split() if w.startswith("@")]


class Helpers(unittest.TestCase):
    def test_units(self):
        self.assertAlmostEqual(gib_of_published("21.30 GB"), 21.30e9 / GiB)
        self.assertEqual(gib_of_published("1024 MiB"), 1.0)
        self.assertEqual(gib_of_published("2147483648 B"), 2.0)
        self.assertEqual(gib_of_published("18.9 GiB"), 18.9)
        self.assertEqual(gib_of_published("47.14 GB (read as GiB)"), 47.14)
        for bad in ("18.9GiB", "about 18 GB", "18.9 GBs", "18,9 GiB", "2 MiB (read as GiB)"):
            self.assertRaises(ValueError, gib_of_published, bad)

    def test_config_paths(self):
        self.assertEqual(config_paths("--model @public/T0_3B --seq 4"),
                         [os.path.join(ACC, "public/T0_3B.json")])
        self.assertEqual(config_paths("--model llama-2-7b"), [])


class Cases(unittest.TestCase):
    def setUp(self):
        self.rows = read("cases.csv")

    def test_size_and_sources(self):
        self.assertGreaterEqual(len(self.rows), 100)
        self.assertGreaterEqual(len({r["source_key"] for r in self.rows}), 10)
        ids = [r["id"] for r in self.rows]
        self.assertEqual(len(ids), len(set(ids)), "ids are unique")

    def test_every_row_is_complete(self):
        for r in self.rows:
            missing = [c for c in REQUIRED if not r[c].strip()]
            self.assertEqual(missing, [], r["id"])
            self.assertIn(r["confidence"], ("A", "B"), r["id"])
            self.assertIn(r["counter"], ("allocated", "reserved", "device"), r["id"])

    def test_one_counter_holding_the_published_number(self):
        for r in self.rows:
            filled = [c for c in MEASURED if r[c].strip()]
            self.assertEqual(len(filled), 1, r["id"])
            self.assertTrue(filled[0].startswith({"allocated": "max_memory_allocated",
                                                  "reserved": "max_memory_reserved",
                                                  "device": "nvml"}[r["counter"]]), r["id"])
            self.assertAlmostEqual(float(r[filled[0]]), gib_of_published(r["published"]),
                                   delta=6e-5, msg=r["id"])

    def test_args_name_existing_configs_and_the_gpu(self):
        for r in self.rows:
            self.assertNotIn("--json", r["args"], r["id"])
            for path in config_paths(r["args"]):
                self.assertTrue(os.path.isfile(path), "%s: %s" % (r["id"], path))
            if r["model_config"].startswith("@"):
                self.assertIn("--model %s " % r["model_config"], r["args"] + " ", r["id"])
            words = r["args"].split()
            if r["gpu"]:
                self.assertIn("--gpu %s" % r["gpu"], r["args"], r["id"])
            else:
                self.assertNotIn("--gpu", words, r["id"])

    def test_shared_cases_keep_their_numbers(self):
        with open(os.path.join(ACC, "published-measurements.csv"), newline="",
                  encoding="utf-8") as f:
            old = {r["id"]: float(r["measured_GiB"]) for r in csv.DictReader(f)}
        shared = [r for r in self.rows if r["id"] in old]
        self.assertGreaterEqual(len(shared), 18)
        for r in shared:
            col = next(c for c in MEASURED if r[c].strip())
            self.assertAlmostEqual(float(r[col]), old[r["id"]], places=3, msg=r["id"])

    def test_readme_names_every_source(self):
        with open(os.path.join(PUB, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        for key in sorted({r["source_key"] for r in self.rows}):
            self.assertIn("`%s`" % key, readme, key)


class Rejected(unittest.TestCase):
    def test_every_rejection_says_why(self):
        rows = read("rejected.csv")
        self.assertGreater(len(rows), 10)
        for r in rows:
            for c in ("source", "place", "reason"):
                self.assertTrue(r[c].strip(), "%s: %s" % (r, c))


if __name__ == "__main__":
    unittest.main()
