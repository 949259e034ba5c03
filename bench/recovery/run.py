"""The time one OOM costs: in-loop recovery (oomless.torch.TrainStep) against a relaunch by
`oomless run` of the same small job (bench/recovery/job.py), alone and as two torchrun ranks.

    python bench/recovery/run.py --bin build/oomless [--repeat 3] [--json out.json]

Every run goes through the real `oomless run --batch-size 16 --grad-accum 2 -- [torchrun ...]
job.py`; the OOM is injected in the backward of the last rank at step 6 for micro-batches above
8. Time lost = (end of step 6) - (end of step 5) - (a normal step at micro-batch 8, the median of
steps 7-12 of the same run): for the in-loop recovery, the failed attempt and the clean-up; for
the relaunch, the failed attempt, the process (and torchrun) teardown, oomless's restart, the new
process's interpreter start, torch import, process-group set-up, model build and checkpoint load.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OOM_STEP, STEPS = 6, 12


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one(binary, mode, ranks, tmp):
    work = tempfile.mkdtemp(dir=tmp)
    logf, ckpt = os.path.join(work, "steps.jsonl"), os.path.join(work, "ckpt.pt")
    job = [os.path.join(HERE, "job.py"), "--mode", mode, "--steps", str(STEPS), "--oom-step",
           str(OOM_STEP), "--oom-above", "8", "--ckpt", ckpt, "--timeline", logf]
    if ranks > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port())] + job
    else:
        cmd = [sys.executable] + job
    env = dict(os.environ, OMP_NUM_THREADS="1", OOMLESS_NVML_LIBRARY="/nonexistent",
               PYTHONDONTWRITEBYTECODE="1")
    t0 = time.time()
    out = subprocess.run([binary, "run", "--batch-size", "16", "--grad-accum", "2", "--"] + cmd,
                         env=env, capture_output=True, text=True, timeout=900)
    wall = time.time() - t0
    if out.returncode != 0:
        raise SystemExit("%s %d ranks failed (%d):\n%s" % (mode, ranks, out.returncode,
                                                          out.stderr[-4000:]))
    with open(logf) as f:
        lines = [json.loads(x) for x in f]
    steps = {d["step"]: d for d in lines if "step" in d}
    starts = [d for d in lines if d.get("event") == "start"]
    normal = statistics.median(steps[i]["t"] - steps[i - 1]["t"]
                               for i in range(OOM_STEP + 2, STEPS + 1))
    lost = steps[OOM_STEP]["t"] - steps[OOM_STEP - 1]["t"] - normal
    shutil.rmtree(work)
    return {"lost_s": lost, "normal_step_s": normal, "wall_s": wall,
            "processes": len(starts), "micro_after": steps[STEPS]["micro"]}


def versions(binary):
    import torch
    v = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"oomless": v, "torch": torch.__version__, "python": platform.python_version(),
            "cpu": cpu, "cores": os.cpu_count(),
            "date": datetime.date.today().isoformat()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="build/oomless")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    results = {"versions": versions(a.bin), "runs": []}
    print("# %s" % json.dumps(results["versions"]))
    print("| ranks | mode | time lost to one OOM (median) | runs | normal step | whole job "
          "| processes |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (1, 2):
            for mode in ("inloop", "relaunch"):
                runs = [one(a.bin, mode, ranks, tmp) for _ in range(a.repeat)]
                results["runs"].append({"ranks": ranks, "mode": mode, "runs": runs})
                med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
                print("| %d | %s | %.2f s | %s | %.3f s | %.1f s | %d |"
                      % (ranks, mode, med("lost_s"),
                         " / ".join("%.2f" % r["lost_s"] for r in runs), med("normal_step_s"),
                         med("wall_s"), runs[0]["processes"]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
