/*
 * estimate.c - the memory model: per-GPU bytes of each phase of a training step (forward end,
 * backward, optimizer step) or of an inference prefill, the maximum of them, the caching
 * allocator's slack and the CUDA context. docs/estimate.md explains it with its sources; the
 * empirical numbers come from data/coefficients.json (estimate_coef.c).
 */
#include "estimate/estimate.h"

#include <math.h>
#include <string.h>

/* what the phases are made of; doubles while computing, bytes at the end */
typedef struct mem {
    double w, g, o, a, l, kv, t;
} mem;

typedef struct ctx {
    const oom_workload *w;
    const oomi_model *m;
    const oomi_coef *c;
    oom_precision prec;
    oomi_lora lora;
    bool train, lora_on, quant, frozen;
    double e;         /* bytes of the compute dtype (activations, KV cache) */
    double trainable; /* trained parameters */
    double n;         /* data-parallel GPUs */
    bool fused;       /* TRL's fused LM head: log-probs in tiles, no logits tensor */
    double wref;      /* a reference copy's weights (per GPU) */
    bool ref_fwd;     /* a no-grad reference forward in every step */
    double ab;        /* bytes of an adapter parameter, its gradient and AdamW states */
    bool nf4, dq;     /* a 4-bit base quantised at load (bitsandbytes), double-quantised */
    double paged;     /* trained parameters whose optimizer states a paged optimizer pages */
    bool fsdp2;       /* sharding fsdp2: torch's fully_shard per block and on the root */
    double context;   /* tokens a query attends over: a row, or under packing with flash
                       * attention's varlen kernels its document (at most --seq) */
    oomi_zero3 z3;    /* what ZeRO-3 keeps beside the shards (estimate_zero3.c) */
} ctx;

static int regime(const ctx *x)
{
    if (x->quant) /* quantised base: 16-bit compute whatever the precision knob says */
        return OOMI_REGIME_16BIT;
    switch (x->prec) {
    case OOM_PRECISION_FP32:
        return OOMI_REGIME_FP32;
    case OOM_PRECISION_AMP_FP16:
    case OOM_PRECISION_AMP_BF16:
        return OOMI_REGIME_AMP;
    default:
        return OOMI_REGIME_16BIT;
    }
}

static bool amp(const ctx *x)
{
    return regime(x) == OOMI_REGIME_AMP;
}

/* bytes per base parameter as stored (non-quantised part) */
static double param_bytes(const ctx *x)
{
    return x->prec == OOM_PRECISION_FP32 || amp(x) ? 4 : 2;
}

/* ---- model states ---------------------------------------------------------------------------- */

/* bytes per parameter a quantised base leaves unquantised (embeddings, head, norms): 16-bit as
 * loaded, fp32 after PEFT's prepare_model_for_kbit_training ("cast all non INT8 parameters to
 * fp32": every fp16/bf16 parameter that is not a Params4bit, peft/utils/other.py) */
static double unquantized_bytes(const ctx *x)
{
    return oomi_kbit_prepare(x->w) ? 4 : 2;
}

static double weights(const ctx *x)
{
    const oomi_model *m = x->m;
    double linear = (double)m->params_linear, other = (double)(m->params - m->params_linear);
    double base;
    if (x->quant) {
        double qb = m->quant_bytes > 0 ? m->quant_bytes /* as its config says */
                    : x->nf4           ? oomi_nf4_bytes(x->dq)
                                       : x->c->int8_bytes;
        base = linear * qb + other * unquantized_bytes(x); /* embeddings, head and norms */
    } else {
        base = (double)m->params * param_bytes(x);
    }
    return base + (x->lora_on ? (double)x->lora.params * x->ab : 0);
}

/* bytes per trained parameter: gradient, one optimizer state, fp32 master copy */
static void train_bytes(const ctx *x, double *grad, double *state, double *master)
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

static double optimizer_states(const ctx *x, double state, double master)
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
        double f = x->lora_on ? (double)x->lora.params / (double)x->w->lora_rank +
                                    2.0 * (double)x->w->lora_rank * (double)x->lora.n_adapted
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

/* FSDP2 (torch.distributed.fsdp.fully_shard, one group per transformer block and one on the
 * root for the embeddings, final norm and head, as torchtitan's parallelize_llama applies it):
 * what a GPU keeps and what it gathers, in bytes. docs/estimate.md, "FSDP2", has the sources. */
typedef struct fsdp2_mem {
    double w, g, o, topt; /* sharded parameters, gradients, optimizer states, the step's temps */
    double fwd;           /* the forward's last block: the parameters kept unsharded so far and
                           * that block's gathered copy with its all-gather buffer */
    double bwd;           /* ... and a block's buffers during its backward */
    double end;           /* the root's reduce-scatter, less its own sharded gradients */
} fsdp2_mem;

static void fsdp2_of(const ctx *x, fsdp2_mem *f)
{
    const oomi_model *m = x->m;
    /* the sharded parameters' dtype is also their gradients' and AdamW's states' (FSDPParam
     * keeps the sharded gradient in the parameter dtype; no separate master copy): fp32 under
     * torchtitan's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32); the
     * reduce-scatter runs in it too (reduce_dtype, _fsdp_collectives.py foreach_reduce) */
    double ps = x->w->fsdp_bf16 ? 2 : 4, c = x->e, r = ps, n = x->n, P = (double)m->params;
    double B = (double)m->params_layer_max, L = (double)(m->layers + m->enc_layers);
    double R = P - L * B, kept, rs;
    if (R < (double)(m->params_embed + m->params_lm_head)) /* blocks of unequal size */
        R = (double)(m->params_embed + m->params_lm_head);
    f->w = P * ps / n;
    f->g = x->trainable * ps / n;
    f->o = optimizer_states(x, ps, 0) / n;
    f->topt = x->trainable * ps * x->c->opt_temp[x->w->k.optimizer] / n;
    /* after the forward the root keeps its parameters unsharded (fully_shard sets the root's
     * reshard_after_forward to False); blocks free theirs (True), keep them (False) or keep a
     * 1/N shard of them (an int N: _sharded_post_forward_param_data, _fsdp_param.py) */
    kept = x->w->fsdp_reshard == 0  ? 0
           : x->w->fsdp_reshard < 0 ? (P - R) * c
                                    : (P - R) * c / (double)x->w->fsdp_reshard;
    /* the last block's forward: what is kept, its parameters copied out of the all-gather
     * output, which is still alive (foreach_all_gather_copy_out, _fsdp_collectives.py) */
    f->fwd = R * c + kept + (x->w->fsdp_reshard < 0 ? B * c : 2 * B * c);
    /* a block's reduce-scatter: its unsharded gradients in the compute dtype, the flat input in
     * reduce_dtype and the 1/n output (foreach_reduce's reduce_scatter_input, reduce_output) */
    rs = c + r + r / n;
    /* during a block's backward: its gathered parameters and the next block's, all-gathered
     * ahead (FSDPParamGroup's backward prefetch); none regathered when kept unsharded */
    f->bwd = R * c + kept + B * rs + (x->w->fsdp_reshard < 0 ? 0 : 2 * B * c);
    /* the backward's end: the root, resharded after backward, reduce-scatters the embeddings'
     * and the head's gradients, whose sharded copies do not exist yet */
    f->end = R * rs - R * ps / n;
}

/* the largest Linear weight: a dequantised or cast copy of one exists at a time */
static double max_linear(const oomi_model *m)
{
    double best = 0;
    size_t i;
    for (i = 0; i < m->nlinears; i++)
        if ((double)m->linears[i].din * (double)m->linears[i].dout > best)
            best = (double)m->linears[i].din * (double)m->linears[i].dout;
    return best;
}

/* A 4-bit base's linear in a forward or backward: bitsandbytes dequantises the whole weight to
 * the compute dtype for the matmul (MatMul4Bit.forward: linear(A, dequantize_4bit(B).to(A.dtype)
 * .t()); backward the same for grad_A, bitsandbytes/autograd/_functions.py), one linear at a time
 * and freed after it. With double quantization dequantize_4bit first rebuilds the fp32 absmax of
 * every block of 64 (dequantize_blockwise of the 8-bit constants, bitsandbytes/functional.py),
 * alive while the weight is dequantised. Other quantised bases: one 16-bit copy. */
static double dequant_transient(const ctx *x)
{
    return max_linear(x->m) * (2.0 + (x->nf4 && x->dq ? 4.0 / 64 : 0));
}

/* The share of the optimizer states a paged optimizer keeps in CUDA unified memory: those of
 * tensors of OOMI_PAGED_MIN elements or more. cudaMallocManaged memory (cget_managed_ptr in
 * bitsandbytes' get_paged, bitsandbytes/functional.py) is not the caching allocator's: it is in
 * neither torch.cuda.max_memory_allocated nor max_memory_reserved; nvidia-smi counts the pages
 * resident on the GPU (they migrate there when the step's kernels touch them), and under memory
 * pressure the driver evicts them to host memory rather than failing: they never cause an OOM. */
