"""ctypes declarations of liboomless: every function used gets explicit argtypes and restype.

The library is found, in order: $OOMLESS_LIBRARY; liboomless.so next to this package or bundled
in it by the wheel (oomless/lib/liboomless.so.1); the project's build directory (for a source
checkout); an installed tree (<prefix>/lib); the system's library path.
"""
import ctypes
import ctypes.util
import os
from typing import Any, Iterator, Optional

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates() -> Iterator[str]:
    env = os.environ.get("OOMLESS_LIBRARY")
    if env:
        yield env
        return
    for name in ("liboomless.so", "liboomless.so.1", os.path.join("lib", "liboomless.so.1")):
        yield os.path.join(_HERE, name)
    root = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
    yield os.path.join(root, "build", "liboomless.so")
    # an installed tree: <prefix>/lib/oomless/python/oomless -> <prefix>/lib/liboomless.so
    yield os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(_HERE))), "liboomless.so.1")
    found = ctypes.util.find_library("oomless")
    if found:
        yield found


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append("%s: not found" % path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as exc:
            errors.append(str(exc))
    raise ImportError("oomless: cannot load liboomless (set OOMLESS_LIBRARY): " + "; ".join(errors))


# The major version of liboomless these declarations were written for: another major may have
# changed any struct or function (the ABI promise of oomless.h holds within one major version).
MAJOR = 1


def _check_version(library: ctypes.CDLL) -> ctypes.CDLL:
    """ImportError unless `library` is of major version MAJOR (before anything else is declared:
    a library of another major may lack the functions)."""
    try:
        number = library.oom_version_number
    except AttributeError:
        number = None
    if number is None:
        raise ImportError("oomless: the liboomless found is older than 1.0.0 (it has no "
                          "oom_version_number); this package needs major version %d" % MAJOR)
    number.restype = ctypes.c_uint
    number.argtypes = []
    found = number()
    library.oom_version.restype = ctypes.c_char_p
    if found // 10000 != MAJOR:
        raise ImportError("oomless: the liboomless found is version %s (%d.%d.%d); this package "
                          "was written for major version %d (set OOMLESS_LIBRARY to a liboomless "
                          "%d.x)" % (library.oom_version().decode(), found // 10000,
                                     found // 100 % 100, found % 100, MAJOR, MAJOR))
    return library


lib = _check_version(_load())

c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_void_p = ctypes.c_void_p
c_size_t = ctypes.c_size_t
c_uint64 = ctypes.c_uint64
POINTER = ctypes.POINTER


class Versioned(ctypes.Structure):
    """A public struct of oomless.h whose first member is `version`: a new one is made at the
    version these declarations were written for (what OOM_<NAME>_INIT does in C); the other
    arguments fill the fields after it, in order. `c_name` is the struct's name in oomless.h."""

    c_name: Optional[str] = None
    c_version = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(self.c_version, *args, **kwargs)


class TargetRequest(Versioned):
    """oom_target_request: what the user asked for (NULL fields = default)."""

    c_name = "oom_target_request"
    _fields_ = [("version", c_uint), ("gpu", c_char_p), ("vram", c_char_p), ("margin", c_char_p),
                ("config", c_void_p)]


def _declare(name: str, restype: Any, *argtypes: Any) -> Any:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


NOTICE_FN = ctypes.CFUNCTYPE(None, c_char_p, c_void_p)
oom_set_notice_handler = _declare("oom_set_notice_handler", None, NOTICE_FN, c_void_p)
oom_version = _declare("oom_version", c_char_p)
oom_struct_size = _declare("oom_struct_size", c_size_t, c_char_p)
oom_strerror = _declare("oom_strerror", c_char_p, c_int)
oom_last_message = _declare("oom_last_message", c_char_p)
oom_last_error = _declare("oom_last_error", c_int)
oom_free = _declare("oom_free", None, c_void_p)
oom_parse_size = _declare("oom_parse_size", c_int, POINTER(c_uint64), c_char_p, c_int)
oom_parse_margin = _declare("oom_parse_margin", c_int, POINTER(c_uint64), c_char_p, c_uint64)
oom_config_load = _declare("oom_config_load", c_int, POINTER(c_void_p), c_char_p)
oom_config_free = _declare("oom_config_free", None, c_void_p)
oom_catalog_load = _declare("oom_catalog_load", c_int, POINTER(c_void_p), c_void_p)
oom_catalog_free = _declare("oom_catalog_free", None, c_void_p)
oom_catalog_to_json = _declare("oom_catalog_to_json", c_int, POINTER(c_void_p), c_void_p)
oom_gpus_report = _declare("oom_gpus_report", c_int, POINTER(c_void_p), POINTER(TargetRequest), c_uint)

OOM_UNIT_BYTES, OOM_UNIT_MIB, OOM_UNIT_GIB = 0, 1, 2
OOM_SAMPLE_PROCESSES, OOM_SAMPLE_ALL_GPUS = 1, 2


class Budget(Versioned):
    """oom_budget."""

    c_name = "oom_budget"
    _fields_ = [("version", c_uint), ("target_bytes", c_uint64), ("safety_margin_bytes", c_uint64),
                ("usable_bytes", c_uint64)]


class Estimate(Versioned):
    """oom_estimate (field order and types as in oomless.h)."""

    c_name = "oom_estimate"
    # (mixed ctypes types: mypy infers too narrow an element type for the joined lists)
    _fields_ = [("version", c_uint)] + [  # type: ignore[assignment]
        (name, c_uint64) for name in (
        "weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "temporaries",
        "overhead", "allocated_peak", "reserved_peak", "device_peak")] + [
        ("peak_phase", c_int), ("params_total", c_uint64), ("params_trainable", c_uint64),
        ("flops_per_token", ctypes.c_double), ("flops_per_step", ctypes.c_double),
        ("tokens_per_step", c_uint64)]


class OptionValue(Versioned):
    """oom_option_value: one value of an option (name or form, help, the commands that take it,
    the Trainer's name for it; version 2: the versions of the code it models, whether traced)."""

    c_name = "oom_option_value"
    c_version = 2
    _fields_ = [("version", c_uint), ("name", c_char_p), ("help", c_char_p), ("commands", c_uint),
                ("form", c_int), ("trainer", c_char_p), ("trainer_args", c_char_p),
                ("versions", c_char_p), ("traced", c_int)]


class Option(Versioned):
    """oom_option: one option (name, metavar, help; version 2: its values, default, commands);
    the library's tables are arrays of pointers to them."""

    c_name = "oom_option"
    c_version = 2
    _fields_ = [("version", c_uint), ("name", c_char_p), ("metavar", c_char_p), ("help", c_char_p),
                ("values", POINTER(POINTER(OptionValue))), ("n_values", c_size_t),
                ("default_value", c_char_p), ("commands", c_uint), ("list", c_int)]


class PlanFormatInfo(Versioned):
    """oom_plan_format_info: one output format of plan or table (version 2: the Python
    distribution whose version its `versions` count)."""

    c_name = "oom_plan_format_info"
    c_version = 2
    _fields_ = [("version", c_uint), ("name", c_char_p), ("help", c_char_p),
                ("framework", c_char_p), ("versions", c_char_p), ("commands", c_uint),
                ("package", c_char_p)]


class ProbeFit(Versioned):
    """oom_probe_fit: fixed + per_sample x batch (+ per_sample2 x batch^2)."""

    c_name = "oom_probe_fit"
    _fields_ = [("version", c_uint), ("valid", c_int), ("quadratic", c_int),
                ("fixed_bytes", ctypes.c_double), ("per_sample_bytes", ctypes.c_double),
                ("per_sample2_bytes", ctypes.c_double)]


class Calibration(Versioned):
    """oom_calibration: one record of the calibration store (version 2: its further members as
    a JSON object's text in `extra`)."""

    c_name = "oom_calibration"
    c_version = 2
    _fields_ = [("version", c_uint), ("gpu", c_char_p), ("command", c_char_p),
                ("workload", c_char_p), ("fit", ProbeFit), ("recommended_batch", c_int),
                ("max_batch", c_int), ("usable_bytes", c_uint64), ("time", ctypes.c_double),
                ("traced", c_int), ("extra", c_char_p)]


# every ctypes declaration of a public struct, for the size check against the library
STRUCTS = (TargetRequest, Budget, Estimate, OptionValue, Option, PlanFormatInfo, ProbeFit,
           Calibration)

# the OOM_COMMAND_* bits of oomless.h
COMMANDS = {"estimate": 1 << 0, "plan": 1 << 1, "table": 1 << 2, "probe": 1 << 3,
            "trace": 1 << 4, "gpus": 1 << 5, "run": 1 << 6, "watch": 1 << 7}


oom_workload_create = _declare("oom_workload_create", c_int, POINTER(c_void_p))
oom_workload_free = _declare("oom_workload_free", None, c_void_p)
oom_workload_set = _declare("oom_workload_set", c_int, c_void_p, c_char_p, c_char_p)
oom_workload_options = _declare("oom_workload_options", POINTER(POINTER(Option)),
                                POINTER(c_size_t))
oom_estimate_budget = _declare("oom_estimate_budget", c_int, POINTER(Budget), POINTER(c_int),
                               POINTER(c_void_p), c_void_p, POINTER(TargetRequest))
oom_estimate_run = _declare("oom_estimate_run", c_int, POINTER(Estimate), c_void_p)
oom_estimate_to_json_budget = _declare("oom_estimate_to_json_budget", c_int, POINTER(c_void_p),
                                       c_void_p, POINTER(Estimate), POINTER(Budget))
oom_model_presets_json = _declare("oom_model_presets_json", c_int, POINTER(c_void_p))
oom_model_resolve = _declare("oom_model_resolve", c_int, POINTER(c_void_p), c_char_p)

oom_plan_json = _declare("oom_plan_json", c_int, POINTER(c_void_p), POINTER(c_char_p),
                         POINTER(c_char_p), c_size_t)
oom_plan_option_table = _declare("oom_plan_option_table", POINTER(POINTER(Option)),
                                 POINTER(c_size_t))
oom_option_lookup = _declare("oom_option_lookup", POINTER(Option), c_char_p)
oom_option_help = _declare("oom_option_help", c_int, POINTER(c_void_p), POINTER(Option))
oom_plan_formats = _declare("oom_plan_formats", POINTER(POINTER(PlanFormatInfo)),
                            POINTER(c_size_t))
oom_plan_format_pick = _declare("oom_plan_format_pick", c_int, POINTER(c_char_p), c_char_p,
                                c_char_p)
oom_plan_options_format = _declare("oom_plan_options_format", c_int, POINTER(c_void_p),
                                   POINTER(c_char_p), POINTER(c_char_p), POINTER(c_char_p),
                                   c_size_t, c_char_p, c_char_p)
oom_workload_get = _declare("oom_workload_get", c_int, POINTER(c_void_p), c_void_p, c_char_p)

oom_calibration_default_path = _declare("oom_calibration_default_path", c_int, POINTER(c_void_p))
oom_calibration_command_key = _declare("oom_calibration_command_key", c_int, POINTER(c_void_p),
                                       POINTER(c_char_p))
oom_calibration_save = _declare("oom_calibration_save", c_int, c_char_p, POINTER(Calibration))
oom_calibration_lookup = _declare("oom_calibration_lookup", c_int,
                                  POINTER(POINTER(Calibration)), c_char_p, c_char_p, c_char_p,
                                  c_char_p)
oom_calibration_free = _declare("oom_calibration_free", None, POINTER(Calibration))

oom_gpu_open = _declare("oom_gpu_open", c_int, POINTER(c_void_p))
oom_gpu_close = _declare("oom_gpu_close", None, c_void_p)
oom_monitor_create = _declare("oom_monitor_create", c_int, POINTER(c_void_p), c_void_p)
oom_monitor_free = _declare("oom_monitor_free", None, c_void_p)
oom_monitor_set_margin = _declare("oom_monitor_set_margin", c_int, c_void_p, c_char_p)
oom_monitor_set_plan_peak = _declare("oom_monitor_set_plan_peak", None, c_void_p, c_uint64)
oom_monitor_sample = _declare("oom_monitor_sample", c_int, c_void_p)
oom_monitor_snapshot = _declare("oom_monitor_snapshot", c_void_p, c_void_p)
oom_watch_to_json = _declare("oom_watch_to_json", c_int, POINTER(c_void_p), c_void_p, c_int)

# OOM_UNKNOWN of oomless.h: a quantity not known
OOM_UNKNOWN = 0xFFFFFFFFFFFFFFFF
