"""The library's option and format tables, read through ctypes: the one place the package learns
an option's values, its default, its help and the commands that take it, the output formats,
and an optimizer's name in transformers' TrainingArguments. Nothing in the package writes these
words itself (``tests/python/test_vocabulary.py`` checks it)."""
import ctypes
from typing import Any, Dict, List, Optional, Tuple

from . import _native as _n


def _text(b: Optional[bytes]) -> Optional[str]:
    return None if b is None else b.decode("utf-8")


def _help(opt: Any) -> str:
    """The help line as the CLI prints it: the help and its default."""
    out = ctypes.c_void_p()
    if _n.oom_option_help(ctypes.byref(out), opt) != 0 or not out.value:
        return _text(opt.contents.help) or ""
    try:
        return ctypes.string_at(out.value).decode("utf-8")
    finally:
        _n.oom_free(out)


def _command_names(mask: int) -> List[str]:
    return [name for name, bit in _n.COMMANDS.items() if mask & bit]


def _bit(command: Optional[str]) -> int:
    if command is None:
        return ~0
    if command not in _n.COMMANDS:
        raise ValueError("command %r is not one of %s" % (command, ", ".join(_n.COMMANDS)))
    return _n.COMMANDS[command]


def _value(v: Any) -> Dict[str, Any]:
    new = v.version >= 2  # the library's tables are its own version's; an older one lacks them
    return {"name": _text(v.name), "help": _text(v.help), "form": bool(v.form),
            "commands": _command_names(v.commands), "trainer": _text(v.trainer),
            "trainer_args": _text(v.trainer_args),
            "versions": _text(v.versions) if new else None, "traced": bool(new and v.traced)}


def _option(ptr: Any, command: Optional[str]) -> Dict[str, Any]:
    o = ptr.contents
    bit = _bit(command)
    values = [_value(o.values[i][0]) for i in range(o.n_values) if o.values[i][0].commands & bit]
    return {"name": _text(o.name), "metavar": _text(o.metavar), "help": _text(o.help),
            "help_line": _help(ptr), "default": _text(o.default_value),
            "commands": _command_names(o.commands), "list": bool(o.list), "values": values}


def _tables() -> List[Any]:
    out = []
    for table in (_n.oom_workload_options, _n.oom_plan_option_table):
        count = ctypes.c_size_t()
        t = table(ctypes.byref(count))
        out += [t[i] for i in range(count.value)]
    return out


def options(command: Optional[str] = None) -> List[Dict[str, Any]]:
    """Every option of the workload and plan tables that `command` ("estimate", "plan", "table",
    "probe", "trace", ...; None: any) takes, as dicts: name, metavar, help, help_line (with the
    default, as the CLI prints it), default (None when the library works it out), commands,
    list (a comma-separated list of values), values (those `command` takes: name, help, form
    (the name is a pattern, "every:N"), commands, trainer, trainer_args, versions (of the code a
    stack models, else None), traced (whether oomless trace runs that code))."""
    bit = _bit(command)
    return [_option(ptr, command) for ptr in _tables() if ptr.contents.commands & bit]


def option(name: str, command: Optional[str] = None) -> Dict[str, Any]:
    """One option by name ('_' may stand for '-'); KeyError when there is none."""
    ptr = _n.oom_option_lookup(name.encode("utf-8"))
    if not ptr:
        raise KeyError("no option %r" % name)
    return _option(ptr, command)


def plan_formats(command: Optional[str] = "plan") -> List[Dict[str, Any]]:
    """The output formats of `command` ("plan" or "table"; None: both): name, help, framework,
    versions (of the framework whose keys it follows, None when not pinned), commands."""
    bit = _bit(command)
    count = ctypes.c_size_t()
    t = _n.oom_plan_formats(ctypes.byref(count))
    return [{"name": _text(f.name), "help": _text(f.help), "framework": _text(f.framework),
             "versions": _text(f.versions), "commands": _command_names(f.commands),
             "package": _text(f.package)}
            for f in (t[i][0] for i in range(count.value)) if f.commands & bit]


def installed_version(package: Optional[str]) -> Optional[str]:
    """The version of the Python distribution `package` this interpreter can import, or None
    (no package, not installed)."""
    if not package:
        return None
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def format_version(name: str, version: Optional[str] = None) -> Optional[str]:
    """The version of the format's framework whose keys the library writes for `version`
    (``oom_plan_format_pick``): the newest it knows that is not newer; None: the latest. None
    for a format that follows no framework. ValueError for a version it refuses."""
    out = ctypes.c_char_p()
    if _n.oom_plan_format_pick(ctypes.byref(out), name.encode("utf-8"),
                               None if version is None else str(version).encode("utf-8")) != 0:
        raise ValueError(_n.oom_last_message().decode("utf-8", "replace"))
    return _text(out.value)


def trainer_optimizer(name: str) -> Tuple[Optional[str], Optional[str]]:
    """(TrainingArguments.optim, TrainingArguments.optim_args) for an oomless optimizer name, as
    ``plan --format args`` writes them; (None, None) for one without (none, or an unknown
    name)."""
    for v in option("optimizer")["values"]:
        if v["name"] == name:
            return v["trainer"], v["trainer_args"]
    return None, None


def form_matches(form: str, text: str) -> bool:
    """Whether `text` is an instance of a form: its N stands for a whole number of at least 1
    ("every:N+offload": "every:2+offload"); a form with other capitals ("M1,M2", "SIZE") is any
    text the library then reads."""
    if any(c.isupper() and c != "N" for c in form):
        return bool(text)
    i = j = 0
    while i < len(form):
        if form[i] == "N":
            k = j
            while k < len(text) and text[k].isdigit():
                k += 1
            if k == j or text[j] == "0":
                return False
            i, j = i + 1, k
            continue
        if j >= len(text) or form[i] != text[j]:
            return False
        i, j = i + 1, j + 1
    return j == len(text)


def resolved(**workload: Any) -> Dict[str, str]:
    """The workload's options as the library resolves them: each given option set on a new
    workload (no model needed), then every option read back, "auto" values resolved as the
    estimate resolves them (precision, reference)."""
    handle = ctypes.c_void_p()
    if _n.oom_workload_create(ctypes.byref(handle)) != 0:
        raise MemoryError("oomless: cannot create a workload")
    try:
        for key, value in workload.items():
            if value is None:
                continue
            if _n.oom_workload_set(handle, key.encode(), str(value).encode()) != 0:
                raise ValueError(_n.oom_last_message().decode("utf-8", "replace"))
        out = {}
        for ptr in _tables()[:_workload_count()]:
            name = ptr.contents.name
            text = ctypes.c_void_p()
            if _n.oom_workload_get(ctypes.byref(text), handle, name) == 0 and text.value:
                try:
                    out[name.decode()] = ctypes.string_at(text.value).decode("utf-8")
                finally:
                    _n.oom_free(text)
        return out
    finally:
        _n.oom_workload_free(handle)


def _workload_count() -> int:
    count = ctypes.c_size_t()
    _n.oom_workload_options(ctypes.byref(count))
    return count.value