static double paged_share(const ctx *x)
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

/* ---- activations ----------------------------------------------------------------------------- */

static const oomi_act_coef *act_coef(const ctx *x)
{
    int b = (int)x->m->block;
    size_t i;
    for (i = 0; i < x->c->nfamilies; i++) /* a set fitted for this model_type */
        if (!strcmp(x->c->family[i].model_type, x->m->family))
            return &x->c->family[i].act[regime(x)];
    if (x->m->block == OOMI_BLOCK_T5 && x->m->gated)
        b = 4;
    return &x->c->act[b][regime(x)];
}

/* What a layer of multi-head latent attention saves per token beyond its MLP (`mla` set,
 * bench/trace/README.md): the hidden states, every head's keys without and with RoPE and values
 * (the expanded latent), the query and key/value latents; a frozen base keeps less of the
 * hidden states and of the latents */
static double mla_per_token(const ctx *x, const oomi_act_coef *a)
{
    const oomi_model *m = x->m;
    double H = (double)m->heads, lat = (double)(m->q_lora + m->kv_lora);
    double b = a->mla_h * (double)m->hidden + a->mla_nope * H * (double)m->qk_nope +
               a->mla_rope * H * (double)m->qk_rope + a->mla_v * H * (double)m->v_head +
               a->mla_q_lora * (double)m->q_lora + a->mla_kv_lora * (double)m->kv_lora;
    if (x->frozen)
        b -= a->mla_frozen_h * (double)m->hidden + a->mla_frozen_lora * lat;
    return b;
}

/* bytes saved per token by a layer of MLP width `f` per token, `share` of it a layer with the
 * experts, without the eager score term */
static double per_token_of(const ctx *x, double f, double share)
{
    const oomi_model *m = x->m;
    const oomi_act_coef *a = act_coef(x);
    double qd = (double)(m->heads * m->head_dim), kvd = (double)(m->kv_heads * m->head_dim);
    double h = (double)m->hidden;
    double b = a->h * h + a->q * qd + a->kv * kvd + a->f * f;
    if (x->w->k.attention != OOM_ATTENTION_EAGER)
        b += a->lse * (double)m->heads;
    else
        b += a->eager_h * h + a->eager_q * qd + a->eager_kv * kvd + a->eager_f * f;
    if (m->qk_norm)
        b += (a->qk_norm - (x->frozen ? a->frozen_qk_norm : 0)) * (qd + kvd);
    if (x->frozen)
        b -= a->frozen_h * h + a->frozen_q * qd + a->frozen_f * f;
    if (m->kv_lora > 0 && a->mla) /* multi-head latent attention instead of h, q and kv */
        b += mla_per_token(x, a) - (a->h - (x->frozen ? a->frozen_h : 0)) * h -
             (a->q - (x->frozen ? a->frozen_q : 0)) * qd - a->kv * kvd;
    if (share > 0) {
        double k = (double)m->routed, kh = a->moe_kh - (x->frozen ? a->moe_frozen_kh : 0);
        /* Llama 4 under autocast: the repeated input stays fp32 (4 bytes, kept for the score's
         * gradient) and a trained expert keeps its 16-bit cast (2 more); the other regimes'
         * sets hold as fitted (oomless trace, a Llama 4 config of two expert layers, amp-bf16
         * LoRA: 320 MiB of fp32 repeats at 512 tokens where bf16 keeps 160) */
        if (m->moe_repeat_input && regime(x) == OOMI_REGIME_AMP)
            kh = x->frozen ? 4.0 : 6.0;
        b += share * (kh * k * h + a->moe_k * k);
    }
    if (x->w->k.batch == 1)
        b += x->w->k.attention == OOM_ATTENTION_EAGER ? a->b1_eager_q * qd + a->b1_eager_kv * kvd
                                                      : a->b1_q * qd + a->b1_kv * kvd;
    return b;
}

/* bytes saved per token by one (encoder or only) layer, averaged over the layers (the MLP
 * width and the experts' terms are) */
static double layer_per_token(const ctx *x)
{
    const oomi_model *m = x->m;
    return per_token_of(x, m->ffn_tok_mean,
                        m->sparse_layers > 0 ? (double)m->sparse_layers / (double)m->layers : 0);
}

/* whether layers with the experts alternate with dense ones (Llama 4 Maverick, DeepSeek's first
 * layers), which are then counted each as it is, not as the average layer */
static bool mixed_layers(const oomi_model *m)
{
    return m->sparse_layers > 0 && m->sparse_layers < m->layers;
}

/* bytes saved per token by a layer with the experts and by a dense one */
static void per_token_kinds(const ctx *x, double *sparse, double *dense)
{
    const oomi_model *m = x->m;
    *sparse = per_token_of(x, (double)m->routed * (double)m->ffn + (double)m->shared_ffn, 1);
    *dense = per_token_of(x, (double)m->ffn_dense, 0);
}

/* ... and by the layer that saves the most: what one recomputed layer holds (oomless trace, a
 * Llama 4 config of two dense and two expert layers, amp-bf16 LoRA 2 x 1024 with full
 * checkpointing: at the peak an expert layer's recomputed tensors, 3.9 GiB, where the average
 * layer's are 1.2 GiB) */
static double heaviest_per_token(const ctx *x)
{
    double sparse, dense;
    if (!mixed_layers(x->m))
        return layer_per_token(x);
    per_token_kinds(x, &sparse, &dense);
    return sparse > dense ? sparse : dense;
}

/* attention weights kept per layer for `q` query and `k` key tokens per sample: eager
 * attention's, or SDPA's where no fused kernel takes the shapes (math path: sdpa_score) */
static double scores(const ctx *x, double q, double k)
{
    double per;
    if (x->w->k.checkpointing == OOM_CHECKPOINTING_SELECTIVE)
        return 0;
    per = x->w->k.attention == OOM_ATTENTION_EAGER  ? act_coef(x)->score
          : x->w->k.attention == OOM_ATTENTION_SDPA ? act_coef(x)->sdpa_score
                                                    : 0;
    /* a softmax in the compute dtype keeps one 16-bit tensor, which the matmul after it saves
     * too; under autocast the softmax runs in fp32 all the same (autocast's fp32 list) */
    if (x->w->k.attention == OOM_ATTENTION_EAGER && x->m->eager_softmax_compute &&
        regime(x) == OOMI_REGIME_16BIT)
        per = x->e;
    return per * (double)x->w->k.batch * (double)x->m->heads * q * k;
}

/* attention weights of one layer when they are materialised (eager, SDPA's math path), else 0 */
static double scores_elems(const ctx *x)
{
    double s = (double)x->w->k.seq_len;
    const oomi_act_coef *a = act_coef(x);
    if (x->w->k.attention == OOM_ATTENTION_EAGER ||
        (x->w->k.attention == OOM_ATTENTION_SDPA && a->sdpa_score > 0))
        return (double)x->w->k.batch * (double)x->m->heads * s * s;
    return 0;
}

/* bytes of one attention score's gradient: SDPA's math path computes 16-bit inputs in fp32
 * (PyTorch's _scaled_dot_product_attention_math upcasts half and bfloat16 query/key/value);
 * eager attention in the compute dtype */
static double score_size(const ctx *x)
{
    return x->w->k.attention == OOM_ATTENTION_SDPA ? 4.0 : x->e;
}

/* LoRA's own saved tensors per token (whole model): the adapter-dtype input copies, A's output */
static double lora_per_token(const ctx *x)
{
    double in;
    if (!x->lora_on)
        return 0;
    if (x->ab < 4) /* 16-bit adapters: the input cast to them where the compute dtype differs;
                    * with dropout the 1-byte mask and the dropped copy lora_A saves */
        in = x->w->lora_dropout > 0 ? 1 + x->ab : x->e != x->ab ? x->ab : 0;
    else if (x->w->lora_dropout > 0)
        in = x->c->lora_dropout_in[x->e < 4 ? 0 : 1]; /* the mask and the dropped copy */
    else
        in = x->e < 4 ? x->c->lora_in_fp32 : 0;
    return in * (double)x->lora.in_elems +
           8.0 * (double)x->w->lora_rank * (double)x->lora.n_adapted;
}

