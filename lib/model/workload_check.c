/* workload_check.c - whether a workload's options make sense together (oom_workload_validate):
 * precision and method, tensor parallelism, FSDP2 and the other sharding, the objective, packing.
 * Each refusal names the values it cannot take together. */
#include "model/model.h"

#include <string.h>

static int validate_precision(const oom_workload *w)
{
    oom_precision p = oomi_resolved_precision(w);
    oom_method m = w->k.method;
    if (m == OOM_METHOD_QLORA && (p == OOM_PRECISION_FP32 || p == OOM_PRECISION_INT8))
        return oomi_fail(OOM_EINVAL,
                         "method 'qlora' needs a 4-bit base with 16-bit compute; "
                         "precision '%s' is not possible (use 4bit, bf16 or fp16)",
                         oom_precision_name(p));
    if (m == OOM_METHOD_FULL && (p == OOM_PRECISION_INT8 || p == OOM_PRECISION_4BIT))
        return oomi_fail(OOM_EINVAL,
                         "precision '%s' quantizes frozen weights: it needs method "
                         "lora, qlora or inference, not 'full'",
                         oom_precision_name(p));
    if (w->gpu.known && w->gpu.cc_major > 0 && w->gpu.cc_major < 8 &&
        (p == OOM_PRECISION_BF16 || p == OOM_PRECISION_AMP_BF16 ||
         (m == OOM_METHOD_QLORA && p == OOM_PRECISION_4BIT)))
        return oomi_fail(OOM_EINVAL,
                         "precision '%s' needs bf16, which GPU '%s' (compute capability "
                         "%d.%d) lacks: use fp16 or amp-fp16",
                         oom_precision_name(p), w->gpu.id, w->gpu.cc_major, w->gpu.cc_minor);
    return OOM_OK;
}

/* tensor parallelism splits the attention heads over the GPUs: vLLM asserts that the query heads
 * divide evenly and that the KV heads either divide evenly or are replicated (tp a multiple of
 * them): vllm/model_executor/models/llama.py, LlamaAttention.__init__ */
static int validate_tp(const oom_workload *w)
{
    const oomi_model *m = w->model;
    long kv = m->kv_heads > 0 ? m->kv_heads : m->heads;
    if (w->parallel.tp == 1 || w->k.method != OOM_METHOD_INFERENCE) /* oomi_layout_validate */
        return OOM_OK;
    if (m->heads % w->parallel.tp)
        return oomi_fail(OOM_EINVAL,
                         "tensor-parallel '%ld' does not divide the %ld attention heads of '%s'",
                         w->parallel.tp, m->heads, m->name);
    if (kv >= w->parallel.tp ? kv % w->parallel.tp : w->parallel.tp % kv)
        return oomi_fail(OOM_EINVAL,
                         "tensor-parallel '%ld' neither divides nor is a multiple of the %ld KV "
                         "heads of '%s'",
                         w->parallel.tp, kv, m->name);
    return OOM_OK;
}

/* what FSDP2 is modelled for: full training whose compute dtype --precision gives (its 16-bit
 * dtype is MixedPrecisionPolicy's param_dtype; amp-* means the same, FSDP2's policy replacing
 * autocast), without offload; reshard-after-forward N a proper divisor of the GPUs, as
 * fully_shard requires */
static int validate_fsdp2(const oom_workload *w)
{
    oom_precision p = oomi_resolved_precision(w);
    if (!oomi_fsdp2(w))
        return w->fsdp2.dtype_set || w->fsdp2.reshard_set
                   ? oomi_fail(OOM_EINVAL, "%s is for sharding 'fsdp2' (got '%s')",
                               w->fsdp2.dtype_set ? "fsdp-param-dtype" : "reshard-after-forward",
                               oom_sharding_name(w->k.sharding))
                   : OOM_OK;
    if (w->k.method != OOM_METHOD_FULL)
        return oomi_fail(OOM_EINVAL, "sharding 'fsdp2' is modelled for method 'full' (got '%s')",
                         oom_method_name(w->k.method));
    if (w->k.offload != OOM_OFFLOAD_NONE)
        return oomi_fail(OOM_EINVAL, "sharding 'fsdp2' takes no offload (got '%s')",
                         oom_offload_name(w->k.offload));
    if (p == OOM_PRECISION_INT8 || p == OOM_PRECISION_4BIT ||
        (w->fsdp2.bf16 && p != OOM_PRECISION_BF16 && p != OOM_PRECISION_AMP_BF16))
        return oomi_fail(OOM_EINVAL,
                         "sharding 'fsdp2' %s precision '%s' (fp32, fp16 or bf16 compute%s)",
                         "does not take", oom_precision_name(p),
                         w->fsdp2.bf16 ? "; bf16 for fsdp-param-dtype 'bf16'" : "");
    if (w->fsdp2.reshard > 1 && (w->k.gpus % w->fsdp2.reshard || w->fsdp2.reshard >= w->k.gpus))
        return oomi_fail(OOM_EINVAL,
                         "reshard-after-forward '%ld' must divide gpus '%ld' and be smaller",
                         w->fsdp2.reshard, w->k.gpus);
    return OOM_OK;
}

