/* estimate_states.c - the model states: weights (quantised, with adapters, under tensor
 * parallelism, a reference copy), gradients and optimizer states, FSDP2's shards and gathers,
 * a quantised base's dequantised weight, paged optimizer states (docs/estimate.md). */
#include "estimate/estimate_ctx.h"

#include <string.h>

/* bytes per parameter a quantised base leaves unquantised (embeddings, head, norms): 16-bit as
 * loaded, fp32 after PEFT's prepare_model_for_kbit_training ("cast all non INT8 parameters to
 * fp32": every fp16/bf16 parameter that is not a Params4bit, peft/utils/other.py) */
double oomi_est_unquantized_bytes(const ctx *x)
{
    return oomi_kbit_prepare(x->w) ? 4 : 2;
}

/* the causal-mask buffer GPT-2's attention registers in transformers 4.x: torch.tril of
 * max_positions x max_positions bools per layer (GPT2Attention, register_buffer("bias", ...,
 * persistent=False), models/gpt2/modeling_gpt2.py line 161 of 4.57.6); 5.x builds its masks per
 * call (oomless trace --stack transformers-4, bench/trace/transformers-4: 12.0 MiB more weights
 * on GPT-2's cells, to the byte) */
static double mask_buffers(const ctx *x)
{
    const oomi_model *m = x->m;
    if (x->w->stack != OOMI_STACK_TRANSFORMERS4 || strcmp(m->family, "gpt2"))
        return 0;
    return (double)m->layers * (double)m->max_pos * (double)m->max_pos;
}

/* torchtune's Qwen2 / Qwen2.5 builders cache RoPE's cos and sin for max_seq_len positions in
 * fp32 (Qwen2RotaryPositionalEmbeddings): the full model one cache, the LoRA builders one in
 * every layer's attention (torchtune/models/qwen2/_component_builders.py lines 84 and 393 of
 * 0.6.1; oomless trace --stack torchtune: 384 MiB for Qwen2.5 0.5B LoRA, 3.5 GiB for 1.5B) */
static double rope_caches(const ctx *x)
{
    const oomi_model *m = x->m;
    if (x->w->stack != OOMI_STACK_TORCHTUNE || strcmp(m->family, "qwen2"))
        return 0;
    return (double)(x->lora_on ? m->layers : 1) * (double)m->max_pos * 2 * (double)m->head_dim * 4;
}

/* the output head's parameters quantized with the linears: Lightning Fabric's
 * BitsandbytesPrecision converts every nn.Linear (_convert_layers and the class replacement of
 * module_init_context, lightning/fabric/plugins/precision/bitsandbytes.py), LitGPT's lm_head
 * too, which LitGPT keeps apart from the embedding even where the checkpoint ties them (GPT:
 * lm_head = nn.Linear(n_embd, padded_vocab_size), litgpt/model.py); transformers'
 * BitsAndBytesConfig leaves the output head in 16 bits (get_keys_to_not_convert). 0 without */
double oomi_est_quantized_head(const ctx *x)
{
    const oomi_model *m = x->m;
    if (!x->nf4 || x->w->quant.quantizer != OOMI_QUANTIZER_FABRIC || m->head == OOMI_HEAD_SEQ_CLS ||
        m->head == OOMI_HEAD_BASE)
        return 0;
    return (double)m->vocab * (double)m->hidden;
}

void oomi_est_quantized_split(const ctx *x, double *linear, double *other)
{
    const oomi_model *m = x->m;
    double head = oomi_est_quantized_head(x);
    *linear = (double)m->params_linear + head;
    *other = (double)(m->params - m->params_linear) - (head > 0 ? (double)m->params_lm_head : 0);
}

double oomi_est_weights(const ctx *x)
{
    const oomi_model *m = x->m;
    double linear, other, base;
    oomi_est_quantized_split(x, &linear, &other);
    if (x->quant) {
        double qb = m->quant_bytes > 0 ? m->quant_bytes /* as its config says */
                    : x->nf4           ? oomi_nf4_bytes(x->dq)
                                       : x->c->int8_bytes;
        base = linear * qb + other * oomi_est_unquantized_bytes(x); /* embeddings, head and norms */
    } else {
        base = (double)m->params * param_bytes(x);
    }
    return base + (x->lora_on ? (double)x->lora.params * x->ab : 0) + mask_buffers(x) +
           rope_caches(x);
}

