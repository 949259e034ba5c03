/*
 * plan_layout.c - training past one node: the planner's search over model-parallel layouts
 * (tensor x context x pipeline x expert x data parallel over the GPUs given), with the
 * micro-batch and the recomputation; each candidate estimated per pipeline rank
 * (estimate_pipeline.c), ranked by a throughput that counts the pipeline's bubble and each
 * group's communication over its link, the effective batch kept. docs/parallelism.md, "Planning
 * a layout", has the model and its sources.
 */
#include "plan/plan.h"

#include <math.h>
#include <string.h>

#define RUNNERS 3 /* runners-up reported */

typedef struct lay {
    long tp, cp, pp, vpp, ep, dp;
    int ck; /* 0 none, 1 full recomputation */
} lay;

typedef struct lsearch {
    const oom_plan_request *r;
    const struct oomi_plan_consts *k;
    oom_workload *w; /* scratch clone of the request's */
    oom_knobs base;
    long G, per_node, eff, candidates;
    uint64_t usable;
    lay fixed;    /* a size above 1 the request gave (0: free) */
    bool offload; /* Megatron's optimizer CPU offload */
    oom_plan_choice best, run[RUNNERS];
    lay best_lay, run_lay[RUNNERS];
    double best_bubble;
    size_t nrun;
    bool have;
} lsearch;

/* whether a group of `size` GPUs `stride` ranks apart stays in a node (ranks placed tensor
 * parallel first, then context, data, pipeline: Megatron's order, torchtitan's mesh) */
static bool intra(const lsearch *s, long size, long stride)
{
    return size * stride <= s->per_node;
}

static double link(const lsearch *s, long size, long stride)
{
    return oomi_pk_si(s->k, intra(s, size, stride) ? OOMI_PK_INTRA : OOMI_PK_INTER);
}

/* Seconds per step of a candidate: the pipeline's m micro-batches and its (P - 1) / V idle
 * slots (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
 * Using Megatron-LM", section 2.2: bubble (p - 1) / (v m)), each slot a stage's compute of one
 * micro-batch (1 / (P t c) of the model's FLOPs on each GPU at the utilisation of its tokens)
 * plus the micro-batch's communication: tensor parallelism's all-gathers and reduce-scatters of
 * the activations (four per layer forward and backward), the experts' all-to-all (dispatch and
 * combine, forward and backward), the context ring's keys and values, the pipeline's sends;
 * then the gradients' reduction over the data-parallel GPUs. None overlapped: conservative. */
static double step_seconds(const lsearch *s, const lay *l, oom_plan_choice *c, double *bubble)
{
    const oomi_model *m = s->w->model;
    const oom_knobs *k = &c->knobs;
    double e = k->precision == OOM_PRECISION_FP32 ? 4 : 2, h = (double)m->hidden;
    double peak = oomi_plan_tflops(s->r->gpu, k->precision, s->k) * 1e12;
    double T = (double)k->batch * (double)k->seq_len / (double)l->cp;
    double tsp = l->tp > 1 ? (double)l->tp : 1, slots = (double)(l->pp - 1) / (double)l->vpp;
    double layers = (double)m->layers / (double)l->pp,
           moe = (double)m->sparse_layers / (double)l->pp;
    double kv = (double)(m->kv_heads > 0 ? m->kv_heads : m->heads) * (double)m->head_dim;
    double u = oomi_plan_utilisation(s->r, T, peak, s->k), mb = (double)k->grad_accum;
    double compute = c->estimate.flops_per_token * (double)k->batch * (double)k->seq_len /
                     (double)(l->pp * l->tp * l->cp) / (peak * u);
    double comm = 0, params, n = (double)(l->dp * l->cp);

    if (l->tp > 1)
        comm += 8 * (tsp - 1) / tsp * e * h * T * layers / link(s, l->tp, 1);
    if (l->ep > 1)
        comm += 4 * (double)m->topk * e * h * T / tsp * (double)(l->ep - 1) / (double)l->ep * moe /
                link(s, l->ep, 1);
    if (l->cp > 1)
        comm += 2 * 2 * e * kv / (double)l->tp * T * (double)(l->cp - 1) * layers /
                link(s, l->cp, l->tp);
    if (l->pp > 1)
        comm += 2 * e * h * T / tsp / link(s, l->pp, l->tp * l->cp * l->dp);
    /* the gradients reduced and the parameters gathered again (distributed optimizer, FSDP2):
     * 2 bytes of each of this GPU's parameters, twice, over the data x context group */
    params = (double)c->estimate.weights / (k->precision == OOM_PRECISION_FP32 ? 4 : 2);
    *bubble = slots / (mb + slots);
    c->utilisation = u;
    return (mb + slots) * (compute + comm) +
           (n > 1 ? 2 * 2 * params * (n - 1) / n / link(s, l->dp * l->cp, l->tp) : 0) +
           (k->offload != OOM_OFFLOAD_NONE /* fp32 gradients down, 16-bit weights up, CPU Adam */
                ? params / n * 6 / oomi_pk_si(s->k, OOMI_PK_PCIE) +
                      params / n / oomi_pk_si(s->k, OOMI_PK_CPU_ADAM)
                : 0);
}

