"""One exception class per oomless error code, each carrying the library's message."""
from typing import Any, Dict, Optional


class OomlessError(Exception):
    """Base class: `code` is the oom_error number, str() the library's message; `exit_status`
    the oomless program's exit status for an error of :func:`oomless.probe`/:func:`oomless.run`
    (else None)."""

    code: Optional[int] = None
    exit_status: Optional[int] = None

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidValueError(OomlessError, ValueError):
    """OOM_EINVAL: a value or option is malformed, out of range or contradictory."""

    code = 1


class NoMemoryError(OomlessError, MemoryError):
    """OOM_ENOMEM: an allocation failed."""

    code = 2


class FileError(OomlessError, OSError):
    """OOM_EIO: a file could not be read, written or renamed."""

    code = 3


class ParseError(OomlessError, ValueError):
    """OOM_EPARSE: a file's syntax is wrong."""

    code = 4


class NotFoundError(OomlessError, LookupError):
    """OOM_ENOTFOUND: a named model preset, GPU profile or key does not exist."""

    code = 5


class NoDeviceError(OomlessError):
    """OOM_ENODEV: no GPU backend (NVML missing, init failed, no GPU)."""

    code = 6


class DoesNotFitError(OomlessError):
    """OOM_ENOFIT: nothing fits in the memory budget; `document` is the plan's report."""

    code = 7
    document: Optional[Dict[str, Any]] = None


class JobError(OomlessError):
    """OOM_EJOB: a supervised job failed."""

    code = 8


class RefusedError(OomlessError):
    """OOM_EREFUSED: an edit was refused; the file is unchanged."""

    code = 9


class UnsupportedError(OomlessError):
    """OOM_EUNSUPPORTED: a valid request this version cannot do."""

    code = 10


class InterruptedJobError(OomlessError):
    """OOM_EINTERRUPTED: stopped by a signal."""

    code = 11


class InternalError(OomlessError):
    """OOM_EINTERNAL: a bug in oomless."""

    code = 12


BY_CODE = {cls.code: cls for cls in (
    InvalidValueError, NoMemoryError, FileError, ParseError, NotFoundError, NoDeviceError,
    DoesNotFitError, JobError, RefusedError, UnsupportedError, InterruptedJobError, InternalError)}


def error_for(code: int, message: Optional[str]) -> OomlessError:
    """The exception for a library error code."""
    return BY_CODE.get(code, OomlessError)(message or "oomless error %d" % code, code)
