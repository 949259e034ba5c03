/* estimate_training.c - the phases of a training step (forward end, backward, optimizer step)
 * and the largest of them; GRPO's generation in the trainer (docs/estimate.md, "Phases"). */
#include "estimate/estimate_ctx.h"

#include <math.h>

/* What one GPU keeps through a step: the model states after sharding, offload and paging */
typedef struct states {
    double weights;    /* the weights, and a reference copy's */
    double grads;      /* the gradients, once the backward made them */
    double optimizer;  /* the optimizer's states (and an fp32 master copy) */
    double step;       /* the optimizer step's temporaries */
    double buckets;    /* DDP's gradient buckets: allocated once, kept */
    double grad_bytes; /* bytes of one trained parameter's gradient */
} states;

/* The weight copies of a step: autocast's 16-bit copies, saved for the backward, or a quantised
 * base's one dequantised linear */
typedef struct copies {
    double head;       /* the LM head's (autocast) */
    double forward;    /* alive in the forward */
    double backward;   /* at the backward's start */
    double recomputed; /* a recomputed layer's own */
    double unwrapped;  /* at the first recompute: the unwrapped layers' copies still saved */
} copies;

/* What sharding gathers beside the states at each moment: ZeRO-3's coordinator
 * (estimate_zero3.c) or FSDP2 (oomi_est_fsdp2) */
typedef struct gathers {
    double forward_end, backward, backward_end, step;
} gathers;

/* what a layer saves: all saved activations at the forward's end, one layer's (recomputed or in
 * flight), and those left at the first recompute (oomi_est_activations) */
typedef struct saved {
    double all, one, at_recompute;
} saved;

static bool lm_head(const ctx *x)
{
    return x->m->head != OOMI_HEAD_SEQ_CLS && x->m->head != OOMI_HEAD_BASE;
}

/* the model states before sharding */
static states states_of(const ctx *x)
{
    states s = {0};
    double state, master;
    oomi_est_train_bytes(x, &s.grad_bytes, &state, &master);
    s.weights = oomi_est_weights(x) + x->wref;
    s.grads = x->trainable * s.grad_bytes;
    s.optimizer = oomi_est_optimizer_states(x, state, master);
    s.step = x->trainable * state * x->c->opt_temp[x->w->k.optimizer];
    return s;
}

/* autocast's copies (torch.bmm's 3-D expert weights are cast as the linears' are; the LM head's
 * too), or one dequantised weight at a time. Without checkpointing every copy is saved for the
 * backward. Checkpointed layers saved only their inputs, so once autocast's cache is gone (the
 * end of the forward) the layers not checkpointed keep theirs, the head's is left for the loss
 * backward, and a recomputed layer makes its own again (oomless trace, Qwen2.5-0.5B amp-bf16,
 * 2026-11-25) */
static copies copies_of(const ctx *x)
{
    const oomi_model *m = x->m;
    const double cast_params = (double)(m->params_linear + m->params_bmm);
    copies c = {0};
    if (x->quant)
        c.forward = oomi_est_dequant(x);
    else if (amp(x)) {
        if (lm_head(x))
            c.head = 2.0 * (double)m->vocab * (double)m->hidden;
        c.forward = 2.0 * cast_params + c.head;
    }
    c.backward = c.recomputed = c.forward;
    if (amp(x) && !x->quant && oomi_est_ckpt_share(x) > 0) {
        double per_layer = 2.0 * cast_params / (double)(m->layers + m->enc_layers), above;
        double cs = 2.0 * (double)m->cast_layer_sparse, cd = 2.0 * (double)m->cast_layer_dense;
        long left, left_sp, top_left, top_sp;
        oomi_est_ckpt_layers(x, &above);
        /* at the first recompute the unwrapped layers above it have had their backward */
        if (oomi_est_unwrapped_mix(x, &left, &left_sp, &top_left, &top_sp)) {
            c.backward = c.head + (double)left_sp * cs + (double)(left - left_sp) * cd;
            c.unwrapped =
                c.backward - c.head - ((double)top_sp * cs + (double)(top_left - top_sp) * cd);
        } else {
            c.backward = c.head + (1 - oomi_est_ckpt_share(x)) * 2.0 * cast_params;
            c.unwrapped = c.backward - c.head - above * per_layer;
        }
        /* the recomputed layer's own: the largest where layers with the experts alternate with
         * dense ones (Llama 4: an expert layer's 3.75 GiB of copies at the peak of the trace
         * named at heaviest_per_token) */
        c.recomputed = oomi_est_mixed_layers(m) ? 2.0 * (double)m->params_layer_max : per_layer;
    }
    return c;
}

