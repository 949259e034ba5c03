#!/usr/bin/env python3
"""examples.py - the console examples of README.md and docs/*.md, run and checked.

Every console example in the documentation names the example it is, on the line before it:

    <!-- example: ID [setup=NAME] -->
    ```console
    $ oomless plan --model gpt2 --vram 8
    ...the output the command prints...
    ```

The lines starting with `$ ` are commands (a line ending in `\\` continues on the next); the
lines after a command are what it prints (stdout and stderr together). `check` runs every
command, in a folder of its own under $TMPDIR, with the built `oomless` first on PATH and the
environment of the named setup (SETUPS below: no GPU, the test suite's fake NVML with given
GPUs, the fake training job, the Python environment of the tracer), and fails on any line that
differs. `update` writes what the commands print into the blocks.

What an example may leave out:
  - a line `...` stands for any number of lines (none included);
  - `...` inside a line stands for any text;
  - the fields in VOLATILE (clock times, process ids, a trial's seconds) match any value of the
    same shape, and `update` keeps the ones written.
Paths that depend on where the example ran are written as a user would see them (NORMALIZE).

An example from a real GPU, which no test machine has, quotes a committed transcript instead:
`<!-- example: ID transcript=bench/e2e/.../transcript.log -->`: its lines must appear, in
order, in that file (`oomless` there is the wrapper the transcript ran, `./.dev/oomless-wrap`).

Usage: scripts/examples.py check|update|list|show [--id ID]... [--setups A,B | --skip-setups A,B]
                           [FILE.md...]
Environment (ctest sets it as for the CLI tests): OOMLESS_BIN, OOMLESS_SRC, FAKE_NVML_LIB,
FAKE_JOB, OOMLESS_PYTHON (the tracer's Python; examples of setup `venv` need it); without them
the build/ folder of the source tree is used. Exit 0 all match, 1 a difference, 2 usage.
"""
import argparse
import concurrent.futures
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("OOMLESS_SRC") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(SRC, "build")
TIMEOUT = 300  # seconds for one example (a traced 8B model takes about 10 s on 2 cores)

MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<id>[A-Za-z0-9][\w.-]*)(?P<attrs>(\s+\w+=\S+)*)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[\w+-]*)\s*$")
PROMPT = "$ "
ABSOLUTE = re.compile(r"(^|[\s=:])/(?!dev/null\b)[\w.]")  # a path an example must not touch
GAP = "..."

# Fields whose value changes from run to run: they match any value of the same shape.
VOLATILE = [
    re.compile(r"\b(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d\b"),  # the clock of `run` and `watch`
    re.compile(r"\bpid \d+"),
    re.compile(r"(?<=\s)\d+\.\d s$"),  # a probe trial's wall time
    re.compile(r"\(\d+(\.\d+)? s\)"),  # a trial's seconds in the progress lines
    re.compile(r'"duration_s": [\d.]+'),  # and in JSON
]

# GPUs of the test suite's fake NVML (tests/fake/fake_nvml.c reads these specs)
GIB = 1 << 30
MIB = 1 << 20
NVML_SPECS = {
    # an RTX 4090 in use by one process (and 1 GiB NVML gives to none) beside an idle A100
    "gpus": f"""driver 550.54.15
cuda 12040
gpu name="NVIDIA GeForce RTX 4090" uuid=GPU-4090aaaa-1111-2222-3333-444444444444 total={24564 * MIB} used={GIB} cc=8.9
gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-a100bbbb-1111-2222-3333-444444444444 total={80 * GIB} used=0 cc=8.0
proc gpu=0 pid=4242 used={GIB}""",
    # the idle H100 of bench/e2e/h100-2026-11-25 (gpus.json there): what its NVML reported
    "h100": f"""driver 580.159.04
cuda 13000
gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-6144c1d5-a225-3598-49b2-cf706f5a74ec total={81559 * MIB} used=0 reserved={480 * MIB} cc=9.0""",
    "t4": f"""gpu name="Tesla T4" uuid=GPU-7777aaaa-1111-2222-3333-444444444444 total={15360 * MIB} used=0 cc=7.5""",
    # an 80 GiB A100 whose processes are the fake jobs (each writes its use under procs/)
    "job": f"""gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-11111111-2222-3333-4444-555555555555 total={80 * GIB} used=0 cc=8.0
procdir {{cwd}}/procs""",
}