/* bytes per trained parameter: gradient, one optimizer state, fp32 master copy */
void oomi_est_train_bytes(const ctx *x, double *grad, double *state, double *master)
{
    bool half = !x->lora_on && (x->prec == OOM_PRECISION_FP16 || x->prec == OOM_PRECISION_BF16);
    *grad = x->lora_on ? x->ab : half ? 2 : 4;
    *state = x->lora_on ? x->ab : half ? 2 : 4; /* torch's AdamW: states in the param's dtype */
    *master = 0;
    if (half && x->w->k.sharding != OOM_SHARDING_NONE) {
        /* DeepSpeed / FSDP mixed precision: fp32 master weights and fp32 states */
        *state = 4;
        *master = 4;
    }
}

double oomi_est_optimizer_states(const ctx *x, double state, double master)
{
    double p = x->trainable;
    switch (x->w->k.optimizer) {
    case OOM_OPTIMIZER_ADAMW:
    case OOM_OPTIMIZER_ADAMW_FUSED:
        return p * (2 * state + master);
    case OOM_OPTIMIZER_ADAMW_8BIT:
    case OOM_OPTIMIZER_PAGED_ADAMW_8BIT:
        return p * (x->c->adam8_bytes + master);
    case OOM_OPTIMIZER_PAGED_ADAMW: /* bitsandbytes' 32-bit states: fp32 whatever the param */
        return p * (2 * 4 + master);
    case OOM_OPTIMIZER_SGD_MOMENTUM:
    case OOM_OPTIMIZER_LION:
        return p * (state + master);
    case OOM_OPTIMIZER_ADAFACTOR: {
        /* factored second moment: rows + columns per matrix */
        double f = x->lora_on ? (double)x->lora.params / (double)x->w->lora.rank +
                                    2.0 * (double)x->w->lora.rank * (double)x->lora.n_adapted
                              : (double)x->m->factored;
        return f * state + p * master;
    }
    case OOM_OPTIMIZER_SGD:
        return p * master;
    case OOM_OPTIMIZER_NONE:
        return 0;
    }
    return 0;
}

