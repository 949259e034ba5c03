"""The calibration store (``$XDG_CACHE_HOME/oomless/calibration.jsonl``), through liboomless:
the one writer and reader of the file that ``oomless probe``, ``oomless run``, ``plan -- CMD``
and ``estimate -- CMD`` use. A record is the dict of one line::

    {"time": 1700000000.25, "gpu": "NVIDIA A100 80GB", "command": ["python", "train.py"],
     "workload": "", "fixed_bytes": ..., "per_sample_bytes": ..., "per_sample2_bytes": 0.0,
     "recommended_batch": 4, "max_batch": 4, "usable_bytes": ..., "traced": True, ...}

Members beyond these are kept, written after them (``oom_calibration.extra``). The library
appends a line all or nothing, under a lock, on a fresh line, never through a symbolic link or
into a FIFO, ignores a relative ``$XDG_CACHE_HOME`` (a :class:`oomless.Notice` says so) and
never creates a missing ``$HOME``; its errors are :class:`oomless.OomlessError` subclasses
(:class:`oomless.FileError` for the file)."""
import ctypes
import json
import time
import warnings
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from . import _native as _n
from .errors import BY_CODE, InternalError, OomlessError

# the members oom_calibration holds; the others of a record travel as its `extra`
_KNOWN = ("time", "gpu", "command", "workload", "fixed_bytes", "per_sample_bytes",
          "per_sample2_bytes", "recommended_batch", "max_batch", "usable_bytes", "traced")


def _check(code: int) -> None:
    if code != 0:
        message = _n.oom_last_message().decode("utf-8", "replace")
        raise BY_CODE.get(code, OomlessError)(message, code)


def _take(ptr: ctypes.c_void_p) -> str:
    if not ptr.value:
        raise InternalError("the library returned no text", InternalError.code)
    try:
        return ctypes.string_at(ptr.value).decode("utf-8")
    finally:
        _n.oom_free(ptr)


def _b(value: Optional[str]) -> Optional[bytes]:
    return None if value is None else value.encode("utf-8")


def default_path() -> str:
    """The store's default path: ``$XDG_CACHE_HOME/oomless/calibration.jsonl`` (an absolute
    $XDG_CACHE_HOME), else ``$HOME/.cache/oomless/calibration.jsonl``. NotFoundError when
    neither is set."""
    out = ctypes.c_void_p()
    _check(_n.oom_calibration_default_path(ctypes.byref(out)))
    return _take(out)


def command_key(argv: Sequence[str]) -> str:
    """The key of a command (an argv list, placeholders such as ``{batch}`` unexpanded): the
    JSON array text the store matches records by."""
    arr = (ctypes.c_char_p * (len(argv) + 1))(*[a.encode("utf-8") for a in argv], None)
    out = ctypes.c_void_p()
    _check(_n.oom_calibration_command_key(ctypes.byref(out), arr))
    return _take(out)


def save(record: Mapping[str, Any], path: Optional[str] = None) -> str:
    """Appends `record` (a dict as above; "command" a list or its JSON text) to the store at
    `path` (None: the default path, its folders made private); returns the path written."""
    command = record.get("command", [])
    if not isinstance(command, str):
        command = command_key([str(a) for a in command])
    per2 = float(record.get("per_sample2_bytes") or 0.0)
    extra = {k: v for k, v in record.items() if k not in _KNOWN}
    rec = _n.Calibration()
    rec.gpu = _b(str(record.get("gpu", "")))
    rec.command = _b(command)
    rec.workload = _b(str(record.get("workload", "")))
    rec.fit = _n.ProbeFit(1, 1 if per2 else 0, float(record["fixed_bytes"]),
                          float(record["per_sample_bytes"]), per2)
    rec.recommended_batch = int(record.get("recommended_batch", 0))
    rec.max_batch = int(record.get("max_batch", 0))
    rec.usable_bytes = int(record.get("usable_bytes", 0))
    rec.time = float(record.get("time", round(time.time(), 3)))
    rec.traced = 1 if record.get("traced") else 0
    rec.extra = _b(json.dumps(extra, separators=(",", ":"))) if extra else None
    _check(_n.oom_calibration_save(_b(path), ctypes.byref(rec)))
    if path is not None:
        return path
    with warnings.catch_warnings():  # the save's own notices were given already
        warnings.simplefilter("ignore")
        return default_path()


def lookup(gpu: str, command: Union[str, Sequence[str]], workload: str = "",
           path: Optional[str] = None) -> Dict[str, Any]:
    """The newest record for (gpu, command, workload) in the store (a traced record, gpu "",
    is for every GPU; a measured one wins over it), as a dict with its further members.
    NotFoundError when there is none."""
    if not isinstance(command, str):
        command = command_key(list(command))
    out = ctypes.POINTER(_n.Calibration)()
    _check(_n.oom_calibration_lookup(ctypes.byref(out), _b(path), _b(gpu), _b(command),
                                     _b(workload)))
    try:
        c = out.contents
        rec: Dict[str, Any] = {
            "time": c.time, "gpu": (c.gpu or b"").decode("utf-8"),
            "command": json.loads((c.command or b"[]").decode("utf-8")),
            "workload": (c.workload or b"").decode("utf-8"),
            "fixed_bytes": int(round(c.fit.fixed_bytes)),
            "per_sample_bytes": int(round(c.fit.per_sample_bytes)),
            "per_sample2_bytes": c.fit.per_sample2_bytes,
            "recommended_batch": c.recommended_batch, "max_batch": c.max_batch,
            "usable_bytes": c.usable_bytes}
        if c.traced:
            rec["traced"] = True
        if c.version >= 2 and c.extra:
            rec.update(json.loads(c.extra.decode("utf-8")))
        return rec
    finally:
        _n.oom_calibration_free(out)