/* the workload of a candidate: its layout, micro-batch, micro-batches, data-parallel copies,
 * the engine's sharding (Megatron's distributed optimizer, torchtitan's FSDP2) */
static int set_candidate(lsearch *s, const lay *l, long batch)
{
    oom_workload *w = s->w;
    oom_knobs k = s->base;
    bool titan = w->layout.engine == OOMI_ENGINE_TORCHTITAN;
    w->parallel.tp = l->tp;
    w->layout.pp = l->pp, w->layout.vpp = l->vpp, w->layout.ep = l->ep, w->layout.cp = l->cp;
    w->layout.etp = w->model->experts > 0 ? 1 : 0;
    w->ckpt.every = 0, w->ckpt.nth = w->ckpt.offload = w->ckpt.op = false;
    w->fsdp2.on = titan;
    k.batch = batch, k.grad_accum = s->eff / (l->dp * batch), k.gpus = l->dp;
    k.checkpointing = l->ck ? OOM_CHECKPOINTING_FULL : OOM_CHECKPOINTING_NONE;
    k.sharding = titan               ? OOM_SHARDING_ZERO3
                 : l->dp * l->cp > 1 ? OOM_SHARDING_ZERO1
                                     : OOM_SHARDING_NONE;
    k.offload = s->offload ? OOM_OFFLOAD_OPTIMIZER : OOM_OFFLOAD_NONE;
    if (s->offload)
        k.sharding = OOM_SHARDING_ZERO1;
    return oom_workload_set_knobs(w, &k);
}

/* One candidate: estimated (*valid false where a rule refuses it), fits, throughput */
static int evaluate(lsearch *s, const lay *l, long batch, oom_plan_choice *c, bool *valid,
                    double *bubble)
{
    char ck[OOMI_CKPT_TEXT];
    int err;
    *valid = false;
    *c = (oom_plan_choice){.version = OOM_PLAN_CHOICE_VERSION,
                           .estimate = {.version = OOM_ESTIMATE_VERSION}};
    if ((err = set_candidate(s, l, batch)) || (err = oom_estimate_run(&c->estimate, s->w))) {
        if (err != OOM_EINVAL)
            return err;
        oomi_clear_error();
        return OOM_OK;
    }
    *valid = true;
    s->candidates++;
    c->knobs.version = OOM_KNOBS_VERSION;
    oom_workload_get_knobs(&c->knobs, s->w);
    oomi_snprintf(c->checkpointing, sizeof c->checkpointing, "%s",
                  oomi_checkpointing_text(ck, sizeof ck, s->w));
    c->effective_batch = c->knobs.batch * c->knobs.grad_accum * c->knobs.gpus;
    c->fits = c->estimate.device_peak <= s->usable;
    c->has_throughput = 1;
    c->step_s = step_seconds(s, l, c, bubble);
    c->samples_per_s = c->step_s > 0 ? (double)c->effective_batch / c->step_s : 0;
    c->tokens_per_s = c->samples_per_s * (double)c->knobs.seq_len;
    c->score = c->tokens_per_s;
    c->recompute = l->ck ? 1 : 0;
    return OOM_OK;
}

