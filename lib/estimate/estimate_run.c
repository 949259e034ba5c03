/*
 * estimate_run.c - the memory model: per-GPU bytes of each phase of a training step (forward end,
 * backward, optimizer step) or of an inference prefill, the maximum of them, the caching
 * allocator's slack and the CUDA context. docs/estimate.md explains it with its sources; the
 * empirical numbers come from data/coefficients.json (estimate_coef.c). The parts are computed
 * in estimate_states.c, estimate_activations.c, estimate_loss.c, estimate_training.c and
 * estimate_inference.c.
 */
#include "estimate/estimate_ctx.h"

#include <math.h>
#include <string.h>

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

/* Reserved = allocated + the cached blocks the allocator cannot hand back to the request that
 * makes the peak, rounded up to its 2 MiB segments. Measured on an H100 (torch 2.11, 50 cases,
 * bench/accuracy/h100-2026-11-25.csv; fitted on the three quarters not held back,
 * bench/accuracy/fit_allocator.py): at a forward/backward peak of training, about 1.35 fp32
 * logits tensors (the loss path's large blocks: upcast, log-softmax, gradient); at an
 * optimizer peak, the step's temporaries come in new segments beside the cached ones (1.4 x
 * them); both over a floor (50 MiB on the H100); in a prefill, 40 % of the transient part.
 * Per-tensor waste is not modelled: a 30B MoE with 18,000 weight tensors left 0.02 GiB between
 * reserved and allocated. */
static double reserved(const ctx *x, const phase_bytes *p, double allocated, oom_phase phase)
{
    const oomi_coef *c = x->c;
    double lt = !x->train ? 0 : x->mp ? x->mp_logits : oomi_est_logits_tensor(x), cache;
    if (phase == OOM_PHASE_LOAD)
        cache = c->blocks_transient * p->temps;
    else if (x->train && phase == OOM_PHASE_OPTIMIZER)
        cache = c->blocks_floor + c->blocks_optimizer * p->temps;
    else if (lt > 0)
        cache = c->blocks_floor + c->blocks_logits * lt;
    else
        cache = c->blocks_transient * (p->activations + p->logits + p->temps + p->kv_cache);
    return ceil((allocated + cache) / c->round) * c->round;
}