static int validate_parallel(const oom_workload *w)
{
    int err;
    if ((err = validate_fsdp2(w)))
        return err;
    if (w->k.offload == OOM_OFFLOAD_OPTIMIZER_PARAMS && w->k.sharding != OOM_SHARDING_ZERO3)
        return oomi_fail(OOM_EINVAL, "offload 'optimizer+params' needs sharding 'zero3' (got '%s')",
                         oom_sharding_name(w->k.sharding));
    if (w->k.offload != OOM_OFFLOAD_NONE && w->k.sharding == OOM_SHARDING_NONE)
        return oomi_fail(OOM_EINVAL,
                         "offload '%s' needs a ZeRO stage (--sharding zero1|zero2|zero3)",
                         oom_offload_name(w->k.offload));
    if (w->k.method == OOM_METHOD_INFERENCE &&
        (w->k.sharding != OOM_SHARDING_NONE || w->k.grad_accum > 1))
        return oomi_fail(OOM_EINVAL, "method 'inference' takes no %s",
                         w->k.grad_accum > 1 ? "grad-accum" : "sharding");
    if ((w->serve.tokens || w->serve.seqs) && w->k.method != OOM_METHOD_INFERENCE)
        return oomi_fail(OOM_EINVAL, "%s is for method 'inference' (got '%s')",
                         w->serve.tokens ? "max-num-batched-tokens" : "max-num-seqs",
                         oom_method_name(w->k.method));
    if ((err = validate_tp(w)))
        return err;
    return oomi_layout_validate(w); /* model-parallel training (workload_layout.c) */
}

/* what TRL refuses at a given batch: checked by the estimate, not by oom_workload_validate, so
 * that a plan searching the batch skips these candidates instead of failing */
int oomi_objective_check_batch(const oom_workload *w)
{
    /* KTOTrainer.__init__: "Actual (not effective) batch size must be > 1" for its KL term, whose
     * mismatched pairs are the batch's completions shifted by one */
    if (w->objective.kind == OOMI_OBJECTIVE_KTO && w->k.batch < 2)
        return oomi_fail(OOM_EINVAL,
                         "objective 'kto' needs a micro-batch of at least 2: its KL term pairs "
                         "each prompt with another example's completion (batch is %ld)",
                         w->k.batch);
    /* GRPOConfig.__post_init__: generation_batch_size % num_generations == 0 */
    if (w->objective.kind == OOMI_OBJECTIVE_GRPO &&
        (w->k.batch * w->k.grad_accum * w->k.gpus) % w->objective.num_generations)
        return oomi_fail(OOM_EINVAL,
                         "objective 'grpo': the generation batch (batch x grad-accum x gpus = "
                         "%ld completions) must be a multiple of num-generations %ld",
                         w->k.batch * w->k.grad_accum * w->k.gpus, w->objective.num_generations);
    return OOM_OK;
}