/* a layout with fewer model-parallel GPUs is simpler; recomputation last */
static long complexity(const lay *l)
{
    return (l->tp * l->pp * l->ep * l->cp * l->vpp) * 2 + l->ck;
}

static bool better(const oom_plan_choice *a, const lay *la, const oom_plan_choice *b, const lay *lb)
{
    double tol = 1e-3 * fmax(a->score, b->score);
    if (a->score > b->score + tol)
        return true;
    if (a->score < b->score - tol)
        return false;
    return complexity(la) < complexity(lb);
}

/* the best and the runners-up (one per layout and recomputation) */
static void keep(lsearch *s, const oom_plan_choice *c, const lay *l, double bubble)
{
    size_t i, j;
    if (!s->have || better(c, l, &s->best, &s->best_lay)) {
        if (s->have) { /* the best so far becomes the first runner-up */
            for (j = s->nrun < RUNNERS ? s->nrun++ : RUNNERS - 1; j > 0; j--)
                s->run[j] = s->run[j - 1], s->run_lay[j] = s->run_lay[j - 1];
            s->run[0] = s->best, s->run_lay[0] = s->best_lay;
        }
        s->best = *c, s->best_lay = *l, s->best_bubble = bubble, s->have = true;
        return;
    }
    for (i = 0; i < s->nrun && !better(c, l, &s->run[i], &s->run_lay[i]); i++)
        ;
    if (i >= RUNNERS)
        return;
    for (j = s->nrun < RUNNERS ? s->nrun++ : RUNNERS - 1; j > i; j--)
        s->run[j] = s->run[j - 1], s->run_lay[j] = s->run_lay[j - 1];
    s->run[i] = *c, s->run_lay[i] = *l;
}

/* the fastest step a layout could reach: its compute at the curve's ceiling with its least
 * bubble (micro-batch 1), no communication; tokens/s above which it cannot score */
static double ceiling(const lsearch *s, const lay *l, double flops_per_token)
{
    double peak = oomi_plan_tflops(s->r->gpu, s->base.precision, s->k) * 1e12;
    double mb = (double)(s->eff / l->dp), slots = (double)(l->pp - 1) / (double)l->vpp;
    double tokens = (double)s->eff * (double)s->base.seq_len;
    double t = flops_per_token * tokens / (double)s->G / (peak * s->k->v[OOMI_PK_MFU_MAX]);
    return tokens / (t * (mb + slots) / mb);
}

/* micro-batches 1, 2, 4 ... of a layout (smaller fit first: stop at the first that does not) */
static int sweep(lsearch *s, const lay *l)
{
    long b;
    for (b = 1; b <= s->eff / l->dp; b *= 2) {
        oom_plan_choice c;
        double bubble;
        bool valid;
        int err;
        if ((s->eff / l->dp) % b || (l->vpp > 1 && (s->eff / (l->dp * b)) % l->pp))
            continue;
        if ((err = evaluate(s, l, b, &c, &valid, &bubble)))
            return err;
        if (!valid || !c.fits)
            break;
        keep(s, &c, l, bubble);
    }
    return OOM_OK;
}

static bool allowed(long v, long fixed)
{
    return !fixed || v == fixed;
}

/* every layout: tensor parallel within a node, context parallel for long sequences, pipeline
 * stages, experts over data-parallel GPUs, two model chunks per pipeline GPU, with and without
 * recomputation; a layout whose most forgiving candidate (micro-batch 1, full recomputation)
 * does not fit, or whose ceiling cannot beat the best, is skipped */
