/* plan_notes.c - what a plan's result says beside the plan: its confidence, the hints for a
 * fixed or awkward batch, the objective's, the colocated engine's and NCCL's notes, the serving
 * engine's profile run. */
#include "plan/plan_search.h"

#include <math.h>

/* The single changes the request does not allow that would make the fixed batch fit as given
 * (the workload's other knobs, its seq, full checkpointing where allowed): "batch size 8 fits with
 * --allow loss (chunked loss) or
 * --checkpointing full". *out is NULL when none does (or there is no fixed batch). */
int oomi_search_batch_hint(search *s, char **out)
{
    const oom_plan_request *r = s->r;
    oomi_sb sb = OOMI_SB_INIT;
    oom_knobs k0 = s->base, k;
    oom_plan_choice c;
    long per = (s->eff + s->gpus - 1) / s->gpus;
    bool valid;
    int i, err = OOM_OK;

    *out = NULL;
    if (!r->fixed_batch || !s->w || k0.method == OOM_METHOD_INFERENCE)
        return OOM_OK;
    k0.batch = r->fixed_batch, k0.gpus = s->gpus;
    k0.grad_accum = r->fixed_grad_accum ? r->fixed_grad_accum
                                        : (per >= r->fixed_batch ? per / r->fixed_batch : 1);
    for (i = 0; i < 4 && !err; i++) {
        const char *flag;
        k = k0;
        if (i == 0 && k0.loss != OOM_LOSS_CHUNKED && !(r->allow & OOM_ALLOW_LOSS))
            k.loss = OOM_LOSS_CHUNKED, flag = "--allow loss (chunked loss)";
        else if (i == 1 && k0.attention != OOM_ATTENTION_FLASH && !(r->allow & OOM_ALLOW_ATTENTION))
            k.attention = OOM_ATTENTION_FLASH, flag = "--allow attention (flash attention)";
        else if (i == 2 && k0.checkpointing != OOM_CHECKPOINTING_FULL &&
                 (r->fixed_checkpointing || !(r->allow & OOM_ALLOW_CHECKPOINTING)))
            k.checkpointing = OOM_CHECKPOINTING_FULL,
            flag = r->fixed_checkpointing ? "--checkpointing full"
                                          : "--allow checkpointing (full checkpointing)";
        else if (i == 3 && !(r->allow & OOM_ALLOW_OPTIMIZER) &&
                 (k0.optimizer == OOM_OPTIMIZER_ADAMW || k0.optimizer == OOM_OPTIMIZER_ADAMW_FUSED))
            k.optimizer = OOM_OPTIMIZER_ADAMW_8BIT, flag = "--allow optimizer (8-bit AdamW)";
        else
            continue;
        if ((err = oomi_search_eval(s, &k, k.checkpointing == k0.checkpointing ? s->own : 0, &c,
                                    &valid)))
            continue;
        if ((!valid || !c.fits) && (r->allow & OOM_ALLOW_CHECKPOINTING) &&
            !r->fixed_checkpointing && k.checkpointing != OOM_CHECKPOINTING_FULL) {
            k.checkpointing = OOM_CHECKPOINTING_FULL; /* with what is allowed already */
            if ((err = oomi_search_eval(s, &k, 0, &c, &valid)))
                continue;
        }
        if (!valid || !c.fits)
            continue;
        oomi_sb_printf(&sb, "%s%s", sb.len ? " or " : "", flag);
    }
    oomi_clear_error();
    if (!err && sb.len)
        *out = oomi_asprintf("batch size %ld fits with %s", r->fixed_batch, sb.buf);
    if (!err && sb.len && !*out)
        err = oomi_nomem();
    err = err ? err : oomi_sb_ok(&sb);
    oomi_sb_free(&sb);
    return err;
}

/* family i's knobs on c's (seq, GPUs) */
static oom_knobs family_knobs(const void *ctx, size_t i, const oom_plan_choice *c)
{
    const family *f = &((const search *)ctx)->fams[i];
    oom_knobs k = c->knobs;
    k.precision = f->prec, k.optimizer = f->opt, k.checkpointing = f->ck;
    k.sharding = f->shard, k.offload = f->off, k.loss = f->loss, k.attention = f->attn;
    return k;
}

static int family_eval(void *ctx, size_t i, const oom_knobs *k, oom_plan_choice *c, bool *valid)
{
    search *s = ctx;
    return oomi_search_eval(s, k, s->fams[i].var, c, valid);
}