/* a no-grad reference forward in every step (DPO, IPO, KTO with a reference not precomputed) */
static bool reference_forward(const oom_workload *w)
{
    return oomi_reference_of(w) != OOMI_REFERENCE_NONE && !w->objective.precompute_ref &&
           w->objective.kind != OOMI_OBJECTIVE_GRPO;
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
    double fwd = 2 * N + attn, mult, again = oomi_est_ckpt_share(x), mm;
    /* op-sac recomputes the mms it does not keep, not the attention nor the others' FLOPs */
    if (x->train && x->w->ckpt.op && k->checkpointing == OOM_CHECKPOINTING_FULL) {
        oomi_est_op_sac(x, &mm);
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

/* RewardTrainer builds the checkpoint as AutoModelForSequenceClassification with num_labels=1
 * (trl/trainer/reward_trainer.py): a causal LM's output head, untied or tied, gives way to a
 * score Linear of hidden x 1 (transformers' GenericForSequenceClassification); the model as the
 * trainer holds it, in `rm` */
static const oomi_model *reward_model(oomi_model *rm, const oom_workload *w)
{
    const oomi_model *m = w->model;
    uint64_t score = (uint64_t)m->hidden;
    if (w->objective.kind != OOMI_OBJECTIVE_REWARD || m->head != OOMI_HEAD_CAUSAL_LM)
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
    wb->k.batch = w->k.batch * oomi_objective_sequences(w->objective.kind);
    /* the masked kernels (SDPA's memory-efficient one, eager) compute every score of a packed
     * row and mask the other documents' away; the varlen kernels skip them */
    x->context =
        (double)(w->packing.mode != OOMI_PACKING_NONE && w->k.attention == OOM_ATTENTION_FLASH
                     ? w->k.seq_len
                     : 0);
    oomi_est_packed_batch(wb);
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
    x->ab = w->lora.adapter_dtype == OOMI_ADAPTER_BF16 ? 2 : 4;
    x->frozen = x->lora_on;
    x->e = x->prec == OOM_PRECISION_FP32 ? 4 : 2;
    x->n = (double)w->k.gpus;
    x->fsdp2 = oomi_fsdp2(w) && x->train;
    if (x->fsdp2 && amp(x)) /* MixedPrecisionPolicy's param_dtype: 16-bit compute, no autocast */
        x->prec = x->prec == OOM_PRECISION_AMP_FP16 ? OOM_PRECISION_FP16 : OOM_PRECISION_BF16;
    x->fused = w->objective.kind == OOMI_OBJECTIVE_DPO || w->objective.kind == OOMI_OBJECTIVE_IPO ||
               w->objective.kind == OOMI_OBJECTIVE_KTO || w->objective.kind == OOMI_OBJECTIVE_GRPO;
    x->ref_fwd = reference_forward(w);
    if (x->lora_on && (err = oomi_lora_resolve(&x->lora, x->m, w->lora.targets, w->lora.rank)))
        return err;
    /* a multimodal checkpoint trained on text: its vision tower gets no gradient, so AdamW keeps
     * no state for it (oomless trace, Gemma 3 12B full fine-tune: 11.77 B trained of 12.19 B) */
    x->trainable = !x->train    ? 0
                   : x->lora_on ? (double)x->lora.params
                                : (double)(x->m->params - x->m->params_vision);
    x->wref = oomi_est_reference_weights(x);
    if (x->train && w->k.sharding == OOM_SHARDING_ZERO3 && !x->fsdp2) {
        double A, A1, Ar;
        oomi_est_activations(x, &A, &A1, &Ar);
        if ((err = oomi_zero3_of(&x->z3, wb, A)))
            return err;
    }
    return OOM_OK;
}

/* model-parallel training: the pipeline rank that peaks highest (estimate_pipeline.c) */
static int layout_peak(ctx *x, phase_bytes *p, oom_phase *phase)
{
    oomi_layout_result r;
    const oomi_rank_mem *k;
    int err = oomi_layout_run(&r, x->w);
    if (err)
        return err;
    k = &r.rank[r.limiting];
    *p = (phase_bytes){k->w, k->g, k->o, k->a, k->l, 0, k->t};
    *phase = (oom_phase)k->phase;
    x->mp = true, x->mp_logits = k->block;
    oomi_layout_result_free(&r);
    return OOM_OK;
}

int oom_estimate_run(oom_estimate *out, const oom_workload *w)
{
    ctx x;
    phase_bytes p;
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
    if (x.train && oomi_layout_on(w)) {
        if ((err = layout_peak(&x, &p, &out->peak_phase)))
            return err;
    } else {
        out->peak_phase = x.train ? oomi_est_training(&x, &p) : oomi_est_inference(&x, &p);
    }
    /* with a colocated vLLM engine the trainer does not generate: the engine's memory is the
     * planner's to split (docs/plan.md, "RL with a colocated rollout engine") */
    if (w->objective.kind == OOMI_OBJECTIVE_GRPO && w->objective.rollout == OOMI_ROLLOUT_NONE) {
        phase_bytes g;
        oomi_est_generation(&x, &g);
        if (oomi_est_sum(&g) > oomi_est_sum(&p))
            p = g, out->peak_phase = OOM_PHASE_PREFILL;
    }
    { /* loading the weights, when it holds more than the step (estimate_load.c) */
        phase_bytes l;
        const char *how;
        if ((err = oomi_est_load(&x, &p, &l, &how)))
            return err;
        if (oomi_est_sum(&l) > oomi_est_sum(&p))
            p = l, out->peak_phase = OOM_PHASE_LOAD;
    }
    out->weights = to_bytes(p.weights), out->gradients = to_bytes(p.grads);
    out->optimizer = to_bytes(p.optimizer), out->activations = to_bytes(p.activations);
    out->logits = to_bytes(p.logits), out->kv_cache = to_bytes(p.kv_cache);
    /* the cuBLAS workspace, from the caching allocator: allocated, outside the blocks it keeps */
    out->temporaries = to_bytes(p.temps + oomi_cublas_workspace(w, x.c, NULL));
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

int oomi_load_of(oomi_load *out, const oom_workload *w, const oom_estimate *e)
{
    ctx x;
    oom_workload wb;
    oomi_model rm;
    phase_bytes step = {.weights = (double)e->weights}, l;
    int err;

    memset(out, 0, sizeof(*out));
    if ((err = setup(&x, &wb, &rm, w)))
        return err;
    if ((err = oomi_est_load(&x, &step, &l, &out->how)))
        return err;
    out->transient = l.temps;
    out->peak = l.weights + l.temps;
    return OOM_OK;
}

int oomi_qlora_of(oomi_qlora *out, const oom_workload *w, const oom_estimate *e)
{
    ctx x;
    oom_workload wb;
    oomi_model rm;
    double grad, state, master, linear, other;
    int err;

    memset(out, 0, sizeof(*out));
    if ((err = setup(&x, &wb, &rm, w)))
        return err;
    oomi_est_quantized_split(&x, &linear, &other);
    out->quantized = x.nf4;
    out->double_quant = x.dq;
    if (x.nf4) {
        out->nf4 = linear / 2;
        out->absmax = x.dq ? linear / 64 : linear * 4 / 64;
        out->absmax2 = x.dq ? linear * 4 / (64 * 256) : 0;
        out->unquantized = other * oomi_est_unquantized_bytes(&x);
        out->dequant = oomi_est_dequant(&x);
    }
    if (x.nf4 && oomi_bnb_linears(w)) {
        out->bnb = true;
        out->quantizer = w->quant.quantizer, out->release = w->quant.bitsandbytes;
        if (oomi_bnb_keeps_inputs(w)) { /* what the release adds: the estimate without it */
            oom_workload w44 = *w;
            oom_estimate without = OOM_ESTIMATE_INIT;
            w44.quant.bitsandbytes = 0;
            if ((err = oom_estimate_run(&without, &w44)))
                return err;
            out->kept_inputs = (double)e->activations - (double)without.activations;
        }
    }
    if (x.lora_on) {
        out->adapter_bytes = x.ab;
        out->adapters = (double)x.lora.params * x.ab;
    }
    oomi_est_train_bytes(&x, &grad, &state, &master);
    out->paged =
        x.train ? oomi_est_optimizer_states(&x, state, master) * oomi_est_paged_share(&x) : 0;
    if (w->k.sharding >= OOM_SHARDING_ZERO1)
        out->paged /= x.n;
    if (w->k.offload != OOM_OFFLOAD_NONE)
        out->paged = 0;
    return OOM_OK;
}
