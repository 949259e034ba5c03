#!/usr/bin/env python3
"""check.py - the verdicts of tests/gpu/run.sh: one subcommand per check, exit 0 when it holds,
1 when not; the last line printed says why either way. Python standard library only.

  check.py gpus GPUS.json SMI.csv          oomless gpus --json against nvidia-smi --query-gpu
  check.py watch WATCH.json SMI_APPS.csv PID   the holder's pid and bytes in both
  check.py probe PROBE.json                a batch was recommended
  check.py verify WATCH_LOG.csv PROBE.json the longer run's NVML peak: under the usable budget,
                                           and at least 85 % of it
  check.py run RUN.json EVENTS.jsonl TRANSCRIPT FIRST_BATCH
                                           recovered: exit 0, restarted, the effective batch kept,
                                           resumed from the checkpoint
  check.py accuracy OUTDIR                 at least 40 cases measured
  check.py experts OUTDIR                  every mixture-of-experts case ran the experts path the
                                           tracer runs on the meta device (grouped_mm), through
                                           torch's grouped matmul, not transformers' fallback
"""
import csv
import glob
import json
import os
import sys

MiB = 2 ** 20


def gpus(path, smi):
    doc = json.load(open(path))
    rows = [r for r in csv.reader(open(smi)) if r]
    bad = []
    for g, r in zip(doc["gpus"], rows):
        index, name, total, used = (x.strip() for x in r)
        if g["name"] != name:
            bad.append("name %r vs %r" % (g["name"], name))
        if g["total_bytes"] // MiB != int(total):
            bad.append("total %d MiB vs %s MiB" % (g["total_bytes"] // MiB, total))
        if abs(g["used_bytes"] / MiB - int(used)) > 64:
            bad.append("used %.0f MiB vs %s MiB" % (g["used_bytes"] / MiB, used))
    if len(doc["gpus"]) != len(rows):
        bad.append("%d GPUs vs %d" % (len(doc["gpus"]), len(rows)))
    msg = "; ".join(bad) or "%d GPU(s): name, total (%s MiB) and used agree" % (
        len(rows), rows[0][2].strip() if rows else "-")
    print(msg)
    return 1 if bad else 0


def watch(path, smi, pid):
    doc = json.load(open(path))
    pid = int(pid)
    smi_used = {int(r[0]): int(r[1]) for r in csv.reader(open(smi)) if r and r[0].strip().isdigit()}
    procs = {p["pid"]: p for g in doc["gpus"] for p in g["processes"]}
    if pid not in procs:
        print("pid %d not in oomless watch's processes %s (nvidia-smi: %s)" % (
            pid, sorted(procs), sorted(smi_used)))
        return 1
    if pid not in smi_used:
        print("pid %d not in nvidia-smi's compute apps %s" % (pid, sorted(smi_used)))
        return 1
    ours = procs[pid]["used_bytes"] / MiB
    if abs(ours - smi_used[pid]) > 1:
        print("pid %d: oomless %.1f MiB, nvidia-smi %d MiB" % (pid, ours, smi_used[pid]))
        return 1
    print("pid %d: oomless %.1f MiB = nvidia-smi %d MiB; command %r" % (
        pid, ours, smi_used[pid], procs[pid].get("command")))
    return 0


def probe(path):
    doc = json.load(open(path))
    rec = doc.get("recommended_batch") or 0
    print("recommended batch %d after %d launches (usable %.2f GiB, trials %s)" % (
        rec, doc.get("launches", 0), doc.get("usable_bytes", 0) / 2 ** 30,
        [(t["batch"], round((t["peak_bytes"] or 0) / 2 ** 30, 2)) for t in doc.get("trials", [])]))
    return 0 if rec > 0 else 1


def verify(log, probe_path):
    usable = json.load(open(probe_path))["usable_bytes"]
    peak = 0
    for r in csv.DictReader(row for row in open(log) if not row.startswith("#")):
        if r.get("kind") == "process" and "train.py" in (r.get("command") or "") and r["used_bytes"]:
            peak = max(peak, int(r["used_bytes"]))
    share = peak / usable if usable else 0
    print("peak %.2f GiB of %.2f GiB usable: %.1f %%" % (peak / 2 ** 30, usable / 2 ** 30,
                                                         100 * share))
    return 0 if 0.85 <= share <= 1.0 else 1


def run(path, events, transcript, first_batch):
    doc = json.load(open(path))
    evs = [json.loads(ln) for ln in open(events) if ln.strip()]
    ooms = [e for e in evs if e["event"] == "oom"]
    text = open(transcript).read()
    first = int(first_batch)
    why = []
    if doc.get("exit_code") != 0:
        why.append("exit %s" % doc.get("exit_code"))
    if doc.get("restarts", 0) < 1:
        why.append("no restart")
    if doc.get("target_effective_batch") != first:
        why.append("effective batch %s, not %d" % (doc.get("target_effective_batch"), first))
    if "resuming from step" not in text:
        why.append("never resumed from a checkpoint")
    print("%s: exit %s, %d attempts, %d restarts, OOM at steps %s, last batch %s x accum %s = %s "
          "(target %s)" % ("; ".join(why) or "recovered", doc.get("exit_code"),
                           doc.get("attempts", 0), doc.get("restarts", 0),
                           [e.get("step") for e in ooms], doc.get("batch"), doc.get("grad_accum"),
                           doc.get("effective_batch"), doc.get("target_effective_batch")))
    return 1 if why else 0


def accuracy(outdir):
    files = sorted(glob.glob(os.path.join(outdir, "*-20*.csv")))
    if not files:
        print("no measurement CSV in %s" % outdir)
        return 1
    rows = list(csv.DictReader(open(files[-1])))
    ok = [r for r in rows if r["status"] == "ok"]
    print("%d of %d cases measured (%s)" % (len(ok), len(rows), os.path.basename(files[-1])))
    return 0 if len(ok) >= 40 else 1


def experts(outdir):
    files = sorted(glob.glob(os.path.join(outdir, "*-20*.jsonl")))
    if not files:
        print("no measurement JSONL in %s" % outdir)
        return 1
    seen, bad = [], []
    for line in open(files[-1]):
        doc = json.loads(line)
        worker = doc.get("worker") or {}
        impl = worker.get("experts_implementation")
        if "id" not in doc or impl is None:
            continue
        calls = worker.get("experts_calls") or {}
        # F.grouped_mm calls torch._grouped_mm: one matmul counted by both
        torch_mm = max(calls.get("F.grouped_mm", 0), calls.get("torch._grouped_mm", 0))
        seen.append("%s %s (%d grouped matmuls, %d fallback)" % (doc["id"], impl, torch_mm,
                                                                calls.get("fallback", 0)))
        if impl != "grouped_mm" or not torch_mm or calls.get("fallback"):
            bad.append(doc["id"])
    if not seen:
        print("no mixture-of-experts case measured")
        return 1
    print("%s: %s" % ("not the traced path: " + ", ".join(bad) if bad else "as traced",
                      "; ".join(seen)))
    return 1 if bad else 0


if __name__ == "__main__":
    cmds = {"gpus": gpus, "watch": watch, "probe": probe, "verify": verify, "run": run,
            "accuracy": accuracy, "experts": experts}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    try:
        sys.exit(cmds[sys.argv[1]](*sys.argv[2:]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print("cannot check %s: %s" % (sys.argv[1], exc))
        sys.exit(1)
