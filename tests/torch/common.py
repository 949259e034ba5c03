"""What the torch tests share: the interpreter, bounded subprocesses, free ports, the CLI."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("OOMLESS_SRC") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "bindings", "python"))

try:
    import torch  # noqa: F401
    TORCH_REASON = None
except ImportError as exc:  # reported as a skip with the reason
    TORCH_REASON = "torch is not installed for %s (%s); run `make venv`" % (sys.executable, exc)


def missing(module):
    """None when `module` imports, else the reason to skip."""
    if TORCH_REASON:
        return TORCH_REASON
    try:
        __import__(module)
        return None
    except ImportError as exc:
        return "%s is not installed for %s (%s); run `make venv`" % (module, sys.executable, exc)


def end_distributed():
    """The end of a DDP test job: a torch teardown crash ("terminate called without an active
    exception") hits DDP jobs on gloo at interpreter exit now and then, with or without oomless.
    The caller drops its DDP model first; then it is collected and the process group destroyed
    before the exit."""
    import gc
    gc.collect()
    if "torch" in sys.modules and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def free_port():
    """A TCP port nobody listens on now (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def oomless_bin():
    """The CLI: $OOMLESS_BIN (ctest sets it) or the source tree's build/oomless; None."""
    path = os.environ.get("OOMLESS_BIN") or os.path.join(SRC, "build", "oomless")
    return path if os.access(path, os.X_OK) else None


def plan_format(args, fmt):
    """`oomless plan ARGS --format FMT`'s output, with no NVML (the plan is for the named GPU)"""
    env = dict(os.environ, OOMLESS_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    out = subprocess.run([oomless_bin(), "plan", *args, "--format", fmt], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout


def framework_python(env_var, venv, module):
    """(interpreter, None) of a framework that has an environment of its own ($env_var, else
    build/<venv>: `make venv-torchtitan`, `make venv-torchtune`), or (None, the reason to skip)."""
    path = os.environ.get(env_var) or os.path.join(SRC, "build", venv, "bin", "python")
    if not os.access(path, os.X_OK):
        return None, "no %s (%s): run `make %s`" % (path, env_var, venv)
    probe = subprocess.run([path, "-c", "import %s" % module], capture_output=True, text=True,
                           timeout=300)
    if probe.returncode:
        return None, "%s cannot import %s: %s" % (path, module, probe.stderr.strip()[-300:])
    return path, None


def run_python(python, script, *args):
    """`python -c script args...` in the environment `env()` makes; its stdout (JSON) parsed.
    AssertionError with the output when it fails."""
    out = subprocess.run([python, "-c", script, *[str(a) for a in args]], capture_output=True,
                         text=True, timeout=300, env=env())
    if out.returncode:
        raise AssertionError("%s failed (exit %d):\n%s" % (python, out.returncode,
                                                           out.stderr[-4000:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def plan_stderr(args, fmt):
    """The notices `oomless plan ARGS --format FMT` writes on stderr"""
    e = dict(os.environ, OOMLESS_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    out = subprocess.run([oomless_bin(), "plan", *args, "--format", fmt], env=e,
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stderr


def torchrun(*args):
    """torchrun as this interpreter's module (the venv's torch)."""
    return [sys.executable, "-m", "torch.distributed.run"] + [str(a) for a in args]


def env(**extra):
    e = dict(os.environ)
    e.setdefault("OOMLESS_SRC", SRC)
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e["OMP_NUM_THREADS"] = "1"
    # quiet and offline: nothing in these tests downloads anything
    e.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM":
              "false", "OOMLESS_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1"})
    e.update({k: str(v) for k, v in extra.items()})
    return e


class Proc:
    """A process in its own session, killed with all its children when it outlives `timeout`."""

    def __init__(self, cmd, timeout, **env_extra):
        self.cmd, self.timeout = cmd, timeout
        # its own TMPDIR, removed when it ends: a torchrun agent that `oomless run` stops
        # (SIGTERM/SIGKILL on a relaunch) leaves its torchelastic_* folder behind
        self.tmp = tempfile.mkdtemp(prefix="proc-")
        env_extra.setdefault("TMPDIR", self.tmp)
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=env(**env_extra), start_new_session=True, text=True)

    def wait(self):
        """(returncode, output); raises AssertionError naming the command on a timeout."""
        try:
            out, _ = self.p.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            out, _ = self.p.communicate()
            raise AssertionError("timed out after %d s (killed): %s\n%s"
                                 % (self.timeout, " ".join(self.cmd), out[-4000:]))
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return self.p.returncode, out


def run(cmd, timeout, **env_extra):
    return Proc(cmd, timeout, **env_extra).wait()
