/* plan_suggest.c - when nothing fits: what would (more GPUs, QLoRA, offload, shorter sequence). */
#include "plan/plan_search.h"

#include <stdio.h>
#include <stdarg.h>
#include <string.h>

/* 1 when w with knobs k fits in usable (peak set), 0 when not or when refused */
static int fits_with(oom_workload *w, const oom_knobs *k, uint64_t usable, uint64_t *peak)
{
    oom_estimate e = OOM_ESTIMATE_INIT;
    *peak = UINT64_MAX;
    if (oom_workload_set_knobs(w, k) || oom_estimate_run(&e, w)) {
        oomi_clear_error();
        return 0;
    }
    *peak = e.device_peak;
    return e.device_peak <= usable;
}

/* appends a suggestion; the first failure stays in *err (and later ones add nothing) */
static void add(oom_plan_result *res, int *err, const char *fmt, ...) OOMI_PRINTF(3, 4);
static void add(oom_plan_result *res, int *err, const char *fmt, ...)
{
    va_list ap;
    if (*err)
        return;
    va_start(ap, fmt);
    *err = oomi_strv_addv(&res->suggestions, &res->n_suggestions, fmt, ap);
    va_end(ap);
}

/* the longest sequence (>= 16) under k's that fits at k's other knobs; 0 when none */
static long longest_seq(oom_workload *w, oom_knobs k, uint64_t usable)
{
    long lo = 16, hi = k.seq_len - 1, best = 0;
    uint64_t peak;
    while (lo <= hi) {
        k.seq_len = lo + (hi - lo) / 2;
        if (fits_with(w, &k, usable, &peak))
            best = k.seq_len, lo = k.seq_len + 1;
        else
            hi = k.seq_len - 1;
    }
    return best >= 256 ? best / 64 * 64 : best; /* a round number */
}

static void suggest_training(oom_plan_result *res, const oom_plan_request *r, oom_workload *w,
                             oom_knobs k0, uint64_t usable, int *err)
{
    oom_knobs k = OOM_KNOBS_INIT;
    uint64_t peak;
    char a[16];
    long g, s;

    if (!r->fixed_batch || (r->downscale & OOM_DOWNSCALE_BATCH))
        k0.batch = 1;
    if (!r->fixed_checkpointing || (r->downscale & OOM_DOWNSCALE_CHECKPOINTING))
        k0.checkpointing = OOM_CHECKPOINTING_FULL;
    k0.grad_accum = 1;
    for (g = k0.gpus > 1 ? k0.gpus * 2 : 2; g <= 512; g *= 2) {
        k = k0, k.gpus = g, k.sharding = OOM_SHARDING_ZERO3, k.offload = OOM_OFFLOAD_NONE;
        if (fits_with(w, &k, usable, &peak)) {
            add(res, err,
                "more GPUs with ZeRO-3: --gpus %ld --allow sharding (device peak %s per GPU)", g,
                OOMI_SZ(a, peak));
            break;
        }
        /* DeepSpeed/FSDP mixed precision keeps 16-bit parameters: no autocast copies */
        k.precision =
            k0.precision == OOM_PRECISION_AMP_FP16 ? OOM_PRECISION_FP16 : OOM_PRECISION_BF16;
        if (k0.method == OOM_METHOD_FULL && fits_with(w, &k, usable, &peak)) {
            add(res, err,
                "more GPUs with ZeRO-3 and 16-bit parameters: --gpus %ld --allow "
                "sharding,precision (device peak %s per GPU)",
                g, OOMI_SZ(a, peak));
            break;
        }
    }
    if (k0.method == OOM_METHOD_FULL || k0.method == OOM_METHOD_LORA) {
        k = k0, k.method = OOM_METHOD_QLORA, k.precision = OOM_PRECISION_4BIT;
        k.sharding = OOM_SHARDING_NONE, k.offload = OOM_OFFLOAD_NONE, k.gpus = 1;
        if (fits_with(w, &k, usable, &peak))
            add(res, err,
                "QLoRA: --method qlora (4-bit base, LoRA adapters; device peak %s at batch 1)",
                OOMI_SZ(a, peak));
    }
    k = k0, k.sharding = OOM_SHARDING_ZERO3, k.offload = OOM_OFFLOAD_OPTIMIZER_PARAMS;
    if (fits_with(w, &k, usable, &peak))
        add(res, err,
            "CPU offload: --allow offload (ZeRO-3 with optimizer and parameters on the CPU; "
            "device peak %s, much slower steps)",
            OOMI_SZ(a, peak));
    if ((s = longest_seq(w, k0, usable)) > 0)
        add(res, err, "a shorter sequence: --seq %ld (batch %ld, checkpointing %s)", s, k0.batch,
            oom_checkpointing_name(k0.checkpointing));
}