static int search(lsearch *s)
{
    const oomi_model *m = s->w->model;
    long kvh = m->kv_heads > 0 ? m->kv_heads : m->heads;
    lay l;
    int err;
    for (l.tp = 1; l.tp <= s->per_node && s->G % l.tp == 0; l.tp *= 2) {
        if (!allowed(l.tp, s->fixed.tp) || m->heads % l.tp || (kvh >= l.tp ? kvh % l.tp : 0))
            continue;
        for (l.cp = 1; l.tp * l.cp <= s->per_node && (s->G / l.tp) % l.cp == 0; l.cp *= 2) {
            if (!allowed(l.cp, s->fixed.cp) ||
                (l.cp > 1 && (s->base.seq_len < 8192 || s->base.seq_len % (2 * l.cp * l.tp))))
                continue;
            for (l.pp = 1; l.pp <= m->layers && (s->G / (l.tp * l.cp)) % l.pp == 0; l.pp *= 2) {
                l.dp = s->G / (l.tp * l.cp * l.pp);
                if (!allowed(l.pp, s->fixed.pp) || s->eff % l.dp)
                    continue;
                for (l.ep = 1; l.ep <= (m->experts > 0 ? m->experts : 1); l.ep *= 2) {
                    if (!allowed(l.ep, s->fixed.ep) || (m->experts > 0 && m->experts % l.ep) ||
                        (l.tp * l.cp * l.dp) % l.ep)
                        continue;
                    for (l.vpp = 1; l.vpp <= (l.pp > 1 ? 2 : 1); l.vpp++) {
                        oom_plan_choice c;
                        double bubble;
                        bool valid;
                        if ((s->fixed.vpp && l.vpp != s->fixed.vpp) || m->layers < l.pp * l.vpp)
                            continue;
                        l.ck = 1; /* the lower bound: micro-batch 1, full recomputation */
                        if ((err = evaluate(s, &l, 1, &c, &valid, &bubble)))
                            return err;
                        if (!valid || !c.fits ||
                            (s->have &&
                             ceiling(s, &l, c.estimate.flops_per_token * 0.75) <= s->best.score))
                            continue;
                        for (l.ck = 0; l.ck <= 1; l.ck++)
                            if ((err = sweep(s, &l)))
                                return err;
                    }
                }
            }
        }
    }
    return OOM_OK;
}

/* the layers of each virtual stage as the estimate splits them, "7,8,8,..." */
static char *stage_text(const oom_workload *w)
{
    long n = w->layout.pp * w->layout.vpp, i, *l = oomi_calloc((size_t)n, sizeof(long));
    oomi_sb sb = OOMI_SB_INIT;
    char *out = NULL;
    if (!l)
        return NULL;
    if (!oomi_layout_stage_layers(l, w)) {
        for (i = 0; i < n; i++)
            oomi_sb_printf(&sb, "%s%ld", i ? "," : "", l[i]);
        if (oomi_sb_finish(&sb, &out))
            out = NULL;
    }
    oomi_free(l);
    return out;
}

/* what data parallelism alone gave, for the note */
static const char *dp_verdict(const oom_plan_result *res)
{
    if (!res->found)
        return "data parallelism alone does not fit";
    if (res->best->knobs.offload != OOM_OFFLOAD_NONE)
        return "data parallelism alone needs CPU offload";
    return "data parallelism alone needs ZeRO-3";
}