/* ZeRO-1/2/3 shard the states over the GPUs; under ZeRO-3 each rank keeps the 16-bit copies of
 * its own shard (DeepSpeed's bf16/fp16 parameters, FSDP's MixedPrecision), and what the
 * coordinator has gathered, the buckets and the small tensors it keeps whole are DeepSpeed's
 * (estimate_zero3.c): at the turn from the forward to the backward, and after the backward.
 * Without sharding, more than one GPU is DDP with its buckets. FSDP2 keeps its own shards and
 * gathers; offload moves the states to the host; paged states are outside the device's budget. */
static gathers shard(const ctx *x, states *s, copies *c)
{
    const oom_knobs *k = &x->w->k;
    double n = x->n;
    gathers g = {0};
    if (k->sharding >= OOM_SHARDING_ZERO1)
        s->optimizer /= n, s->step /= n;
    if (k->sharding >= OOM_SHARDING_ZERO2)
        s->grads /= n;
    if (k->sharding == OOM_SHARDING_ZERO3) {
        s->weights /= n, c->forward /= n, c->backward /= n, c->recomputed /= n;
        g.forward_end = g.backward = x->z3.turn;
        g.backward_end = g.step = x->z3.persistent + x->z3.bucket + x->z3.end;
    }
    if (k->sharding == OOM_SHARDING_NONE && n > 1)
        s->buckets = s->grads * x->c->ddp_buckets;
    if (x->fsdp2) {
        fsdp2_mem f;
        oomi_est_fsdp2(x, &f);
        s->weights = f.w + x->wref, s->grads = f.g, s->optimizer = f.o, s->step = f.topt;
        c->forward = c->backward = c->recomputed = 0;
        g = (gathers){.forward_end = f.fwd, .backward = f.bwd, .backward_end = f.end};
    }
    if (k->offload != OOM_OFFLOAD_NONE)
        s->optimizer = 0, s->step = 0;
    if (k->offload == OOM_OFFLOAD_OPTIMIZER_PARAMS)
        s->weights = 0, s->grads = 0;
    s->optimizer *= 1 - oomi_est_paged_share(x);
    return g;
}

/* the largest parameter tensor the step trains: the embedding (or an untied head) or the largest
 * linear */
static double largest_tensor(const ctx *x)
{
    const oomi_model *m = x->m;
    double big = (double)m->vocab * (double)m->hidden, t;
    size_t i;
    for (i = 0; i < m->nlinears; i++)
        if ((t = (double)m->linears[i].din * (double)m->linears[i].dout) > big)
            big = t;
    return big;
}

/* optimizer-in-backward (torchtune 0.6.1's optimizer_in_bwd: register_optim_in_bwd_hooks in
 * torchtune/training/memory.py gives every parameter a post-accumulate-grad hook that calls its
 * own optimizer's step() and zero_grad()): no gradient outlives its parameter's step, so at any
 * moment one tensor's gradient and one tensor's step temporaries, sharded as the states are */
static void step_in_backward(const ctx *x, states *s)
{
    double share;
    if (!x->w->runtime.optim_in_bwd || !(x->trainable > 0))
        return;
    share = largest_tensor(x) / x->trainable;
    if (share > 1)
        share = 1;
    s->grads *= share, s->step *= share;
}

/* gradients alive before the backward: only under accumulation (zero_grad(set_to_none) after
 * each step) or when kept (set_to_none=False), and DDP's buckets */
static double early_grads(const ctx *x, const states *s)
{
    return (x->w->k.grad_accum > 1 || x->w->runtime.keep_grads ? s->grads : 0) + s->buckets;
}

