/* estimate_training.c - the phases of a training step (forward end, backward, optimizer step)
 * and the largest of them; GRPO's generation in the trainer (docs/estimate.md). */
#include "estimate/estimate_ctx.h"

#include <math.h>

oom_phase oomi_est_training(const ctx *x, mem *peak)
{
    const oom_knobs *k = &x->w->k;
    double grad, state, master, n = x->n, W, G, O, A, A1, Ar, Lf, Lb, Tcast = 0, Tz3 = 0, Tz3e = 0,
                                Topt, live_g, Gb = 0, Tb, Tr, Tsc, Tnh, head = 0, Lh = 0, Tf, Te,
                                Ts, Tfwd, Tgx, Tk = 0;
    const double cast_params = (double)(x->m->params_linear + x->m->params_bmm);
    fsdp2_mem f;
    mem ph[3];
    int i, best = 0;

    oomi_est_train_bytes(x, &grad, &state, &master);
    W = oomi_est_weights(x) + x->wref;
    G = x->trainable * grad;
    O = oomi_est_optimizer_states(x, state, master);
    Topt = x->trainable * state * x->c->opt_temp[k->optimizer];
    if (x->quant) /* one dequantised weight at a time */
        Tcast = oomi_est_dequant(x);
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
    if (amp(x) && !x->quant &&
        oomi_est_ckpt_share(x) > 0) { /* the layers not checkpointed keep theirs */
        const oomi_model *m = x->m;
        double per_layer = 2.0 * cast_params / (double)(m->layers + m->enc_layers), above;
        double cs = 2.0 * (double)m->cast_layer_sparse, cd = 2.0 * (double)m->cast_layer_dense;
        long left, left_sp, top_left, top_sp;
        oomi_est_ckpt_layers(x, &above);
        /* Tk: at the first recompute the unwrapped layers above it have had their backward */
        if (oomi_est_unwrapped_mix(x, &left, &left_sp, &top_left, &top_sp)) {
            Tb = head + (double)left_sp * cs + (double)(left - left_sp) * cd;
            Tk = Tb - head - ((double)top_sp * cs + (double)(top_left - top_sp) * cd);
        } else {
            Tb = head + (1 - oomi_est_ckpt_share(x)) * 2.0 * cast_params;
            Tk = Tb - head - above * per_layer;
        }
        /* the recomputed layer's own: the largest where layers with the experts alternate with
         * dense ones (Llama 4: an expert layer's 3.75 GiB of copies at the peak of the trace
         * named at heaviest_per_token) */
        Tr = oomi_est_mixed_layers(m) ? 2.0 * (double)m->params_layer_max : per_layer;
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
        oomi_est_fsdp2(x, &f);
        W = f.w + x->wref, G = f.g, O = f.o, Topt = f.topt, Tcast = Tb = Tr = 0;
        Tz3 = f.bwd, Tf = f.fwd, Te = f.end, Ts = 0;
    }
    if (k->offload != OOM_OFFLOAD_NONE)
        O = 0, Topt = 0;
    if (k->offload == OOM_OFFLOAD_OPTIMIZER_PARAMS)
        W = 0, G = 0;
    O *= 1 - oomi_est_paged_share(x); /* paged states: outside the device's budget */
    oomi_est_activations(x, &A, &A1, &Ar);
    oomi_est_logits(x, &Lf, &Lb);
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
        double end = (double)k->batch * (double)k->seq_len * (double)x->m->hidden * x->e +
                     oomi_est_fused_tile(x);
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
    Tsc = x->c->score_grads * oomi_est_scores_elems(x) * oomi_est_score_size(x);
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
    if (Tsc > 0 && W + live_g + O + A + Lh + Tnh + Tsc + Tz3 > oomi_est_sum(&ph[1]))
        ph[1] = (mem){W, live_g, O, A, Lh, 0, Tnh + Tsc + Tz3};
    /* under full checkpointing, the first recomputed layer: its activations made again (by the
     * backward, so counted with its temporaries, as the trace counts them), and where it keeps
     * attention weights, their gradients in flight as above */
    /* ... and where every expert runs on every token (Llama 4), the gradient of the experts'
     * gate and up outputs (each expert's 2 x its width per token, 16-bit under autocast) in
     * flight beside them (oomless trace, a Llama 4 config of 16 experts, LoRA amp-bf16 2 x 1024
     * with full checkpointing: 1 GiB of it at the peak) */
    Tgx = x->m->moe_repeat_input && oomi_est_ckpt_share(x) > 0
              ? (double)k->batch * (double)k->seq_len * (double)x->m->routed * 2.0 *
                    (double)x->m->ffn * (amp(x) ? 2.0 : x->e)
              : 0;
    if (oomi_est_ckpt_share(x) > 0 &&
        W + live_g + O + Ar + A1 + Tk + Tr + Tgx + Tsc + Tz3 > oomi_est_sum(&ph[1]))
        ph[1] = (mem){W, live_g, O, Ar, 0, 0, A1 + Tk + Tr + Tgx + Tsc + Tz3};
    if (W + G + Gb + O + A1 + Te > oomi_est_sum(&ph[1]))
        ph[1] = (mem){W, G + Gb, O, A1, 0, 0, Te};
    ph[2] = (mem){W, G + Gb, O, 0, 0, 0, Topt + Ts};
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
void oomi_est_generation(const ctx *x, mem *out)
{
    oom_workload g = *x->w;
    ctx y = *x;
    mem p;
    double s = (double)x->w->k.seq_len,
           comp = x->w->completion_len ? (double)x->w->completion_len : floor(s / 2), grad, state,
           master, kvd = oomi_est_tp_kv_heads(x) * (double)x->m->head_dim;
    g.k.batch = x->w->k.batch * x->w->k.grad_accum;
    g.k.seq_len = (long)(s - comp);
    g.tp = 1;
    y.w = &g;
    oomi_est_inference(&y, &p);
    oomi_est_train_bytes(x, &grad, &state, &master);
    p.w = oomi_est_weights(x) + x->wref;
    p.o = oomi_est_optimizer_states(x, state, master) * (1 - oomi_est_paged_share(x));
    if (x->w->k.sharding >= OOM_SHARDING_ZERO1)
        p.o /= x->n;
    if (x->w->k.offload != OOM_OFFLOAD_NONE)
        p.o = 0;
    p.g = x->w->keep_grads ? x->trainable * grad : 0;
    if (x->fsdp2) { /* the sharded states; the engine-less generation gathers as the forward */
        fsdp2_mem f;
        oomi_est_fsdp2(x, &f);
        p.w = f.w + x->wref, p.o = f.o, p.g = x->w->keep_grads ? f.g : 0;
        p.t += f.fwd;
    }
    p.kv = (double)x->m->layers * 2 * kvd * (double)g.k.batch * s * x->e;
    *out = p;
}
