"""The preference objectives (DPO, KTO, IPO, SimPO, ORPO, reward models) as TRL 1.16 runs them."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from .build import DTYPES, PRECISIONS, apply_lora, build_hf
from .emulate import CudaEmulation
from .loss import F, LossRegion, output_head
from .prepare import _for_training, _instrumented
from .steps import _finish, _train, _train_traced
from .tracker import Tracker
from .workload import _sample, _unpacked_batches

if TYPE_CHECKING:
    from .workload import Workload


# ---- preference objectives (DPO, KTO) as TRL 1.16 runs them ------------------------------------
@contextlib.contextmanager
def _meta_autocast(emu: CudaEmulation) -> Iterator[None]:
    """TRL's fused LM head asks torch whether autocast is on for the hidden states' device; the
    meta device has no autocast, so the emulation's state is the answer there."""
    enabled, dtype = torch.is_autocast_enabled, torch.get_autocast_dtype

    def is_enabled(*args: Any) -> bool:
        if args and str(args[0]) == "meta":
            return bool(emu.autocast and emu.amp_dtype is not None)
        return enabled(*args)

    def get_dtype(device_type: Any) -> torch.dtype:
        if str(device_type) == "meta":
            return emu.amp_dtype or torch.float32
        return dtype(device_type)

    # (patches of torch's own functions: their types are not these)
    torch.is_autocast_enabled, torch.get_autocast_dtype = is_enabled, get_dtype  # type: ignore
    try:
        yield
    finally:
        torch.is_autocast_enabled, torch.get_autocast_dtype = enabled, dtype


@contextlib.contextmanager
def _fused_head_as_on_cuda(tracker: Tracker) -> Iterator[None]:
    """TRL's fused log-prob function (trl/kernels/chunked_logprob.py) as it runs on a GPU, tagged
    as the loss region (what LossRegion does for an output head: its forward, and its backward up
    to the gradient of the hidden states it was given). On CUDA its Triton kernels fold each tile
    into the per-token statistics, and turn it into the logits' gradient, in place, and
    _addmm_fp32 accumulates into its fp32 output with cuBLAS (addmm out_dtype): none of them
    allocates. Off CUDA their torch fallbacks make fp32 copies of every tile, which a GPU never
    holds, so here they allocate nothing; the tiles, the fp32 accumulators, the casts of the
    hidden states and of the head's weight are TRL's own torch code and are traced as they are."""
    import trl.kernels.chunked_logprob as ck
    import trl.trainer.utils as tu
    fn = tu._ChunkedLogProbFunction
    saved = (ck._forward_tile, ck._backward_tile, ck._addmm_fp32)

    def in_place(*_args: Any, **_kw: Any) -> None:
        return None

    def end_tag(grad: torch.Tensor) -> torch.Tensor:
        tracker.tag = None
        return grad

    class Tagged:
        @staticmethod
        def apply(hidden: torch.Tensor, *args: Any) -> Any:
            tracker.tag = "logits"
            if hidden.requires_grad:
                hidden.register_hook(end_tag)
            try:
                return fn.apply(hidden, *args)
            finally:
                tracker.tag = None

    tu._ChunkedLogProbFunction = Tagged  # type: ignore[misc,assignment]
    ck._forward_tile = ck._backward_tile = ck._addmm_fp32 = in_place
    try:
        yield
    finally:
        tu._ChunkedLogProbFunction = fn  # type: ignore[misc]
        ck._forward_tile, ck._backward_tile, ck._addmm_fp32 = saved


def _preference_models(w: Workload, cfg_dict: dict[str, Any], wdtype: str,
                       tracker: Tracker | None,
                       device: str = "meta") -> tuple[Any, Any, Callable[..., Any]]:
    """The policy and the reference as TRL's trainers hold them: the fused LM head added before
    PEFT wraps the model (add_fused_lm_head), the reference a frozen copy built from the same config
    at the policy's dtype (DPOTrainer.__init__: ref_model_init_kwargs dtype = model.dtype) or the
    policy itself with its adapter disabled. On `device` (bench/accuracy/measure.py builds them on
    a GPU); the copy's weights registered with `tracker` when one is given."""
    from trl.trainer.utils import add_fused_lm_head
    model, cfg = build_hf(cfg_dict, DTYPES[wdtype], w.attention, device=device)
    add_fused_lm_head(model)
    if w.method == "lora":
        model = apply_lora(model, w.lora_rank, w.lora_targets, w.lora_dropout)
    if w.reference == "copy":
        ref, _ = build_hf(cfg_dict, DTYPES[wdtype], w.attention, device=device)
        add_fused_lm_head(ref)
        ref.eval()
        ref.requires_grad_(False)
        if tracker is not None:
            tracker.register(list(ref.parameters()) + list(ref.buffers()), "weights")

        def ref_call(**kw: Any) -> Any:
            return ref(**kw)
    else:
        def ref_call(**kw: Any) -> Any:
            with model.disable_adapter():
                return model(**kw)
    return model, cfg, ref_call


