"""Building a model on the meta device as users build it, and tracing its training steps."""
import contextlib
import gc
import importlib
import json
import os
import platform
import tempfile

import torch

from .._vocab import option, resolved
from . import heads
from .emulate import CudaEmulation
from .tracker import CATEGORIES, Tracker


def _values(name, command=None):
    """The values of an option in the library's table (those `command` takes)."""
    return [v["name"] for v in option(name, command)["values"]]


def _without_reference():
    """The preference objectives the library gives no reference model (SimPO, ORPO, reward:
    TRL's reference-free trainers)."""
    return [o for o in _values("objective", "trace")
            if o != "sft" and resolved(objective=o)["reference"] == "none"]


class TraceError(Exception):
    """A workload the tracer cannot express, with the reason (exit 2)."""


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# what --precision means: (dtype of the weights, autocast dtype or None)
PRECISIONS = {
    "fp32": ("fp32", None), "bf16": ("bf16", None), "fp16": ("fp16", None),
    "amp-bf16": ("fp32", "bf16"), "amp-fp16": ("fp32", "fp16"),
}


def versions():
    """The versions a trace depends on: recorded with every result."""
    from importlib import metadata
    from .stacks import NEEDS  # each stack's distributions
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in dict.fromkeys(d for needs in NEEDS.values() for d in needs):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


# ---- finding a model's config ------------------------------------------------------------------
def find_config(model):
    """The config.json dict and path a model argument names: a file, a folder holding one, a
    preset, or a hub id in the local Hugging Face cache, by the library's rules
    (oom_model_resolve, as ``oomless estimate --model`` finds it)."""
    from .. import OomlessError, _model_config_path
    from .config_check import read_config
    try:
        path = _model_config_path(model)
    except OomlessError as exc:
        raise TraceError(str(exc)) from exc
    return read_config(path), path


def build_hf(cfg_dict, dtype, attention, device="meta"):
    """The transformers model the config names, with no weights (meta device), or with random
    ones on `device` (bench/accuracy/measure.py builds the same model on a GPU)."""
    import transformers
    from .config_check import model_class_of, refused_by_transformers
    cfg_dict = dict(cfg_dict, **({"pad_token_id": 0} if heads.needs_pad_token(cfg_dict) else {}))
    if "model_type" not in cfg_dict:
        raise TraceError("model config has no 'model_type'")
    cls = model_class_of(cfg_dict)
    for key in ("torch_dtype", "dtype", "quantization_config"):
        cfg_dict.pop(key, None)
    impl = {"eager": "eager", "sdpa": "sdpa", "flash": "sdpa"}[attention]
    with refused_by_transformers(cls):
        cfg = transformers.AutoConfig.for_model(**cfg_dict)
        with torch.device(device):
            if cls is not None:
                model = cls._from_config(cfg, dtype=dtype, attn_implementation=impl)
            else:
                model = transformers.AutoModelForCausalLM.from_config(
                    cfg, dtype=dtype, attn_implementation=impl)
    return model, cfg