/* The forward's end: every saved activation and the loss's logits; autocast caches the casts of
 * leaves that require grad until the forward ends, while a frozen base's copies live only where
 * the backward saved them, as at the backward's start (oomless trace, Llama 4 amp-bf16 LoRA with
 * full checkpointing: the head's copy alone). The reference's no-grad forward comes after the
 * policy's, whose saved activations wait for the backward (DPOTrainer._compute_loss,
 * KTOTrainer._compute_loss): on top, the larger of one layer's working set (bounded by what a
 * layer saves with gradients) and the final hidden states with a tile of the fused head (oomless
 * trace, SmolLM2-135M DPO LoRA 2 x 256: the tile, 67 MB, is the whole of it) */
static phase_bytes forward_end(const ctx *x, const states *s, const copies *c, const gathers *g,
                               const saved *a, double logits)
{
    const oom_knobs *k = &x->w->k;
    double cast = amp(x) && !x->quant && x->frozen ? c->backward : c->forward;
    phase_bytes p = {s->weights, early_grads(x, s),    s->optimizer, a->all, logits,
                     0,          cast + g->forward_end};
    if (x->ref_fwd) {
        double end = (double)k->batch * (double)k->seq_len * (double)x->m->hidden * x->e +
                     oomi_est_fused_tile(x);
        p.temps += a->one > end ? a->one : end;
    }
    return p;
}

/* where attention keeps its weights (eager, SDPA's math path), the gradients of one layer's
 * attention weights in flight in its backward (two score-sized tensors; oomless trace, Falcon-7B
 * fp32 at 4 x 1024: 2.36 GiB) */
static double score_grads(const ctx *x)
{
    return x->c->score_grads * oomi_est_scores_elems(x) * oomi_est_score_size(x);
}

/* where every expert runs on every token (Llama 4) and layers are recomputed, the gradient of
 * the experts' gate and up outputs (each expert's 2 x its width per token, 16-bit under
 * autocast) in flight in a recomputed layer's backward (oomless trace, a Llama 4 config of 16
 * experts, LoRA amp-bf16 2 x 1024 with full checkpointing: 1 GiB of it at the peak) */
static double expert_grads(const ctx *x)
{
    const oom_knobs *k = &x->w->k;
    if (!x->m->moe_repeat_input || !(oomi_est_ckpt_share(x) > 0))
        return 0;
    return (double)k->batch * (double)k->seq_len * (double)x->m->routed * 2.0 * (double)x->m->ffn *
           (amp(x) ? 2.0 : x->e);
}

/* `candidate` where it holds more than `p` */
static void keep_larger(phase_bytes *p, phase_bytes candidate)
{
    if (oomi_est_sum(&candidate) > oomi_est_sum(p))
        *p = candidate;
}

/* The backward: the largest of its moments. The loss gradient, with every activation still
 * saved. The last layer's backward where attention keeps its weights: the loss path is freed by
 * then; the head's backward left its weight's gradient where the head is trained (oomless trace,
 * Falcon-7B fp32 full 4 x 1024: the 1127 MiB gradient of the output embedding; nothing under
 * LoRA, whose base is frozen), and autocast's copy of the head's weight is gone with it
 * (amp-bf16: 14.35 GiB of temporaries at that moment, the layers' copies and the score
 * gradients). Under full checkpointing, the first recomputed layer: its activations made again
 * (by the backward, so counted with its temporaries, as the trace counts them), with its copies
 * and gradients in flight (the loss path is freed by then: oomless trace shows the two never
 * overlap). The end: all gradients with one layer's activations. */