# Setups: the fake GPUs, fixture files copied from the repository (example path: repository
# path), shell commands run in the example's folder before it (prepare; unshown, so the text
# beside the example says what they do). Every example also sees the repository's bench/, bindings/, data/, docs/, examples/,
# scripts/, tests/ (links) and the build's `build/oomless`, `build/liboomless.so`, `./fakejob`.
APPLY_FILES = {"conf/config.yaml": "tests/data/apply/config.yaml",
               "plan.json": "tests/data/apply/plan.json",
               "args.json": "tests/data/apply/hf_args.json"}
SETUPS = {
    "nogpu": {},
    "gpus": {"nvml": "gpus"},
    "h100": {"nvml": "h100"},
    "t4": {"nvml": "t4"},
    "job": {"nvml": "job", "mkdir": ["procs"]},
    "apply": {"files": APPLY_FILES},
    # the same files, the config without its accumulation key and the arguments without theirs
    "apply-missing": {"files": APPLY_FILES, "prepare": [
        "sed -i '/accumulate_grad_batches/d' conf/config.yaml",
        "sed -i '/gradient_accumulation_steps/d' args.json"]},
    "snapshot": {"nvml": "job", "files": {"job.sh": "tests/data/run/snapshot_job.sh"}},
    "venv": {"venv": True},
    "web": {"web": True},  # the page `make web` builds (BUILD/web)
}
LINKED = ["bench", "bindings", "data", "docs", "examples", "scripts", "tests"]


def normalize(text, where):
    """What a reader would see in place of the example's own folders: ~ for its HOME, relative
    paths for its working folder, build/venv for the tracer's Python environment,
    libnvidia-ml.so.1 for the missing library it was given."""
    if where.get("venv"):
        for venv in (where["venv"], os.path.realpath(where["venv"])):
            text = text.replace(venv + "/", "build/venv/")
    text = text.replace(where["home"], "~").replace(where["cwd"] + "/", "")
    return text.replace("/nonexistent/libnvidia-ml.so.1", "libnvidia-ml.so.1")


class Example:
    """One marked block: where it is, its id and setup, its commands and their expected output."""

    def __init__(self, path, line, indent, ident, attrs, body, end):
        self.path, self.line, self.indent, self.id = path, line, indent, ident
        self.attrs, self.body, self.end = attrs, body, end
        self.steps = parse_steps(body)  # [(command lines, output lines)]

    @property
    def setup(self):
        return "transcript" if "transcript" in self.attrs else self.attrs.get("setup", "nogpu")

    def where(self):
        return f"{os.path.relpath(self.path, SRC)}:{self.line}: example {self.id}"


def parse_steps(body):
    steps, cont = [], False
    for line in body:
        if cont or line.startswith(PROMPT):
            if cont:
                steps[-1][0].append(line)
            else:
                steps.append(([line], []))
            cont = line.endswith("\\")
        elif steps:
            steps[-1][1].append(line)
        else:
            steps.append(([], [line]))  # output before any command: reported by check
    return steps


