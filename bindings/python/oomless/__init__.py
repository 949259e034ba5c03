"""oomless: fit deep-learning training and inference jobs to the GPU memory available.

A thin ctypes binding of liboomless. Every function returns the same dict the command line's
``--json`` prints (the library builds the document for both), with the same numbers::

    import oomless
    oomless.gpus()["budget"]["usable_bytes"]

Errors raise a subclass of :class:`oomless.OomlessError`, one per library error code, with
the library's message.

Through the library (ctypes): :func:`gpus`, :func:`catalog`, :func:`estimate`, :func:`plan`,
:func:`watch` (one snapshot), :func:`parse_size` and the option tables. Through the ``oomless``
program with ``--json`` (:func:`probe`, :func:`run`): they launch and supervise your command
(process group, signals, the terminal, relaunches), which belongs to a program, not to a call
in your interpreter. :func:`trace` is :mod:`oomless.trace` (PyTorch's meta device, in process). The library's notices (a damaged line skipped in the calibration file, an
ignored relative ``$XDG_CACHE_HOME``) are warnings of the class :class:`oomless.Notice`.
"""
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import warnings
from types import FrameType
from typing import (IO, Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union,
                    cast)

from . import _native as _n
from . import _vocab
from . import calibration  # noqa: F401  (the calibration store, through the library)
from ._memory_log import MemoryLog, MemoryWarning
# oomless.trace is the tracing package and, called, its trace(): oomless.trace(model=...)
from . import trace  # noqa: F401  (light: torch is imported on first use)
from .errors import (BY_CODE, DoesNotFitError, FileError, InternalError, InterruptedJobError,
                     InvalidValueError, JobError, NoDeviceError, NoMemoryError, NotFoundError,
                     OomlessError, ParseError, RefusedError, UnsupportedError)

__all__ = [
    "Notice", "gpus", "catalog", "estimate", "plan", "plan_format", "plan_options", "list_models", "workload_options", "Workload", "parse_size",
    "options", "plan_formats", "calibration",
    "version", "watch", "probe", "run", "trace", "cli_path", "MemoryLog", "MemoryWarning", "OomlessError", "InvalidValueError",
    "NoMemoryError", "FileError", "ParseError", "NotFoundError", "NoDeviceError",
    "DoesNotFitError", "JobError", "RefusedError", "UnsupportedError", "InterruptedJobError",
    "InternalError",
]


class Notice(UserWarning):
    """A notice from the library: something to know although the call succeeded."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _on_notice(message: bytes, user: Any) -> None:
    # called by the library during a call: the warning points at the caller's line (the first
    # frame outside this package)
    frame: Optional[FrameType] = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(message.decode("utf-8", "replace"), Notice, stacklevel=level + 1)


_NOTICE_HANDLER = _n.NOTICE_FN(_on_notice)  # kept alive for as long as the library holds it
_n.oom_set_notice_handler(_NOTICE_HANDLER, None)


# The library reads a number given as text with C's strtoll/strtod: an integer outside int64
# would come back as another value (2**64 as 9223372036854775807), so it is refused here.
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _int_arg(name: str, value: int, low: int, high: int) -> int:
    """`value` when low <= value <= high; InvalidValueError naming the argument otherwise."""
    if not low <= value <= high:
        raise InvalidValueError("%s=%d is out of range (%d to %d)" % (name, value, low, high),
                                InvalidValueError.code)
    return value


def _text_arg(name: str, value: Any) -> str:
    """`value` as the text the library or the CLI reads: an integer range-checked, a string
    refused when it holds a NUL (C would read it cut short there)."""
    if isinstance(value, int) and not isinstance(value, bool):
        _int_arg(name, value, *_INT64)
    text = value if isinstance(value, str) else str(value)
    if "\0" in text:
        raise InvalidValueError("%s=%r holds a NUL character, which would cut it short"
                                % (name, value), InvalidValueError.code)
    return text


def _b(value: Any, name: str) -> Optional[bytes]:
    if value is None:
        return None
    return _text_arg(name, value).encode("utf-8")


def _gpu_arg(gpu: Any) -> Optional[bytes]:
    """A GPU as the library reads it: an integer is an index (0 to 2**31 - 1), else a name."""
    if isinstance(gpu, int) and not isinstance(gpu, bool):
        _int_arg("gpu", gpu, 0, (1 << 31) - 1)
    return _b(gpu, "gpu")


def _check(code: int) -> None:
    if code != 0:
        message = _n.oom_last_message().decode("utf-8", "replace")
        raise BY_CODE.get(code, OomlessError)(message, code)


def _take_json(ptr: ctypes.c_void_p) -> Any:
    """Decodes and frees a library-allocated JSON string."""
    if not ptr.value:
        raise InternalError("the library returned no document", InternalError.code)
    try:
        return json.loads(ctypes.string_at(ptr.value).decode("utf-8"))
    finally:
        _n.oom_free(ptr)


def version() -> str:
    """The library's version string."""
    return _n.oom_version().decode()