def _preference_loss(w: Workload, vocab: int, model: Any, ref_call: Callable[..., Any],
                     sample: Callable[[int, int, int], torch.Tensor] = _sample) -> torch.Tensor:
    """One micro-batch's loss as DPOTrainer._compute_loss / KTOTrainer._compute_loss make it:
    DPO and IPO (DPOTrainer with loss_type "ipo"): chosen and rejected concatenated (2 x batch
    sequences) through the policy, then the same through the reference under no_grad; KTO: the
    KL batch (the completions shifted by one) through the policy under no_grad, the batch
    through the policy, then both through the reference under no_grad. `sample(vocab, rows,
    tokens)` makes the batches (on the meta device unless given)."""
    n = 2 * w.batch if w.objective in ("dpo", "ipo") else w.batch
    ids = sample(vocab, n, w.seq)
    kl = sample(vocab, w.batch, w.seq) if w.objective == "kto" else None
    if kl is not None:
        with torch.no_grad():
            model(input_ids=kl, labels=kl, fused_lm_head=True, use_cache=False)
    logps = model(input_ids=ids, labels=ids, fused_lm_head=True, use_cache=False).log_probs.sum(-1)
    with torch.no_grad():
        if kl is not None:
            ref_call(input_ids=kl, labels=kl, fused_lm_head=True, use_cache=False)
        ref_logps = ref_call(input_ids=ids, labels=ids, fused_lm_head=True,
                             use_cache=False).log_probs.sum(-1)
    ratio = logps - ref_logps
    if w.objective == "dpo":
        chosen, rejected = ratio.chunk(2, dim=0)
        return -F.logsigmoid(0.1 * (chosen - rejected)).mean()
    if w.objective == "ipo":  # the log-ratio difference held to 1 / (2 beta) (Azar et al. 2023)
        chosen, rejected = ratio.chunk(2, dim=0)
        return ((chosen - rejected - 1 / (2 * 0.1)) ** 2).mean()
    return (1 - torch.sigmoid(0.1 * ratio)).mean()


def _trace_preference(w: Workload, cfg_dict: dict[str, Any]) -> dict[str, Any]:
    wdtype, amp = PRECISIONS[w.precision]
    tracker = Tracker()
    model, cfg, ref_call = _preference_models(w, cfg_dict, wdtype, tracker)
    vocab = getattr(cfg, "vocab_size", None) or cfg.get_text_config().vocab_size
    emu = CudaEmulation(DTYPES[amp] if amp else None, fused_sdpa=w.attention != "eager",
                        tracker=tracker)
    tracker.register(list(model.parameters()) + list(model.buffers()), "weights")
    trainable, opt = _for_training(model, w, emu)
    with _unpacked_batches(flash=w.attention == "flash"), _meta_autocast(emu), \
            _fused_head_as_on_cuda(tracker), tracker, emu:
        def forward() -> torch.Tensor:
            emu.autocast = amp is not None
            loss = _preference_loss(w, vocab, model, ref_call)
            emu.autocast = False
            emu.end_region()
            return loss / w.grad_accum

        step_start = _train(tracker, forward, trainable, opt, w.steps, w.grad_accum,
                            loss_tag="logits")
    return _finish(tracker, None, model, w, steady_from=step_start[-1] if w.steps > 1 else 0)