def scan(path):
    """(examples, problems) of one Markdown file. A problem is a console example that names no
    example, a `$ ` line outside a console block, or a marker with no console block after it."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    examples, problems = [], []
    rel = os.path.relpath(path, SRC)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].lstrip().startswith(PROMPT):
                problems.append(f"{rel}:{i + 1}: a console line outside a marked ```console block")
            elif MARKER.match(lines[i]) and not (i + 1 < len(lines) and FENCE.match(lines[i + 1])):
                problems.append(f"{rel}:{i + 1}: example marker not followed by a code block")
            i += 1
            continue
        indent, lang = len(m.group("indent")), m.group("lang")
        close = re.compile(r"^ {0,%d}%s\s*$" % (indent, m.group("fence")))
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [dedent(line, indent) for line in lines[i + 1:j]]
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        if lang == "console":
            if not marker:
                problems.append(f"{rel}:{i + 1}: a ```console block without <!-- example: ID -->")
            else:
                attrs = dict(a.split("=", 1) for a in marker.group("attrs").split())
                e = Example(path, i + 1, indent, marker.group("id"), attrs, body, j)
                outside = [c for c, _ in e.steps for c in c if ABSOLUTE.search(c)]
                if outside and e.setup != "transcript":
                    problems.append(f"{e.where()}: an absolute path in a command ({outside[0].strip()}): "
                                    "an example works in its own folder, with relative paths")
                else:
                    examples.append(e)
        elif any(line.startswith(PROMPT) for line in body):
            problems.append(f"{rel}:{i + 1}: commands with `$ ` in a ```{lang} block (use console)")
        i = j + 1
    return examples, problems


def dedent(line, n):
    k = len(line) - len(line.lstrip(" "))
    return line[min(k, n):]


# ---- matching ------------------------------------------------------------------------------------

def mask(line):
    for rx in VOLATILE:
        line = rx.sub("\0", line)
    return line


def line_matches(want, got):
    want, got = mask(want.rstrip()), mask(got.rstrip())
    if GAP in want:
        rx = ".*".join(re.escape(part) for part in want.split(GAP))
        return re.fullmatch(rx, got) is not None
    return want == got


def lines_match(want, got, line_ok=None):
    """want (with `...` lines as gaps) against all of got; line_ok compares two lines."""
    line_ok = line_ok or line_matches
    # match[i][j]: want[i:] matches got[j:]
    n, m = len(want), len(got)
    match = [[False] * (m + 1) for _ in range(n + 1)]
    match[n][m] = True
    for i in range(n - 1, -1, -1):
        gap = want[i].strip() == GAP
        for j in range(m, -1, -1):
            if gap:
                match[i][j] = match[i + 1][j] or (j < m and match[i][j + 1])
            else:
                match[i][j] = j < m and line_ok(want[i], got[j]) and match[i + 1][j + 1]
    return match[0][0]


def shape(line):
    return re.sub(r"\d+(\.\d+)?", "#", mask(line.rstrip()))


def keep_volatile(want, got):
    """got, where a line differs from its counterpart in want only in VOLATILE fields, as want."""
    out = list(got)
    matcher = difflib.SequenceMatcher(None, [mask(w.rstrip()) for w in want], [mask(g) for g in got],
                                      autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            out[block.b + k] = want[block.a + k].rstrip()
    return out


def updated(want, got):
    """The block's output lines made true: the whole output when the block shows it whole; with
    gaps, each shown line replaced by the next output line of its shape (numbers aside). None
    when a shown line has no such line any more (the example must be edited by hand)."""
    if lines_match(want, got):
        return want
    if not any(w.strip() == GAP for w in want):  # the whole output shown: the whole output,
        return keep_volatile(want, [g.rstrip() for g in got])  # its clock times kept
    out, j = [], 0
    for w in want:
        if w.strip() == GAP:
            out.append(w)
            continue
        k = j
        while k < len(got) and not (line_matches(w, got[k]) or shape(w) == shape(got[k])):
            k += 1
        if k == len(got):
            return None
        out.append(w if line_matches(w, got[k]) else got[k].rstrip())
        j = k + 1
    return out if lines_match(out, got) else None


# ---- running ---------------------------------------------------------------------------------------

def tools():
    env = os.environ
    return {
        "bin": env.get("OOMLESS_BIN") or os.path.join(BUILD, "oomless"),
        "nvml": env.get("FAKE_NVML_LIB") or os.path.join(BUILD, "tests", "fake", "libnvidia-ml.so.1"),
        "job": env.get("FAKE_JOB") or os.path.join(BUILD, "tests", "fakejob"),
        "lib": env.get("OOMLESS_LIBRARY") or os.path.join(BUILD, "liboomless.so"),
        "web": os.path.join(os.path.dirname(env.get("OOMLESS_BIN") or os.path.join(BUILD, "oomless")), "web"),
        "python": env.get("OOMLESS_PYTHON") or os.path.join(BUILD, "venv", "bin", "python"),
    }


def prepare(example, root, tool):
    """A folder for the example, and the environment its commands run in."""
    setup = SETUPS[example.setup]
    base = os.path.join(root, f"{example.id}.{example.line}")
    cwd, home, bindir, tmp = base, base + ".home", base + ".bin", base + ".tmp"
    for d in (cwd, home, bindir, tmp, os.path.join(cwd, "build")):
        os.makedirs(d)
    # stdout line-buffered, as on a terminal: its lines and stderr's come in the order a user sees
    with open(os.path.join(bindir, "oomless"), "w") as f:
        f.write(f'#!/bin/sh\nexec stdbuf -oL "{tool["bin"]}" "$@"\n')
    os.chmod(os.path.join(bindir, "oomless"), 0o755)
    os.symlink(tool["bin"], os.path.join(cwd, "build", "oomless"))
    os.symlink(tool["lib"], os.path.join(cwd, "build", "liboomless.so"))
    os.symlink(tool["job"], os.path.join(cwd, "fakejob"))
    for d in LINKED:
        os.symlink(os.path.join(SRC, d), os.path.join(cwd, d))
    for name, src in setup.get("files", {}).items():
        os.makedirs(os.path.dirname(os.path.join(cwd, name)) or cwd, exist_ok=True)
        shutil.copy(os.path.join(SRC, src), os.path.join(cwd, name))  # its mode too
    for d in setup.get("mkdir", []):
        os.makedirs(os.path.join(cwd, d))
    where = {"cwd": cwd, "home": home}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OOMLESS_", "FAKE_NVML", "XDG_", "CUDA_", "NCCL_", "GPU_PROFILE"))
           and k not in ("CUBLAS_WORKSPACE_CONFIG", "HF_HOME", "HF_HUB_CACHE")}
    env.update({"PATH": bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": home, "TMPDIR": tmp,  # what a command leaves there goes with the example
                "LC_ALL": "C.UTF-8", "COLUMNS": "100", "PYTHONDONTWRITEBYTECODE": "1",
                "OOMLESS_DATA_DIR": os.path.join(SRC, "data"),
                "OOMLESS_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1"})
    if setup.get("nvml"):
        spec = base + ".nvml"
        with open(spec, "w") as f:
            f.write(NVML_SPECS[setup["nvml"]].replace("{cwd}", cwd) + "\n")
        env.update({"OOMLESS_NVML_LIBRARY": tool["nvml"], "FAKE_NVML_SPEC": spec})
    if setup.get("web"):
        os.symlink(tool["web"], os.path.join(cwd, "build", "web"))
    if setup.get("venv"):
        venv = os.path.dirname(os.path.dirname(tool["python"]))
        os.symlink(venv, os.path.join(cwd, "build", "venv"))
        env["OOMLESS_PYTHON"] = tool["python"]
        env["PATH"] = bindir + os.pathsep + os.path.join(venv, "bin") + os.pathsep + os.environ.get("PATH", "")
        where["venv"] = venv
    for command in setup.get("prepare", []):
        subprocess.run(["bash", "-c", command], cwd=cwd, env=env, check=True)
    return cwd, env, where


def run_example(example, root, tool):
    """The output of each command of the example: [[lines]]."""
    cwd, env, where = prepare(example, root, tool)
    outputs = []
    for command, _ in example.steps:
        text = "\n".join(command)[len(PROMPT):]
        try:
            p = subprocess.run(["bash", "-o", "pipefail", "-c", text], cwd=cwd, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=TIMEOUT)
            out = p.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            out = f"(examples.py: no answer in {TIMEOUT} s)\n"
        outputs.append(trim(normalize(out, where).split("\n")))
    return outputs


def trim(lines):
    """Lines without the blank ones at the end."""
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def check_transcript(example):
    """The example's lines in order in the transcript it names; a message, or None."""
    path = os.path.join(SRC, example.attrs["transcript"])
    if not os.path.isfile(path):
        return f"no transcript {example.attrs['transcript']}"
    with open(path, encoding="utf-8") as f:
        got = f.read().split("\n")
    want = []
    for command, output in example.steps:
        want += [c.replace(PROMPT + "oomless ", PROMPT + "./.dev/oomless-wrap ", 1) for c in command]
        want += output
    if not lines_match([GAP] + want + [GAP], got):
        return f"its lines are not, in this order, in {example.attrs['transcript']}"
    return None


