"""The workload a trace runs (the estimate's flags, resolved) and the batches it feeds."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .._vocab import option, resolved
from .build import PRECISIONS, _values
from .limits import TraceError
from .prepare import checkpoint_every


def _without_reference() -> list[str]:
    """The preference objectives the library gives no reference model (SimPO, ORPO, reward:
    TRL's reference-free trainers)."""
    return [o for o in _values("objective", "trace")
            if o != "sft" and resolved(objective=o)["reference"] == "none"]


# ---- one traced run ----------------------------------------------------------------------------
class Workload:
    """The estimate's workload flags, resolved as `oomless estimate` resolves them."""

    # the options the workload takes, each None by default: the library's default (its table)
    OPTIONS = ("method", "precision", "optimizer", "batch", "seq", "grad_accum", "checkpointing",
               "attention", "loss", "lora_rank", "lora_targets", "lora_dropout", "objective",
               "reference", "packing", "optimizer_in_backward")
    # (set from OPTIONS in __init__: the values given, else the table's defaults)
    method: str
    precision: str
    optimizer: str
    batch: int
    seq: int
    grad_accum: int
    checkpointing: str
    attention: str
    loss: str
    lora_rank: int
    lora_targets: str
    lora_dropout: float
    objective: str
    reference: str
    packing: str
    optimizer_in_backward: str

    def __init__(self, model: str, method: str | None = None, precision: str | None = None,
                 optimizer: str | None = None, batch: int | None = None, seq: int | None = None,
                 grad_accum: int | None = None, checkpointing: str | None = None,
                 attention: str | None = None, loss: str | None = None,
                 lora_rank: int | None = None, lora_targets: str | None = None,
                 lora_dropout: float | None = None, steps: int = 2, chunk_tokens: int = 1024,
                 objective: str | None = None, reference: str | None = None,
                 packing: str | None = None, tokens_per_batch: int = 0,
                 stack: str | None = None, optimizer_in_backward: str | None = None) -> None:
        given = dict(method=method, precision=precision, optimizer=optimizer, batch=batch,
                     seq=seq, grad_accum=grad_accum, checkpointing=checkpointing,
                     attention=attention, loss=loss, lora_rank=lora_rank,
                     lora_targets=lora_targets, lora_dropout=lora_dropout, objective=objective,
                     reference=reference, packing=packing,
                     optimizer_in_backward=optimizer_in_backward)
        # the stack: as given, else the one installed here (stacks.resolve, at check())
        self.stack: str | None = stack
        self.experts: str | None = None  # the experts path traced (prepare._instrumented)
        for name in self.OPTIONS:
            value = given[name]
            if value is None:
                value = option(name)["default"]
                value = (float(value) if name == "lora_dropout" else
                         int(value) if value.isdigit() else value)
            setattr(self, name, value)
        self.model, self.steps, self.chunk_tokens = model, steps, chunk_tokens
        self.tokens_per_batch = tokens_per_batch
        method, precision, objective, reference = (self.method, self.precision, self.objective,
                                                   self.reference)
        if "auto" in (self.precision, self.reference):  # as the library resolves them
            try:
                lib = resolved(method=method, precision=precision, objective=objective,
                               reference=reference)
            except ValueError:  # a value the library refuses: check() says which
                lib = {}
            if self.precision == "auto":
                self.precision = lib.get("precision", "auto")
            if self.reference == "auto":
                self.reference = lib.get("reference", "auto")

    def check(self) -> None:
        from .stacks import resolve
        self.stack = resolve(self.stack)
        if self.stack == "torchtune":  # its own rules (tune.check): qlora is traced there
            return self._check_counts()
        if self.optimizer_in_backward != "no":
            raise TraceError("optimizer-in-backward is traced with --stack torchtune")
        if self.method not in _values("method"):
            raise TraceError("method '%s' is not one of: %s"
                             % (self.method, ", ".join(_values("method"))))
        if self.method == "qlora" or self.precision in ("4bit", "int8"):
            raise TraceError("--method qlora / --precision 4bit|int8 cannot be traced on the meta "
                             "device: bitsandbytes' quantized layers run only on CUDA")
        if self.precision not in PRECISIONS:
            raise TraceError("precision '%s' is not one of: %s" %
                             (self.precision, ", ".join(PRECISIONS)))
        if checkpoint_every(self.checkpointing) is None:
            raise TraceError("checkpointing '%s' cannot be traced (none, full, every:N or nth:N: "
                             "the model's own gradient checkpointing on every layer or one layer "
                             "in N, +offload after the last three; op-sac: torchtitan's op-level "
                             "selective policy on every layer)" % self.checkpointing)
        for name in ("attention", "loss"):
            if getattr(self, name) not in _values(name, "trace"):
                raise TraceError("%s '%s' is not one of: %s"
                                 % (name, getattr(self, name), ", ".join(_values(name, "trace"))))
        if self.objective not in _values("objective", "trace"):
            raise TraceError("objective '%s' cannot be traced (%s)"
                             % (self.objective, ", ".join(_values("objective", "trace"))))
        if self.objective in _without_reference() and self.reference != "none":
            raise TraceError("objective '%s' has no reference model" % self.objective)
        if self.objective != "sft":
            if self.method not in ("full", "lora"):
                raise TraceError("objective '%s' is traced for method full or lora" % self.objective)
            if (self.objective not in _without_reference() and
                    self.reference not in ("copy", "adapter")):
                raise TraceError("reference '%s' cannot be traced (copy, adapter)" % self.reference)
            if self.reference == "adapter" and self.method != "lora":
                raise TraceError("reference 'adapter' needs method lora")
            if self.objective == "kto" and self.batch < 2:
                raise TraceError("objective 'kto' needs a batch of at least 2 (its KL term)")
        if self.packing not in _values("packing", "trace"):
            raise TraceError("packing '%s' is not one of: %s"
                             % (self.packing, ", ".join(_values("packing", "trace"))))
        if self.packing != "none" and (self.objective != "sft" or self.method == "inference"):
            raise TraceError("packing '%s' is traced for training with objective sft"
                             % self.packing)
        if self.tokens_per_batch and self.packing == "none":
            raise TraceError("tokens-per-batch needs --packing padding-free or block-mask")
        if self.packing == "block-mask" and self.tokens_per_batch % self.batch:
            raise TraceError("tokens-per-batch %d is not a whole number of %d rows"
                             % (self.tokens_per_batch, self.batch))
        self._check_counts()

    def _check_counts(self) -> None:
        for name in ("batch", "seq", "grad_accum", "steps", "lora_rank"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise TraceError("%s '%s' must be a whole number of at least 1" %
                                 (name.replace("_", "-"), v))


    def rows(self) -> tuple[int, int]:
        """The micro-batch as the model sees it, (rows, tokens per row), as `oomless estimate`
        shapes it: padding-free one row of every packed token, block-mask `batch` rows of packs"""
        tokens = self.tokens_per_batch or self.batch * self.seq
        if self.packing == "padding-free":
            return 1, tokens
        if self.packing == "block-mask":
            return self.batch, tokens // self.batch
        return self.batch, self.seq


@contextlib.contextmanager
def _unpacked_batches(packed_shape: tuple[int, int] | None = None,
                      flash: bool = False) -> Iterator[None]:
    """Synthetic batches are never packed unless `packed_shape` (rows, tokens) says so:
    transformers' check for packed sequences reads the position ids' values (data the meta
    device does not have), so it is answered here as a GPU would answer it for these inputs
    (None: one sequence per row; packed: a document index per token, which makes transformers
    build the block-diagonal 4D mask for SDPA and eager attention).

    `flash`: the model runs SDPA in place of flash attention (the meta device has no flash
    kernels; the emulation gives SDPA flash's saved tensors), so its masks are made as for
    flash_attention_2: none for batches without padding, where SDPA's would build a 4D mask
    for a sliding window or chunk as long as the sequence or longer (Mistral-7B's 4096 at a
    packed row of 4096 tokens: 1 GiB of masks and the masked kernel's copies), which flash
    takes as a kernel argument instead (masking_utils.flash_attention_mask, transformers 5.23)."""
    try:
        import transformers.masking_utils as mu
    except ImportError:
        yield
        return
    saved = getattr(mu, "find_packed_sequence_indices", None)
    if saved is None:
        yield
        return
    if packed_shape is None:
        mu.find_packed_sequence_indices = lambda position_ids: None
    else:
        mu.find_packed_sequence_indices = lambda position_ids: torch.zeros(
            packed_shape, dtype=torch.long, device=position_ids.device)
    masks: Any = getattr(getattr(mu, "ALL_MASK_ATTENTION_FUNCTIONS", None), "_global_mapping",
                         None)
    sdpa_mask = masks.get("sdpa") if flash and isinstance(masks, dict) else None
    if sdpa_mask is not None:
        # the synthetic batches have no padding, which is when flash's mask function says None
        # (it would read the 2D mask's values to see so, which the meta device does not have)
        masks["sdpa"] = lambda *args, **kwargs: None
    try:
        yield
    finally:
        mu.find_packed_sequence_indices = saved
        if sdpa_mask is not None:
            masks["sdpa"] = sdpa_mask


def _sample(vocab: int, batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), device="meta")
