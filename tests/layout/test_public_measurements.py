"""The public measurements the estimator is checked against are in the repository with their
sources: every case of bench/accuracy/public/cases.tsv is a row of
bench/accuracy/published-measurements.csv with the same number, every row names its source, and
bench/accuracy/README.md says where each row comes from."""
import csv
import os
import re
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")
ACC = os.path.join(SRC, "bench", "accuracy")


def rows():
    with open(os.path.join(ACC, "published-measurements.csv"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def cases():
    """(id, measured GiB) of each case line of public/cases.tsv."""
    out = []
    with open(os.path.join(ACC, "public", "cases.tsv"), encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                fields = line.rstrip("\n").split("\t")
                out.append((fields[0], float(fields[2])))
    return out


class PublicMeasurements(unittest.TestCase):
    def test_every_row_has_a_source_and_a_number(self):
        table = rows()
        self.assertGreaterEqual(len(table), 20)
        for r in table:
            self.assertTrue(r["source"].strip(), r["id"])
            self.assertTrue(r["what_is_measured"].strip(), r["id"])
            self.assertGreater(float(r["measured_GiB"]), 0, r["id"])
        self.assertEqual(len({r["id"] for r in table}), len(table), "ids are unique")

    def test_cases_are_rows_with_the_same_number(self):
        table = {r["id"]: float(r["measured_GiB"]) for r in rows()}
        listed = cases()
        self.assertGreaterEqual(len(listed), 15)
        for cid, gib in listed:
            self.assertIn(cid, table, f"case {cid} is not a row of published-measurements.csv")
            self.assertAlmostEqual(gib, table[cid], places=3, msg=cid)

    def test_readme_names_the_source_of_every_row(self):
        with open(os.path.join(ACC, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        # the README lists rows by id or as a range of one family ("HF-01 … HF-11")
        families = {re.sub(r"-\d+$", "", r["id"]) for r in rows()}
        for fam in sorted(families):
            self.assertRegex(readme, rf"\| {re.escape(fam)}-\w+", fam)


if __name__ == "__main__":
    unittest.main()
