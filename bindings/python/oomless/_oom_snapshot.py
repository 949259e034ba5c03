"""What filled the GPU memory when a job ran out of it: the ``oom_snapshot`` event.

:func:`summarize_snapshot` is a pure function over the dict ``torch.cuda.memory._snapshot()``
returns (format: the docstring of ``_snapshot`` in ``torch/cuda/memory.py``, torch 2.13):
``{"segments": [{"total_size", "allocated_size", "blocks": [{"size", "requested_size",
"state": "active_allocated" | "active_awaiting_free" | "inactive", "frames": [{"filename",
"line", "name"}, ...]}, ...]}, ...], "device_traces": [[{"action": "alloc" | ... | "oom",
"size", "device_free", "frames"}, ...]]}``. A block's ``frames`` (innermost first) are filled
only while ``torch.cuda.memory._record_memory_history()`` is on; ``device_traces`` only with its
history (``enabled="all"``).

:func:`record_oom` takes the snapshot (while the failed step's tensors are still alive: before
the exception's frames are cleared), summarises it and appends one ``oom_snapshot`` line to the
events file of ``oomless run --events`` (``$OOMLESS_RECOVERY_EVENTS``). The integrations
(:class:`oomless.torch.TrainStep`, :mod:`oomless.hf`, :mod:`oomless.lightning`) call it where
they catch the OOM; :func:`install_oom_hook` (done on import of :mod:`oomless.torch` when
``oomless run --events`` started the job) calls it for an OOM that ends the process.
``$OOMLESS_MEMORY_HISTORY`` (``oomless run --memory-history N``) turns allocation stacks on at
import, with a history of at most N entries.
"""
from __future__ import annotations

import fcntl
import json
import linecache
import os
import sys
import time
import weakref
from typing import Any, Callable, Iterable

#: a summary's source-line reader: (filename, line) -> the line's text or None
Source = Callable[[Any, Any], "str | None"]

#: How many blocks and origins a summary lists.
TOP = 5

# frames that say nothing about the user's code: torch itself, the standard library, oomless
_SKIP_PARTS = (os.sep + "torch" + os.sep, os.sep + "oomless" + os.sep, "<frozen ", "<string>")
_STDLIB = os.path.dirname(os.__file__)

#: what gives the snapshot: a callable returning a snapshot dict (tests inject one on CPU)
SnapshotSource = Callable[[], "dict[str, Any] | None"]
_snapshot_source: SnapshotSource | None = None
#: storage address -> the name of the module whose forward returned it (tag_modules)
_tags: dict[int, str] = {}
#: storage address -> a weak reference to the tensor that got the tag
_tag_tensors: dict[int, weakref.ref[Any] | None] = {}
_TAGS_MAX = 1 << 16


