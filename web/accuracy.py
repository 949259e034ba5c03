#!/usr/bin/env python3
"""accuracy.py - the accuracy figure the page shows, measured when the page is built.

usage: web/accuracy.py OOMLESS > accuracy.json

Runs bench/accuracy/compare (the estimator against public measurements, as the test
accuracy.public does) with the native oomless and writes its summary as JSON: median and maximum
|error| in percent, number of cases, the command, the date and where the measurements come from.
"""
import datetime, json, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    binary = sys.argv[1]
    cmd = [sys.executable, os.path.join(ROOT, "bench", "accuracy", "compare"), "--bin", binary]
    env = dict(os.environ, OOMLESS_DATA_DIR=os.path.join(ROOT, "data"))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = p.stdout.strip().splitlines()
    m = re.match(r"median \|error\| ([0-9.]+)% \((\d+) cases\), max ([0-9.]+)%", lines[-1] if lines else "")
    if not m:
        sys.exit(f"web/accuracy.py: no summary from {' '.join(cmd)}:\n{p.stdout}{p.stderr}")
    json.dump({
        "median_error_pct": float(m.group(1)),
        "cases": int(m.group(2)),
        "max_error_pct": float(m.group(3)),
        "command": "bench/accuracy/compare --bin build/oomless",
        "date": datetime.date.today().isoformat(),
        "source": "published peaks: Hugging Face single-GPU training docs (V100), accelerate docs, "
                  "PEFT README (A100); bench/accuracy/public/cases.tsv",
    }, sys.stdout, indent=1)
    sys.stdout.write("\n")


main()