def default_lora_targets(model):
    """The modules ``--lora-targets default`` adapts: PEFT's default for the model's type
    (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING), given by name: left to get_peft_model,
    a LoraConfig without target_modules reaches PEFT 0.21.2 empty for Mixtral under transformers
    5.23 ("No `target_modules` passed") though the mapping names q_proj and v_proj. Where PEFT
    has none (Phi-3, Qwen-MoE, DeepSeek V2/V3: get_peft_model refuses a LoraConfig without
    target_modules) the ones `oomless estimate` plans for the default, asked of the library for
    the model's own config, so that the trace adapts what the estimate counts."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    mapped = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model.config.model_type)
    if mapped is not None:
        return mapped if isinstance(mapped, str) else list(mapped)
    from .. import OomlessError, estimate
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(model.config.to_dict(), f)
    try:
        doc = estimate(model=f.name, method="lora", seq=1)
    except OomlessError as exc:
        raise TraceError("LoRA: PEFT has no default target modules for model_type '%s' and the "
                         "estimator's cannot be found (%s)" % (model.config.model_type, exc)) from exc
    finally:
        os.unlink(f.name)
    return doc["workload"]["lora_targets"].split(",")


def apply_lora(model, rank, targets, dropout):
    import peft
    if targets in (None, "", "default"):
        target_modules = default_lora_targets(model)
    elif targets == "all-linear":
        target_modules = "all-linear"
    else:
        target_modules = [t.strip() for t in targets.split(",") if t.strip()]
    conf = peft.LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=dropout,
                           target_modules=target_modules)
    try:
        return peft.get_peft_model(model, conf)
    except ValueError as exc:
        raise TraceError("LoRA: %s" % exc) from exc


class ModelledAdam:
    """The states of an optimizer that cannot run on the meta device, kept as it keeps them.

    - "fused": torch.optim.AdamW(fused=True) refuses meta tensors; its state is exp_avg and
      exp_avg_sq like the parameter, updated by one CUDA kernel in place (no temporaries).
    - "8bit": bitsandbytes' AdamW8bit (CUDA only): two uint8 states per element plus an fp32
      absmax per block of 2048 elements for each (block-wise quantisation), and 32-bit states for
      parameters under 4096 elements (its min_8bit_size) — bitsandbytes' documentation of 8-bit
      optimizers. The updates are done in place, as the kernels do.
    """

    BLOCK, MIN_8BIT = 2048, 4096

    def __init__(self, params, kind):
        self.params, self.kind, self.state = list(params), kind, {}

    def _init(self, p):
        if self.kind == "8bit" and p.numel() >= self.MIN_8BIT:
            blocks = (p.numel() + self.BLOCK - 1) // self.BLOCK
            return [torch.empty_like(p, dtype=torch.uint8), torch.empty_like(p, dtype=torch.uint8),
                    torch.empty(blocks, dtype=torch.float32, device=p.device),
                    torch.empty(blocks, dtype=torch.float32, device=p.device)]
        dtype = torch.float32 if self.kind == "8bit" else p.dtype
        return [torch.zeros_like(p, dtype=dtype), torch.zeros_like(p, dtype=dtype)]

    def step(self):
        for p in self.params:
            if p.grad is None:
                continue
            st = self.state.get(p)
            if st is None:
                st = self.state[p] = self._init(p)
            if st[0].dtype == p.grad.dtype:
                st[0].lerp_(p.grad, 0.1)
                st[1].mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None


def make_optimizer(name, params):
    params = list(params)
    if name == "none" or not params:
        return None
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if name == "adamw-fused":
        return ModelledAdam(params, "fused")
    if name == "adamw-8bit":
        return ModelledAdam(params, "8bit")
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=True)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
    if name == "adafactor":
        raise TraceError("optimizer 'adafactor' cannot be traced: torch.optim.Adafactor reads a "
                         "tensor's value (.item()) in its step, which the meta device does not "
                         "have")
    if name.startswith("paged-"):
        raise TraceError("optimizer '%s' cannot be traced: bitsandbytes pages its states in CUDA "
                         "unified memory, outside the allocator the tracer follows" % name)
    raise TraceError("optimizer '%s' cannot be traced (lion is not in torch.optim; the "
                     "traced ones: %s)" % (name, ", ".join(_values("optimizer", "trace"))))


# ---- the head and the loss ---------------------------------------------------------------------
def output_head(model):
    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if getter else None
    return head


class LossRegion:
    """Tags everything the output head and the loss allocate, forward and backward, as logits."""

    def __init__(self, tracker, head):
        self.tracker = tracker
        self.handles = []
        if head is not None:
            self.handles.append(head.register_forward_pre_hook(self._pre))

    def _pre(self, _module, args):
        self.tracker.tag = "logits"
        x = args[0] if args else None
        if isinstance(x, torch.Tensor) and x.requires_grad:
            x.register_hook(self._input_grad)

    def _input_grad(self, grad):
        self.tracker.tag = None
        return grad

    def close(self):
        for h in self.handles:
            h.remove()


def chunked_causal_loss(model, ids, chunk_tokens):
    """Cross-entropy over the output head one chunk of tokens at a time, each chunk's logits
    recomputed in the backward (what chunked / fused linear-cross-entropy losses keep)."""
    import torch.utils.checkpoint as ckpt
    # base_model: the decoder by the class's base_model_prefix (GPT-2's `transformer`, which
    # 4.57's get_decoder does not know: it answers the model itself)
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
    if base is model or base is getattr(model, "get_base_model", lambda: None)():
        # Llama4ForCausalLM's get_decoder answers the model itself (transformers 5.23), as
        # GPT2LMHeadModel's does in 4.57
        base = (model.get_base_model() if hasattr(model, "get_base_model") else model).base_model
    hidden = base(input_ids=ids).last_hidden_state[:, :-1, :]
    labels = ids[:, 1:]
    head = model.get_output_embeddings()
    h = hidden.reshape(-1, hidden.shape[-1])
    y = labels.reshape(-1)
    n = h.shape[0]

    def piece(hc, yc):
        return F.cross_entropy(head(hc).float(), yc, reduction="sum")

    total = None
    for start in range(0, n, chunk_tokens):
        part = ckpt.checkpoint(piece, h[start:start + chunk_tokens], y[start:start + chunk_tokens],
                               use_reentrant=False)
        total = part if total is None else total + part
    return total / n


F = torch.nn.functional
# the stacks whose code is not transformers': the module and function that trace them
STACK_TRACERS = {"torchtune": (".tune", "trace_torchtune"),
                 "torchtitan": (".titan", "trace_torchtitan")}


# ---- one traced run ----------------------------------------------------------------------------
class Workload:
    """The estimate's workload flags, resolved as `oomless estimate` resolves them."""

    # the options the workload takes, each None by default: the library's default (its table)
    OPTIONS = ("method", "precision", "optimizer", "batch", "seq", "grad_accum", "checkpointing",
               "attention", "loss", "lora_rank", "lora_targets", "lora_dropout", "objective",
               "reference", "packing", "optimizer_in_backward")

    def __init__(self, model, method=None, precision=None, optimizer=None, batch=None, seq=None,
                 grad_accum=None, checkpointing=None, attention=None, loss=None, lora_rank=None,
                 lora_targets=None, lora_dropout=None, steps=2, chunk_tokens=1024, objective=None,
                 reference=None, packing=None, tokens_per_batch=0, stack=None,
                 optimizer_in_backward=None):
        given = dict(method=method, precision=precision, optimizer=optimizer, batch=batch,
                     seq=seq, grad_accum=grad_accum, checkpointing=checkpointing,
                     attention=attention, loss=loss, lora_rank=lora_rank,
                     lora_targets=lora_targets, lora_dropout=lora_dropout, objective=objective,
                     reference=reference, packing=packing,
                     optimizer_in_backward=optimizer_in_backward)
        # the stack: as given, else the one installed here (stacks.resolve, at check())
        self.stack = stack
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

    def check(self):
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

    def _check_counts(self):
        for name in ("batch", "seq", "grad_accum", "steps", "lora_rank"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise TraceError("%s '%s' must be a whole number of at least 1" %
                                 (name.replace("_", "-"), v))

    def rows(self):
        """The micro-batch as the model sees it, (rows, tokens per row), as `oomless estimate`
        shapes it: padding-free one row of every packed token, block-mask `batch` rows of packs"""
        tokens = self.tokens_per_batch or self.batch * self.seq
        if self.packing == "padding-free":
            return 1, tokens
        if self.packing == "block-mask":
            return self.batch, tokens // self.batch
        return self.batch, self.seq


@contextlib.contextmanager
def _unpacked_batches(packed_shape=None, flash=False):
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
    masks = getattr(getattr(mu, "ALL_MASK_ATTENTION_FUNCTIONS", None), "_global_mapping", None)
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


def _sample(vocab, batch, seq):
    return torch.randint(0, vocab, (batch, seq), device="meta")


def checkpoint_every(checkpointing):
    """(N, nth, offload) for a --checkpointing value: one layer in N checkpointed, the N-th of
    each N where nth (torchtitan) else the first (transformers), the checkpoints' saved inputs in
    host memory where offload ("+offload"); (0, False, False) for none; None if it is not one the
    tracer runs."""
    base, plus, rest = checkpointing.partition("+")
    offload = plus == "+" and rest == "offload"
    if plus and not offload:
        return None
    if base == "none":
        return None if offload else (0, False, False)
    if base == "full" or (base == "op-sac" and not offload):
        return 1, False, offload
    kind, _, n = base.partition(":")
    if kind in ("every", "nth") and n.isdigit() and int(n) >= 1:
        return int(n), kind == "nth", offload
    return None


def op_sac_policy():
    """torchtitan's op-level selective activation checkpointing policy for one transformer block
    (SelectiveAC._wrap_block, torchtitan/distributed/activation_checkpoint.py, pytorch/torchtitan
    b5bcd76, 2026-08-21): the outputs of the compute-intensive ops (functorch's default op list:
    mm, bmm, addmm, the fused SDPA kernels, ...), of the math SDPA, max (float8 scaling), topk
    and the reduce-scatter / all-to-all collectives are saved, except every second mm/linear of
    the block (counted separately in the forward and the recomputation), which is recomputed with
    everything else. torchtitan's force-recomputed router shapes (moe.router.gate) have no
    transformers counterpart and are left out. A fresh policy per checkpointed call, as
    torchtitan's context_fn makes one."""
    from torch._functorch.partitioners import get_default_op_list
    from torch.utils.checkpoint import CheckpointPolicy
    aten = torch.ops.aten
    save = {op.default for op in get_default_op_list().compute_intensive_ops}
    save.update((aten._scaled_dot_product_cudnn_attention.default,
                 aten._scaled_dot_product_attention_math.default,
                 aten._scaled_dot_product_fused_attention_overrideable.default,
                 aten.max.default, aten.linear.default, aten.topk.default,
                 torch.ops._c10d_functional.reduce_scatter_tensor.default,
                 torch.ops._c10d_functional.all_to_all_single.default))
    mm_ops = (aten.mm.default, aten.linear.default)
    count = {False: 0, True: 0}

    def policy(ctx, func, *args, **kwargs):
        if func in mm_ops:
            count[ctx.is_recompute] += 1
        if func in save and not (func in mm_ops and count[ctx.is_recompute] % 2 == 0):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE
    return policy


class _Both:
    """Two context managers entered as one (checkpoint's context_fn wants one per pass)."""

    def __init__(self, *cms):
        self.cms = cms
        self.stack = None

    def __enter__(self):
        self.stack = contextlib.ExitStack()
        for cm in self.cms:
            self.stack.enter_context(cm)
        return self

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)


