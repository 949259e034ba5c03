#!/usr/bin/env python3
"""The estimate (`oomless estimate --engine torchtitan`) against bench/parallel/measured.json, per
run and rank, as tests/torch/test_parallel_memory.py compares them (its estimate_args):

    bench/parallel/compare.py --bin build/oomless
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "torch"))
from test_parallel_memory import estimate_args  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "..", "build", "oomless"))
    ap.add_argument("--measured", default=os.path.join(HERE, "measured.json"))
    a = ap.parse_args()
    with open(a.measured, encoding="utf-8") as f:
        measured = json.load(f)
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("dense", "moe"):
            with open(os.path.join(tmp, name + ".json"), "w", encoding="utf-8") as f:
                json.dump(measured["configs"][name], f)
        print("| run | rank | measured peak MB | estimate MB | error |")
        print("|---|---|---|---|---|")
        for spec in sorted(k for k in measured if ":" in k):
            model = os.path.join(tmp, ("moe" if spec.startswith("ep") else "dense") + ".json")
            out = subprocess.run([a.bin, "estimate", "--model", model, *estimate_args(spec),
                                  "--json"], capture_output=True, text=True, check=True)
            ranks = json.loads(out.stdout)["parallel"]["ranks"]
            for r, m in sorted(measured[spec].items()):
                est = ranks[int(r) if len(ranks) > 1 else 0]["allocated_peak"]
                got = m["snapshots"]["peak"]
                err = est / got - 1
                worst = max(worst, abs(err))
                print("| `%s` | %s | %.3f | %.3f | %+.1f %% |" % (spec, r, got / 1e6, est / 1e6,
                                                                  100 * err))
    print("\nworst |error| %.1f %%" % (100 * worst))


if __name__ == "__main__":
    main()