def parse_size(text: Union[str, int, float], bare_unit: str = "GiB") -> int:
    """Bytes for a size such as "20.5", "16GiB" or "512MiB"; bare numbers in `bare_unit`."""
    units = {"B": _n.OOM_UNIT_BYTES, "MiB": _n.OOM_UNIT_MIB, "GiB": _n.OOM_UNIT_GIB}
    if bare_unit not in units:
        raise InvalidValueError("bare_unit %r is not one of B, MiB, GiB" % (bare_unit,), 1)
    out = ctypes.c_uint64()
    _check(_n.oom_parse_size(ctypes.byref(out), _b(text, "text"), units[bare_unit]))
    return out.value


class _Config:
    """Owns an oom_config for the duration of a call."""

    def __init__(self, path: Optional[str]) -> None:
        self.ptr = ctypes.c_void_p()
        _check(_n.oom_config_load(ctypes.byref(self.ptr), _b(path, "config")))

    def close(self) -> None:
        if self.ptr:
            _n.oom_config_free(self.ptr)
            self.ptr = ctypes.c_void_p()

    def __enter__(self) -> "_Config":
        return self

    def __exit__(self, *exc: Any) -> "Literal[False]":
        self.close()
        return False


def gpus(gpu: Optional[Union[str, int]] = None, vram: Optional[Union[str, int, float]] = None,
         vram_safety_margin: Optional[Union[str, int]] = None, config: Optional[str] = None,
         all: bool = False) -> Dict[str, Any]:
    """The GPUs and the budget, as ``oomless gpus --json`` prints them.

    `gpu` is "auto", an index or a profile ("a100-80gb"); `vram` and `vram_safety_margin`
    take the CLI's sizes ("20.5", "16GiB", "512", "10%"); `config` a config file path;
    `all` ignores CUDA_VISIBLE_DEVICES.
    """
    with _Config(config) as cfg:
        req = _n.TargetRequest(_gpu_arg(gpu), _b(vram, "vram"),
                                _b(vram_safety_margin, "vram_safety_margin"), cfg.ptr)
        out = ctypes.c_void_p()
        _check(_n.oom_gpus_report(ctypes.byref(out), ctypes.byref(req),
                                  _n.OOM_SAMPLE_ALL_GPUS if all else 0))
        return _take_json(out)


def catalog(config: Optional[str] = None) -> Dict[str, Any]:
    """The GPU profiles, as ``oomless gpus --catalog --json`` prints them."""
    with _Config(config) as cfg:
        cat = ctypes.c_void_p()
        _check(_n.oom_catalog_load(ctypes.byref(cat), cfg.ptr))
        try:
            out = ctypes.c_void_p()
            _check(_n.oom_catalog_to_json(ctypes.byref(out), cat))
            return _take_json(out)
        finally:
            _n.oom_catalog_free(cat)


_BUDGET_KEYS = ("gpu", "vram", "vram_safety_margin", "config")


def _synopsis(o: Mapping[str, Any]) -> str:
    """What the CLI's --help shows after --NAME: the values joined by '|', else the metavar."""
    return o["metavar"] if o["list"] or not o["values"] else "|".join(
        v["name"] for v in o["values"])


