"""Which training stack the tracer runs: the one asked for (``--stack``), or the one installed in
the Python that runs the tracer.

The stacks, their versions and whether their code runs on the meta device are the library's
(the workload option ``stack``, ``oomless._vocab``); what is written here is how each one is
recognised among the installed packages and what it needs. Each stack lives in its own virtual
environment (``make venv-STACK``, ``bindings/python/requirements-stack-STACK.txt``): transformers
4 and 5 cannot share one, and torchtune 0.6.1 imports only beside torchao 0.15.0.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._vocab import option

if TYPE_CHECKING:
    from .limits import TraceError

# the packages each traced stack imports, the first one naming the stack; the make target and the
# requirements file that install them
NEEDS = {
    "transformers": ("transformers", "peft"),
    "transformers-4": ("transformers", "peft"),
    "torchtune": ("torchtune", "torchao"),
    "torchtitan": ("torchtitan",),
}
VENV = {"transformers": "venv", "transformers-4": "venv-transformers4",
        "torchtune": "venv-torchtune", "torchtitan": "venv-torchtitan"}


def _error(message: str) -> TraceError:
    from .run import TraceError
    return TraceError(message)


def version_of(module: str) -> str | None:
    """The installed version of a package (its distribution's, so that a folder of that name on
    sys.path, such as bench/trace/torchtune, is not taken for it), None when it is not
    installed or does not import."""
    from importlib import metadata
    try:
        version = metadata.version(module)
        importlib.import_module(module)
    except Exception:  # not installed, or it fails to import (a torchao that torchtune refuses)
        return None
    return version


def table() -> dict[str, dict[str, Any]]:
    """The library's stacks by name: help, versions (what each models), traced, commands."""
    return {v["name"]: v for v in option("stack")["values"]}


def detect() -> str:
    """The stack installed here: transformers by its major version, else torchtune, else
    torchtitan; TraceError when none is."""
    tf = version_of("transformers")
    if tf is not None:
        return "transformers-4" if tf.split(".")[0] == "4" else "transformers"
    for name in ("torchtune", "torchtitan"):
        if version_of(name) is not None:
            return name
    raise _error("no training stack is installed for this Python (transformers, torchtune or "
                 "torchtitan): `make venv` (or venv-torchtune, venv-torchtitan, "
                 "venv-transformers4), then OOMLESS_PYTHON=build/venv[-STACK]/bin/python")


def resolve(stack: str | None) -> str:
    """The stack to trace: `stack` checked against the library's table and the installed
    packages, or detected when None."""
    if stack is None:
        return detect()
    known = table()
    if stack not in known:
        raise _error("stack '%s' is not one of: %s" % (stack, ", ".join(known)))
    if not known[stack]["traced"] or "trace" not in known[stack]["commands"]:
        raise _error("stack '%s' (%s) cannot be traced: its kernels run only on a GPU; `oomless "
                     "estimate --stack %s` models it from its source (docs/stacks.md)"
                     % (stack, known[stack]["versions"], stack))
    missing = [m for m in NEEDS[stack] if version_of(m) is None]
    tf = version_of("transformers")
    wrong = stack.startswith("transformers") and tf is not None and (
        (tf.split(".")[0] == "4") != (stack == "transformers-4"))
    if missing or wrong:
        raise _error("stack '%s' needs %s installed for this Python%s: `make %s`, then "
                     "OOMLESS_PYTHON=build/%s/bin/python (pinned in bindings/python/%s)"
                     % (stack, ", ".join(NEEDS[stack]),
                        " (transformers %s is)" % tf if wrong else "", VENV[stack], VENV[stack],
                        requirements(stack)))
    return stack


def requirements(stack: str) -> str:
    """The pinned requirements file of a stack's virtual environment."""
    if stack == "transformers":
        return "requirements-test.txt"
    return "requirements-stack-%s.txt" % stack.replace("transformers-4", "transformers4")


def describe(stack: str) -> dict[str, Any]:
    """What a trace document says of its stack: name, version (the packages that ran), traced,
    and the versions the library's table says the stack models."""
    mods = NEEDS[stack] + (("accelerate",) if stack == "transformers-4" else ())
    ran = ", ".join("%s %s" % (m, version_of(m)) for m in mods if version_of(m))
    return {"name": stack, "version": ran, "traced": True, "models": table()[stack]["versions"]}