def evaluate(example, root, tool, update):
    """(message or None, new body or None) for one example."""
    if example.steps and not example.steps[0][0]:
        return "output before the first `$ ` command", None
    if example.setup == "transcript":
        return check_transcript(example), None
    outputs = run_example(example, root, tool)
    body, diffs = [], []
    for (command, want), got in zip(example.steps, outputs):
        body += command
        want = trim(list(want))
        if lines_match(want, got):
            body += want
            continue
        diffs.append(report(command, want, got))
        new = updated(want, got) if update else None
        if update and new is None:
            return f"cannot be updated by shape, edit it by hand:\n{diffs[-1]}", None
        body += new if update else want
    return ("\n".join(diffs) or None), (body if diffs else None)


def report(command, want, got):
    """The command, the first documented line the output does not bear out, and the diff."""
    first = next(i for i in range(len(want), -1, -1) if lines_match(want[:i] + [GAP], got))
    where = (f"documented line {first + 1} is not printed there: {want[first]}" if first < len(want)
             else "the output goes on after the last documented line")
    diff = difflib.unified_diff([w.rstrip() for w in want], [g.rstrip() for g in got],
                                "documented", "printed", lineterm="", n=1)
    return "\n".join(["  " + command[0], "  " + where] + ["    " + d for d in diff])