static void suggest_inference(oom_plan_result *res, oom_workload *w, oom_knobs k0, uint64_t usable,
                              int *err)
{
    static const oom_precision q[] = {OOM_PRECISION_INT8, OOM_PRECISION_4BIT};
    oom_knobs k = OOM_KNOBS_INIT;
    uint64_t peak;
    char a[16];
    size_t i;
    long s, tp;

    k0.batch = 1;
    for (i = 0; i < 2; i++) {
        k = k0, k.precision = q[i];
        if (k0.precision != q[i] && fits_with(w, &k, usable, &peak)) {
            add(res, err, "quantised weights: --precision %s (device peak %s at batch 1)",
                oom_precision_name(q[i]), OOMI_SZ(a, peak));
            break;
        }
    }
    if ((s = longest_seq(w, k0, usable)) > 0)
        add(res, err, "a shorter context: --seq %ld (batch 1)", s);
    /* the smallest tensor-parallel size that fits (the estimator refuses one that does not
     * divide the heads) */
    for (tp = w->parallel.tp * 2; tp <= 64; tp *= 2) {
        long was = w->parallel.tp;
        bool fits;
        w->parallel.tp = tp;
        fits = fits_with(w, &k0, usable, &peak);
        w->parallel.tp = was;
        if (fits) {
            add(res, err, "tensor parallelism: --tensor-parallel %ld (device peak %s per GPU)", tp,
                OOMI_SZ(a, peak));
            break;
        }
    }
}

int oomi_plan_suggest(oom_plan_result *res, const oom_plan_request *r, oom_workload *w,
                      const oom_knobs *smallest)
{
    uint64_t usable = res->budget.usable_bytes, need = res->smallest->estimate.device_peak;
    char a[16], b[16];
    int err = OOM_OK;

    if (w && smallest->method == OOM_METHOD_INFERENCE)
        suggest_inference(res, w, *smallest, usable, &err);
    else if (w)
        suggest_training(res, r, w, *smallest, usable, &err);
    else if (r->line && r->line->fixed_bytes > usable)
        add(res, &err, "the fixed part alone (%s) is over the usable %s: reduce the model",
            OOMI_SZ(a, r->line->fixed_bytes), OOMI_SZ(b, usable));
    if (need != 0 && need != UINT64_MAX && res->workers > 1)
        add(res, &err, "fewer workers: one copy needs %s", OOMI_SZ(a, need));
    if (need != 0 && need != UINT64_MAX)
        add(res, &err,
            "a GPU with at least %s usable (the smallest configuration tried needs that)",
            OOMI_SZ(a, need));
    if (err)
        return err;
    oomi_clear_error();
    return OOM_OK;
}