/* --checkpointing op-sac: the bytes per token that torchtitan's op-level selective policy keeps
 * of one layer beside its input (SelectiveAC, torchtitan/distributed/activation_checkpoint.py,
 * pytorch/torchtitan b5bcd76): the outputs of the mm ops save every second one (counted from 1
 * in the order the block runs them: q, k, v, o, the MLP's, each adapted linear's base mm then
 * LoRA's A and B), of every addmm (a linear with a bias, saved uncounted), and of the attention:
 * the fused kernel's output and fp32 log-sum-exp per head and row (in rows of 32 for the
 * memory-efficient kernel that fp32 runs), or the matmuls' (eager: the scores, bmm, saved
 * uncounted) or the math path's output and weights. Outputs are in the compute dtype, 16-bit
 * under autocast; LoRA's adapters compute in fp32 outside autocast (PEFT's
 * autocast_adapter_dtype). A Llama-style dense block (workload_set.c refuses the others):
 * oomless trace, Llama-3.2-1B bf16 4 x 1024, 29824 bytes per token per layer, as counted here. */
static double op_sac_per_token(const ctx *x, double *recomputed)
{
    const oomi_model *m = x->m;
    double e = amp(x) ? 2 : x->e, le = amp(x) ? 2 : 4, b = 0, s = (double)x->w->k.seq_len;
    double qd = (double)(m->heads * m->head_dim), H = (double)m->heads, r = x->w->lora_rank;
    long mms = 0;
    size_t i;
    *recomputed = 0; /* multiply-adds per token of the mms recomputed */
    for (i = 0; i < m->nlinears; i++) {
        const oomi_linear *l = &m->linears[i];
        double in = (double)l->din, out = (double)l->dout;
        if (l->count != m->layers)
            continue;
        if (l->bias || ++mms % 2)
            b += e * out;
        else
            *recomputed += in * out;
        if (x->lora_on && oomi_lora_adapts(m, x->w->lora_targets, l->name)) {
            if (++mms % 2)
                b += le * r;
            else
                *recomputed += in * r;
            if (++mms % 2)
                b += le * out;
            else
                *recomputed += r * out;
        }
    }
    if (scores_elems(x) > 0)
        return b + e * qd + (x->w->k.attention == OOM_ATTENTION_EAGER ? e : score_size(x)) * H * s;
    return b + e * qd + 4.0 * H * (x->e >= 4 && !amp(x) ? ceil(s / 32) * 32 / s : 1);
}

/* the layers full checkpointing wraps: every one, or one in N with every:N / nth:N
 * (workload_set.c); *above: the layers above the last one wrapped (not checkpointed). 0 without */
static double ckpt_layers(const ctx *x, double *above)
{
    long L = x->m->layers + x->m->enc_layers, n = x->w->ckpt_every > 1 ? x->w->ckpt_every : 1;
    long c = x->w->ckpt_nth ? L / n : (L + n - 1) / n;
    long top = x->w->ckpt_nth ? n * c - 1 : n * (c - 1); /* 0-based index of the last wrapped */
    *above = 0;
    if (x->w->k.checkpointing != OOM_CHECKPOINTING_FULL || L <= 0 || c <= 0)
        return 0;
    *above = (double)(L - 1 - top);
    return (double)c;
}

/* the share of the layers that full checkpointing wraps */
static double ckpt_share(const ctx *x)
{
    double above, L = (double)(x->m->layers + x->m->enc_layers);
    return L > 0 ? ckpt_layers(x, &above) / L : 0;
}

/* Where layers with the experts alternate with dense ones and every:N or nth:N leaves some
 * unwrapped: how many layers are left unwrapped (*left) and how many of those have the experts
 * (*left_sparse), and the same of the layers above the last one wrapped. false where the layers
 * are alike, nothing is wrapped, or the model's map of its expert layers does not reach */
static bool unwrapped_mix(const ctx *x, long *left, long *left_sparse, long *top_left,
                          long *top_sparse)
{
    const oomi_model *m = x->m;
    long L = m->layers, n = x->w->ckpt_every > 1 ? x->w->ckpt_every : 1, last, i;
    double above;
    *left = *left_sparse = *top_left = *top_sparse = 0;
    if (m->enc_layers > 0 || !mixed_layers(m) || L > OOMI_SPARSE_MAP_LAYERS ||
        ckpt_layers(x, &above) <= 0)
        return false;
    last = L - 1 - (long)above;
    for (i = 0; i < L; i++) {
        bool wrapped = x->w->ckpt_nth ? (i + 1) % n == 0 : i % n == 0;
        bool sparse = (m->sparse_map[i / 8] >> (i % 8)) & 1;
        if (wrapped)
            continue;
        *left += 1, *left_sparse += sparse;
        if (i > last)
            *top_left += 1, *top_sparse += sparse;
    }
    return *left > 0;
}

/* ---- sequence packing (docs/estimate.md, "Sequence packing") ----------------------------------
 */

/* the micro-batch as the model sees it: padding-free one row of all its tokens, block-mask
 * `batch` rows of packs (oomi_packed_shape); every per-token term then counts the packed tokens
 * and every attention-score term (eager) the packed row's length squared: eager attention
 * computes the whole row's scores and masks the other documents' away */
static void packed_batch(oom_workload *wb)
{
    long rows, len;
    if (wb->packing == OOMI_PACKING_NONE)
        return;
    oomi_packed_shape(wb, &rows, &len);
    wb->k.batch = rows, wb->k.seq_len = len;
}

/* What SDPA keeps per layer for a packed row's document mask. transformers builds a 4D boolean
 * mask (rows x 1 x len x len) from the restarting position ids (masking_utils.py,
 * find_packed_sequence_indices and sdpa_mask, transformers 5.23); no flash kernel takes a mask,
 * so CUDA runs the memory-efficient one, after converting the boolean mask to an additive one in
 * the query's dtype in every call (convert_boolean_attn_mask, PyTorch
 * aten/src/ATen/native/transformers/attention.cpp), which that kernel saves for its backward.
 * With a mask transformers does not pass enable_gqa (sdpa_attention.py, use_gqa_in_sdpa), so
 * grouped key/value heads are repeated to the query heads and the copies saved instead (2 x
 * (q width - k/v width) more per token; oomless trace, Llama-3.2-1B bf16 2 x 1024: 320 MiB more
 * padding-free, 256 MiB block-mask, both to the MiB) where unpacked 16-bit rows would run flash
 * attention on the grouped heads as they are (fp32 runs the memory-efficient kernel on repeated
 * heads either way). Flash attention (varlen: cu_seqlens from the position ids) and eager
 * attention (its mask and scores are there unpacked) add nothing. */
static double doc_mask_per_layer(const ctx *x)
{
    const oomi_model *m = x->m;
    double rows = (double)x->w->k.batch, len = (double)x->w->k.seq_len, ea = amp(x) ? 2 : x->e;
    double qd = (double)(m->heads * m->head_dim), kvd = (double)(m->kv_heads * m->head_dim);
    if (x->w->packing == OOMI_PACKING_NONE || x->w->k.attention != OOM_ATTENTION_SDPA)
        return 0;
    return rows * len * len * ea + (kvd < qd && ea < 4 ? rows * len * 2.0 * (qd - kvd) * ea : 0);
}

/* the boolean document mask itself (rows x len x len bytes): an input of every checkpointed
 * layer, which non-reentrant checkpointing keeps until the backward (unless +offload moves the
 * saved inputs to host memory); without checkpointing it is freed with the forward (oomless
 * trace, Llama-3.2-1B LoRA 1 x 8192 padding-free full: 64 MiB) */
static double doc_mask_kept(const ctx *x)
{
    double len = (double)x->w->k.seq_len;
    if (doc_mask_per_layer(x) <= 0 || ckpt_share(x) <= 0 || x->w->ckpt_offload)
        return 0;
    return (double)x->w->k.batch * len * len;
}

/* all saved activations at the end of the forward pass, one layer's (for recompute), and those
 * still saved when the backward reaches the last checkpointed layer (the layers above it, not
 * checkpointed, have been freed by then) */