def options(command: Optional[str] = None) -> List[Dict[str, Any]]:
    """Every option (the workload's and the plan's) that `command` takes ("estimate", "plan",
    "table", "probe", "trace"; None: all), from the library's tables: dicts with name,
    metavar, help, help_line (with the default, as ``--help`` prints it), default, commands,
    list, and values (each with name, help, form, commands, trainer, trainer_args, versions,
    traced)."""
    return _vocab.options(command)


def plan_formats(command: Optional[str] = "plan") -> List[Dict[str, Any]]:
    """The output formats of ``plan`` (or ``table``): name, help, framework, versions."""
    return _vocab.plan_formats(command)


def workload_options() -> List[Tuple[str, str, str]]:
    """The workload options as (name, synopsis, help): the CLI's --NAME (or NAME with '_' here),
    its values or metavar, and its help with the default, as ``oomless estimate --help``."""
    count = ctypes.c_size_t()
    _n.oom_workload_options(ctypes.byref(count))
    return [(o["name"], _synopsis(o), o["help_line"]) for o in _vocab.options()[:count.value]]


class Workload:
    """An oom_workload: set options by their CLI names (`lora_rank` or "lora-rank").

    Usually built for you by :func:`estimate` and :func:`plan`; usable as a context manager.
    """

    def __init__(self, **options: Any) -> None:
        self._ptr = ctypes.c_void_p()
        _check(_n.oom_workload_create(ctypes.byref(self._ptr)))
        try:
            for key, value in options.items():
                self.set(key, value)
        except BaseException:
            self.close()
            raise

    def set(self, key: str, value: Any) -> None:
        """Sets one option; values are given as the CLI takes them (numbers may be ints)."""
        if isinstance(value, bool):
            value = "yes" if value else "no"
        _check(_n.oom_workload_set(self._ptr, _b(key, "key"), _b(value, key)))

    @property
    def handle(self) -> ctypes.c_void_p:
        if not self._ptr:
            raise InvalidValueError("the workload is closed", 1)
        return self._ptr

    def close(self) -> None:
        """Frees the workload; calling it again does nothing."""
        if self._ptr:
            _n.oom_workload_free(self._ptr)
            self._ptr = ctypes.c_void_p()

    def __enter__(self) -> "Workload":
        return self

    def __exit__(self, *exc: Any) -> "Literal[False]":
        self.close()
        return False

    def __del__(self) -> None:
        self.close()