void oomi_est_fsdp2(const ctx *x, fsdp2_mem *f)
{
    const oomi_model *m = x->m;
    /* the sharded parameters' dtype is also their gradients' and AdamW's states' (FSDPParam
     * keeps the sharded gradient in the parameter dtype; no separate master copy): fp32 under
     * torchtitan's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32); the
     * reduce-scatter runs in it too (reduce_dtype, _fsdp_collectives.py foreach_reduce) */
    double ps = x->w->fsdp2.bf16 ? 2 : 4, c = x->e, r = ps, n = x->n, P = (double)m->params;
    double B = (double)m->params_layer_max, L = (double)(m->layers + m->enc_layers);
    double R = P - L * B, E, twice, early, kept, rs, copy_in, reduce;
    if (R < (double)(m->params_embed + m->params_lm_head)) /* blocks of unequal size */
        R = (double)(m->params_embed + m->params_lm_head);
    /* the root's FSDP parameters. torchtitan 0.3.0 ties the embedding to the head in the
     * model's __init__ on meta, but the tie does not survive to fully_shard(model), which then
     * makes an FSDPParam of each; init_states ties them again (models/common/decoder.py), and
     * FSDP2 points both FSDPParams at the one sharded weight (reset_sharded_param,
     * _fsdp_param.py) but gathers and reduce-scatters each: the vocabulary's matrix twice
     * (oomless trace, Llama 3.2 1B: a root reduce-scatter of 525,338,624 elements, twice the
     * embedding plus the norm). Under the chunked loss the head runs in the loss, outside the
     * model's forward, and its gradient is reduce-scattered there, early (the same trace: the
     * head's 262,668,288 elements in the loss, the embedding and the norm at the end): its
     * sharded copy is a gradient of its own at the end */
    twice = x->w->stack == OOMI_STACK_TORCHTITAN && m->tied ? (double)m->params_embed : 0;
    early = x->w->k.loss == OOM_LOSS_CHUNKED ? twice : 0;
    E = R + twice;
    f->w = P * ps / n;
    f->g = x->trainable * ps / n;
    f->o = oomi_est_optimizer_states(x, ps, 0) / n;
    f->topt = x->trainable * ps * x->c->opt_temp[x->w->k.optimizer] / n;
    /* after the forward the root keeps its parameters unsharded (fully_shard sets the root's
     * reshard_after_forward to False); blocks free theirs (True), keep them (False) or keep a
     * 1/N shard of them (an int N: _sharded_post_forward_param_data, _fsdp_param.py) */
    kept = x->w->fsdp2.reshard == 0  ? 0
           : x->w->fsdp2.reshard < 0 ? (P - R) * c
                                     : (P - R) * c / (double)x->w->fsdp2.reshard;
    /* the last block's forward: what is kept, its parameters copied out of the all-gather
     * output, which is still alive (foreach_all_gather_copy_out, _fsdp_collectives.py) */
    f->fwd = E * c + kept + (x->w->fsdp2.reshard < 0 ? B * c : 2 * B * c);
    /* ... and where the head's gradient is reduce-scattered in the loss, while the forward's
     * activations are all saved: its flat input and its sharded output (oomless trace,
     * torchtitan Qwen3 0.6B amp-bf16 1 x 2048 chunked: 622,329,856 bytes each at the peak) */
    f->fwd += early * (r + ps / n);
    /* a block's reduce-scatter: its unsharded gradients in the compute dtype, the flat input in
     * reduce_dtype and the 1/n output (foreach_reduce's reduce_scatter_input, reduce_output) */
    rs = c + r + r / n;
    /* during a block's backward: its gathered parameters and the next block's, all-gathered
     * ahead (FSDPParamGroup's backward prefetch); none regathered when kept unsharded */
    f->bwd = E * c + kept + B * rs + (x->w->fsdp2.reshard < 0 ? 0 : 2 * B * c);
    /* the backward's end: the root, resharded after backward, reduce-scatters the embeddings'
     * and the head's gradients, whose sharded copies do not exist yet. foreach_reduce
     * (_fsdp_collectives.py) copies the unsharded gradients into the flat input in
     * reduce_dtype, frees them (unsharded_grads.clear()), then allocates the 1/n output; on one
     * GPU it copies instead of reduce-scattering, through a quotient when a divide factor is
     * set (reduce_output.copy_(reduce_scatter_input / gradient_divide_factor)), as torchtitan
     * sets one (1.0: disable_fsdp_gradient_division, torchtitan/distributed/fsdp.py): a third
     * buffer of the input's size */
    copy_in = c + r;
    reduce = r + r / n + (n == 1 && x->w->stack == OOMI_STACK_TORCHTITAN ? r : 0);
    f->end = (E - early) * (copy_in > reduce ? copy_in : reduce) - R * ps / n + early * ps / n;
}

/* the largest Linear weight: a dequantised or cast copy of one exists at a time */
double oomi_est_max_linear(const oomi_model *m)
{
    double best = 0;
    size_t i;
    for (i = 0; i < m->nlinears; i++)
        if ((double)m->linears[i].din * (double)m->linears[i].dout > best)
            best = (double)m->linears[i].din * (double)m->linears[i].dout;
    return best;
}

/* A 4-bit base's linear in a forward or backward (the output head among them where the quantizer
 * takes it): bitsandbytes dequantises the whole weight to the compute dtype for the matmul
 * (MatMul4Bit.forward: linear(A, dequantize_4bit(B).to(A.dtype).t()); backward the same for
 * grad_A, bitsandbytes/autograd/_functions.py), one linear at a time and freed after it. With
 * double quantization dequantize_4bit first rebuilds the fp32 absmax of every block of 64
 * (dequantize_blockwise of the 8-bit constants, bitsandbytes/functional.py), alive while the weight
 * is dequantised. Other quantised bases: one 16-bit copy. */
