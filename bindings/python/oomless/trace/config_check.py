"""A model config checked before the tracer builds anything from it.

The file is read by liboomless first, through the binding, exactly as ``oomless estimate --model``
reads it, so that the rules live in one place (lib/model, lib/core): a regular file (a FIFO or a
device is refused, never opened) of at most 64 MiB, JSON nesting at most 32 levels (json-c's
limit), a leading UTF-8 byte order mark skipped, every width, count and layer number it reads a
whole number from 0 to 2^40 (not NaN, not 2048.5, not 1e18). A ``model_type`` the estimator does
not model is no reason to refuse: the tracer runs transformers' own code for it.

What only the tracer reads is checked here: ``architectures`` names the transformers class the
model is built with, so each entry must be a string, and one that transformers has must be a model
class (``AutoModel`` is a factory, not a model).

Every refusal is a :class:`~oomless.trace.run.TraceError` naming the file, the field and the value
(``python -m oomless.trace`` exits 2 with it), never a traceback.
"""
from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from .limits import TraceError


def _error(message: str) -> TraceError:
    from .run import TraceError
    return TraceError(message)


def read_config(path: str) -> dict[str, Any]:
    """The config.json at `path` as a dict, once liboomless has read it as the estimator does."""
    from .. import OomlessError, UnsupportedError, Workload
    try:
        Workload(model=path).close()
    except UnsupportedError:
        pass  # a family, multimodal tower or quantization the estimator does not model
    except OomlessError as exc:
        raise _error(str(exc)) from None
    try:
        with open(path, encoding="utf-8-sig") as f:  # -sig: a byte order mark is skipped
            cfg = json.load(f)
    except (OSError, ValueError) as exc:
        raise _error("model config '%s': %s" % (path, exc)) from None
    if not isinstance(cfg, dict):
        raise _error("model config '%s' is not a JSON object" % path)
    check_architectures(cfg, path)
    return cfg


def check_architectures(cfg: dict[str, Any], path: str = "the model config") -> None:
    """Refuses an ``architectures`` that is not a list of strings, or whose entry transformers
    has as something other than a model class."""
    archs = cfg.get("architectures")
    if archs is None:
        return
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise _error("model config '%s': architectures %s is not a list of class names (such as "
                     "[\"LlamaForCausalLM\"])" % (path, json.dumps(archs)[:200]))
    for arch in archs:
        found, cls = _lookup(arch)
        if found and cls is None:
            raise _error("model config '%s': architectures entry '%s' is not a transformers model "
                         "class (a class such as LlamaForCausalLM, not a factory such as "
                         "AutoModel)" % (path, arch))


def _lookup(arch: str) -> tuple[bool, type[Any] | None]:
    """(whether transformers has the name `arch`, its model class or None)"""
    import transformers
    if not arch or arch.startswith("_"):
        return False, None
    try:
        cls = getattr(transformers, arch)
    except AttributeError:
        return False, None
    except Exception:  # a lazy import of an optional dependency failed: a name it has
        return True, None
    if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
        return True, cls
    return True, None


def model_class(arch: str) -> type[Any] | None:
    """The transformers model class named `arch`, or None when transformers has no such model
    class (the tracer then builds AutoModelForCausalLM)."""
    return _lookup(arch)[1]


def model_class_of(cfg: dict[str, Any]) -> type[Any] | None:
    """The class the tracer builds the config's model with: the first ``architectures`` entry
    that is a transformers model class, None for AutoModelForCausalLM (after
    :func:`check_architectures`)."""
    check_architectures(cfg)
    return next(filter(None, map(model_class, cfg.get("architectures") or [])), None)


def reads_values(exc: BaseException) -> bool:
    """Whether a RuntimeError is the meta device's (the model's code read a tensor's value), not
    the config's."""
    text = str(exc)
    # torch.nonzero's meta function refuses ("a correct data-independent implementation does
    # not exist"): shapes that depend on values, as transformers 4's per-expert loop has
    return ("meta tensors" in text or "data-dependent" in text or
            "data-independent implementation" in text)


@contextlib.contextmanager
def refused_by_transformers(cls: type[Any] | None) -> Iterator[None]:
    """What transformers raises while it builds the model from the config (the config is all it
    reads then) as one TraceError naming its words, e.g. a field of the wrong type: "Validation
    error for field 'hidden_size'"."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, RuntimeError) and reads_values(exc):
            raise
        raise _error("transformers cannot build %s from the model config (%s: %s)"
                     % (cls.__name__ if cls else "a causal LM", type(exc).__name__,
                        " ".join(str(exc).split())[:500])) from exc
