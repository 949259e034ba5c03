#!/usr/bin/env python3
"""speed.py - oomless's speed limits (issue 34), measured as CPU time, and checked.

    bench/speed/speed.py [--build BUILD] [--runs N] [--only plan,table,zero3,relay] [--relay-bytes N]

plan   the searches a few flags reach: each `oomless plan` under 50 ms of CPU (the whole process:
       exec, loading the preset, the catalog and data/coefficients.json, the search, the JSON);
table  `oomless table` over all 31 catalog GPUs under 500 ms;
zero3  the ZeRO-3 replay against the number of layers, 32 to 1024 (bench/speed/zero3_sweep.c,
       linked with BUILD/liboomless.a): its cost per step may not grow more than 3 times;
relay  `oomless run` and `probe` passing on 1 GiB of a job's output (bench/speed/logjob.py) to
       pipes (64 KiB, drained as fast as they fill) or files, with under 1 s of their own CPU
       (not the job's: /proc/PID/stat fields 14 and 15, read while oomless is a zombie); each
       case run 3 times, every run held to the limit.

Each figure is the median of --runs runs (plan, table) and the CPU time of the process
(user + system: os.wait4). Prints one line per figure and exits 1 when one is over its limit.
No GPU is used (OOMLESS_NVML_LIBRARY points nowhere); the planner plans for named profiles.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

ALL31 = ("rtx-2060,rtx-2080-ti,rtx-3060,rtx-3080,rtx-3090,rtx-4060-ti,rtx-4070-ti,rtx-4080,"
         "rtx-4090,rtx-5090,quadro-rtx-6000,rtx-a4000,rtx-a5000,rtx-a6000,rtx-6000-ada,t4,"
         "v100-16gb,v100-32gb,a10,a10g,l4,l40s,a100-40gb,a100-80gb,h100-pcie,h100-sxm,h100-nvl,"
         "h200,b200,mi250,mi300x")

# (limit in ms, arguments): issue 34's searches, then bench/README.md's
PLANS = [
    (50, "plan --model llama-3.1-8b --gpu h100 --seq 2048 --target-effective-batch 8192 --gpus 8 --allow all --json"),
    (50, "plan --model llama-3.1-8b --gpu h100 --seq 2048 --target-effective-batch 4096 --gpus 8 --allow all --checkpointing-variants all --packing padding-free --json"),
    (50, "plan --model qwen3-0.6b --gpu h100 --seq 2048 --target-effective-batch 8192 --gpus 8 --allow all --checkpointing-variants all --json"),
    (50, "plan --model llama-3.1-8b --gpu a100-80gb --seq 2048 --target-effective-batch 4096 --allow all --checkpointing-variants all --json"),
    (50, "plan --model mixtral-8x7b --gpu b200 --seq 4096 --target-effective-batch 4096 --gpus 8 --allow all --checkpointing-variants all --json"),
    (50, "plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 32 --json"),
    (50, "plan --model llama-2-7b --nodes 2 --gpus-per-node 8 --gpu a100-80gb --seq-range 512:8192 --target-effective-batch 1024 --allow all --json"),
    (50, "plan --model mixtral-8x7b --method qlora --gpus 8 --gpu h100-sxm --seq-range 256:32768 --target-effective-batch 512 --allow all --json"),
    (50, "plan --model gpt2 --method inference --seq-range 128:1024 --gpu a100-80gb --allow precision --json"),
    (50, "plan --model llama-2-70b --seq 4096 --gpu rtx-4090 --allow all --json"),
    (50, "plan --model llama-2-70b --gpus 8 --gpu rtx-4090 --seq-range 64:32768 --target-effective-batch 4096 --allow all --json"),
    # issue 37's layout searches: tensor x context x pipeline x expert x data parallel of 64 GPUs
    (50, "plan --model qwen3-235b-a22b --nodes 8 --gpus-per-node 8 --gpu h100 --json"),
    (50, "plan --model deepseek-v3 --nodes 8 --gpus-per-node 8 --gpu h100 --allow checkpointing,sharding,layout,offload --json"),
    (50, "plan --model qwen3-235b-a22b --nodes 8 --gpus-per-node 8 --gpu h100 --engine torchtitan --json"),
]
TABLES = [
    (500, "table --model llama-3.1-8b --seq 2048 --target-effective-batch 4096 --allow all --checkpointing-variants all --gpus " + ALL31 + " --format json"),
]
RELAY_LIMIT_S = 1.0
RELAY_RUNS = 3  # each relay case: the median is printed, the worst checked


def env():
    e = dict(os.environ)
    e.update(OOMLESS_DATA_DIR=os.path.join(ROOT, "data"), OOMLESS_NVML_LIBRARY="/nonexistent",
             LC_ALL="C")
    for k in ("OOMLESS_GPU", "GPU_PROFILE", "OOMLESS_BATCH_SIZE", "OOMLESS_GRAD_ACCUM"):
        e.pop(k, None)
    return e


def cpu_of(argv, home):
    """CPU seconds (user + system) of one run of argv, its output discarded"""
    e = env()
    e.update(HOME=home, XDG_CACHE_HOME=os.path.join(home, "cache"),
             XDG_CONFIG_HOME=os.path.join(home, "config"))
    p = subprocess.Popen(argv, cwd=ROOT, env=e, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime, p.returncode


def median_ms(binary, args, runs, home):
    times, rcs = [], set()
    for _ in range(runs):
        t, rc = cpu_of([binary] + args.split(), home)
        times.append(t * 1000)
        rcs.add(rc)
    return statistics.median(times), max(times), rcs


def bench_commands(binary, cases, runs, home):
    over = 0
    for limit, args in cases:
        med, worst, rcs = median_ms(binary, args, runs, home)
        bad = med > limit or rcs - {0, 1}
        over += bool(bad)
        shown = args if len(args) < 160 else args[:150] + " ..."
        print(f"{'OVER ' if bad else ''}{med:8.1f} ms CPU (max {worst:6.1f}, limit {limit}) "
              f"oomless {shown}" + (f"  [exit {sorted(rcs)}]" if rcs - {0, 1} else ""))
    return over


def bench_zero3(build, tmp):
    exe = os.path.join(tmp, "zero3_sweep")
    cc = subprocess.run(["pkg-config", "--libs", "json-c", "yaml-0.1"], capture_output=True,
                        text=True, check=True).stdout.split()
    subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-I" + os.path.join(ROOT, "include"),
                    os.path.join(HERE, "zero3_sweep.c"), os.path.join(build, "liboomless.a")]
                   + cc + ["-ldl", "-lm", "-o", exe], check=True)
    p = subprocess.run([exe, "--check", tmp], env=env(), capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    return 1 if p.returncode else 0


def own_cpu(pid):
    """user + system seconds of process pid itself (not its children), read while it is a
    zombie; then reaped"""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / hz
    own_cpu.split = (int(fields[11]) / hz, int(fields[12]) / hz)
    job = (int(fields[13]) + int(fields[14])) / hz
    _, status = os.waitpid(pid, 0)
    return own, job, os.waitstatus_to_exitcode(status)


def drain(fd, counter):
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        counter[0] += len(b)
    os.close(fd)


def relay_once(argv, e, to_file, tmp):
    """oomless's own CPU, the job's, bytes relayed, exit status: its stdout and stderr to files
    in tmp, or to pipes (64 KiB, Linux's default) that threads here drain"""
    if to_file:
        out = open(os.path.join(tmp, "relay.out"), "wb")
        err = open(os.path.join(tmp, "relay.err"), "wb")
        p = subprocess.Popen(argv, cwd=ROOT, env=e, stdin=subprocess.DEVNULL, stdout=out,
                             stderr=err)
        own, jobcpu, rc = own_cpu(p.pid)
        out.close()
        err.close()
        relayed = os.path.getsize(out.name) + os.path.getsize(err.name)
        os.unlink(out.name)
        os.unlink(err.name)
        return own, jobcpu, relayed, rc
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    got_out, got_err = [0], [0]
    p = subprocess.Popen(argv, cwd=ROOT, env=e, stdin=subprocess.DEVNULL, stdout=w_out,
                         stderr=w_err)
    os.close(w_out)
    os.close(w_err)
    threads = [threading.Thread(target=drain, args=(r_out, got_out)),
               threading.Thread(target=drain, args=(r_err, got_err))]
    for t in threads:
        t.start()
    own, jobcpu, rc = own_cpu(p.pid)
    for t in threads:
        t.join()
    return own, jobcpu, got_out[0] + got_err[0], rc


def bench_relay(binary, nbytes, home):
    over = 0
    job = [sys.executable, os.path.join(HERE, "logjob.py"), str(nbytes)]
    cases = [
        ("run", "stdout", "a pipe", [binary, "run", "--batch-size", "4", "--calibration", "off", "--"] + job + ["stdout"]),
        ("run", "stderr", "a pipe", [binary, "run", "--batch-size", "4", "--calibration", "off", "--"] + job + ["stderr"]),
        ("run", "stdout", "a file", [binary, "run", "--batch-size", "4", "--calibration", "off", "--"] + job + ["stdout"]),
        ("probe", "both", "a pipe", [binary, "probe", "--max-trials", "1", "--calibration", "off", "--"] + job + ["both"]),
        ("probe", "both", "a file", [binary, "probe", "--max-trials", "1", "--calibration", "off", "--"] + job + ["both"]),
    ]
    e = env()
    e.update(HOME=home, XDG_CACHE_HOME=os.path.join(home, "cache"))
    for name, stream, dest, argv in cases:
        runs = []
        for _ in range(RELAY_RUNS):
            own, jobcpu, relayed, rc = relay_once(argv, e, dest == "a file", home)
            runs.append((own, own_cpu.split, jobcpu, relayed, rc))
        own, split, jobcpu, relayed, rc = sorted(runs)[len(runs) // 2]
        worst = max(r[0] for r in runs)
        # to a file, the kernel's own writes into the page cache cost what they cost whoever
        # writes (dd's below): the limit is on the pipes, and on every run of them
        limit = RELAY_LIMIT_S * nbytes / (1 << 30) if dest == "a pipe" else float("inf")
        bad = worst > limit or min(r[3] for r in runs) < nbytes or any(r[4] for r in runs)
        over += bad
        print(f"{'OVER ' if bad else ''}{own:8.2f} s CPU of oomless {name} (median of "
              f"{len(runs)}, worst {worst:.2f}; user {split[0]:.2f} + system {split[1]:.2f}; "
              f"limit {limit:.2f}; {own * 1e9 / nbytes:.2f} ns/byte), the job {jobcpu:.2f} s: "
              f"{nbytes / (1 << 20):.0f} MiB to the job's {stream}, {relayed / (1 << 20):.0f} MiB "
              f"relayed to {dest}, exit {rc}")
    path = os.path.join(home, "dd.out")
    t, _ = cpu_of(["dd", "if=/dev/zero", "of=" + path, "bs=1M", "count=%d" % (nbytes >> 20)], home)
    os.unlink(path)
    print(f"{t:8.2f} s CPU of dd writing {nbytes >> 20} MiB to a file in the same folder")
    return over


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--bin")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--only", default="plan,table,zero3,relay")
    ap.add_argument("--relay-bytes", type=int, default=1 << 30)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    binary = os.path.abspath(args.bin or os.path.join(build, "oomless"))
    only = set(args.only.split(","))
    over = 0
    with tempfile.TemporaryDirectory(prefix="oomless-speed-") as tmp:
        if "plan" in only:
            print("== plan (median CPU of %d runs)" % args.runs)
            over += bench_commands(binary, PLANS, args.runs, tmp)
        if "table" in only:
            print("== table (median CPU of %d runs)" % args.runs)
            over += bench_commands(binary, TABLES, args.runs, tmp)
        if "zero3" in only:
            print("== ZeRO-3 replay against the layers (zero3_sweep, median of 7 rounds)")
            over += bench_zero3(build, tmp)
        if "relay" in only:
            print("== relay (3 runs each: the median shown, every run checked)")
            over += bench_relay(binary, args.relay_bytes, tmp)
    if over:
        print(f"speed: {over} figure(s) over the limit")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