/* the best layout in `res`, its runners-up as the alternatives */
static int install(lsearch *s, oom_plan_result *res)
{
    const lay *l = &s->best_lay;
    char a[16];
    const char *why = dp_verdict(res);
    size_t i;
    int err;

    if ((err = set_candidate(s, l, s->best.knobs.batch)))
        return err;
    for (i = 0; i < res->n_alternatives; i++)
        oomi_free(res->alternatives[i]->why), oomi_free(res->alternatives[i]);
    oomi_free(res->alternatives);
    res->alternatives = NULL, res->n_alternatives = 0;
    oomi_strv_free(&res->suggestions, &res->n_suggestions);
    oomi_free(res->curve_batch), oomi_free(res->curve_peak_none), oomi_free(res->curve_peak_full);
    res->curve_batch = NULL, res->curve_peak_none = res->curve_peak_full = NULL, res->n_curve = 0;
    oomi_free(res->best->why);
    *res->best = s->best;
    res->found = 1, res->has_fit_probability = 0, res->fit_probability = 0;
    res->downscaled = 0;
    if (!(res->alternatives = oomi_calloc(RUNNERS, sizeof(*res->alternatives))))
        return oomi_nomem();
    for (i = 0; i < s->nrun; i++) {
        const lay *o = &s->run_lay[i];
        char v[32] = "";
        oom_plan_choice *c = oomi_malloc(sizeof(*c));
        if (!c)
            return oomi_nomem();
        *c = s->run[i];
        if (o->vpp > 1)
            oomi_snprintf(v, sizeof v, " (interleaved:%ld)", o->vpp);
        c->why =
            oomi_asprintf("tp %ld x cp %ld x pp %ld%s x ep %ld x dp %ld, %s: %.0f tokens/s", o->tp,
                          o->cp, o->pp, v, o->ep, o->dp, c->checkpointing, c->tokens_per_s);
        res->alternatives[res->n_alternatives++] = c;
    }
    res->tensor_parallel = l->tp;
    res->pipeline_parallel = l->pp, res->virtual_stages = l->vpp;
    res->expert_parallel = l->ep, res->expert_tensor_parallel = s->w->model->experts > 0 ? 1 : 0;
    res->context_parallel = l->cp, res->sequence_parallel = oomi_layout_sp(s->w);
    res->engine = (int)s->w->layout.engine;
    res->recompute_method = 0, res->recompute_layers = 1;
    res->layers = s->w->model->layers, res->bubble = s->best_bubble;
    oomi_free(res->stage_layers);
    res->stage_layers = stage_text(s->w);
    res->peak_tflops = oomi_plan_tflops(s->r->gpu, s->best.knobs.precision, s->k);
    res->max_workers = (long)(res->gpu_budget.usable_bytes / s->best.estimate.device_peak);
    return oomi_plan_note(res,
                          "%s: planned tensor %ld x context %ld x pipeline %ld x data %ld "
                          "parallel (experts over %ld GPUs), %s per GPU at the highest rank's "
                          "peak",
                          why, l->tp, l->cp, l->pp, l->dp, l->ep,
                          OOMI_SZ(a, s->best.estimate.device_peak));
}

static bool titan(const oom_workload *w)
{
    return w->layout.engine == OOMI_ENGINE_TORCHTITAN;
}

/* "OPTION: the layout ... fits (device peak ...)" among the suggestions */
static int suggest(const lsearch *s, oom_plan_result *res, const char *option)
{
    const lay *l = &s->best_lay;
    char a[16];
    return oomi_strv_add(&res->suggestions, &res->n_suggestions,
                         "%s: tensor %ld x context %ld x pipeline %ld x data %ld parallel, experts "
                         "over %ld GPUs, micro-batch %ld, checkpointing %s%s fits (device peak %s)",
                         option, l->tp, l->cp, l->pp, l->dp, l->ep, s->best.knobs.batch,
                         s->best.checkpointing,
                         s->offload ? ", the optimizer's states on the CPU (Megatron's "
                                      "--optimizer-cpu-offload)"
                                    : "",
                         OOMI_SZ(a, s->best.estimate.device_peak));
}

/* where nothing fits on the GPUs given: the first of 2, 4 and 8 times the nodes that a layout
 * fits without offload */
static int more_nodes(const lsearch *s0, oom_plan_result *res, int err)
{
    long f;
    if (err != OOM_ENOFIT)
        return OOM_OK;
    for (f = 2; f <= 8; f *= 2) {
        lsearch s = *s0;
        char opt[48];
        int e;
        s.G *= f, s.eff *= f, s.have = false, s.nrun = 0, s.offload = false;
        if ((e = search(&s)))
            return e;
        if (s.have) {
            oomi_snprintf(opt, sizeof opt, "--nodes %ld", s.G / s.per_node);
            return suggest(&s, res, opt);
        }
    }
    return OOM_OK;
}

