"""Reading an oomless plan document: the pieces the framework helpers share."""
from typing import Any, Dict, Mapping, Optional

from ._vocab import option

# the precisions of oomless.h's oom_precision, from the library's option table
PRECISIONS = tuple(v["name"] for v in option("precision")["values"])

# sharding backends the helpers can express a ZeRO/offload plan with
BACKENDS = ("deepspeed", "fsdp")


def plan_of(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """The "plan" object of a plan document (the document itself when it is that object)."""
    plan = doc.get("plan", doc)
    if plan is None:
        raise ValueError("the plan document has no plan (nothing fits): see its 'smallest' and "
                         "'suggestions'")
    for key in ("batch_size", "grad_accum"):
        if key not in plan:
            raise KeyError("plan has no %r: pass the document oomless.plan() returns" % key)
    return plan


def exact_precision(doc: Mapping[str, Any]) -> str:
    """The plan's exact precision: ``amp-bf16`` (autocast, fp32 weights) versus ``bf16`` (16-bit
    weights), ``amp-fp16``, ``fp16``, ``fp32``, ``int8``, ``4bit``, or ``auto`` (a measured
    line: unchanged). Read from ``plan.exact_precision``; a document of a library older than
    that key has it in ``estimate_precision``; a plan object written by hand names it in
    ``precision``."""
    plan = plan_of(doc)
    value = plan.get("exact_precision") or doc.get("estimate_precision") or plan.get("precision")
    if value is None:
        return "auto"
    if value not in PRECISIONS:
        raise ValueError("unknown precision %r in the plan" % (value,))
    return value


def is_sharded(doc: Mapping[str, Any]) -> bool:
    """Whether the plan shards (ZeRO 1-3) or offloads to the CPU."""
    plan = plan_of(doc)
    return plan.get("sharding", "none") != "none" or plan.get("offload", "none") != "none"


def deepspeed_config(doc: Mapping[str, Any]) -> Dict[str, Any]:
    """The DeepSpeed config of a sharded or offloaded plan (what ``--format deepspeed`` prints;
    the library puts it in the document as ``deepspeed``)."""
    config: Optional[Dict[str, Any]] = doc.get("deepspeed") if "plan" in doc else None
    if not config:
        raise KeyError("the plan shards or offloads but the document has no 'deepspeed' config: "
                       "pass the whole document of oomless.plan() or `oomless plan --json`")
    return dict(config)


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError("backend %r is not one of %s" % (backend, ", ".join(BACKENDS)))
    return backend