def rewrite(path, changes):
    """Replaces the bodies of the changed examples of one file (changes: [(example, body)])."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for example, body in sorted(changes, key=lambda c: -c[0].line):
        pad = " " * example.indent
        lines[example.line:example.end] = [(pad + b if b else "") for b in body]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def documents(src, args):
    """The Markdown files named, else README.md and docs/*.md of the source tree src."""
    if args:
        return [os.path.abspath(a) for a in args]
    docs = os.path.join(src, "docs")
    return [os.path.join(src, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["check", "update", "list", "show"],
                    help="show: print what the examples' commands print now")
    ap.add_argument("files", nargs="*", help="Markdown files (default README.md and docs/*.md)")
    ap.add_argument("--setups", help="only the examples of these setups (comma-separated)")
    ap.add_argument("--skip-setups", default="", help="leave out the examples of these setups")
    ap.add_argument("--id", action="append", help="only this example (repeatable)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_intermixed_args()
    examples, problems, seen = [], [], {}
    for path in documents(SRC, args.files):
        found, bad = scan(path)
        examples += found
        problems += bad
    runnable = []
    for e in examples:
        if e.id in seen:
            problems.append(f"{e.where()}: id already used at {seen[e.id].where()}")
        elif e.setup not in SETUPS and e.setup != "transcript":
            problems.append(f"{e.where()}: unknown setup '{e.setup}' (known: {', '.join(SETUPS)})")
        else:
            runnable.append(e)
        seen.setdefault(e.id, e)
    examples = runnable
    only = set(args.setups.split(",")) if args.setups else None
    skip = set(filter(None, args.skip_setups.split(",")))
    chosen = [e for e in examples if (only is None or e.setup in only) and e.setup not in skip
              and (not args.id or e.id in args.id)]
    if args.action == "list":
        for e in chosen:
            print(f"{e.where()} [{e.setup}] {len(e.steps)} command(s)")
        return 0
    tool = tools()
    skipped = 0
    for setup, need in (("venv", tool["python"]), ("web", os.path.join(tool["web"], "oomless.wasm"))):
        left = [e for e in chosen if e.setup != setup]
        if len(left) < len(chosen) and not os.path.exists(need):
            print(f"examples.py: no {need}: the {len(chosen) - len(left)} example(s) of setup "
                  f"{setup} skipped")
            skipped += len(chosen) - len(left)
            chosen = left
    failures, changes = list(problems), {}
    if args.action == "show":
        with tempfile.TemporaryDirectory(prefix="oomless-examples.") as root:
            for e in chosen:
                if e.setup == "transcript":
                    continue
                for (command, _), out in zip(e.steps, run_example(e, root, tool)):
                    print("\n".join(command + out))
        return 0
    with tempfile.TemporaryDirectory(prefix="oomless-examples.") as root:
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            results = pool.map(lambda e: (e, evaluate(e, root, tool, args.action == "update")),
                               chosen)
            for e, (message, body) in results:
                if body is not None and args.action == "update":
                    changes.setdefault(e.path, []).append((e, body))
                elif message:
                    failures.append(f"{e.where()}: {message}")
    for path, change in changes.items():
        rewrite(path, change)
        print(f"examples.py: updated {len(change)} example(s) in {os.path.relpath(path, SRC)}")
    for f in failures:
        print(f, file=sys.stderr)
    print(f"examples.py: {len(chosen)} example(s) run, {skipped} skipped, {len(failures)} problem(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