static void activations(const ctx *x, double *all, double *one, double *at_recompute)
{
    const oomi_model *m = x->m;
    double b = (double)x->w->k.batch, s = (double)x->w->k.seq_len;
    double ds = x->w->decoder_seq ? (double)x->w->decoder_seq : s;
    double per = layer_per_token(x), enc = 0, dec, saved, inputs, final, c = ckpt_share(x);
    double resid = x->e < 4 && !amp(x) ? 2 : 4; /* checkpointed layer inputs */
    double L = (double)(m->layers + m->enc_layers), above, mix_top = 0;
    long left, left_sp, top_left, top_sp;

    if (m->block == OOMI_BLOCK_T5) {
        enc = (double)m->enc_layers * (per * b * s + scores(x, s, s));
        dec = (double)m->layers *
              (per * x->c->decoder_factor * b * ds + scores(x, ds, ds) + scores(x, ds, s));
        *one = per * x->c->decoder_factor * b * ds + scores(x, ds, ds) + scores(x, ds, s);
        if (per * b * s + scores(x, s, s) > *one)
            *one = per * b * s + scores(x, s, s);
    } else {
        ds = s;
        dec = (double)m->layers * (per * b * s + scores(x, s, s) + doc_mask_per_layer(x));
        *one = heaviest_per_token(x) * b * s + scores(x, s, s) + doc_mask_per_layer(x);
    }
    /* the final norm's saved tensors, once (fitted per layer, so not in `per`) */
    final = act_coef(x)->final_h * (double)m->hidden * b * ds;
    /* every layer's saved tensors with LoRA's, and only each layer's input where checkpointed
     * (LoRA's inputs are recomputed with the layer) */
    saved = enc + dec + lora_per_token(x) * b * (m->block == OOMI_BLOCK_T5 ? (s + ds) / 2 : s);
    inputs =
        ((double)m->enc_layers * b * s + (double)m->layers * b * ds) * (double)m->hidden * resid;
    /* GPT-2's training forward fills a KV cache (config use_cache), copies of every layer's keys
     * and values (DynamicLayer.update concatenates onto an empty tensor), which the fitted
     * coefficients hold; GPT2Model hands its blocks no cache once gradient checkpointing is on
     * (past_key_values if not (self.gradient_checkpointing and self.training), transformers 5.23
     * models/gpt2/modeling_gpt2.py), so the layers left unwrapped by every:N keep none (oomless
     * trace, GPT-2 4 x 1024 every:2 and every:12: 4 bytes per token per hidden element less per
     * such layer in bf16 and amp-bf16). A packed batch is run without a cache (TRL's
     * SFTTrainer.compute_loss sets use_cache=False), so it keeps none either; under eager
     * attention the cache costs nothing there (oomless trace, GPT-2 2 x 256 bf16 and amp-bf16:
     * the same activations with and without it, to 2 KiB). */
    if ((c > 0 ||
         (x->w->packing != OOMI_PACKING_NONE && x->w->k.attention != OOM_ATTENTION_EAGER)) &&
        !strcmp(m->family, "gpt2"))
        saved -= (double)m->layers * b * ds * 2.0 * (double)(m->kv_heads * m->head_dim) *
                 (amp(x) ? 2 : x->e);
    /* +offload: the wrapped layers' inputs wait in host memory (transformers'
     * activation_checkpointing_enable(offload=True) runs each checkpoint under save_on_cpu); the
     * recompute brings one back to the device (oomless trace, Llama-3.2-1B bf16 4 x 1024 full:
     * the 268 MB of layer inputs gone, the final norm's 67 MB left) */
    *all = (x->w->ckpt_offload ? 0 : c) * inputs + (1 - c) * saved + final;
    /* the unwrapped layers as they are, not as the average layer: Llama 4 Maverick's every:2
     * wraps the dense layers and leaves every expert layer (oomless trace, a Llama 4 config of
     * two dense and two expert layers, LoRA bf16 2 x 1024 every:2: the estimate was 8 % low) */
    if (unwrapped_mix(x, &left, &left_sp, &top_left, &top_sp)) {
        double ps, pd;
        per_token_kinds(x, &ps, &pd);
        *all +=
            b * ds * ((double)left_sp * ps + (double)(left - left_sp) * pd - (double)left * per);
        mix_top = b * ds *
                  ((double)top_sp * ps + (double)(top_left - top_sp) * pd - (double)top_left * per);
    }
    if (x->w->ckpt_op && c > 0) { /* what the policy keeps; the recomputation reuses it */
        double mm, kept = op_sac_per_token(x, &mm);
        *all += L * b * ds * kept;
        *one -= b * ds * kept;
    }
    /* ... but for a frozen base a Llama-style model's first layer input is the embedding output
     * made to require a gradient (enable_input_require_grads), a leaf that autograd holds anyway:
     * it stays where the first layer is wrapped (oomless trace, Llama-3.2-1B LoRA 2 x 256
     * full+offload). GPT-2 adds its position embeddings first, and that sum leaves. */
    if (c > 0 && x->w->ckpt_offload && x->frozen && m->block == OOMI_BLOCK_LLAMA &&
        !(x->w->ckpt_nth && x->w->ckpt_every > 1))
        *all += inputs / L;
    *all += doc_mask_kept(x);
    *at_recompute = *all;
    if (c > 0) {
        *one += lora_per_token(x) * b * ds / L + (x->w->ckpt_offload ? inputs / L : 0);
        ckpt_layers(x, &above);
        *at_recompute -= above / L * saved + mix_top;
    }
}

/* tokens the loss scores: GRPO's completions only (logits_to_keep), every position otherwise
 * (the prompt/completion split of a DPO or KTO sample is the data's: all of --seq is counted) */
static double loss_tokens(const ctx *x)
{
    double s = (double)x->w->k.seq_len;
    if (x->w->objective == OOMI_OBJECTIVE_GRPO)
        s = x->w->completion_len ? (double)x->w->completion_len : floor(s / 2);
    return (double)x->w->k.batch * s;
}

/* one tile of TRL's fused LM head: 4096 tokens x 32768 vocabulary entries in the compute dtype
 * (TOKEN_CHUNK_SIZE and _CHUNKED_LOGPROB_CHUNK_SIZE, trl/kernels/chunked_logprob.py and
 * trl/trainer/utils.py add_fused_lm_head, trl 1.16.0) */
static double fused_tile(const ctx *x)
{
    double t = loss_tokens(x), v = (double)x->m->vocab;
    return (t < 4096 ? t : 4096) * (v < 32768 ? v : 32768) * (amp(x) ? 2 : x->e);
}

/* TRL's fused LM head (DPO, IPO, KTO, GRPO): the forward keeps the fp32 log-normaliser and the
 * log-probs per token; its backward makes the fp32 gradient of the hidden states (and of the
 * head's weight where the head is trained) beside one tile (ChunkedLogProbFunction.backward) */
static void fused_head(const ctx *x, double *fwd, double *bwd)
{
    double t = loss_tokens(x);
    *fwd = 8.0 * t;
    *bwd = *fwd + 4.0 * t * (double)x->m->hidden + fused_tile(x);
    /* a trained head: its fp32 gradient accumulator, and its cast to the weight's dtype returned
     * beside it (grad_weight.to(weight.dtype); no copy where the weight is fp32) */
    if (!x->frozen)
        *bwd += (4.0 + (param_bytes(x) < 4 ? param_bytes(x) : 0)) * (double)x->m->vocab *
                (double)x->m->hidden;
}

/* logits and the loss path: bytes live at the end of the forward and at the loss backward */
/* The rows of logits the loss holds at once: every target token (the decoder's for T5), one
 * chunk under --loss chunked; 0 where there are no vocabulary logits (classification and base
 * heads, reward models) */
static double logit_rows(const ctx *x)
{
    double tokens =
        (double)x->w->k.batch * (double)(x->w->decoder_seq ? x->w->decoder_seq : x->w->k.seq_len);
    if (x->m->head == OOMI_HEAD_SEQ_CLS || x->m->head == OOMI_HEAD_BASE ||
        x->w->objective == OOMI_OBJECTIVE_REWARD)
        return 0;
    if (x->w->k.loss == OOM_LOSS_CHUNKED && tokens > x->c->chunk_tokens)
        tokens = x->c->chunk_tokens;
    return tokens;
}

static void logits(const ctx *x, double *fwd, double *bwd)
{
    int r = x->prec == OOM_PRECISION_FP32 ? 1 : 0;
    double n = logit_rows(x) * (double)x->m->vocab;
    *fwd = *bwd = 0;
    if (n <= 0)
        return;
    if (x->fused) {
        fused_head(x, fwd, bwd);
        return;
    }
    if (x->w->objective == OOMI_OBJECTIVE_SIMPO || x->w->objective == OOMI_OBJECTIVE_ORPO) {
        /* TRL's CPOTrainer (SimPO) and ORPOTrainer: the model's logits as they come (the compute
         * dtype, 16-bit under autocast), their log-probs by selective_log_softmax's kernel
         * (trl/kernels/logprob_entropy.py: fp32 values per row only, then the logits' gradient
         * beside them in the backward); ORPO's NLL of the chosen half adds a contiguous copy of
         * its logits and cross_entropy's log-softmax of it (in fp32 under autocast: 8 bytes per
         * chosen element then, traced). oomless trace --objective simpo|orpo: the logits at the
         * forward's end and twice them in the backward, ORPO's chosen half beside them */
        double le = amp(x) ? 2 : x->e;
        double nll = x->w->objective == OOMI_OBJECTIVE_ORPO ? (le + (amp(x) ? 6 : le)) * n / 2 : 0;
        *fwd = le * n + nll;
        *bwd = 2 * le * n + nll;
    } else if (x->w->k.loss != OOM_LOSS_CHUNKED &&
               (x->m->head == OOMI_HEAD_MASKED_LM || x->m->head == OOMI_HEAD_SEQ2SEQ_LM)) {
        /* cross_entropy on the logits as they are: in the compute dtype, fp32 under autocast */
        double le = amp(x) ? 4 : x->e;
        *fwd = x->c->ce_fwd * le * n;
        *bwd = x->c->ce_bwd * le * n;
    } else {
        *fwd = x->c->logits_fwd[r] * n;
        *bwd = x->c->logits_bwd[r] * n;
    }
    if (x->m->logit_softcap && x->w->k.loss != OOM_LOSS_CHUNKED) {
        /* the tanh output, kept for its backward (a chunked loss caps inside its chunks) */
        *fwd += x->c->softcap_elems * x->e * n;
        *bwd += x->c->softcap_elems * x->e * n;
    }
}