/* what TRL refuses or ignores, refused here rather than estimated wrongly */
static int validate_objective(const oom_workload *w)
{
    const char *obj = OOMI_VALUE_NAME(oomi_objective_values, w->objective.kind);
    bool lora = w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;
    if (w->objective.grpo_set && w->objective.kind != OOMI_OBJECTIVE_GRPO)
        return oomi_fail(OOM_EINVAL, "num-generations is for objective 'grpo' (got '%s')", obj);
    if (w->objective.completion_set && w->objective.kind != OOMI_OBJECTIVE_GRPO &&
        w->k.method != OOM_METHOD_INFERENCE)
        return oomi_fail(OOM_EINVAL,
                         "completion-len is for objective 'grpo' or method 'inference' (got "
                         "objective '%s', method '%s')",
                         obj, oom_method_name(w->k.method));
    if (w->objective.completion_set && w->k.method == OOM_METHOD_INFERENCE &&
        w->objective.kind == OOMI_OBJECTIVE_SFT) {
        if (w->model->head != OOMI_HEAD_CAUSAL_LM || w->model->block == OOMI_BLOCK_T5)
            return oomi_fail(OOM_EINVAL,
                             "completion-len is for a causal language model's generate (model "
                             "'%s' is not one%s)",
                             w->model->family,
                             w->model->block == OOMI_BLOCK_T5 ? ": --decoder-seq sets its targets"
                                                              : "");
        if (w->objective.completion_len >= w->k.seq_len)
            return oomi_fail(OOM_EINVAL,
                             "completion-len '%ld' must be shorter than seq '%ld' (the prompt and "
                             "the generated tokens together)",
                             w->objective.completion_len, w->k.seq_len);
    }
    if (w->objective.rollout != OOMI_ROLLOUT_NONE && w->objective.kind != OOMI_OBJECTIVE_GRPO)
        return oomi_fail(OOM_EINVAL,
                         "rollout '%s' generates completions for objective 'grpo' "
                         "(got '%s')",
                         OOMI_VALUE_NAME(oomi_rollout_values, w->objective.rollout), obj);
    if (w->objective.sleep_set && w->objective.rollout == OOMI_ROLLOUT_NONE)
        return oomi_fail(OOM_EINVAL, "sleep-mode is the colocated engine's: it needs rollout "
                                     "vllm-colocate");
    if (w->objective.rollout != OOMI_ROLLOUT_NONE && w->parallel.tp > 1)
        return oomi_fail(OOM_EINVAL, "rollout vllm-colocate is planned with one engine per GPU "
                                     "(tensor-parallel 1)");
    if (w->objective.kind == OOMI_OBJECTIVE_SFT) {
        if (w->objective.reference != OOMI_REFERENCE_AUTO || w->objective.precompute_ref ||
            w->objective.ref_precision != OOM_PRECISION_AUTO)
            return oomi_fail(OOM_EINVAL, "a reference model is for objectives dpo, ipo, kto and "
                                         "grpo (objective is 'sft')");
        return OOM_OK;
    }
    if (w->k.method == OOM_METHOD_INFERENCE)
        return oomi_fail(OOM_EINVAL, "objective '%s' trains: method 'inference' takes none", obj);
    /* SimPO and ORPO are reference-free by construction (CPOTrainer with loss_type "simpo",
     * ORPOTrainer: trl/experimental/cpo, trl/experimental/orpo); a reward model has none */
    if (!oomi_objective_has_reference(w->objective.kind) &&
        ((w->objective.reference != OOMI_REFERENCE_AUTO &&
          w->objective.reference != OOMI_REFERENCE_NONE) ||
         w->objective.precompute_ref))
        return oomi_fail(OOM_EINVAL, "objective '%s' has no reference model: reference is 'none'",
                         obj);
    if (oomi_reference_of(w) == OOMI_REFERENCE_ADAPTER && !lora)
        return oomi_fail(OOM_EINVAL,
                         "reference 'adapter' is the policy with its LoRA adapter disabled: "
                         "it needs method lora or qlora (got '%s')",
                         oom_method_name(w->k.method));
    if (w->objective.ref_precision != OOM_PRECISION_AUTO &&
        oomi_reference_of(w) != OOMI_REFERENCE_COPY)
        return oomi_fail(OOM_EINVAL,
                         "reference-precision is for a reference copy "
                         "(reference is '%s')",
                         OOMI_VALUE_NAME(oomi_reference_values, oomi_reference_of(w)));
    if (w->objective.kind == OOMI_OBJECTIVE_REWARD && w->model->head != OOMI_HEAD_CAUSAL_LM &&
        w->model->head != OOMI_HEAD_SEQ_CLS)
        return oomi_fail(OOM_EINVAL, "objective 'reward' needs a decoder model (got '%s')",
                         w->model->family);
    if (w->objective.kind != OOMI_OBJECTIVE_REWARD && w->model->head != OOMI_HEAD_CAUSAL_LM)
        return oomi_fail(OOM_EINVAL, "objective '%s' needs a causal language model (got '%s')", obj,
                         w->model->family);
    if (w->objective.kind == OOMI_OBJECTIVE_GRPO && w->objective.precompute_ref)
        return oomi_fail(OOM_EINVAL, "objective 'grpo' scores its own completions: its reference "
                                     "log-probs cannot be precomputed");
    if (w->objective.kind == OOMI_OBJECTIVE_GRPO && w->objective.completion_len >= w->k.seq_len)
        return oomi_fail(OOM_EINVAL,
                         "completion-len '%ld' must be shorter than seq '%ld' (the prompt and "
                         "the completion together)",
                         w->objective.completion_len, w->k.seq_len);
    return OOM_OK;
}

