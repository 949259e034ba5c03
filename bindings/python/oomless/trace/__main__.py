"""python -m oomless.trace: trace a workload on the meta device (see oomless.trace).

Exit codes: 0 ok; 2 bad option or value, a workload the tracer cannot express, or torch /
transformers / peft missing (the message says what to install); 3 the calibration record could
not be saved (--calibrate).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import warnings
from types import ModuleType
from typing import Any, Callable, Sequence

from .. import calibration as store
from ..errors import FileError, OomlessError
from . import progress
from .options import add_workload_arguments

USAGE_NOTE = """Traces one or more training steps (forward, loss, backward, optimizer step) of the real
model code on PyTorch's meta device and reports the allocated peak (what
torch.cuda.max_memory_allocated would show) with its breakdown. Outside the trace: the CUDA context,
the caching allocator's reserve and fragmentation, cuBLAS/cuDNN workspaces and kernel-internal
buffers (oomless estimate adds them).

Exit codes: 0 ok, 2 bad option or value, an untraceable workload, or a missing package, 3 the
calibration record could not be saved."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="oomless trace", description=USAGE_NOTE,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_arguments(p)  # the library's table: the workload options the tracer takes
    p.add_argument("--steps", type=int, default=2, help="training steps traced (default 2)")
    p.add_argument("--module", help="pkg.mod:build_fn returning any torch.nn.Module")
    p.add_argument("--step", help="pkg.mod:step_fn(model, input_shape) -> loss (with --module)")
    p.add_argument("--input-shape", help="with --module: the input's shape, e.g. 8,3,224,224")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--calibrate", action="store_true",
                   help="trace several batch sizes, fit fixed + per sample (+ per sample^2) and "
                        "append a calibration record that 'oomless plan -- oomless trace ...' "
                        "(the same trace options, without --calibrate) plans on")
    p.add_argument("--batches", help="with --calibrate: the batch sizes (default BATCH, 2x, 4x)")
    p.add_argument("--calibration", help="with --calibrate: the calibration file (default "
                                         "$XDG_CACHE_HOME/oomless/calibration.jsonl)")
    return p


# the options that do not change the memory line (they say what to do with it)
_NOT_KEY = {"--calibrate": 0, "--json": 0, "--batches": 1, "--calibration": 1, "--batch": 1}


def command_key(argv: Sequence[str]) -> list[str]:
    """The calibration record's command: `oomless trace` and the options that define the
    workload, in the order given, without the ones that only say what to do (--calibrate, --json,
    --batch, ...). `oomless plan -- oomless trace OPTIONS` builds the same key from its argv."""
    key, i = ["oomless", "trace"], 0
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if name in _NOT_KEY:
            i += 1 + (_NOT_KEY[name] if "=" not in a else 0)
            continue
        key.append(a)
        i += 1
    return key