def _split(kwargs: Dict[str, Any],
           keys: Sequence[str]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    picked = {k: kwargs.pop(k) for k in list(kwargs) if k in keys}
    return picked, kwargs


def estimate(gpu: Optional[Union[str, int]] = None, vram: Optional[Union[str, int, float]] = None,
             vram_safety_margin: Optional[Union[str, int]] = None, config: Optional[str] = None,
             **workload: Any) -> Dict[str, Any]:
    """Peak GPU memory of a workload, as ``oomless estimate --json`` prints it.

    Workload keywords are the CLI's options with '_' for '-': ``model``, ``method``,
    ``precision``, ``optimizer``, ``batch``, ``seq``, ``grad_accum``, ``checkpointing``,
    ``lora_rank``, ... (see :func:`workload_options`). With `gpu` or `vram` the document has a
    ``budget`` with ``fits``, as the CLI does.
    """
    with Workload(**workload) as w, _Config(config if (gpu or vram) else None) as cfg:
        req = _n.TargetRequest(_gpu_arg(gpu), _b(vram, "vram"),
                                _b(vram_safety_margin, "vram_safety_margin"), cfg.ptr)
        budget, have = _n.Budget(), ctypes.c_int()
        _check(_n.oom_estimate_budget(ctypes.byref(budget), ctypes.byref(have), None,
                                      w.handle, ctypes.byref(req)))
        est = _n.Estimate()
        _check(_n.oom_estimate_run(ctypes.byref(est), w.handle))
        out = ctypes.c_void_p()
        _check(_n.oom_estimate_to_json_budget(ctypes.byref(out), w.handle, ctypes.byref(est),
                                              ctypes.byref(budget) if have.value else None))
        return _take_json(out)


def list_models() -> Any:
    """The built-in model presets, as ``oomless estimate --list-models --json`` prints them."""
    out = ctypes.c_void_p()
    _check(_n.oom_model_presets_json(ctypes.byref(out)))
    return _take_json(out)


def _model_config_path(model: str) -> str:
    """The config.json a model argument names (a file, a folder, a preset, a hub id in the local
    Hugging Face cache), by the rules the estimator uses; NotFoundError naming the closest
    presets otherwise."""
    out = ctypes.c_void_p()
    _check(_n.oom_model_resolve(ctypes.byref(out), _b(model, "model")))
    try:
        return os.fsdecode(ctypes.string_at(out.value or 0))
    finally:
        _n.oom_free(out)


def plan_options() -> List[Tuple[str, str, str]]:
    """The plan-only options as (name, synopsis, help), besides the workload options."""
    count = ctypes.c_size_t()
    _n.oom_workload_options(ctypes.byref(count))
    return [(o["name"], _synopsis(o), o["help_line"]) for o in _vocab.options()[count.value:]]


def _option_arrays(options: Mapping[str, Any]) -> Tuple[Any, Any, int]:
    """Keyword options as the library's two arrays of strings (True/False as yes/no, None
    left out) and their count."""
    items = [(k, "yes" if v is True else "no" if v is False else v)
             for k, v in options.items() if v is not None]
    keys = (ctypes.c_char_p * max(len(items), 1))(*[_b(k, "option") for k, _ in items])
    values = (ctypes.c_char_p * max(len(items), 1))(
        *[_gpu_arg(v) if k == "gpu" else _b(v, k) for k, v in items])
    return keys, values, len(items)


def plan(**options: Any) -> Dict[str, Any]:
    """The fastest configuration that fits, as ``oomless plan --json`` prints it.

    Keywords are the CLI's options with '_' for '-': the workload options (``model``,
    ``method``, ``seq``, ...) and the plan options (``gpu``, ``vram``,
    ``vram_safety_margin``, ``target_effective_batch``, ``batch_size``, ``allow``, ...).
    When nothing fits, :class:`DoesNotFitError` is raised; its ``document`` attribute holds
    the JSON report (smallest configuration tried, suggestions).
    """
    keys, values, n = _option_arrays(options)
    out = ctypes.c_void_p()
    code = _n.oom_plan_json(ctypes.byref(out), keys, values, n)
    if code == DoesNotFitError.code and out.value:
        message = _n.oom_last_message().decode("utf-8", "replace")
        exc = DoesNotFitError(message, code)
        exc.document = _take_json(out)
        raise exc
    if code != 0 and out.value:
        _n.oom_free(out)
    _check(code)
    return _take_json(out)


def plan_format(format: str, version: Optional[str] = None, **options: Any) -> str:
    """The plan in `format`, as ``oomless plan --format FORMAT`` writes it (``args``,
    ``deepspeed``, ``accelerate``, ``torchtitan``, ``trl``, ``torchtune``...: see
    :func:`plan_formats`), for the version `version` of the format's framework.

    By default the version is the one installed here (the format's ``package``, as
    ``importlib.metadata`` sees it: ``--format torchtitan`` in an environment with torchtitan
    0.2.2 writes 0.2's TOML), else the latest the format knows. Options as :func:`plan`. A plan
    the framework cannot run raises :class:`UnsupportedError` saying why (LoRA for torchtitan,
    fp16 for torchtune); :class:`DoesNotFitError` when nothing fits.
    """
    info = next((f for f in _vocab.plan_formats("plan") if f["name"] == format), None)
    if version is None and info is not None:
        version = _vocab.installed_version(info["package"])
    keys, values, n = _option_arrays(options)
    out = ctypes.c_void_p()
    _check(_n.oom_plan_options_format(ctypes.byref(out), None, keys, values, n,
                                      _b(format, "format"), _b(version, "version")))
    try:
        return ctypes.string_at(out.value or 0).decode("utf-8")
    finally:
        _n.oom_free(out)


def watch(vram_safety_margin: Optional[Union[str, int]] = None,
          plan: Optional[Union[Mapping[str, Any], int]] = None) -> Dict[str, Any]:
    """One snapshot of every GPU and the processes on it, as ``oomless watch --once --json``
    prints it (``time``, ``plan_peak_bytes``, ``gpus``: used/total bytes, band, budget, the
    processes with their batch sizes...).

    Through the library (oom_monitor). `vram_safety_margin` ("1GiB", "10%") makes each GPU's
    budget (its total minus the margin); `plan` is a plan document (its
    ``memory.device_peak``) or a number of bytes, the peak that bounds the "safe" band. Needs the
    NVIDIA driver's NVML: :class:`NoDeviceError` without it. One sample has no trend yet (its
    ``trend`` values are null); call again for another snapshot.
    """
    session, monitor = ctypes.c_void_p(), ctypes.c_void_p()
    _check(_n.oom_gpu_open(ctypes.byref(session)))
    try:
        _check(_n.oom_monitor_create(ctypes.byref(monitor), session))
        if vram_safety_margin is not None:
            _check(_n.oom_monitor_set_margin(monitor,
                                             _b(vram_safety_margin, "vram_safety_margin")))
        if plan is not None:
            peak = plan if isinstance(plan, int) else (plan.get("memory") or {})["device_peak"]
            # a c_uint64 argument wraps silently: -1 would be 18446744073709551615
            _n.oom_monitor_set_plan_peak(monitor, _int_arg("plan", int(peak), 0, (1 << 64) - 1))
        _check(_n.oom_monitor_sample(monitor))
        out = ctypes.c_void_p()
        _check(_n.oom_watch_to_json(ctypes.byref(out), _n.oom_monitor_snapshot(monitor), 0))
        return _take_json(out)
    finally:
        if monitor:
            _n.oom_monitor_free(monitor)
        _n.oom_gpu_close(session)


def cli_path() -> str:
    """The ``oomless`` program :func:`probe` and :func:`run` use: $OOMLESS_CLI; the one beside
    the loaded liboomless (a build directory); ``<prefix>/bin/oomless`` for a library in
    ``<prefix>/lib``; else the first ``oomless`` on $PATH. :class:`FileError` when none is
    found."""
    env = os.environ.get("OOMLESS_CLI")
    if env:
        return env
    lib_dir = os.path.dirname(os.path.abspath(_n.lib._name)) if os.sep in _n.lib._name else None
    if lib_dir:
        for path in (os.path.join(lib_dir, "oomless"),
                     os.path.join(os.path.dirname(lib_dir), "bin", "oomless")):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    found = shutil.which("oomless")
    if found:
        return found
    raise FileError("the oomless program is not found (set OOMLESS_CLI to its path, or put it "
                    "on PATH)")


def _cli_options(options: Mapping[str, Any]) -> List[str]:
    """Keywords as the CLI's options: key_name=V -> --key-name V; True -> the flag alone;
    False/None -> left out; a list or tuple -> the option once per item (``set=[...]``)."""
    argv: List[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, _text_arg(key, item)]
        else:
            argv += [flag, _text_arg(key, value)]
    return argv


# the CLI's exit codes of README.md ("Exit codes") for a failure that printed no document
_CLI_ERRORS = {2: InvalidValueError, 3: NoDeviceError, 126: JobError, 127: JobError}
# a line the oomless program writes itself ("oomless probe: ...", "oomless: ..."), not the job
_CLI_MESSAGE = re.compile(rb"^oomless(?: [a-z]+)?: ")
_LINE_KEPT = 4096  # of a line not ended yet: enough for any message of the program's


def _write_stderr(chunk: bytes) -> None:
    stream = sys.stderr
    if stream is None:
        return
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        stream.flush()
        buffer.write(chunk)
        buffer.flush()
    else:  # a notebook's or a test's replacement: text only
        stream.write(chunk.decode("utf-8", "replace"))
        stream.flush()


def _stop(proc: "subprocess.Popen[bytes]") -> None:
    """Ends the program the way a signal to it would (it passes SIGTERM to the job and waits
    out its grace), then for good."""
    try:
        proc.terminate()
        proc.wait(timeout=30)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _run_cli(argv: List[str]) -> Tuple[int, bytes, List[bytes]]:
    """Runs the program: its stderr (its messages and the job's output) copied to ours as it
    comes, its stdout (the document) read whole. Returns the exit status, the stdout and the
    program's own message lines."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as exc:
        raise FileError("cannot run %s: %s" % (argv[0], exc)) from exc
    stdout, stderr = cast(IO[bytes], proc.stdout), cast(IO[bytes], proc.stderr)  # both piped
    out: List[bytes] = []
    reader = threading.Thread(target=lambda: out.append(stdout.read()), daemon=True)
    reader.start()
    messages: List[bytes] = []
    line = b""
    try:
        while True:
            chunk = os.read(stderr.fileno(), 65536)
            if not chunk:
                break
            _write_stderr(chunk)
            lines = (line + chunk).split(b"\n")
            line = lines.pop()[:_LINE_KEPT]
            messages = (messages + [x for x in lines if _CLI_MESSAGE.match(x)])[-16:]
        if _CLI_MESSAGE.match(line):
            messages.append(line)
        proc.wait()
    except BaseException:
        _stop(proc)
        raise
    finally:
        reader.join()
        stdout.close()
        stderr.close()
    return proc.returncode, out[0] if out else b"", messages


def _cli_json(verb: str, command: Sequence[str], options: Mapping[str, Any]) -> Dict[str, Any]:
    if isinstance(command, (str, bytes)) or not command:
        raise InvalidValueError("command is a non-empty list of arguments (the program and its "
                                "arguments, run without a shell)")
    args = [_text_arg("command[%d]" % i, a) for i, a in enumerate(command)]
    argv = [cli_path(), verb, "--json"] + _cli_options(options) + ["--"] + args
    status, stdout, messages = _run_cli(argv)
    text = stdout.decode("utf-8", "replace").strip()
    if text.startswith("{"):
        return json.loads(text)
    error = _CLI_ERRORS.get(status, OomlessError)
    if messages:  # the last: the error it ended with (notices come before it)
        message = messages[-1].decode("utf-8", "replace")
        failure = error("%s (exit status %d)" % (message, status))
    else:
        failure = error("oomless %s exited with status %d and printed no result nor message"
                        % (verb, status))
    failure.exit_status = status
    raise failure


def probe(command: Sequence[str], **options: Any) -> Dict[str, Any]:
    """Runs `command` at a few batch sizes and finds the largest that fits, as ``oomless probe
    --json -- COMMAND`` prints it (``recommended_batch``, ``max_batch``, ``trials``...).

    Through the ``oomless`` program (:func:`cli_path`): the trials are processes it launches,
    measures (NVML) and stops. `command` is the program and its arguments (no shell), with the
    placeholders ``{batch}``, ``{accum}``, ``{seq}``; options are ``oomless probe``'s with '_'
    for '-' (``max_trials=4``, ``calibration="off"``, ``set=["method=lora"]``). The jobs' output
    and the program's messages go to stderr as they come. A document is returned whatever the
    search found; when the program printed none, :class:`OomlessError` (or a subclass by exit
    status: 2 usage, 3 environment, 126/127 the command cannot be run) with the program's own
    message (``--max-trials '0' must be a whole number >= 1 (exit status 2)``). A string
    holding a NUL character, or an integer outside int64, is refused before anything runs
    (:class:`InvalidValueError`, a ValueError, naming the argument).
    """
    return _cli_json("probe", command, options)


def run(command: Sequence[str], **options: Any) -> Dict[str, Any]:
    """Runs `command` under ``oomless run`` (relaunched at a smaller micro-batch after an OOM)
    and returns its summary, as ``oomless run --json -- COMMAND`` prints it (``exit_code``,
    ``attempts``, ``restarts``, ``batch``, ``grad_accum``, ``peak_bytes``, ``oom``...).

    Through the ``oomless`` program, which owns the job's process group, forwards signals and
    hands it the terminal. Options are ``oomless run``'s with '_' for '-' (``batch_size=8``,
    ``target_effective_batch=32``, ``max_restarts=3``); the job's exit status is in the
    document (``exit_code``), not raised. Errors as for :func:`probe`.
    """
    return _cli_json("run", command, options)