class _LogProbOnCuda(torch.autograd.Function):
    """TRL's selective_log_softmax as it runs on a GPU (trl/kernels/logprob_entropy.py,
    _LogProbEntropyFunction, whose Triton kernels fill its tensors in place): the forward
    allocates four fp32 values per row (log-probs, entropy, log-normaliser, expected logit) and
    keeps the logits for the backward, whose one allocation is the logits' gradient, contiguous
    and like the logits. (Off CUDA TRL falls back to a log-softmax of every row, which a GPU
    never holds.) The values are not computed: the meta device has none."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        logprobs = torch.empty(logits.shape[:-1], device=logits.device, dtype=torch.float32)
        log_z, expected = torch.empty_like(logprobs), torch.empty_like(logprobs)
        entropy = torch.empty_like(logprobs)  # returned beside the log-probs, dropped by TRL
        del entropy
        ctx.save_for_backward(logits, index, log_z, expected)
        return logprobs

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits = ctx.saved_tensors[0]
        return torch.empty_like(logits, memory_format=torch.contiguous_format), None


def _cpo_loss(w: Workload, vocab: int, model: Any) -> torch.Tensor:
    """One micro-batch's loss as TRL's CPOTrainer (loss_type "simpo", cpo_alpha 0) and
    ORPOTrainer run it (trl/experimental/cpo, trl/experimental/orpo: concatenated_forward,
    get_batch_logps): chosen and rejected concatenated (2 x batch sequences) through the model,
    its logits in the model's dtype; ORPO's negative log-likelihood of the chosen half
    (nn.CrossEntropyLoss over a contiguous copy of its shifted logits); the average log-probs of
    every sequence by selective_log_softmax; SimPO's or ORPO's loss of the two halves."""
    ids = _sample(vocab, 2 * w.batch, w.seq)
    logits = model(input_ids=ids, use_cache=False).logits
    nll: Any = 0
    if w.objective == "orpo":
        chosen_logits = logits[:w.batch, :-1, :].contiguous()
        nll = F.cross_entropy(chosen_logits.view(-1, chosen_logits.shape[-1]),
                              ids[:w.batch, 1:].contiguous().view(-1))
        del chosen_logits
    labels = ids[:, 1:].clone()
    mask = labels != -100
    logps = (_LogProbOnCuda.apply(logits[:, :-1, :], labels) * mask).sum(-1) / mask.sum(-1)
    chosen, rejected = logps.chunk(2, dim=0)
    if w.objective == "simpo":  # CPOConfig: beta 0.1 (SimPO's paper uses 2.0), simpo_gamma 0.5
        return -F.logsigmoid(0.1 * (chosen - rejected) - 0.5).mean()
    log_odds = (chosen - rejected) - (torch.log1p(-torch.exp(chosen)) -
                                      torch.log1p(-torch.exp(rejected)))
    return nll - 0.1 * F.logsigmoid(log_odds).mean()


def _trace_cpo(w: Workload, cfg_dict: dict[str, Any]) -> dict[str, Any]:
    """SimPO and ORPO: the policy alone (no reference), its logits tagged as SFT's are"""
    wdtype, amp = PRECISIONS[w.precision]
    model, cfg = build_hf(cfg_dict, DTYPES[wdtype], w.attention)
    model, vocab, tracker, emu = _instrumented(model, cfg, w, amp)
    trainable, opt = _for_training(model, w, emu)
    return _train_traced(w, model, tracker, emu, trainable, opt, amp,
                         lambda: _cpo_loss(w, vocab, model),
                         region=LossRegion(tracker, output_head(model)), loss_tag="logits")


def _trace_reward(w: Workload, cfg_dict: dict[str, Any]) -> dict[str, Any]:
    """A reward model's step as TRL's RewardTrainer runs it (trl/trainer/reward_trainer.py): the
    checkpoint as AutoModelForSequenceClassification with num_labels=1 (its pad token set, which
    the score's last-token pooling needs), chosen and rejected concatenated through it (2 x batch
    sequences), the loss -logsigmoid(chosen - rejected) over the two halves of the scores."""
    import transformers
    wdtype, amp = PRECISIONS[w.precision]
    d = {k: v for k, v in cfg_dict.items()
         if k not in ("torch_dtype", "dtype", "quantization_config", "architectures")}
    d["num_labels"] = 1
    if d.get("pad_token_id") is None:
        d["pad_token_id"] = 0
    cfg = transformers.AutoConfig.for_model(**d)
    impl = {"eager": "eager", "sdpa": "sdpa", "flash": "sdpa"}[w.attention]
    with torch.device("meta"):
        model = transformers.AutoModelForSequenceClassification.from_config(
            cfg, dtype=DTYPES[wdtype], attn_implementation=impl)
    model, vocab, tracker, emu = _instrumented(model, cfg, w, amp)
    trainable, opt = _for_training(model, w, emu)

    def loss(ids: torch.Tensor) -> torch.Tensor:
        scores = model(input_ids=ids, use_cache=False).logits.squeeze(-1)
        chosen, rejected = torch.chunk(scores, chunks=2)
        return -F.logsigmoid(chosen - rejected).mean()

    return _train_traced(w, model, tracker, emu, trainable, opt, amp, loss,
                         sample=lambda: _sample(vocab, 2 * w.batch, w.seq))