class HostOffload(torch.autograd.graph.saved_tensors_hooks):
    """torch.autograd.graph.save_on_cpu as a GPU runs it, on the meta device (which has no data
    to copy): a saved tensor leaves the device when packed (its storage is freed once nothing
    else holds it) and comes back as a new device tensor of its shape when unpacked, as
    save_on_cpu's unpack copies it to the device (torch/autograd/graph.py)."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack(t):
            return t.device, t.size(), t.stride(), t.dtype

        def unpack(packed):
            device, size, stride, dtype = packed
            return torch.empty_strided(size, stride, dtype=dtype, device=device)

        super().__init__(pack, unpack)


def _for_training(model, w, emu):
    """The model in training mode, with the model's own gradient checkpointing under
    --checkpointing full (every layer), every:N (transformers' every_n_layers: layers 1, N+1,
    ...), nth:N (layers N, 2N, ..., as torchtitan's layer-level selective checkpointing wraps
    them) or op-sac (every layer under torchtitan's op-level policy, op_sac_policy); its trained
    parameters and their optimizer."""
    every, nth, offload = checkpoint_every(w.checkpointing)
    if offload:
        # transformers' activation_checkpointing_enable(offload=True) wraps each checkpoint in
        # save_on_cpu (modeling_utils.py, transformers 5.23), which the meta device cannot run:
        # the emulation takes its place for this process's traces
        import transformers.modeling_utils
        transformers.modeling_utils.save_on_cpu = HostOffload
    if every:
        # the recomputation in the backward re-enters the forward's emulation, as checkpoint
        # re-enters the forward's autocast state on a GPU
        def contexts():
            if w.checkpointing == "op-sac":
                from torch.utils.checkpoint import create_selective_checkpoint_contexts
                fwd, rec = create_selective_checkpoint_contexts(op_sac_policy())
                return fwd, _Both(emu.recompute_context(), rec)
            return contextlib.nullcontext(), emu.recompute_context()
        kwargs = {"every_n_layers": every} if every > 1 and not nth else {}
        if offload:
            kwargs["offload"] = True
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False, "context_fn": contexts},
            **kwargs)
        if nth:
            from transformers.modeling_layers import GradientCheckpointingLayer
            layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
            for i, layer in enumerate(layers):
                layer.gradient_checkpointing = (i + 1) % every == 0
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    return trainable, make_optimizer(w.optimizer, trainable)


def _instrumented(model, cfg, w, amp):
    """A built model as the tracer runs it: its LoRA adapter when asked, the tracker with its
    weights registered and the CUDA emulation; returns (model, vocabulary, tracker, emulation)."""
    vocab = getattr(cfg, "vocab_size", None) or cfg.get_text_config().vocab_size
    w.experts = heads.experts_path(model)  # the experts implementation CUDA runs, if any
    if w.method == "lora":
        model = apply_lora(model, w.lora_rank, w.lora_targets, w.lora_dropout)
    tracker = Tracker()
    emu = CudaEmulation(DTYPES[amp] if amp else None, fused_sdpa=w.attention != "eager",
                        tracker=tracker)
    tracker.register(list(model.parameters()) + list(model.buffers()), "weights")
    return model, vocab, tracker, emu


def trace_hf(w, cfg_dict=None):
    """Traces workload `w`; returns the result dict (memory breakdown in bytes, phase, ...)."""
    from .config_check import reads_values
    from .emulate import autocast_regions
    try:
        with autocast_regions():
            return _trace_hf(w, cfg_dict)
    except (RuntimeError, NotImplementedError) as exc:
        if reads_values(exc):
            raise TraceError("the model's code reads tensor values (%s), which the meta device "
                             "does not have: this model cannot be traced"
                             % str(exc).splitlines()[0]) from exc
        raise


def _trace_hf(w, cfg_dict=None):
    w.check()
    if w.stack in STACK_TRACERS:
        module, fn = STACK_TRACERS[w.stack]
        return getattr(importlib.import_module(module, __package__), fn)(w)
    if cfg_dict is None:
        cfg_dict, _path = find_config(w.model)
    quant = cfg_dict.get("quantization_config")
    if isinstance(quant, dict):
        raise TraceError("model '%s' is pre-quantized (quant_method %s): its quantized layers run "
                         "only on a GPU, not on the meta device; `oomless estimate` plans it, or "
                         "trace the unquantized model (its config without quantization_config)"
                         % (w.model, quant.get("quant_method")))
    if w.objective != "sft":  # TRL's trainers (preference.py)
        from . import preference
        if w.objective == "reward":
            return preference.trace_reward(w, cfg_dict)
        if w.objective in ("simpo", "orpo"):
            return preference.trace_cpo(w, cfg_dict)
        return preference.trace_preference(w, cfg_dict)
    wdtype, amp = PRECISIONS[w.precision]
    model, cfg = build_hf(cfg_dict, DTYPES[wdtype], w.attention)
    model, vocab, tracker, emu = _instrumented(model, cfg, w, amp)
    if w.method == "inference":
        return _finish(tracker, _inference(model, w, vocab, tracker, emu), model, w)
    trainable, opt = _for_training(model, w, emu)
    rows, tokens = w.rows()
    # flash attention takes packed documents as they are (varlen kernels, cu_seqlens from the
    # position ids): no mask, as for unpacked rows
    masked = w.packing != "none" and w.attention != "flash"

    def loss(ids):
        if w.loss == "chunked":
            return chunked_causal_loss(model, ids, w.chunk_tokens)
        if w.packing != "none":
            # position ids restart per document (their values: the meta device has none; the
            # packed-sequence check answers for them), and no KV cache, whose presence turns
            # that check off: TRL's SFTTrainer.compute_loss sets use_cache=False
            # (trl/trainer/sft_trainer.py, trl 1.16)
            pos = torch.zeros((rows, tokens), dtype=torch.long, device="meta")
            return heads.loss(model, ids, position_ids=pos, use_cache=False)
        return heads.loss(model, ids)  # the head's targets (heads.targets)

    return _train_traced(w, model, tracker, emu, trainable, opt, amp, loss,
                         sample=lambda: _sample(vocab, rows, tokens),
                         region=LossRegion(tracker, output_head(model)), loss_tag="logits",
                         packed=(rows, tokens) if masked else None)


def _train_traced(w, model, tracker, emu, trainable, opt, amp, loss, sample=None, region=None,
                  loss_tag=None, packed=None):
    """The training steps of a policy alone, traced: each forward samples its batch (`sample`,
    whose result `loss` takes; none when `loss` makes its own), computes `loss` under the
    emulated autocast of an amp precision and scales it for accumulation; `region` (a
    LossRegion) is closed after the steps; `packed` as for _unpacked_batches. Returns the
    trace's report."""
    try:
        with _unpacked_batches(packed, flash=w.attention == "flash"), tracker, emu:
            def forward():
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


def _train(tracker, forward, trainable, opt, steps, grad_accum, loss_tag=None):
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


def _inference(model, w, vocab, tracker, emu):
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


def _tensors(obj, seen=None):
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


def _finish(tracker, _keep, model, w, steady_from=0):
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


def trace_module(build, step=None, input_shape=None, steps=2, optimizer="adamw"):
    """Traces any nn.Module: `build()` returns it (built on the meta device here); `step(model,
    batch)` runs one training step's forward and backward (default: sum of the output)."""
    with torch.device("meta"):
        model = build()
    if not isinstance(model, torch.nn.Module):
        raise TraceError("the build function returned %s, not a torch.nn.Module" % type(model).__name__)
    model = model.to("meta")
    tracker = Tracker()
    tracker.register(list(model.parameters()) + list(model.buffers()), "weights")
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(optimizer, trainable)
    emu = CudaEmulation(None)
    if step is None and not input_shape:
        raise TraceError("--input-shape is needed without --step (e.g. 8,3,224,224)")

    def forward():
        if step is not None:
            return step(model, input_shape)
        return model(torch.randn(*input_shape, device="meta")).float().sum()

    with tracker, emu:
        step_start = _train(tracker, forward, trainable, opt, steps, 1)
    w = Workload("module")
    return _finish(tracker, None, model, w, steady_from=step_start[-1] if steps > 1 else 0)


__all__ = ["CATEGORIES", "TraceError", "Workload", "trace_hf", "trace_module", "versions",
           "find_config", "contextlib"]


# what a trace leaves out (the estimator adds them): listed in every document
OUTSIDE_TRACE = ["cuda_context", "allocator_reserve", "kernel_workspaces"]


def _stack_of(name):
    from .stacks import describe
    return describe(name)


def document(model=None, module=None, step=None, input_shape=None, label=None, **options):
    """The document ``python -m oomless.trace --json`` prints: a Hugging Face `model` traced with
    the workload `options` (:class:`Workload`'s keywords), or any `module` (a function building
    the nn.Module; `step`, `input_shape`, ``steps`` and ``optimizer`` as for
    :func:`trace_module`; `label` names it in ``workload.model``)."""
    if module is not None:
        optimizer = options.pop("optimizer", "adamw")
        steps = options.pop("steps", 2)
        if options:
            raise TraceError("with a module only steps and optimizer apply, not %s"
                             % ", ".join(sorted(options)))
        res = trace_module(module, step, input_shape, steps=steps, optimizer=optimizer)
        res["workload"] = {"model": label or getattr(module, "__qualname__", repr(module)),
                           "optimizer": optimizer}
    else:
        if not model:
            raise TraceError("a model (a preset, a config.json or its folder) or a module is "
                             "needed")
        w = Workload(model, **options)
        res = trace_hf(w)
        res["stack"] = _stack_of(w.stack)
        res["workload"] = {"model": model, "method": w.method, "precision": w.precision,
                           "optimizer": w.optimizer, "batch": w.batch, "seq": w.seq,
                           "grad_accum": w.grad_accum, "checkpointing": w.checkpointing,
                           "attention": w.attention, "loss": w.loss}
        if w.objective != "sft":
            res["workload"].update(objective=w.objective, reference=w.reference)
        if w.packing != "none":
            rows, tokens = w.rows()
            res["workload"].update(packing="%s, %d x %d tokens" % (w.packing, rows, tokens))
        if getattr(w, "experts", None):
            res["moe_experts"] = w.experts
        if w.optimizer_in_backward != "no":
            res["workload"].update(optimizer_in_backward=w.optimizer_in_backward)
    res["versions"] = versions()
    res["outside_trace"] = list(OUTSIDE_TRACE)
    return res