/* ---- phases ---------------------------------------------------------------------------------- */

static double sum(const mem *p)
{
    return p->w + p->g + p->o + p->a + p->l + p->kv + p->t;
}

static oom_phase training(const ctx *x, mem *peak)
{
    const oom_knobs *k = &x->w->k;
    double grad, state, master, n = x->n, W, G, O, A, A1, Ar, Lf, Lb, Tcast = 0, Tz3 = 0, Tz3e = 0,
                                Topt, live_g, Gb = 0, Tb, Tr, Tsc, Tnh, head = 0, Lh = 0, Tf, Te,
                                Ts, Tfwd, Tgx, Tk = 0;
    const double cast_params = (double)(x->m->params_linear + x->m->params_bmm);
    fsdp2_mem f;
    mem ph[3];
    int i, best = 0;

    train_bytes(x, &grad, &state, &master);
    W = weights(x) + x->wref;
    G = x->trainable * grad;
    O = optimizer_states(x, state, master);
    Topt = x->trainable * state * x->c->opt_temp[k->optimizer];
    if (x->quant) /* one dequantised weight at a time */
        Tcast = dequant_transient(x);
    else if (amp(x)) { /* autocast's 16-bit weight copies, saved for backward; the LM head's too
                        * (torch.bmm's 3-D expert weights are cast as the linears' are) */
        if (x->m->head != OOMI_HEAD_SEQ_CLS && x->m->head != OOMI_HEAD_BASE)
            head = 2.0 * (double)x->m->vocab * (double)x->m->hidden;
        Tcast = 2.0 * cast_params + head;
    }
    /* backward: without checkpointing every copy is saved for it. Checkpointed layers saved only
     * their inputs, so once autocast's cache is gone (the end of the forward) only the head's
     * copy is left for the loss backward, and a recomputed layer makes its own again (oomless
     * trace, Qwen2.5-0.5B amp-bf16, 2026-11-25) */
    Tb = Tr = Tcast;
    if (amp(x) && !x->quant && ckpt_share(x) > 0) { /* the layers not checkpointed keep theirs */
        const oomi_model *m = x->m;
        double per_layer = 2.0 * cast_params / (double)(m->layers + m->enc_layers), above;
        double cs = 2.0 * (double)m->cast_layer_sparse, cd = 2.0 * (double)m->cast_layer_dense;
        long left, left_sp, top_left, top_sp;
        ckpt_layers(x, &above);
        /* Tk: at the first recompute the unwrapped layers above it have had their backward */
        if (unwrapped_mix(x, &left, &left_sp, &top_left, &top_sp)) {
            Tb = head + (double)left_sp * cs + (double)(left - left_sp) * cd;
            Tk = Tb - head - ((double)top_sp * cs + (double)(top_left - top_sp) * cd);
        } else {
            Tb = head + (1 - ckpt_share(x)) * 2.0 * cast_params;
            Tk = Tb - head - above * per_layer;
        }
        /* the recomputed layer's own: the largest where layers with the experts alternate with
         * dense ones (Llama 4: an expert layer's 3.75 GiB of copies at the peak of the trace
         * named at heaviest_per_token) */
        Tr = mixed_layers(m) ? 2.0 * (double)m->params_layer_max : per_layer;
    }
    if (k->sharding >= OOM_SHARDING_ZERO1)
        O /= n, Topt /= n;
    if (k->sharding >= OOM_SHARDING_ZERO2)
        G /= n;
    if (k->sharding == OOM_SHARDING_ZERO3) {
        /* each rank keeps the 16-bit copies of its own shard (DeepSpeed's bf16/fp16 parameters,
         * FSDP's MixedPrecision); what the coordinator has gathered, the buckets and the small
         * tensors it keeps whole are DeepSpeed's (estimate_zero3.c): at the turn from the
         * forward to the backward, and after the backward */
        W /= n, Tcast /= n, Tb /= n, Tr /= n;
        Tz3 = x->z3.turn;
        Tz3e = x->z3.persistent + x->z3.bucket + x->z3.end;
    }
    if (k->sharding == OOM_SHARDING_NONE && n > 1) /* DDP's buckets: allocated once, kept */
        Gb = G * x->c->ddp_buckets;
    /* what sharding adds at the forward end, backward end and step */
    Tf = Tz3, Te = Ts = Tz3e;
    if (x->fsdp2) {
        fsdp2_of(x, &f);
        W = f.w + x->wref, G = f.g, O = f.o, Topt = f.topt, Tcast = Tb = Tr = 0;
        Tz3 = f.bwd, Tf = f.fwd, Te = f.end, Ts = 0;
    }
    if (k->offload != OOM_OFFLOAD_NONE)
        O = 0, Topt = 0;
    if (k->offload == OOM_OFFLOAD_OPTIMIZER_PARAMS)
        W = 0, G = 0;
    O *= 1 - paged_share(x); /* paged states: outside the device's budget */
    activations(x, &A, &A1, &Ar);
    logits(x, &Lf, &Lb);
    live_g = (k->grad_accum > 1 || x->w->keep_grads ? G : 0) + Gb;
    /* autocast caches the casts of leaves that require grad until the forward ends; a frozen
     * base's copies live only where the backward saved them, as at the backward's start (oomless
     * trace, Llama 4 amp-bf16 LoRA with full checkpointing: the head's copy alone) */
    Tfwd = amp(x) && !x->quant && x->frozen ? Tb : Tcast;
    /* forward end: gradients are alive only under accumulation (zero_grad(set_to_none) after
     * each step) or when kept (set_to_none=False); optimizer states exist from the first step
     */
    ph[0] = (mem){W, live_g, O, A, Lf, 0, Tfwd + Tf};
    /* the reference's no-grad forward comes after the policy's, whose saved activations wait for
     * the backward (DPOTrainer._compute_loss, KTOTrainer._compute_loss): on top of the forward end,
     * the larger of one layer's working set (bounded by what a layer saves with gradients) and the
     * final hidden states with a tile of the fused head (oomless trace, SmolLM2-135M DPO LoRA
     * 2 x 256: the tile, 67 MB, is the whole of it) */
    if (x->ref_fwd) {
        double end =
            (double)k->batch * (double)k->seq_len * (double)x->m->hidden * x->e + fused_tile(x);
        ph[0].t += A1 > end ? A1 : end;
    }
    /* backward: the largest of three moments. The loss gradient, with every activation still
     * saved; under full checkpointing, the first recomputed layer (the loss path is freed by
     * then: oomless trace shows the two never overlap); the end, all gradients with one layer's
     * activations */
    ph[1] = (mem){W, live_g, O, A, Lb, 0, Tb + Tz3};
    /* where attention keeps its weights (eager, SDPA's math path), the last layer's backward:
     * every activation still saved and the gradients of that layer's attention weights in
     * flight (two score-sized tensors; oomless trace, Falcon-7B fp32 at 4 x 1024: 2.36 GiB) */
    Tsc = x->c->score_grads * scores_elems(x) * score_size(x);
    /* by then the loss path is freed; the head's backward left its weight's gradient where the
     * head is trained (oomless trace, Falcon-7B fp32 full 4 x 1024: the 1127 MiB gradient of
     * the output embedding; nothing under LoRA, whose base is frozen), and autocast's copy of
     * the head's weight is gone with the head's backward (amp-bf16: 14.35 GiB of temporaries
     * at that moment, the layers' copies and the score gradients) */
    if (!x->frozen && x->m->head != OOMI_HEAD_SEQ_CLS && x->m->head != OOMI_HEAD_BASE)
        Lh = (double)x->m->vocab * (double)x->m->hidden * grad;
    Tnh = Tb - (k->sharding == OOM_SHARDING_ZERO3 ? head / n : head);
    if (Tnh < 0)
        Tnh = 0;
    if (Tsc > 0 && W + live_g + O + A + Lh + Tnh + Tsc + Tz3 > sum(&ph[1]))
        ph[1] = (mem){W, live_g, O, A, Lh, 0, Tnh + Tsc + Tz3};
    /* under full checkpointing, the first recomputed layer: its activations made again (by the
     * backward, so counted with its temporaries, as the trace counts them), and where it keeps
     * attention weights, their gradients in flight as above */
    /* ... and where every expert runs on every token (Llama 4), the gradient of the experts'
     * gate and up outputs (each expert's 2 x its width per token, 16-bit under autocast) in
     * flight beside them (oomless trace, a Llama 4 config of 16 experts, LoRA amp-bf16 2 x 1024
     * with full checkpointing: 1 GiB of it at the peak) */
    Tgx = x->m->moe_repeat_input && ckpt_share(x) > 0
              ? (double)k->batch * (double)k->seq_len * (double)x->m->routed * 2.0 *
                    (double)x->m->ffn * (amp(x) ? 2.0 : x->e)
              : 0;
    if (ckpt_share(x) > 0 && W + live_g + O + Ar + A1 + Tk + Tr + Tgx + Tsc + Tz3 > sum(&ph[1]))
        ph[1] = (mem){W, live_g, O, Ar, 0, 0, A1 + Tk + Tr + Tgx + Tsc + Tz3};
    if (W + G + Gb + O + A1 + Te > sum(&ph[1]))
        ph[1] = (mem){W, G + Gb, O, A1, 0, 0, Te};
    ph[2] = (mem){W, G + Gb, O, 0, 0, 0, Topt + Ts};
    for (i = 1; i < 3; i++)
        if (sum(&ph[i]) > sum(&ph[best]))
            best = i;
    *peak = ph[best];
    return (oom_phase)best;
}

