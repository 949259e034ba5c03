"""The traced steps: training micro-batches and optimizer steps, inference, and the report."""
from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import torch

from .emulate import CudaEmulation
from .tracker import Tracker
from .workload import Workload, _sample, _unpacked_batches

if TYPE_CHECKING:
    from .loss import LossRegion


def _train_traced(w: Workload, model: Any, tracker: Tracker, emu: CudaEmulation,
                  trainable: Sequence[torch.Tensor], opt: Any, amp: str | None,
                  loss: Callable[..., torch.Tensor],
                  sample: Callable[[], torch.Tensor] | None = None,
                  region: LossRegion | None = None, loss_tag: str | None = None,
                  packed: tuple[int, int] | None = None) -> dict[str, Any]:
    """The training steps of a policy alone, traced: each forward samples its batch (`sample`,
    whose result `loss` takes; none when `loss` makes its own), computes `loss` under the
    emulated autocast of an amp precision and scales it for accumulation; `region` (a
    LossRegion) is closed after the steps; `packed` as for _unpacked_batches. Returns the
    trace's report."""
    try:
        with _unpacked_batches(packed, flash=w.attention == "flash"), tracker, emu:
            def forward() -> torch.Tensor:
                ids = sample() if sample else None
                emu.autocast = amp is not None
                value = loss(ids) if sample else loss()
                emu.autocast = False
                emu.end_region()
                return value / w.grad_accum

            step_start = _train(tracker, forward, trainable, opt, w.steps, w.grad_accum,
                                loss_tag=loss_tag)
    finally:
        if region is not None:
            region.close()
    return _finish(tracker, None, model, w, steady_from=step_start[-1] if w.steps > 1 else 0)


def _train(tracker: Tracker, forward: Callable[[], torch.Tensor], trainable: Sequence[torch.Tensor],
           opt: Any, steps: int, grad_accum: int, loss_tag: str | None = None) -> list[int]:
    """`steps` optimizer steps of `grad_accum` micro-batches each, the phases marked for the
    tracker; `forward()` returns the micro-batch's loss. The clock at each step's start.

    Python's cyclic garbage collector runs at each phase's start and nowhere else: tensors held
    only by reference cycles (torch's checkpointing makes some) are freed when it runs, and
    left to its own thresholds that moment depends on everything the process did before — the
    same cell traced after others came out up to 3 % higher (Llama 4 amp-bf16 with full
    checkpointing). Collected at the phase boundaries, a trace depends on its workload alone."""
    starts = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for step in range(steps):
            starts.append(tracker.clock)
            for _micro in range(grad_accum):
                gc.collect()
                tracker.set_phase("forward", step)
                loss = forward()
                gc.collect()
                tracker.set_phase("backward", step)
                tracker.tag = loss_tag  # the loss's own backward first (LossRegion ends the tag)
                if loss is not None:
                    loss.backward()
                tracker.tag = None
                del loss
                tracker.mark_gradients(trainable)
            if opt is not None:
                gc.collect()
                tracker.set_phase("optimizer", step)
                opt.step()
                opt.zero_grad(set_to_none=True)
            gc.collect()
            tracker.set_phase("idle", step)
    finally:
        if enabled:
            gc.enable()
    return starts


def _inference(model: Any, w: Workload, vocab: int, tracker: Tracker,
               emu: CudaEmulation) -> Any:
    """A prefill of batch x seq tokens with the KV cache kept, logits of the last position."""
    model.eval()
    ids = _sample(vocab, w.batch, w.seq)
    with _unpacked_batches(flash=w.attention == "flash"), torch.no_grad(), tracker, emu:
        tracker.set_phase("inference", 0)
        can_generate = getattr(model, "can_generate", None)
        if can_generate is not None and not can_generate():
            out = model(input_ids=ids)  # an encoder (BERT): one forward, no cache
        else:
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache = getattr(out, "past_key_values", None)
        kv = [t for t in _tensors(cache)]
        tracker.register(kv, "kv_cache")
        tracker.set_phase("idle", 0)
    return out


def _tensors(obj: Any, seen: set[int] | None = None) -> Iterator[torch.Tensor]:
    seen = seen if seen is not None else set()
    if isinstance(obj, torch.Tensor):
        yield obj
        return
    if id(obj) in seen or obj is None or isinstance(obj, (str, int, float, bool)):
        return
    seen.add(id(obj))
    if isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x, seen)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x, seen)
    elif hasattr(obj, "__dict__"):
        for x in vars(obj).values():
            yield from _tensors(x, seen)


def _finish(tracker: Tracker, _keep: Any, model: Any, w: Workload,
            steady_from: int = 0) -> dict[str, Any]:
    peak = tracker.peak(0)
    steady = tracker.peak(steady_from) if steady_from else peak
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    mem = dict(peak["breakdown"])
    mem["allocated_peak"] = peak["allocated_peak"]
    return {
        "memory": mem,
        "peak_phase": peak["phase"],
        "peak_step": peak["step"],
        "steady_peak": steady["allocated_peak"],
        "params": {"total": params, "trainable": trainable},
        "allocations": len(tracker.allocs),
    }