static void family_rescore(const void *ctx, oom_plan_choice *c)
{
    const search *s = ctx;
    oomi_plan_throughput(c, s->r, s->nodes, s->k);
}

/* An awkward target (a prime such as 97) leaves only small micro-batches that divide it: the
 * nearest effective batches with a faster plan (plan_awkward.c). Not where the effective batch is
 * not the target's (inexact). */
int oomi_search_awkward(search *s, oom_plan_result *res)
{
    const oom_plan_request *r = s->r;
    const oom_plan_choice *b = &s->best;
    oomi_plan_families f = {s, s->nfam, family_knobs, family_eval, family_rescore};
    if (res->inference || r->fixed_batch || r->fixed_grad_accum || b->effective_batch != s->eff ||
        s->eff % s->gpus || b->knobs.batch >= s->eff / s->gpus || !b->has_throughput)
        return OOM_OK;
    return oomi_plan_awkward(res, &f, b, s->eff, s->gpus);
}

/* The profile run of an inference plan: the tokens and sequences are the workload's
 * max-num-batched-tokens and max-num-seqs, else the plan's sequence (or batch if larger) and
 * batch. */
int oomi_search_serve_profile(const search *s, oom_plan_result *res)
{
    oom_knobs k = s->best.knobs;
    long seqs = s->w->serve.seqs ? s->w->serve.seqs : k.batch;
    long tokens = s->w->serve.tokens    ? s->w->serve.tokens
                  : k.seq_len > k.batch ? k.seq_len
                                        : k.batch;
    double out, sampler, fwd;
    int err;

    if ((err = oomi_serve_forward(s->w, k, tokens, &fwd, &out)))
        return err;
    sampler = oomi_serve_sampler(s->w->model, seqs < tokens ? seqs : tokens);
    res->serve_batched_tokens = tokens;
    res->serve_max_num_seqs = seqs;
    res->serve_rope_bytes = oomi_serve_rope(s->w->model, k.precision);
    res->serve_profile_bytes = (uint64_t)llround(fwd > out + sampler ? fwd : out + sampler);
    return OOM_OK;
}

/* NCCL's part of the best plan's overhead (docs/estimate.md, "Memory outside PyTorch"), when
 * more than one GPU talks: its buffers, and which of NCCL's settings are defaults */
int oomi_search_nccl_note(search *s, oom_plan_result *res)
{
    oom_workload *w = NULL;
    oomi_overhead o;
    char a[16], b[16], c[16];
    int err;
    if (!s->w || !res->found)
        return OOM_OK;
    if ((err = oom_workload_clone(&w, s->w)) || (err = oom_workload_set_knobs(w, &s->best.knobs)) ||
        (err = oomi_overhead_of(&o, w)) || o.ranks < 2) {
        oom_workload_free(w);
        return err;
    }
    err = oomi_plan_note(
        res,
        "overhead: CUDA context %s + NCCL buffers %s (%ld GPUs, %ld "
        "communicator%s, %ld channels x %s, NVLS %s)%s%s",
        OOMI_SZ(a, (uint64_t)o.part[0].bytes), OOMI_SZ(b, (uint64_t)o.part[1].bytes), o.ranks,
        o.comms, o.comms > 1 ? "s" : "", o.channels, OOMI_SZ(c, (uint64_t)o.buffsize),
        o.nvls ? "on" : "off", o.part[1].change ? "; NCCL's defaults assumed, set " : "",
        o.part[1].change ? o.part[1].change : "");
    oom_workload_free(w);
    return err;
}

/* With fit-confidence, the budget of the class of knobs k: a device peak fits when its bound,
 * peak x (1 + under) + context, is within the target, so usable = (target - context) / (1 +
 * under) and the margin is the rest of the target. */
int oomi_search_conf_budget(search *s, oom_plan_result *res, const oom_knobs *k)
{
    oomi_conf cf;
    double u;
    int err;
    if (!(s->conf > 0) || !s->w)
        return OOM_OK;
    if ((err = oomi_search_conf_class(s, k, s->conf, &cf)))
        return err;
    u = floor(((double)s->target - cf.ctx) / (1 + cf.under));
    s->usable = u > 0 ? (uint64_t)u : 0;
    res->budget.usable_bytes = s->usable;
    res->budget.safety_margin_bytes = s->target - s->usable;
    return OOM_OK;
}