/* Tensor parallelism (Megatron-LM's split, as vLLM does it): the linears, the embedding and the
 * LM head are split over the tp GPUs (ColumnParallelLinear / RowParallelLinear,
 * VocabParallelEmbedding, vllm/model_executor/layers/); the norms are replicated. Query heads
 * are divided by tp; KV heads too, but never below one per GPU: where there are fewer KV heads
 * than GPUs each is replicated (num_kv_heads = max(1, total_num_kv_heads // tp_size),
 * vllm/model_executor/models/llama.py, LlamaAttention). */
static double tp_weights(const ctx *x)
{
    const oomi_model *m = x->m;
    double all = weights(x), tp = (double)x->w->tp;
    double kept = (double)(m->params - m->params_linear - m->params_embed - m->params_lm_head);
    if (tp <= 1 || kept < 0)
        return all;
    kept *= x->quant ? unquantized_bytes(x) : param_bytes(x); /* norms: as unquantised */
    return (all - kept) / tp + kept;
}

static double tp_kv_heads(const ctx *x)
{
    long kv = x->m->kv_heads > 0 ? x->m->kv_heads : x->m->heads;
    return kv >= x->w->tp ? (double)(kv / x->w->tp) : 1;
}

/* What a serving engine allocates per layer type (vLLM's KV-cache specs, vllm/v1/
 * kv_cache_interface.py): FullAttentionSpec, a page of block_size tokens x num_kv_heads x (head
 * size of K + of V) x dtype bytes per layer; SlidingWindowSpec, the same page but only the
 * blocks of the last sliding_window tokens of a sequence (the scheduler frees the ones before,
 * vllm/v1/core/single_type_kv_cache_manager.py, SlidingWindowManager); MLAAttentionSpec, one
 * head (num_kv_heads 1) of kv_lora_rank + qk_rope_head_dim, no separate V. MLA's latent is not
 * split over tensor-parallel GPUs: each holds all of it (vLLM's ModelConfig.get_num_kv_heads is
 * 1 for MLA). transformers' DynamicCache keeps every token of every layer during a prefill; for
 * MLA it too stores the latent and the RoPE key, before their expansion to the heads
 * (modeling_deepseek_v3.py, DeepseekV3Attention.forward: "Cache read / write is performed while
 * latent KV is still compressed"; the tracer's KV cache of a 3-layer DeepSeek-V3 at 2 x 1024
 * tokens is 3 x 2048 x 576 x 2 bytes). */
void oomi_kv_layout_of(oomi_kv_layout *out, const oom_workload *w)
{
    const oomi_model *m = w->model;
    long tp = w->tp > 1 ? w->tp : 1;
    long kv = m->kv_heads > 0 ? m->kv_heads : m->heads;

    memset(out, 0, sizeof(*out));
    if (w->k.method != OOM_METHOD_INFERENCE || m->block == OOMI_BLOCK_BERT)
        return;
    out->vllm = !w->kv_transformers;
    out->latent = m->kv_lora > 0;
    out->full = m->layers;
    if (out->vllm && m->window > 0 && m->window_layers > 0) {
        out->sliding = m->window_layers;
        out->full = m->layers - m->window_layers;
        out->window = m->window;
    }
    if (out->latent)
        out->elems = (double)(m->kv_lora + m->qk_rope);
    else /* KV heads divided by tp but never below one per GPU (see tp_kv_heads) */
        out->elems = 2.0 * (kv >= tp ? (double)(kv / tp) : 1) * (double)m->head_dim;
}

double oomi_kv_bytes(const oomi_kv_layout *kv, double batch, double seq, double e)
{
    double win = kv->window > 0 && (double)kv->window < seq ? (double)kv->window : seq;
    return ((double)kv->full * seq + (double)kv->sliding * win) * kv->elems * batch * e;
}

/* The prefill's working set fitted on the trace (bench/trace/fit_inference.py): the largest of
 * the MLP moment (with experts: a dense layer's MLP, and a layer with experts, which keeps
 * moe_kh elements per top-k x hidden element), and the attention moment where attention weights
 * are kept (eager, SDPA's math path) or where multi-head latent attention's expanded heads (per
 * element of heads x (2 x query/key width + value width)) outgrow the MLP's */
static double fitted_prefill(const ctx *x, const oomi_infer_coef *c, double b, double s)
{
    const oomi_model *m = x->m;
    double tp = (double)x->w->tp, heads = (double)m->heads / tp, h = (double)m->hidden;
    double f = m->ffn_tok_max / tp, a = 0, per = 0, hc = 0, act, att, hd = 0;

    if (c->moe_kh > 0 && m->sparse_layers > 0) {
        double sparse = c->h * h + c->moe_kh * (double)m->routed * h;
        f = m->sparse_layers < m->layers ? (double)m->ffn_dense / tp : 0;
        act = b * s * (c->h * h + c->f * f > sparse ? c->h * h + c->f * f : sparse) * x->e;
    } else {
        act = b * s * (c->h * h + c->f * f) * x->e;
    }
    if (x->w->k.attention == OOM_ATTENTION_EAGER)
        a = c->eager_a, per = c->eager_score, hc = c->eager_heads;
    else /* SDPA, and flash attention for the expanded heads (no weights kept) */
        a = x->w->k.attention == OOM_ATTENTION_SDPA ? c->sdpa_a : 0,
        per = x->w->k.attention == OOM_ATTENTION_SDPA ? c->sdpa_score : 0, hc = c->sdpa_heads;
    if (m->kv_lora > 0)
        hd = heads * (2.0 * (double)(m->qk_nope + m->qk_rope) + (double)m->v_head);
    att = b * s * (a * h + hc * hd) * x->e + per * b * heads * s * s;
    return (per > 0 || hc * hd > 0) && att > act ? att : act;
}