static phase_bytes backward(const ctx *x, const states *s, const copies *c, const gathers *g,
                            const saved *a, double logits)
{
    double grads = early_grads(x, s), scores = score_grads(x), head_grad = 0, copies_left;
    phase_bytes p = {s->weights, grads, s->optimizer, a->all, logits, 0, c->backward + g->backward};
    if (!x->frozen && lm_head(x))
        head_grad = (double)x->m->vocab * (double)x->m->hidden * s->grad_bytes;
    copies_left = c->backward - (x->w->k.sharding == OOM_SHARDING_ZERO3 ? c->head / x->n : c->head);
    if (copies_left < 0)
        copies_left = 0;
    if (scores > 0)
        keep_larger(&p, (phase_bytes){s->weights, grads, s->optimizer, a->all, head_grad, 0,
                                      copies_left + scores + g->backward});
    if (oomi_est_ckpt_share(x) > 0)
        keep_larger(&p, (phase_bytes){s->weights, grads, s->optimizer, a->at_recompute, 0, 0,
                                      a->one + c->unwrapped + c->recomputed + expert_grads(x) +
                                          scores + g->backward});
    keep_larger(&p, (phase_bytes){s->weights, s->grads + s->buckets, s->optimizer, a->one, 0, 0,
                                  g->backward_end});
    return p;
}

/* the optimizer step: every gradient, the states and the step's temporaries */
static phase_bytes optimizer_step(const states *s, const gathers *g)
{
    return (phase_bytes){s->weights, s->grads + s->buckets, s->optimizer, 0, 0,
                         0,          s->step + g->step};
}

oom_phase oomi_est_training(const ctx *x, phase_bytes *peak)
{
    states s = states_of(x);
    copies c = copies_of(x);
    gathers g = shard(x, &s, &c);
    saved a;

    step_in_backward(x, &s);
    double logits_fwd, logits_bwd;
    phase_bytes ph[3];
    int i, best = 0;

    oomi_est_activations(x, &a.all, &a.one, &a.at_recompute);
    oomi_est_logits(x, &logits_fwd, &logits_bwd);
    ph[OOM_PHASE_FORWARD] = forward_end(x, &s, &c, &g, &a, logits_fwd);
    ph[OOM_PHASE_BACKWARD] = backward(x, &s, &c, &g, &a, logits_bwd);
    ph[OOM_PHASE_OPTIMIZER] = optimizer_step(&s, &g);
    for (i = 1; i < 3; i++)
        if (oomi_est_sum(&ph[i]) > oomi_est_sum(&ph[best]))
            best = i;
    *peak = ph[best];
    return (oom_phase)best;
}

/* GRPO's generation (transformers' generate, no vLLM): one call for the whole generation batch,
 * per_device_train_batch_size x steps_per_generation completions (steps_per_generation defaults
 * to gradient_accumulation_steps: GRPOConfig.__post_init__, GRPOTrainer._generate_single_turn),
 * each with its KV cache to the full --seq, the prompt's prefill transient; the optimizer states
 * are kept, the gradients freed by the previous step (zero_grad(set_to_none=True)) */
void oomi_est_generation(const ctx *x, phase_bytes *out)
{
    oom_workload g = *x->w;
    ctx y = *x;
    phase_bytes p;
    double s = (double)x->w->k.seq_len,
           comp = x->w->objective.completion_len ? (double)x->w->objective.completion_len
                                                 : floor(s / 2),
           grad, state, master, kvd = oomi_est_tp_kv_heads(x) * (double)x->m->head_dim;
    g.k.batch = x->w->k.batch * x->w->k.grad_accum;
    g.k.seq_len = (long)(s - comp);
    g.parallel.tp = 1;
    y.w = &g;
    oomi_est_inference(&y, &p);
    oomi_est_train_bytes(x, &grad, &state, &master);
    p.weights = oomi_est_weights(x) + x->wref;
    p.optimizer = oomi_est_optimizer_states(x, state, master) * (1 - oomi_est_paged_share(x));
    if (x->w->k.sharding >= OOM_SHARDING_ZERO1)
        p.optimizer /= x->n;
    if (x->w->k.offload != OOM_OFFLOAD_NONE)
        p.optimizer = 0;
    p.grads = x->w->runtime.keep_grads ? x->trainable * grad : 0;
    if (x->fsdp2) { /* the sharded states; the engine-less generation gathers as the forward */
        fsdp2_mem f;
        oomi_est_fsdp2(x, &f);
        p.weights = f.w + x->wref, p.optimizer = f.o, p.grads = x->w->runtime.keep_grads ? f.g : 0;
        p.temps += f.fwd;
    }
    p.kv_cache = (double)x->m->layers * 2 * kvd * (double)g.k.batch * s * x->e;
    *out = p;
}
