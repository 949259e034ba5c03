/*
 * estimate/estimate_ctx.h - what the files of the memory model share (estimate_run.c and the
 * parts it sums: estimate_states.c, estimate_activations.c, estimate_loss.c,
 * estimate_training.c, estimate_inference.c): the model's view of one workload (ctx) and the
 * bytes of a moment of a step, by part (phase_bytes). The rest of estimate/ sees only
 * estimate/estimate.h.
 */
#ifndef OOMLESS_ESTIMATE_ESTIMATE_CTX_H
#define OOMLESS_ESTIMATE_ESTIMATE_CTX_H

#include "estimate/estimate.h"
/* what one moment of a step holds, by part (oom_estimate's breakdown); doubles while computing,
 * bytes at the end */
typedef struct phase_bytes {
    double weights;     /* the weights (a reference copy's too) */
    double grads;       /* gradients (and DDP's buckets) */
    double optimizer;   /* optimizer states (and an fp32 master copy) */
    double activations; /* saved for the backward (a prefill: its working set) */
    double logits;      /* logits and the loss path */
    double kv_cache;    /* an inference KV cache */
    double temps;       /* weight copies, gathers, the step's and the backward's temporaries */
} phase_bytes;

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
    bool mp;          /* model-parallel training: the limiting rank's (estimate_pipeline.c) */
    double mp_logits; /* its fp32 logits tensor */
} ctx;

static inline int regime(const ctx *x)
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

static inline bool amp(const ctx *x)
{
    return regime(x) == OOMI_REGIME_AMP;
}

/* bytes per base parameter as stored (non-quantised part) */
static inline double param_bytes(const ctx *x)
{
    return x->prec == OOM_PRECISION_FP32 || amp(x) ? 4 : 2;
}

static inline double oomi_est_sum(const phase_bytes *p)
{
    return p->weights + p->grads + p->optimizer + p->activations + p->logits + p->kv_cache +
           p->temps;
}

/* estimate_states.c: the model states. Bytes per parameter a quantised base leaves
 * unquantised; the weights (with LoRA's adapters); bytes per trained parameter of its gradient,
 * one optimizer state and an fp32 master; the optimizer's states; FSDP2's shards and gathers;
 * the largest linear; a quantised base's transient dequantised weight; the share of the states
 * a paged optimizer keeps out of the budget; the weights under tensor parallelism; a reference
 * copy's weights. */
double oomi_est_unquantized_bytes(const ctx *x);
double oomi_est_weights(const ctx *x);
void oomi_est_train_bytes(const ctx *x, double *grad, double *state, double *master);
double oomi_est_optimizer_states(const ctx *x, double state, double master);
void oomi_est_fsdp2(const ctx *x, fsdp2_mem *f);
double oomi_est_max_linear(const oomi_model *m);
double oomi_est_dequant(const ctx *x);
/* the output head's parameters a quantizer quantizes with the linears (0: none); the parameters
 * quantized and those left unquantized */
double oomi_est_quantized_head(const ctx *x);
void oomi_est_quantized_split(const ctx *x, double *linear, double *other);
/* estimate_load.c: loading the weights, beside the step whose weights `step` holds: those
 * weights and the largest transient of putting one on the GPU; `how` says what makes it */
int oomi_est_load(const ctx *x, const phase_bytes *step, phase_bytes *out, const char **how);
/* torchao's NF4Tensor.from_tensor: bytes beyond its input for a bf16 weight of n elements */
double oomi_est_torchao_nf4(double n);
double oomi_est_paged_share(const ctx *x);
double oomi_est_tp_weights(const ctx *x);
double oomi_est_reference_weights(const ctx *x);

/* estimate_activations.c: what the forward saves. The fitted coefficients of the model's
 * family; whether expert and dense layers alternate; the attention weights one layer keeps (0
 * unless materialised) and the bytes of one's gradient; op-sac's bytes per token (and the
 * multiply-adds it recomputes); the layers full checkpointing wraps (and those above the last)
 * and their share; the unwrapped layers of a mixed model; the packed micro-batch; all saved
 * activations at the forward's end, one layer's, and those left at the first recompute. */
const oomi_act_coef *oomi_est_act_coef(const ctx *x);
bool oomi_est_mixed_layers(const oomi_model *m);
double oomi_est_scores_elems(const ctx *x);
double oomi_est_score_size(const ctx *x);
double oomi_est_op_sac(const ctx *x, double *recomputed);
double oomi_est_ckpt_layers(const ctx *x, double *above);
double oomi_est_ckpt_share(const ctx *x);
bool oomi_est_unwrapped_mix(const ctx *x, long *left, long *left_sparse, long *top_left,
                            long *top_sparse);
void oomi_est_packed_batch(oom_workload *wb);
void oomi_est_activations(const ctx *x, double *all, double *one, double *at_recompute);

/* estimate_loss.c: the loss path. Tokens the loss scores; one tile of TRL's fused head; the
 * logits' bytes at the forward's end and at the loss backward; one fp32 logits tensor (the
 * allocator's largest blocks). */
double oomi_est_loss_tokens(const ctx *x);
double oomi_est_fused_tile(const ctx *x);
void oomi_est_logits(const ctx *x, double *fwd, double *bwd);
double oomi_est_logits_tensor(const ctx *x);

/* estimate_training.c: a training step's peak phase, and GRPO's generation without an engine */
oom_phase oomi_est_training(const ctx *x, phase_bytes *peak);
void oomi_est_generation(const ctx *x, phase_bytes *out);

/* estimate_inference.c: KV heads per GPU under tensor parallelism; a prefill's peak */
double oomi_est_tp_kv_heads(const ctx *x);
oom_phase oomi_est_inference(const ctx *x, phase_bytes *peak);

#endif