static oom_phase inference(const ctx *x, mem *peak)
{
    const oomi_model *m = x->m;
    double b = (double)x->w->k.batch, s = (double)x->w->k.seq_len, tp = (double)x->w->tp;
    double ds = x->w->decoder_seq ? (double)x->w->decoder_seq : s;
    double kvd = tp_kv_heads(x) * (double)m->head_dim, f = m->ffn_tok_max / tp;
    double heads = (double)m->heads / tp;
    double kv = 0, act, t = 0, sc = 0, lg = 0;
    bool every_expert = m->sparse_layers > 0 && m->routed > m->topk;
    oomi_kv_layout lay;
    size_t i;

    if (every_expert && !x->w->kv_transformers) {
        /* a serving engine dispatches each token to its top-k experts (vLLM's FusedMoE), where
         * transformers' Llama4TextMoe runs them all */
        double sparse = (double)m->topk * (double)m->ffn + (double)m->shared_ffn;
        f = (m->sparse_layers < m->layers && (double)m->ffn_dense > sparse ? (double)m->ffn_dense
                                                                           : sparse) /
            tp;
        every_expert = false;
    }

    if (m->block == OOMI_BLOCK_T5) {
        kv = (double)m->layers * 2 * kvd * b * (ds + s) * x->e; /* self + cross caches */
    } else {
        oomi_kv_layout_of(&lay, x->w);
        kv = oomi_kv_bytes(&lay, b, s, x->e);
    }
    for (i = 0; i < x->c->ninfer; i++)
        if (!strcmp(x->c->infer[i].model_type, m->family))
            break;
    if (i < x->c->ninfer) {
        act = fitted_prefill(x, &x->c->infer[i], b, s);
    } else {
        act = b * s * (x->c->infer_h * (double)m->hidden + x->c->infer_f * f) * x->e;
        if (every_expert) {
            /* experts run on every token (transformers' Llama4TextMoe): the input repeated for
             * each expert, its gate/up projection (2 x ffn), the gate's activation and its
             * product with up (ffn each) are alive together before down_proj, per expert and
             * token, beside the layer's hidden states (bench/trace/llama4-small.json) */
            double every = b * s *
                           (x->c->infer_h * (double)m->hidden +
                            (double)m->routed * ((double)m->hidden + 4.0 * (double)m->ffn / tp)) *
                           x->e;
            act = every > act ? every : act;
        }
        if (x->w->k.attention == OOM_ATTENTION_EAGER ||
            (x->w->k.attention == OOM_ATTENTION_SDPA && act_coef(x)->sdpa_score > 0))
            sc = b * heads * s * s * (x->e + 4); /* scores + fp32 softmax */
    }
    if (m->head == OOMI_HEAD_MASKED_LM) /* every position's logits, in the compute dtype */
        lg = b * s * (double)m->vocab * x->e;
    else if (m->head != OOMI_HEAD_SEQ_CLS && m->head != OOMI_HEAD_BASE)
        lg = b * (double)m->vocab * 4; /* last position's logits in fp32 */
    if (m->head == OOMI_HEAD_MASKED_LM) {
        /* the logits come after the layers are done: the larger of the two moments, the
         * head's transform output beside its logits */
        if (lg > act + sc)
            act = b * s * (double)m->hidden * x->e, sc = 0;
        else
            lg = 0;
    }
    if (amp(x) || x->quant) /* one 16-bit weight copy at a time (its tp-th part) */
        t = (x->quant ? dequant_transient(x) : 2.0 * max_linear(m)) / tp;
    *peak = (mem){tp_weights(x), 0, 0, act + sc, lg, kv, t};
    return OOM_PHASE_PREFILL;
}

/* ---- allocator, overhead, result ------------------------------------------------------------- */

/* the CUDA context, its kernels and NCCL's buffers (estimate_overhead.c) */
static double context_bytes(const ctx *x)
{
    oomi_overhead o;
    return oomi_overhead_of(&o, x->w) ? 0 : o.total;
}

static uint64_t to_bytes(double v)
{
    if (!(v > 0))
        return 0;
    if (v >= 1152921504606846976.0) /* 2^60: absurd inputs saturate; sums stay below 2^63 */
        return (uint64_t)1 << 60;
    return (uint64_t)llround(v);
}

/* One fp32 logits tensor of the loss (a chunk of it under --loss chunked): the largest blocks
 * a training step allocates and frees, whose segments the allocator keeps */
static double logits_tensor(const ctx *x)
{
    if (x->fused) /* the fused head's largest blocks: the hidden gradient and a tile */
        return (4.0 * loss_tokens(x) * (double)x->m->hidden + fused_tile(x)) / 4.0;
    return logit_rows(x) * (double)x->m->vocab * 4;
}

/* Reserved = allocated + the cached blocks the allocator cannot hand back to the request that
 * makes the peak, rounded up to its 2 MiB segments. Measured on an H100 (torch 2.11, 50 cases,
 * bench/accuracy/h100-2026-11-25.csv; fitted on the three quarters not held back,
 * bench/accuracy/fit_allocator.py): at a forward/backward peak of training, about 1.35 fp32
 * logits tensors (the loss path's large blocks: upcast, log-softmax, gradient); at an
 * optimizer peak, the step's temporaries come in new segments beside the cached ones (1.4 x
 * them); both over a floor (50 MiB on the H100); in a prefill, 40 % of the transient part.
 * Per-tensor waste is not modelled: a 30B MoE with 18,000 weight tensors left 0.02 GiB between
 * reserved and allocated. */
static double reserved(const ctx *x, const mem *p, double allocated, oom_phase phase)
{
    const oomi_coef *c = x->c;
    double lt = x->train ? logits_tensor(x) : 0, cache;
    if (x->train && phase == OOM_PHASE_OPTIMIZER)
        cache = c->blocks_floor + c->blocks_optimizer * p->t;
    else if (lt > 0)
        cache = c->blocks_floor + c->blocks_logits * lt;
    else
        cache = c->blocks_transient * (p->a + p->l + p->t + p->kv);
    return ceil((allocated + cache) / c->round) * c->round;
}

/* a no-grad reference forward in every step (DPO, IPO, KTO with a reference not precomputed) */
static bool reference_forward(const oom_workload *w)
{
    return oomi_reference_of(w) != OOMI_REFERENCE_NONE && !w->precompute_ref &&
           w->objective != OOMI_OBJECTIVE_GRPO;
}

double oomi_estimate_passes(const oom_workload *w)
{
    bool lora = w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;
    return (lora ? 2 : 3) + (reference_forward(w) ? 1 : 0);
}

static void flops(oom_estimate *out, const ctx *x)
{
    const oomi_model *m = x->m;
    const oom_knobs *k = &x->w->k;
    double N = (double)(m->params_active - m->params_embed);
    double attn =
        2.0 * (double)(m->layers + m->enc_layers) * x->context * (double)(m->heads * m->head_dim);
    double fwd = 2 * N + attn, mult, again = ckpt_share(x), mm;
    /* op-sac recomputes the mms it does not keep, not the attention nor the others' FLOPs */
    if (x->train && x->w->ckpt_op && k->checkpointing == OOM_CHECKPOINTING_FULL) {
        op_sac_per_token(x, &mm);
        again = 2.0 * mm * (double)m->layers / fwd;
    }
    if (!x->train)
        mult = 1;
    else
        mult = oomi_estimate_passes(x->w) + again; /* the checkpointed layers' forward again */
    out->flops_per_token = fwd * mult;
    out->tokens_per_step = (uint64_t)k->batch * (uint64_t)k->seq_len * (uint64_t)k->grad_accum;
    out->flops_per_step = out->flops_per_token * (double)out->tokens_per_step;
}

/* a reference copy's weights: the model at --reference-precision (as the policy's by default),
 * without adapters; ZeRO-3 shards it as the policy (prepare_deepspeed, trl/models/utils.py) */
static double reference_weights(const ctx *x)
{
    ctx r = *x;
    oom_precision p = x->w->ref_precision;
    if (oomi_reference_of(x->w) != OOMI_REFERENCE_COPY || x->w->precompute_ref)
        return 0;
    r.lora_on = false;
    if (p != OOM_PRECISION_AUTO) {
        r.prec = p;
        r.quant = p == OOM_PRECISION_INT8 || p == OOM_PRECISION_4BIT;
        r.nf4 = p == OOM_PRECISION_4BIT && x->m->quant_bytes <= 0;
        r.dq = r.nf4 && oomi_double_quant(x->w);
    }
    return weights(&r) / (x->w->k.sharding == OOM_SHARDING_ZERO3 ? x->n : 1);
}

/* GRPO's generation (transformers' generate, no vLLM): one call for the whole generation batch,
 * per_device_train_batch_size x steps_per_generation completions (steps_per_generation defaults
 * to gradient_accumulation_steps: GRPOConfig.__post_init__, GRPOTrainer._generate_single_turn),
 * each with its KV cache to the full --seq, the prompt's prefill transient; the optimizer states
 * are kept, the gradients freed by the previous step (zero_grad(set_to_none=True)) */
static void generation(const ctx *x, mem *out)
{
    oom_workload g = *x->w;
    ctx y = *x;
    mem p;
    double s = (double)x->w->k.seq_len,
           comp = x->w->completion_len ? (double)x->w->completion_len : floor(s / 2), grad, state,
           master, kvd = tp_kv_heads(x) * (double)x->m->head_dim;
    g.k.batch = x->w->k.batch * x->w->k.grad_accum;
    g.k.seq_len = (long)(s - comp);
    g.tp = 1;
    y.w = &g;
    inference(&y, &p);
    train_bytes(x, &grad, &state, &master);
    p.w = weights(x) + x->wref;
    p.o = optimizer_states(x, state, master) * (1 - paged_share(x));
    if (x->w->k.sharding >= OOM_SHARDING_ZERO1)
        p.o /= x->n;
    if (x->w->k.offload != OOM_OFFLOAD_NONE)
        p.o = 0;
    p.g = x->w->keep_grads ? x->trainable * grad : 0;
    if (x->fsdp2) { /* the sharded states; the engine-less generation gathers as the forward */
        fsdp2_mem f;
        fsdp2_of(x, &f);
        p.w = f.w + x->wref, p.o = f.o, p.g = x->w->keep_grads ? f.g : 0;
        p.t += f.fwd;
    }
    p.kv = (double)x->m->layers * 2 * kvd * (double)g.k.batch * s * x->e;
    *out = p;
}