/* How sure the chosen plan is (plan.h: oom_plan_result version 3) */
int oomi_search_confidence(search *s, oom_plan_result *res)
{
    const oom_estimate *e = &s->best.estimate;
    oomi_conf cf;
    uint64_t target = res->budget.target_bytes;
    int err;
    if (!s->w)
        return OOM_OK;
    if ((err = oomi_search_conf_budget(s, res, &s->best.knobs)) ||
        (err = oomi_search_conf_class(s, &s->best.knobs, s->conf > 0 ? s->conf : 0.95, &cf)))
        return err;
    if (s->ro.on) {
        /* the trainer trains beside what the engine holds then (a fixed reservation) */
        oomi_rollout_split sp;
        if ((err = oomi_rollout_split_of(&sp, &s->ro, &s->best.knobs, e, s->usable)))
            return err;
        target -= sp.training_peak - e->device_peak;
    }
    res->device_peak_bound = oomi_confidence_bound(&cf, e->device_peak, true);
    res->fit_probability =
        oomi_confidence_probability(&cf, e->device_peak, target, &res->fit_probability_side);
    res->has_fit_probability = 1;
    if (cf.basis == OOMI_CONF_NONE)
        return oomi_plan_note(res,
                              "no measurement of this kind of workload (%s): its bound takes the "
                              "error of the widest class measured (%s)",
                              cf.key, cf.used);
    return OOM_OK;
}

/* What the batch counts under a TRL objective: per_device_train_batch_size is pairs for DPO,
 * IPO, SimPO, ORPO and reward modelling (each concatenated as chosen + rejected), examples for
 * KTO, completions for GRPO (generated per_device_train_batch_size x steps_per_generation at once,
 * num_generations per prompt: GRPOConfig) */
int oomi_search_objective_note(search *s, oom_plan_result *res)
{
    const oom_workload *w = s->w;
    const oom_plan_choice *c = &s->best;
    const char *name;
    if (!w || w->objective.kind == OOMI_OBJECTIVE_SFT)
        return OOM_OK;
    name = OOMI_VALUE_NAME(oomi_objective_values, w->objective.kind);
    if (w->objective.kind == OOMI_OBJECTIVE_GRPO)
        return oomi_plan_note(res,
                              "objective grpo: the effective batch %ld counts completions, %ld "
                              "prompts of %ld; each GPU generates batch x grad-accum = %ld "
                              "completions at once",
                              c->effective_batch, c->effective_batch / w->objective.num_generations,
                              w->objective.num_generations, c->knobs.batch * c->knobs.grad_accum);
    if (oomi_objective_sequences(w->objective.kind) > 1)
        return oomi_plan_note(res,
                              "objective %s: the effective batch %ld counts %s, as TRL's "
                              "per_device_train_batch_size does (micro-batch %ld %s = %ld "
                              "sequences per forward)",
                              name, c->effective_batch, oomi_objective_unit(w->objective.kind),
                              c->knobs.batch, oomi_objective_unit(w->objective.kind),
                              c->knobs.batch * oomi_objective_sequences(w->objective.kind));
    return oomi_plan_note(res, "objective %s: the effective batch %ld counts %s", name,
                          c->effective_batch, oomi_objective_unit(w->objective.kind));
}

/* the split of the GPU between the trainer and its colocated engine, into res and a notice */
int oomi_search_rollout_note(search *s, oom_plan_result *res)
{
    oomi_rollout_split sp;
    char a[16], b[16], c[16];
    int err;
    if (!s->ro.on)
        return OOM_OK;
    if ((err = oomi_rollout_split_of(&sp, &s->ro, &s->best.knobs, &s->best.estimate, s->usable)))
        return err;
    oomi_rollout_fill(res, &s->ro, &sp);
    res->max_workers = 1; /* the trainer and its engine: one job per GPU */
    return oomi_plan_note(res,
                          "rollout vllm-colocate, sleep mode %d: gpu_memory_utilization %.2f "
                          "(at least %.2f), KV cache %s = %ld tokens = %ld sequences of %ld at "
                          "once for a generation batch of %ld; peak training %s, generating %s",
                          s->ro.sleep, sp.utilisation, sp.min_utilisation, OOMI_SZ(a, sp.kv),
                          sp.kv_tokens, sp.kv_tokens / s->best.knobs.seq_len, s->best.knobs.seq_len,
                          sp.seqs, OOMI_SZ(b, sp.training_peak), OOMI_SZ(c, sp.rollout_peak));
}
