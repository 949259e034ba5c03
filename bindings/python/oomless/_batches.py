"""A per-step batch cut into micro-batches, and the micro-batch to try after an OOM."""
from __future__ import annotations

import math
from typing import Any

import torch


def batch_size_of(batch: Any) -> int:
    """The number of samples in a batch: dim 0 of its tensors (nested in tuples, lists, dicts).

    Raises ValueError when the batch holds no tensor or tensors of different lengths.
    """
    sizes: set[int] = set()

    def walk(x: Any) -> None:
        if torch.is_tensor(x):
            if x.dim() == 0:
                raise ValueError("a 0-d tensor in the batch cannot be split into micro-batches")
            sizes.add(x.shape[0])
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(batch)
    if len(sizes) != 1:
        raise ValueError("the batch must hold tensors with one common first dimension, found %s"
                         % (sorted(sizes) or "no tensor"))
    return sizes.pop()


def split_batch(batch: Any, sizes: list[int]) -> list[Any]:
    """The batch cut along dim 0 into chunks of `sizes` (views, nothing copied); non-tensor
    leaves are repeated in every chunk."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]

    def cut(x: Any, start: int, n: int) -> Any:
        if torch.is_tensor(x):
            return x.narrow(0, start, n)
        if isinstance(x, dict):
            return type(x)((k, cut(v, start, n)) for k, v in x.items())
        if isinstance(x, tuple) and hasattr(x, "_fields"):  # a namedtuple
            return type(x)(*(cut(v, start, n) for v in x))
        if isinstance(x, (list, tuple)):
            return type(x)(cut(v, start, n) for v in x)
        return x

    return [cut(batch, s, n) for s, n in zip(starts, sizes)]


def micro_batch_sizes(per_step_batch: int, limit: int,
                      min_micro_batch: int = 1) -> tuple[list[int], bool]:
    """How to cut a per-step batch when micro-batches may hold at most `limit` samples.

    Returns ``(sizes, exact)``: the largest divisor of `per_step_batch` that is at most `limit`
    and at least `min_micro_batch`, repeated (exact); when there is none, ``ceil(batch / limit)``
    micro-batches as equal as possible (sizes differ by one at most; exact is False).
    """
    if per_step_batch < 1 or limit < 1:
        raise ValueError("the per-step batch (%r) and the limit (%r) must be at least 1"
                         % (per_step_batch, limit))
    limit = min(limit, per_step_batch)
    for d in range(limit, max(min_micro_batch, 1) - 1, -1):
        if per_step_batch % d == 0:
            return [d] * (per_step_batch // d), True
    n = -(-per_step_batch // limit)
    base, extra = divmod(per_step_batch, n)
    return [base + 1] * extra + [base] * (n - extra), False


def _line(observations: dict[int, int],
          fixed: int | None) -> tuple[float | None, float | None]:
    """(fixed, per_sample) from {micro: peak}: fitted through the two largest sizes, or through
    `fixed` (the memory held before the micro-batch) when one size was seen."""
    sizes = sorted(observations, reverse=True)
    if len(sizes) >= 2:
        n1, n2 = sizes[0], sizes[1]
        slope = (observations[n1] - observations[n2]) / float(n1 - n2)
        if slope > 0:
            return observations[n1] - slope * n1, slope
    if fixed is None or not sizes:
        return None, None
    n = sizes[0]
    return fixed, max(observations[n] - fixed, 0) / float(n)


def next_limit(failed_micro: int, observations: dict[int, int] | None = None,
               fixed: int | None = None, capacity: int | None = None, headroom: float = 0.1,
               halve: bool = False) -> tuple[int, str, float | None, float | None]:
    """The largest micro-batch to try after an OOM at `failed_micro`, and how it was chosen.

    `observations` maps micro-batch sizes that ran to their peak bytes; `fixed` is the memory held
    at the start of the step; `capacity` what the process could hold when it failed. Returns
    ``(limit, basis, fixed_bytes, per_sample_bytes)``; basis is "measured" or "halved". The limit
    is always below `failed_micro` and at least 1 (0 when `failed_micro` is 1: nothing smaller).
    """
    if failed_micro <= 1:
        return 0, "halved", None, None
    fit_fixed, slope = (None, None)
    if observations and capacity and not halve:
        fit_fixed, slope = _line(observations, fixed)
    # _line gives both or neither, and only with a capacity
    if slope is not None and fit_fixed is not None and capacity and capacity > fit_fixed:
        # the failure itself: the failed micro-batch needed more than the capacity
        slope = max(slope, (capacity - fit_fixed) / float(failed_micro))
        room = capacity * (1.0 - headroom) - fit_fixed
        limit = int(math.floor(room / slope)) if slope > 0 else failed_micro - 1
        return max(1, min(limit, failed_micro - 1)), "measured", fit_fixed, slope
    return max(1, failed_micro // 2), "halved", fit_fixed, slope