/* RewardTrainer builds the checkpoint as AutoModelForSequenceClassification with num_labels=1
 * (trl/trainer/reward_trainer.py): a causal LM's output head, untied or tied, gives way to a
 * score Linear of hidden x 1 (transformers' GenericForSequenceClassification); the model as the
 * trainer holds it, in `rm` */
static const oomi_model *reward_model(oomi_model *rm, const oom_workload *w)
{
    const oomi_model *m = w->model;
    uint64_t score = (uint64_t)m->hidden;
    if (w->objective != OOMI_OBJECTIVE_REWARD || m->head != OOMI_HEAD_CAUSAL_LM)
        return m;
    *rm = *m;
    rm->head = OOMI_HEAD_SEQ_CLS, rm->labels = 1;
    rm->params = m->params - m->params_lm_head + score;
    rm->params_active = m->params_active - m->params_lm_head + score;
    rm->params_lm_head = score;
    /* Adafactor's rows + columns and the tensors: the head's, then the score's */
    rm->factored = m->factored - (m->params_lm_head ? (uint64_t)(m->vocab + m->hidden) : 0) +
                   (uint64_t)m->hidden + 1;
    rm->tensors = m->tensors - (m->params_lm_head ? 1 : 0) + 1;
    return rm;
}

/* the model's view of a workload (oom_estimate_run, oomi_qlora_of); wb holds the workload with
 * the sequences of one forward as its batch */
static int setup(ctx *x, oom_workload *wb, oomi_model *rm, const oom_workload *w)
{
    int err;
    memset(x, 0, sizeof(*x));
    if ((err = oom_workload_validate(w)) || (err = oomi_objective_check_batch(w)) ||
        (err = oomi_coef_get(&x->c)))
        return err;
    /* the policy's forward carries chosen and rejected concatenated: 2 x --batch sequences
     * (concatenated_inputs in DPOTrainer, CPOTrainer, ORPOTrainer; RewardTrainer) */
    *wb = *w;
    wb->k.batch = w->k.batch * oomi_objective_sequences(w->objective);
    /* the masked kernels (SDPA's memory-efficient one, eager) compute every score of a packed
     * row and mask the other documents' away; the varlen kernels skip them */
    x->context = (double)(w->packing != OOMI_PACKING_NONE && w->k.attention == OOM_ATTENTION_FLASH
                              ? w->k.seq_len
                              : 0);
    packed_batch(wb);
    if (!(x->context > 0))
        x->context = (double)wb->k.seq_len;
    x->w = wb;
    x->m = reward_model(rm, w);
    x->prec = oomi_resolved_precision(w);
    x->train = w->k.method != OOM_METHOD_INFERENCE;
    x->lora_on = w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;
    x->quant = w->k.method == OOM_METHOD_QLORA || x->prec == OOM_PRECISION_INT8 ||
               x->prec == OOM_PRECISION_4BIT || x->m->quant_bytes > 0;
    x->nf4 = oomi_nf4_base(w);
    x->dq = oomi_double_quant(w);
    /* PEFT upcasts 16-bit adapters to fp32 (autocast_adapter_dtype=True in get_peft_model) */
    x->ab = w->adapter_dtype == OOMI_ADAPTER_BF16 ? 2 : 4;
    x->frozen = x->lora_on;
    x->e = x->prec == OOM_PRECISION_FP32 ? 4 : 2;
    x->n = (double)w->k.gpus;
    x->fsdp2 = oomi_fsdp2(w) && x->train;
    if (x->fsdp2 && amp(x)) /* MixedPrecisionPolicy's param_dtype: 16-bit compute, no autocast */
        x->prec = x->prec == OOM_PRECISION_AMP_FP16 ? OOM_PRECISION_FP16 : OOM_PRECISION_BF16;
    x->fused = w->objective == OOMI_OBJECTIVE_DPO || w->objective == OOMI_OBJECTIVE_IPO ||
               w->objective == OOMI_OBJECTIVE_KTO || w->objective == OOMI_OBJECTIVE_GRPO;
    x->ref_fwd = reference_forward(w);
    if (x->lora_on && (err = oomi_lora_resolve(&x->lora, x->m, w->lora_targets, w->lora_rank)))
        return err;
    /* a multimodal checkpoint trained on text: its vision tower gets no gradient, so AdamW keeps
     * no state for it (oomless trace, Gemma 3 12B full fine-tune: 11.77 B trained of 12.19 B) */
    x->trainable = !x->train    ? 0
                   : x->lora_on ? (double)x->lora.params
                                : (double)(x->m->params - x->m->params_vision);
    x->wref = reference_weights(x);
    if (x->train && w->k.sharding == OOM_SHARDING_ZERO3 && !x->fsdp2) {
        double A, A1, Ar;
        activations(x, &A, &A1, &Ar);
        if ((err = oomi_zero3_of(&x->z3, wb, A)))
            return err;
    }
    return OOM_OK;
}

int oom_estimate_run(oom_estimate *out, const oom_workload *w)
{
    ctx x;
    mem p;
    oom_workload wb;
    oomi_model rm;
    double alloc, res;
    int err;

    if (!out)
        return oomi_fail(OOM_EINVAL, "estimate: missing argument");
    if ((err = oomi_check_version(out->version, OOM_ESTIMATE_VERSION, "oom_estimate")))
        return err;
    *out = (oom_estimate){.version = out->version};
    if ((err = setup(&x, &wb, &rm, w)))
        return err;
    out->peak_phase = x.train ? training(&x, &p) : inference(&x, &p);
    /* with a colocated vLLM engine the trainer does not generate: the engine's memory is the
     * planner's to split (docs/plan.md, "RL with a colocated rollout engine") */
    if (w->objective == OOMI_OBJECTIVE_GRPO && w->rollout == OOMI_ROLLOUT_NONE) {
        mem g;
        generation(&x, &g);
        if (sum(&g) > sum(&p))
            p = g, out->peak_phase = OOM_PHASE_PREFILL;
    }
    out->weights = to_bytes(p.w), out->gradients = to_bytes(p.g), out->optimizer = to_bytes(p.o);
    out->activations = to_bytes(p.a), out->logits = to_bytes(p.l), out->kv_cache = to_bytes(p.kv);
    /* the cuBLAS workspace, from the caching allocator: allocated, outside the blocks it keeps */
    out->temporaries = to_bytes(p.t + oomi_cublas_workspace(w, x.c, NULL));
    out->allocated_peak = out->weights + out->gradients + out->optimizer + out->activations +
                          out->logits + out->kv_cache + out->temporaries;
    alloc = (double)out->allocated_peak;
    res = reserved(&x, &p, alloc, out->peak_phase);
    out->reserved_peak = to_bytes(res) > out->allocated_peak ? to_bytes(res) : out->allocated_peak;
    out->overhead = to_bytes(context_bytes(&x));
    out->device_peak = out->reserved_peak + out->overhead;
    out->params_total = x.m->params;
    out->params_trainable = !x.train    ? 0
                            : x.lora_on ? x.lora.params
                                        : x.m->params - x.m->params_vision; /* exact */
    flops(out, &x);
    return OOM_OK;
}

int oomi_qlora_of(oomi_qlora *out, const oom_workload *w)
{
    ctx x;
    oom_workload wb;
    oomi_model rm;
    const oomi_model *m;
    double grad, state, master, linear;
    int err;

    memset(out, 0, sizeof(*out));
    if ((err = setup(&x, &wb, &rm, w)))
        return err;
    m = x.m;
    linear = (double)m->params_linear;
    out->quantized = x.nf4;
    out->double_quant = x.dq;
    if (x.nf4) {
        out->nf4 = linear / 2;
        out->absmax = x.dq ? linear / 64 : linear * 4 / 64;
        out->absmax2 = x.dq ? linear * 4 / (64 * 256) : 0;
        out->unquantized = (double)(m->params - m->params_linear) * unquantized_bytes(&x);
        out->dequant = dequant_transient(&x);
    }
    if (x.lora_on) {
        out->adapter_bytes = x.ab;
        out->adapters = (double)x.lora.params * x.ab;
    }
    train_bytes(&x, &grad, &state, &master);
    out->paged = x.train ? optimizer_states(&x, state, master) * paged_share(&x) : 0;
    if (w->k.sharding >= OOM_SHARDING_ZERO1)
        out->paged /= x.n;
    if (w->k.offload != OOM_OFFLOAD_NONE)
        out->paged = 0;
    return OOM_OK;
}