/* packing as TRL and torchtune run it: training of a decoder on its own text (SFT) */
static int validate_packing(const oom_workload *w)
{
    const char *p = OOMI_VALUE_NAME(oomi_packing_values, w->packing.mode);
    const char *obj = OOMI_VALUE_NAME(oomi_objective_values, w->objective.kind);
    if (w->packing.mode == OOMI_PACKING_NONE) {
        if (w->packing.tokens_per_batch)
            return oomi_fail(OOM_EINVAL,
                             "tokens-per-batch '%ld' counts packed tokens: it needs "
                             "--packing padding-free or block-mask",
                             w->packing.tokens_per_batch);
        return OOM_OK;
    }
    if (w->k.method == OOM_METHOD_INFERENCE || w->objective.kind != OOMI_OBJECTIVE_SFT ||
        w->model->head != OOMI_HEAD_CAUSAL_LM)
        return oomi_fail(OOM_EINVAL,
                         "packing '%s' is for training a causal language model with objective "
                         "sft (got method '%s', objective '%s', a %s head)",
                         p, oom_method_name(w->k.method), obj, oomi_head_name(w->model->head));
    if (w->packing.tokens_per_batch && w->packing.mode == OOMI_PACKING_BLOCK_MASK &&
        w->packing.tokens_per_batch % w->k.batch)
        return oomi_fail(OOM_EINVAL,
                         "tokens-per-batch '%ld' is not a whole number of rows: block-mask packs "
                         "--batch %ld rows of equal length",
                         w->packing.tokens_per_batch, w->k.batch);
    if (w->packing.tokens_per_batch) {
        long rows, len;
        oomi_packed_shape(w, &rows, &len);
        if (w->k.seq_len > len)
            return oomi_fail(OOM_EINVAL,
                             "seq '%ld' (the longest document) is longer than a packed row of "
                             "%ld tokens",
                             w->k.seq_len, len);
    }
    return OOM_OK;
}