/* whether the request leaves layouts to the planner and the model takes them */
static bool applies(const oom_plan_request *r, long gpus, bool forced)
{
    const oom_workload *w = r->workload;
    const oomi_model *m = w ? w->model : NULL;
    if (!w || !m || w->k.method != OOM_METHOD_FULL || gpus < 2)
        return false;
    if (m->block != OOMI_BLOCK_LLAMA || m->routed > m->topk ||
        w->objective.kind != OOMI_OBJECTIVE_SFT || w->packing.mode != OOMI_PACKING_NONE ||
        w->k.loss == OOM_LOSS_CHUNKED)
        return false;
    return forced || (r->allow & OOM_ALLOW_LAYOUT);
}

int oomi_plan_layout(oom_plan_result *res, const oom_plan_request *r,
                     const struct oomi_plan_consts *k, int err)
{
    const oom_workload *w = r->workload;
    lsearch s;
    bool forced, dp_ok;
    char *msg = NULL;
    int e;

    if (err != OOM_OK && err != OOM_ENOFIT)
        return err;
    forced = w && (w->layout.engine_set || w->parallel.tp > 1 || w->layout.pp > 1 ||
                   w->layout.ep > 1 || w->layout.cp > 1);
    /* a data-parallel plan stays on one node (the formats of the frameworks that run it:
     * Trainer, accelerate, DeepSpeed), and past one node unless it needs ZeRO-3 or offload */
    dp_ok = res->found && !forced &&
            (res->nodes == 1 || (res->best->knobs.sharding != OOM_SHARDING_ZERO3 &&
                                 res->best->knobs.offload == OOM_OFFLOAD_NONE));
    if (dp_ok || !applies(r, res->nodes * res->gpus_per_node, forced))
        return err;
    memset(&s, 0, sizeof(s));
    s.r = r, s.k = k, s.G = res->nodes * res->gpus_per_node, s.per_node = res->gpus_per_node;
    s.usable = res->budget.usable_bytes;
    s.eff = res->target_effective_batch > 0 ? res->target_effective_batch : s.G;
    s.base.version = OOM_KNOBS_VERSION;
    s.fixed = (lay){w->parallel.tp > 1 ? w->parallel.tp : 0,
                    w->layout.cp > 1 ? w->layout.cp : 0,
                    w->layout.pp > 1 ? w->layout.pp : 0,
                    w->layout.vpp > 1 ? w->layout.vpp : 0,
                    w->layout.ep > 1 ? w->layout.ep : 0,
                    0,
                    0};
    if (err == OOM_ENOFIT && !(msg = oomi_strdup(oom_last_message()))) {
        e = oomi_nomem();
        goto done;
    }
    if ((e = oom_workload_clone(&s.w, w)) || (e = oom_workload_get_knobs(&s.base, w)))
        goto done;
    if (res->found) /* the sequence the data-parallel search settled on */
        s.base.seq_len = res->best->knobs.seq_len;
    if ((e = search(&s)))
        goto done;
    res->candidates += s.candidates;
    if (!s.have && !titan(w)) { /* the optimizer's states on the CPU: Megatron's offload */
        s.offload = true;
        if ((e = search(&s)))
            goto done;
        if (s.have && !(r->allow & OOM_ALLOW_OFFLOAD)) {
            e = err == OOM_ENOFIT ? suggest(&s, res, "--allow offload") : OOM_OK;
            e = e ? e : more_nodes(&s, res, err);
            e = e ? e : err;
            goto done;
        }
    }
    if (!s.have) {
        e = err == OOM_ENOFIT
                ? oomi_strv_add(&res->suggestions, &res->n_suggestions,
                                "no tensor x pipeline x expert x context parallel layout of the "
                                "%ld GPUs fits either (%ld tried)",
                                s.G, s.candidates)
                : OOM_OK;
        e = e ? e : more_nodes(&s, res, err);
        e = e ? e : err;
        goto done;
    }
    if (res->found && !forced && res->best->score >= s.best.score) {
        e = err; /* ZeRO-3 or offload, and still faster */
        goto done;
    }
    e = install(&s, res);
    oomi_clear_error();
done:
    if (e == OOM_ENOFIT && msg) /* the candidates refused on the way cleared it */
        oomi_fail(OOM_ENOFIT, "%s", msg);
    oomi_free(msg);
    oom_workload_free(s.w);
    return e;
}
