"""oomless: fit deep-learning training and inference jobs to the GPU memory available.

A thin ctypes binding of liboomless. Every function returns the same dict the command line's
``--json`` prints (the library builds the document for both), with the same numbers::

    import oomless
    oomless.gpus()["budget"]["usable_bytes"]

Errors raise a subclass of :class:`oomless.OomlessError`, one per library error code, with
the library's message.
"""
import ctypes
import json

from . import _native as _n
from .errors import (BY_CODE, DoesNotFitError, FileError, InternalError, InterruptedJobError,
                     InvalidValueError, JobError, NoDeviceError, NoMemoryError, NotFoundError,
                     OomlessError, ParseError, RefusedError, UnsupportedError)

__all__ = [
    "gpus", "catalog", "parse_size", "version", "OomlessError", "InvalidValueError",
    "NoMemoryError", "FileError", "ParseError", "NotFoundError", "NoDeviceError",
    "DoesNotFitError", "JobError", "RefusedError", "UnsupportedError", "InterruptedJobError",
    "InternalError",
]


def _b(value):
    if value is None:
        return None
    return str(value).encode("utf-8")


def _check(code):
    if code != 0:
        message = _n.oom_last_message().decode("utf-8", "replace")
        raise BY_CODE.get(code, OomlessError)(message, code)


def _take_json(ptr):
    """Decodes and frees a library-allocated JSON string."""
    try:
        return json.loads(ctypes.string_at(ptr.value).decode("utf-8"))
    finally:
        _n.oom_free(ptr)


def version():
    """The library's version string."""
    return _n.oom_version().decode()


def parse_size(text, bare_unit="GiB"):
    """Bytes for a size such as "20.5", "16GiB" or "512MiB"; bare numbers in `bare_unit`."""
    units = {"B": _n.OOM_UNIT_BYTES, "MiB": _n.OOM_UNIT_MIB, "GiB": _n.OOM_UNIT_GIB}
    if bare_unit not in units:
        raise InvalidValueError("bare_unit %r is not one of B, MiB, GiB" % (bare_unit,), 1)
    out = ctypes.c_uint64()
    _check(_n.oom_parse_size(ctypes.byref(out), _b(text), units[bare_unit]))
    return out.value


class _Config:
    """Owns an oom_config for the duration of a call."""

    def __init__(self, path):
        self.ptr = ctypes.c_void_p()
        _check(_n.oom_config_load(ctypes.byref(self.ptr), _b(path)))

    def close(self):
        if self.ptr:
            _n.oom_config_free(self.ptr)
            self.ptr = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def gpus(gpu=None, vram=None, vram_safety_margin=None, config=None, all=False):
    """The GPUs and the budget, as ``oomless gpus --json`` prints them.

    `gpu` is "auto", an index or a profile ("a100-80gb"); `vram` and `vram_safety_margin`
    take the CLI's sizes ("20.5", "16GiB", "512", "10%"); `config` a config file path;
    `all` ignores CUDA_VISIBLE_DEVICES.
    """
    with _Config(config) as cfg:
        req = _n.TargetRequest(_b(gpu), _b(vram), _b(vram_safety_margin), cfg.ptr)
        out = ctypes.c_void_p()
        _check(_n.oom_gpus_report(ctypes.byref(out), ctypes.byref(req),
                                  _n.OOM_SAMPLE_ALL_GPUS if all else 0))
        return _take_json(out)


def catalog(config=None):
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
