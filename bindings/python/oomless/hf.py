"""Hugging Face Transformers helpers: turn an oomless plan into TrainingArguments keywords.

    plan = oomless.plan(model="llama-3.1-8b", method="lora", seq=2048)
    args = transformers.TrainingArguments(output_dir="out", **oomless.hf.training_arguments(plan))
"""

# oomless optimizer names -> TrainingArguments.optim values (transformers' OptimizerNames).
_OPTIM = {
    "adamw": "adamw_torch",
    "adamw-fused": "adamw_torch_fused",
    "adamw-8bit": "adamw_bnb_8bit",
    "adafactor": "adafactor",
    "sgd": "sgd",
    "sgd-momentum": "sgd",
    "lion": "lion_32bit",
}


def _plan(doc):
    """Accepts the whole plan document or its "plan" object."""
    plan = doc.get("plan", doc)
    for key in ("batch_size", "grad_accum"):
        if key not in plan:
            raise KeyError("plan has no %r: pass the document oomless.plan() returns" % key)
    return plan


def training_arguments(doc):
    """Keyword arguments for ``transformers.TrainingArguments`` from a plan.

    Sets the per-device batch size, gradient accumulation, mixed precision (bf16/fp16),
    gradient checkpointing and the optimizer. `max_seq_length` is not a TrainingArguments
    field: pass ``plan["plan"]["seq_len"]`` to your tokenizer or SFT config.
    """
    plan = _plan(doc)
    precision = plan.get("precision", "fp32")
    kwargs = {
        "per_device_train_batch_size": int(plan["batch_size"]),
        "gradient_accumulation_steps": int(plan["grad_accum"]),
        "bf16": precision in ("bf16", "amp-bf16"),
        "fp16": precision in ("fp16", "amp-fp16"),
        "gradient_checkpointing": plan.get("checkpointing", "none") != "none",
    }
    optim = _OPTIM.get(plan.get("optimizer", ""))
    if optim:
        kwargs["optim"] = optim
    return kwargs