def _user_frame(frames: Iterable[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The innermost frame in the user's code (not torch's, the standard library's or
    oomless's); else the innermost Python frame; None without frames."""
    python = [f for f in frames or () if str(f.get("filename", "")).endswith(".py")]
    for f in python:
        name = str(f.get("filename", ""))
        if not any(p in name for p in _SKIP_PARTS) and not name.startswith(_STDLIB):
            return f
    return python[0] if python else None


def _where(frame: dict[str, Any] | None,
           source: Source | None) -> tuple[str | None, str | None]:
    if frame is None:
        return None, None
    where = "%s:%s %s" % (os.path.basename(str(frame.get("filename"))), frame.get("line"),
                          frame.get("name"))
    text = source(frame.get("filename"), frame.get("line")) if source else None
    return where, (text.strip()[:60] or None) if text else None


def summarize_snapshot(snapshot: dict[str, Any], top: int = TOP, source: Source | None = None,
                       tags: dict[int, str] | None = None) -> dict[str, Any]:
    """The summary of a memory snapshot (see the module documentation for its format).

    Returns ``{"allocated_bytes", "reserved_bytes", "inactive_split_bytes", "frames", "tagged",
    "tried_bytes", "device_free_bytes", "largest": [{"bytes", "module", "where", "code"}],
    "origins": [{"module", "where", "code", "bytes", "count"}]}``: the bytes of live tensors (blocks
    ``active_allocated``), of the allocator's segments (reserved), and of the free blocks inside
    segments still in use (``inactive_split``: cached but not releasable, the fragmentation);
    ``frames`` whether allocation stacks were recorded, ``tagged`` whether a block has a module;
    the size of the allocation that failed
    and what the device still had free (the last ``oom`` of the history; null without one); the
    `top` largest live blocks, and the live bytes grouped by where they were allocated (the
    innermost frame in the user's code, ``file.py:LINE function``; null without stacks), largest
    first. `source(filename, line)` may return the source line (``code``). `tags` maps block
    addresses to the module that made the tensor (:func:`tag_modules`): ``module`` in each
    entry (null when untagged), and the origins are grouped by module and line.
    """
    allocated = reserved = split = 0
    blocks: list[tuple[int, dict[str, Any] | None, str | None]] = []
    frames = False
    for seg in snapshot.get("segments") or ():
        reserved += int(seg.get("total_size", 0))
        seg_blocks = seg.get("blocks") or ()
        in_use = any(b.get("state") != "inactive" for b in seg_blocks)
        for b in seg_blocks:
            size = int(b.get("size", 0))
            if b.get("state") == "active_allocated":
                allocated += size
                frames = frames or bool(b.get("frames"))
                module = (tags or {}).get(b.get("address"))
                blocks.append((size, _user_frame(b.get("frames")), module))
            elif b.get("state") == "inactive" and in_use:
                split += size
    tried = free = None
    for trace in snapshot.get("device_traces") or ():
        for entry in trace or ():
            if entry.get("action") == "oom":
                tried, free = entry.get("size"), entry.get("device_free")
    origins: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    largest: list[dict[str, Any]] = []
    for size, frame, module in sorted(blocks, key=lambda x: -x[0]):
        where, code = _where(frame, source)
        if len(largest) < top:
            largest.append({"bytes": size, "module": module, "where": where, "code": code})
        o = origins.setdefault((module, where), {"module": module, "where": where, "code": code,
                                                 "bytes": 0, "count": 0})
        o["bytes"] += size
        o["count"] += 1
    ranked = sorted(origins.values(),
                    key=lambda o: (-o["bytes"], o["module"] or "", o["where"] or ""))[:top]
    return {"allocated_bytes": allocated, "reserved_bytes": reserved,
            "inactive_split_bytes": split, "frames": frames,
            "tagged": any(b[2] is not None for b in blocks),
            "tried_bytes": int(tried) if tried is not None else None,
            "device_free_bytes": int(free) if free is not None else None,
            "largest": largest, "origins": ranked}


def _source_line(filename: Any, line: Any) -> str | None:
    try:
        return linecache.getline(str(filename), int(line))
    except (TypeError, ValueError, OSError):
        return None


def _forget_tags() -> None:
    _tags.clear()
    _tag_tensors.clear()


def _tag(x: Any, name: str) -> None:
    import torch
    if torch.is_tensor(x):
        address = x.untyped_storage().data_ptr()
        if address:
            if len(_tags) >= _TAGS_MAX:
                _forget_tags()
            holder = _tag_tensors.get(address)
            # the innermost module's name (its hook runs first) while the tagged tensor lives;
            # once it is freed its address is another tensor's (the allocator reuses blocks
            # within one forward), which takes the new name
            if address in _tags and holder is not None and holder() is not None:
                return
            _tags[address] = name
            try:
                _tag_tensors[address] = weakref.ref(x)
            except TypeError:
                _tag_tensors[address] = None
    elif isinstance(x, dict):
        for v in x.values():
            _tag(v, name)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _tag(v, name)


def tag_modules(model: Any) -> list[Any]:
    """Names the tensors the model's modules return, so that a snapshot at an OOM says which
    module made each (``"module": "lm_head"``): a forward hook on every submodule records the
    address of each output's storage (the address of its block in the allocator) with the
    module's qualified name; the model's own forward start forgets the previous forward's.
    Returns the hook handles (``handle.remove()`` undoes it). A Python call per module forward:
    turn it on while looking for what fills the memory."""
    handles = [model.register_forward_pre_hook(lambda module, args: _forget_tags())]
    for name, module in model.named_modules():
        label = name or type(model).__name__
        handles.append(module.register_forward_hook(
            lambda module, args, output, label=label: _tag(output, label)))
    return handles


def set_snapshot_source(fn: SnapshotSource | None) -> SnapshotSource | None:
    """Replaces ``torch.cuda.memory._snapshot`` as what :func:`record_oom` summarises (a callable
    returning a snapshot dict, or None for the default); returns the previous one."""
    global _snapshot_source
    previous, _snapshot_source = _snapshot_source, fn
    return previous


def take_snapshot() -> dict[str, Any] | None:
    """The CUDA allocator's snapshot, or None on a machine or process without CUDA."""
    if _snapshot_source is not None:
        return _snapshot_source()
    import torch
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    snapshot: dict[str, Any] = torch.cuda.memory._snapshot()
    return snapshot


def append_event(doc: dict[str, Any], path: str) -> None:
    """Appends `doc` as one JSON line to `path` with one ``write`` in append mode, under an
    exclusive ``flock`` so that ranks writing at once never interleave."""
    data = (json.dumps(doc, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, data)
    finally:
        os.close(fd)


def _rank() -> int | None:
    r = os.environ.get("RANK")
    return int(r) if r and r.isdigit() else None


def record_oom(exc: BaseException | None = None, step: int | None = None, rank: int | None = None,
               events_path: str | None = None,
               snapshot: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Appends an ``oom_snapshot`` event for an out-of-memory error to the events file.

    `events_path` defaults to ``$OOMLESS_RECOVERY_EVENTS``; `snapshot` to :func:`take_snapshot`;
    `rank` to ``$RANK``. Call it before the exception's frames are cleared. Returns the event,
    or None when there is no events file, no snapshot, or it was recorded for `exc` already.
    Never raises: a failure to record must not hide the out-of-memory error.
    """
    events_path = events_path or os.environ.get("OOMLESS_RECOVERY_EVENTS")
    if not events_path or (exc is not None and getattr(exc, "_oomless_recorded", False)):
        return None
    try:
        snapshot = snapshot if snapshot is not None else take_snapshot()
        if snapshot is None:
            return None
        doc: dict[str, Any] = {
            "time": round(time.time(), 6), "event": "oom_snapshot", "pid": os.getpid(),
            "rank": rank if rank is not None else _rank(), "step": step,
            "reason": str(exc).splitlines()[0][:300] if exc is not None and str(exc) else None}
        doc.update(summarize_snapshot(snapshot, source=_source_line, tags=_tags))
        append_event(doc, events_path)
        if exc is not None:
            setattr(exc, "_oomless_recorded", True)
        return doc
    except Exception as err:  # noqa: BLE001 - reported, never raised over the OOM
        sys.stderr.write("oomless: the out-of-memory snapshot was not recorded: %s\n" % err)
        return None


def install_oom_hook(is_oom: Callable[[BaseException], bool]) -> bool:
    """Chains ``sys.excepthook`` so that an out-of-memory error (``is_oom(exc)``) ending the
    process is recorded by :func:`record_oom` first. Installed once; returns whether it was."""
    previous = sys.excepthook
    if getattr(previous, "_oomless_oom_hook", False):
        return False

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        if exc is not None and is_oom(exc):
            record_oom(exc)
        previous(kind, exc, tb)

    setattr(hook, "_oomless_oom_hook", True)
    sys.excepthook = hook
    return True


def start_history(max_entries: int) -> bool:
    """Turns on the CUDA allocator's allocation stacks (Python frames) with a history of at
    most `max_entries` events; False (nothing done) without CUDA."""
    import torch
    if max_entries < 1 or not torch.cuda.is_available():
        return False
    torch.cuda.memory._record_memory_history("all", context="alloc", stacks="python",
                                             max_entries=int(max_entries))
    return True


def install_from_env(is_oom: Callable[[BaseException], bool]) -> None:
    """What ``oomless run`` asks of the job through its environment: the hook when it writes an
    events file, allocation stacks when ``$OOMLESS_MEMORY_HISTORY`` is a positive count."""
    if os.environ.get("OOMLESS_RECOVERY_EVENTS"):
        install_oom_hook(is_oom)
    entries = os.environ.get("OOMLESS_MEMORY_HISTORY", "")
    if entries.isdigit() and int(entries) > 0:
        try:
            start_history(int(entries))
        except Exception as err:  # noqa: BLE001 - the job runs without stacks
            sys.stderr.write("oomless: allocation stacks not recorded: %s\n" % err)