def fit_line(points: Sequence[tuple[int, int]]) -> tuple[float, float, float]:
    """fixed + per_sample*b + per_sample2*b^2 through (batch, bytes) points: exact for three,
    least squares beyond; a straight line when the curvature is below a byte per sample^2."""
    import numpy as np
    b = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    A = np.stack([np.ones_like(b), b, b * b], axis=1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    if abs(coef[2]) < 1.0:
        A = A[:, :2]
        line, *_ = np.linalg.lstsq(A, y, rcond=None)
        coef = [line[0], line[1], 0.0]
    return float(coef[0]), float(coef[1]), float(coef[2])


def calibrate(args: argparse.Namespace, argv: Sequence[str],
              run: ModuleType) -> tuple[dict[str, Any], str]:
    if args.module:
        raise ValueError("--calibrate works with --model (a --module's batch is its --input-shape)")
    if args.batches:
        try:
            batches = sorted({int(x) for x in args.batches.split(",")})
        except ValueError:
            raise ValueError("--batches '%s' is not a list of whole numbers such as 1,2,4"
                             % args.batches) from None
    else:
        batches = [args.batch, 2 * args.batch, 4 * args.batch]
    if len(batches) < 3 or batches[0] < 1:
        raise ValueError("--batches needs at least three different sizes of at least 1")
    points: list[tuple[int, int]] = []
    for b in batches:
        w = run.Workload(args.model, args.method, args.precision, args.optimizer, b, args.seq,
                         args.grad_accum, args.checkpointing, args.attention, args.loss,
                         args.lora_rank, args.lora_targets, args.lora_dropout, args.steps,
                         objective=args.objective, reference=args.reference,
                         packing=args.packing, tokens_per_batch=args.tokens_per_batch,
                         stack=_given_stack(args, argv),
                         optimizer_in_backward=args.optimizer_in_backward)
        traced = run.trace_hf(w)
        points.append((b, traced["memory"]["allocated_peak"]))
    fixed, per, per2 = fit_line(points)
    record = {"time": round(time.time(), 3), "gpu": "", "command": command_key(argv),
              "workload": "", "fixed_bytes": int(round(fixed)), "per_sample_bytes": int(round(per)),
              "per_sample2_bytes": per2, "recommended_batch": 0, "max_batch": batches[-1],
              "usable_bytes": 0, "traced": True, "counter": "allocated", "seq": args.seq,
              "points": [[b, v] for b, v in points], "versions": run.versions()}
    # the library's store: one line appended whole, under a lock, never through a link or into
    # a FIFO; the default place private, a relative $XDG_CACHE_HOME ignored, no $HOME created
    return record, store.save(record, args.calibration)


def _need(mod: str, why: str) -> ModuleType:
    try:
        return importlib.import_module(mod)
    except ImportError:
        # torch from PyPI is the CUDA build (gigabytes of nvidia-* packages); the tracer runs on
        # the meta device and needs only PyTorch's CPU build, from PyTorch's CPU wheel index
        pins = {"torch": "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
                "transformers": "transformers==5.23.0", "peft": "peft==0.21.2"}
        sys.stderr.write("oomless trace: %s needs the Python package '%s', which is not installed "
                         "for %s. Install it with:\n    %s -m pip install %s\n(or `make venv` in "
                         "the oomless source tree, then OOMLESS_PYTHON=build/venv/bin/python)\n"
                         % (why, mod, sys.executable, sys.executable, pins.get(mod, mod)))
        sys.exit(2)


def _load_fn(spec: str, what: str) -> Callable[..., Any]:
    mod, _, fn = spec.partition(":")
    if not mod or not fn:
        raise ValueError("%s '%s' is not of the form pkg.mod:function" % (what, spec))
    # `oomless trace` runs Python without the current folder on sys.path (a json.py there must
    # not replace the real one); a --module the user names may live there: the folder comes
    # last, after the standard library and the installed packages, which it can no longer shadow
    here = os.getcwd()
    if here not in sys.path:
        sys.path.append(here)
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as exc:
        raise ValueError("%s '%s': %s" % (what, spec, exc)) from exc


def _size(n: int) -> str:
    for unit, div in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= div:
            return "%.2f %s" % (n / div, unit)
    return "%d B" % n


def _text(res: dict[str, Any]) -> str:
    mem = res["memory"]
    total = mem["allocated_peak"] or 1
    lines = ["=" * 60, "Traced on the meta device: %s" % res["workload"]["model"], "=" * 60]
    for k in ("method", "precision", "optimizer", "batch", "seq", "grad_accum", "checkpointing",
              "attention", "loss", "objective", "reference", "packing"):
        if k in res["workload"]:
            lines.append("  %-30s: %s" % (k.replace("_", " "), res["workload"][k]))
    if "moe_experts" in res:
        lines.append("  %-30s: %s (the experts path CUDA runs)" % ("MoE experts",
                                                                  res["moe_experts"]))
    if "stack" in res:
        lines.append("  %-30s: %s (%s)" % ("stack", res["stack"]["name"], res["stack"]["version"]))
    lines.append("  %-30s: %s of %s" % ("trainable parameters", res["params"]["trainable"],
                                         res["params"]["total"]))
    lines.append("=" * 60)
    for k, label in (("weights", "weights"), ("gradients", "gradients"),
                     ("optimizer", "optimizer states"), ("activations", "activations"),
                     ("logits", "logits / loss"), ("kv_cache", "KV cache"),
                     ("temporaries", "temporaries")):
        lines.append("  %-30s: %12s %6.1f%%" % (label, _size(mem[k]), 100.0 * mem[k] / total))
    lines.append("  %-30s: %12s 100.0%%" % ("allocated peak", _size(mem["allocated_peak"])))
    lines.append("  %-30s: %s (step %s)" % ("peak phase", res["peak_phase"], res["peak_step"]))
    lines.append("=" * 60)
    lines.append("  not in the trace: CUDA context, allocator reserve/fragmentation, kernel "
                 "workspaces")
    lines.append("  " + ", ".join("%s %s" % kv for kv in res["versions"].items() if kv[1]))
    return "\n".join(lines) + "\n"


def _given_stack(args: argparse.Namespace, argv: Sequence[str]) -> str | None:
    """--stack as given, None when it was not (then the installed stack is traced: the table's
    default names what estimate models, not what this Python has)."""
    given = any(a == "--stack" or a.startswith("--stack=") for a in argv)
    return args.stack if given else None


def _show_notice(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
    """The library's notices as the oomless tool prints them; other warnings as Python does."""
    from .. import Notice
    progress.clear()
    if issubclass(category, Notice):
        sys.stderr.write("oomless: %s\n" % message)
    else:
        _SHOW_WARNING(message, category, filename, lineno, file, line)


_SHOW_WARNING = warnings.showwarning


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    warnings.showwarning = _show_notice
    if not args.json:  # a status line on a terminal (progress.py); none under --json
        progress.start(sys.stderr)
    try:
        return _main(args, argv)
    finally:
        progress.stop()


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    _need("torch", "tracing")
    from . import run
    try:
        if args.calibrate:
            if not args.model:
                raise ValueError("--calibrate needs --model")
            _need("transformers", "tracing a Hugging Face model")
            record, path = calibrate(args, argv, run)
            progress.stop()
            sys.stderr.write("oomless trace: calibration saved to %s (plan on it with: oomless "
                             "plan [OPTIONS] -- %s)\n" % (path, " ".join(record["command"])))
            if args.json:
                sys.stdout.write(json.dumps(record, indent=2) + "\n")
            else:
                sys.stdout.write("traced line: %s + %s per sample%s (allocated bytes, batches %s)\n"
                                 % (_size(record["fixed_bytes"]), _size(record["per_sample_bytes"]),
                                    " + %.0f B per sample^2" % record["per_sample2_bytes"]
                                    if record["per_sample2_bytes"] else "",
                                    ",".join(str(p[0]) for p in record["points"])))
            return 0
        if args.module:
            build = _load_fn(args.module, "--module")
            step = _load_fn(args.step, "--step") if args.step else None
            shape = None
            if args.input_shape:
                try:
                    shape = tuple(int(x) for x in args.input_shape.split(","))
                except ValueError:
                    raise ValueError("--input-shape '%s' is not a list of whole numbers such as "
                                     "8,3,224,224" % args.input_shape) from None
            res = run.document(module=build, step=step, input_shape=shape, label=args.module,
                               steps=args.steps, optimizer=args.optimizer)
        else:
            if not args.model:
                raise ValueError("--model or --module is needed")
            from .stacks import resolve
            if resolve(_given_stack(args, argv)).startswith("transformers"):
                _need("transformers", "tracing a Hugging Face model")
                if args.method == "lora":
                    _need("peft", "--method lora")
            res = run.document(args.model, method=args.method, precision=args.precision,
                               optimizer=args.optimizer, batch=args.batch, seq=args.seq,
                               grad_accum=args.grad_accum, checkpointing=args.checkpointing,
                               attention=args.attention, loss=args.loss,
                               lora_rank=args.lora_rank, lora_targets=args.lora_targets,
                               lora_dropout=args.lora_dropout, steps=args.steps,
                               objective=args.objective, reference=args.reference,
                               packing=args.packing, tokens_per_batch=args.tokens_per_batch,
                               stack=_given_stack(args, argv),
                               optimizer_in_backward=args.optimizer_in_backward)
    except FileError as exc:  # the calibration record could not be saved
        progress.stop()
        sys.stderr.write("oomless trace: %s\n" % exc)
        return 3
    except (ValueError, OSError, OomlessError, run.TraceError) as exc:
        progress.stop()
        sys.stderr.write("oomless trace: %s\n" % exc)
        return 2
    progress.stop()
    if args.json:
        sys.stdout.write(json.dumps(res, indent=2, sort_keys=False) + "\n")
    else:
        sys.stdout.write(_text(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