int oom_workload_validate(const oom_workload *w)
{
    const oomi_model *m = w->model;
    bool lora = w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;
    long maxp;
    int err;

    if (!m)
        return oomi_fail(OOM_EINVAL, "no model is set (use --model NAME|PATH)");
    if (w->k.gpus < 1 || w->k.batch < 1 || w->k.seq_len < 1 || w->k.grad_accum < 1)
        return oomi_fail(OOM_EINVAL,
                         "gpus '%ld', batch '%ld', seq '%ld' and grad-accum '%ld' must "
                         "all be at least 1",
                         w->k.gpus, w->k.batch, w->k.seq_len, w->k.grad_accum);
    if (!lora && (w->lora.rank_set || w->lora.targets_set || w->lora.dropout_set))
        return oomi_fail(OOM_EINVAL, "lora-%s is set but method '%s' is not lora or qlora",
                         w->lora.rank_set      ? "rank"
                         : w->lora.targets_set ? "targets"
                                               : "dropout",
                         oom_method_name(w->k.method));
    if (w->lora.adapter_dtype != OOMI_ADAPTER_AUTO && !lora)
        return oomi_fail(OOM_EINVAL, "adapter-dtype is set but method '%s' is not lora or qlora",
                         oom_method_name(w->k.method));
    if (w->quant.kbit_prepare == 2 && !oomi_bnb_base(w))
        return oomi_fail(OOM_EINVAL,
                         "kbit-prepare is for a bitsandbytes base (method qlora, precision int8 "
                         "or 4bit, or a bitsandbytes checkpoint), not precision '%s'%s%s",
                         oom_precision_name(oomi_resolved_precision(w)),
                         m->quant_bytes > 0 ? " of a " : "",
                         m->quant_bytes > 0 ? m->quant_desc : "");
    if (w->quant.bitsandbytes || w->quant.quantizer) { /* the option given, as it was spelt */
        char what[64];
        oomi_snprintf(what, sizeof(what), "%s %s",
                      w->quant.bitsandbytes ? "bitsandbytes" : "quantizer",
                      w->quant.bitsandbytes ? oomi_bitsandbytes_values[w->quant.bitsandbytes]->name
                                            : oomi_quantizer_values[w->quant.quantizer]->name);
        if (!oomi_nf4_base(w))
            return oomi_fail(OOM_EINVAL,
                             "%s is for a 4-bit base quantized at load (method qlora or "
                             "precision 4bit), not precision '%s'",
                             what, oom_precision_name(oomi_resolved_precision(w)));
        if (!oomi_bnb_linears(w))
            return oomi_fail(OOM_EINVAL,
                             "%s is for stacks whose 4-bit linears are bitsandbytes'; stack '%s' "
                             "quantizes with its own code",
                             what, oomi_stack_values[w->stack]->name);
    }
    if (w->quant.double_quant && m->quant_bytes > 0)
        return oomi_fail(OOM_EINVAL,
                         "double-quant is set but model '%s' is pre-quantized (%s): its "
                         "quantization_config says how it is stored",
                         w->model_arg ? w->model_arg : m->family, m->quant_desc);
    if (w->quant.double_quant && !oomi_nf4_base(w))
        return oomi_fail(OOM_EINVAL,
                         "double-quant is for a 4-bit base (method qlora or precision 4bit), "
                         "not precision '%s'",
                         oom_precision_name(oomi_resolved_precision(w)));
    if (w->runtime.optim_in_bwd && (w->k.method != OOM_METHOD_FULL || w->k.grad_accum > 1))
        return oomi_fail(OOM_EINVAL,
                         "optimizer-in-backward steps each parameter in its gradient's hook, as "
                         "torchtune's full fine-tuning recipes do: it needs method full and "
                         "grad-accum 1 (got method '%s', grad-accum '%ld')",
                         oom_method_name(w->k.method), w->k.grad_accum);
    if (w->runtime.compile && (w->stack != OOMI_STACK_TORCHTUNE || w->k.loss != OOM_LOSS_CHUNKED ||
                               w->k.method == OOM_METHOD_INFERENCE))
        return oomi_fail(OOM_EINVAL,
                         "compile yes is modelled for torchtune's compiled chunked loss only "
                         "(docs/stacks.md): it needs stack torchtune, loss chunked and a training "
                         "method (got stack '%s', loss '%s', method '%s')",
                         OOMI_VALUE_NAME(oomi_stack_values, w->stack), oom_loss_name(w->k.loss),
                         oom_method_name(w->k.method));
    if (m->quant_bytes > 0 && w->k.method == OOM_METHOD_FULL)
        return oomi_fail(OOM_EINVAL,
                         "model '%s' is pre-quantized (%s): its weights are not trained; use "
                         "--method lora (adapters on the frozen quantized base) or inference",
                         m->name, m->quant_desc);
    if (w->ckpt.op && (m->block != OOMI_BLOCK_LLAMA || m->sparse_layers > 0 || m->kv_lora > 0))
        return oomi_fail(OOM_EINVAL,
                         "checkpointing 'op-sac' is modelled for dense Llama-style decoders; "
                         "'%s' is %s (use full, nth:N or selective)",
                         m->name, m->family);
    if ((err = validate_precision(w)) || (err = validate_parallel(w)) ||
        (err = validate_objective(w)) || (err = validate_packing(w)))
        return err;
    if (lora) {
        oomi_lora l;
        if ((err = oomi_lora_resolve(&l, m, w->lora.targets, w->lora.rank)))
            return err;
    }
    maxp = w->shape.max_positions ? w->shape.max_positions : m->max_pos;
    if (maxp > 0 && w->k.seq_len > maxp)
        return oomi_fail(OOM_EINVAL,
                         "seq '%ld' exceeds the %ld positions of model '%s' (set "
                         "--max-positions to override, e.g. with RoPE scaling)",
                         w->k.seq_len, maxp, m->name);
    if (w->shape.decoder_seq && m->block != OOMI_BLOCK_T5)
        return oomi_fail(OOM_EINVAL, "decoder-seq '%ld' is for encoder-decoder models; '%s' is %s",
                         w->shape.decoder_seq, m->name, m->family);
    return OOM_OK;
}