/* nothing fits under the request: what would (more downscaling, more GPUs, QLoRA, ...) */
/* the trainer fits alone but not beside its colocated engine: what would */
static int rollout_no_fit(search *s, oom_plan_result *res)
{
    oom_plan_choice c = *res->smallest;
    oomi_rollout_split sp;
    char a[16], b[16], d[16];
    uint64_t engine, need;
    int err;

    if ((err = oomi_rollout_split_of(&sp, &s->ro, &c.knobs, &c.estimate, s->usable)))
        return err;
    oomi_rollout_fill(res, &s->ro, &sp);
    if (res->version >= 6) /* nothing planned: the least share the engine needs */
        res->rollout_gpu_memory_utilization = sp.min_utilisation;
    engine = (uint64_t)((double)s->ro.total * sp.min_utilisation);
    need = s->ro.sleep ? (sp.resident + engine > c.estimate.device_peak + sp.sleeping
                              ? sp.resident + engine
                              : c.estimate.device_peak + sp.sleeping)
                       : c.estimate.device_peak + engine;
    if (!s->ro.sleep &&
        (err = oomi_strv_add(&res->suggestions, &res->n_suggestions,
                             "--sleep-mode 1: the engine frees its memory while the trainer "
                             "trains")))
        return err;
    if ((err = oomi_strv_add(&res->suggestions, &res->n_suggestions,
                             "a smaller --target-effective-batch: the engine holds the %ld "
                             "completions each GPU generates at once (%s of KV cache at least)",
                             sp.seqs, OOMI_SZ(a, sp.kv_needed))) ||
        (err = oomi_strv_add(&res->suggestions, &res->n_suggestions,
                             "a GPU with at least %s usable (%s %s + engine %s)", OOMI_SZ(b, need),
                             s->ro.sleep ? "trainer while generating" : "trainer",
                             OOMI_SZ(d, s->ro.sleep ? sp.resident : c.estimate.device_peak),
                             OOMI_SZ(a, engine))))
        return err;
    c.why = NULL;
    if ((err = oomi_search_why_engine(s, &c)))
        return err;
    oomi_fail(OOM_ENOFIT, "nothing fits: the smallest configuration tried (batch %ld, seq %ld) %s",
              c.knobs.batch, c.knobs.seq_len, c.why);
    oomi_free(c.why);
    return OOM_ENOFIT;
}

int oomi_search_no_fit(search *s, oom_plan_result *res, unsigned relax)
{
    const oom_plan_request *r = s->r;
    char a[16], b[16];
    int err;

    res->found = 0;
    *res->smallest = s->smallest;
    if ((err = oomi_search_conf_budget(s, res, &s->smallest.knobs)))
        return err;
    if (r->fixed_batch) {
        char *hint = NULL;
        if ((err = oomi_search_batch_hint(s, &hint)))
            return err;
        if (hint)
            err = oomi_strv_add(&res->suggestions, &res->n_suggestions, "%s", hint);
        oomi_free(hint);
        if (err)
            return err;
    }
    if (relax != OOM_DOWNSCALE_ALL && (r->fixed_batch || r->fixed_seq || r->fixed_checkpointing)) {
        if ((err = oomi_search_all(s, OOM_DOWNSCALE_ALL)))
            return err;
        if (s->have_best &&
            (err = oomi_strv_add(&res->suggestions, &res->n_suggestions,
                                 "--allow-downscale: batch size %ld, seq %ld, checkpointing %s "
                                 "would fit (device peak %s)",
                                 s->best.knobs.batch, s->best.knobs.seq_len, oomi_plan_ck(&s->best),
                                 OOMI_SZ(a, s->best.estimate.device_peak))))
            return err;
    }
    if (s->have_smallest && s->ro.on && res->smallest->estimate.device_peak <= s->usable)
        return rollout_no_fit(s, res);
    if ((err = oomi_plan_suggest(res, r, s->w, &res->smallest->knobs)))
        return err;
    if (!s->have_smallest)
        return oomi_fail(OOM_ENOFIT, "no configuration of %s could be estimated", res->model);
    return oomi_fail(OOM_ENOFIT,
                     "nothing fits: the smallest configuration tried (batch %ld, seq %ld%s%s) "
                     "needs %s, more than the usable %s",
                     res->smallest->knobs.batch, res->smallest->knobs.seq_len,
                     res->inference || res->measured ? "" : ", checkpointing ",
                     res->inference || res->measured ? "" : oomi_plan_ck(res->smallest),
                     OOMI_SZ(a, res->smallest->estimate.device_peak), OOMI_SZ(b, s->usable));
}