double oomi_est_dequant(const ctx *x)
{
    double big = oomi_est_max_linear(x->m), head = oomi_est_quantized_head(x);
    /* Fabric quantizes an fp16 copy (_Linear4bit.quantize: weight.to(torch.half)), so
     * dequantize_4bit returns fp16, cast then to the compute dtype: both alive at the cast */
    double copy = x->w->quant.quantizer == OOMI_QUANTIZER_FABRIC ? 4.0 : 2.0;
    return (head > big ? head : big) * (copy + (x->nf4 && x->dq ? 4.0 / 64 : 0));
}

/* The share of the optimizer states a paged optimizer keeps in CUDA unified memory: those of
 * tensors of OOMI_PAGED_MIN elements or more. cudaMallocManaged memory (cget_managed_ptr in
 * bitsandbytes' get_paged, bitsandbytes/functional.py) is not the caching allocator's: it is in
 * neither torch.cuda.max_memory_allocated nor max_memory_reserved; nvidia-smi counts the pages
 * resident on the GPU (they migrate there when the step's kernels touch them), and under memory
 * pressure the driver evicts them to host memory rather than failing: they never cause an OOM. */
double oomi_est_paged_share(const ctx *x)
{
    const oomi_model *m = x->m;
    double big;
    if (x->trainable <= 0 || (x->w->k.optimizer != OOM_OPTIMIZER_PAGED_ADAMW &&
                              x->w->k.optimizer != OOM_OPTIMIZER_PAGED_ADAMW_8BIT))
        return 0;
    if (x->lora_on)
        return (double)x->lora.paged / x->trainable;
    /* a full fine-tune: the linears, embeddings and head; norms and biases are smaller */
    big = (double)(m->params_linear + m->params_embed + m->params_lm_head);
    return big >= x->trainable ? 1 : big / x->trainable;
}

/* Tensor parallelism (Megatron-LM's split, as vLLM does it): the linears, the embedding and the
 * LM head are split over the tp GPUs (ColumnParallelLinear / RowParallelLinear,
 * VocabParallelEmbedding, vllm/model_executor/layers/); the norms are replicated. Query heads
 * are divided by tp; KV heads too, but never below one per GPU: where there are fewer KV heads
 * than GPUs each is replicated (num_kv_heads = max(1, total_num_kv_heads // tp_size),
 * vllm/model_executor/models/llama.py, LlamaAttention). */
double oomi_est_tp_weights(const ctx *x)
{
    const oomi_model *m = x->m;
    double all = oomi_est_weights(x), tp = (double)x->w->parallel.tp;
    double kept = (double)(m->params - m->params_linear - m->params_embed - m->params_lm_head);
    if (tp <= 1 || kept < 0)
        return all;
    kept *= x->quant ? oomi_est_unquantized_bytes(x) : param_bytes(x); /* norms: as unquantised */
    return (all - kept) / tp + kept;
}

/* a reference copy's weights: the model at --reference-precision (as the policy's by default),
 * without adapters; ZeRO-3 shards it as the policy (prepare_deepspeed, trl/models/utils.py) */
double oomi_est_reference_weights(const ctx *x)
{
    ctx r = *x;
    oom_precision p = x->w->objective.ref_precision;
    if (oomi_reference_of(x->w) != OOMI_REFERENCE_COPY || x->w->objective.precompute_ref)
        return 0;
    r.lora_on = false;
    if (p != OOM_PRECISION_AUTO) {
        r.prec = p;
        r.quant = p == OOM_PRECISION_INT8 || p == OOM_PRECISION_4BIT;
        r.nf4 = p == OOM_PRECISION_4BIT && x->m->quant_bytes <= 0;
        r.dq = r.nf4 && oomi_double_quant(x->w);
    }
    return oomi_est_weights(&r) / (x->w->k.sharding == OOM_SHARDING_ZERO3 ? x->n : 1);
}
