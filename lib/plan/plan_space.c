/* plan_space.c - the candidates of a search: the families of knobs (precision, optimizer,
 * checkpointing, sharding and offload, loss, attention), micro-batches and sequence lengths. */
#include "plan/plan_search.h"

#define INFERENCE_MAX_BATCH 4096

#define ADD_UNIQUE(arr, n, v)                                                                      \
    do {                                                                                           \
        size_t i_;                                                                                 \
        for (i_ = 0; i_ < (n) && (arr)[i_] != (v); i_++)                                           \
            ;                                                                                      \
        if (i_ == (n))                                                                             \
            (arr)[(n)++] = (v);                                                                    \
    } while (0)

static bool no_bf16(const oom_plan_request *r)
{
    return oomi_gpu_lacks_bf16(r->gpu);
}

static size_t precisions(const search *s, oom_precision *out)
{
    const oom_knobs *b = &s->base;
    oom_precision p16 = no_bf16(s->r) ? OOM_PRECISION_FP16 : OOM_PRECISION_BF16;
    oom_precision amp = no_bf16(s->r) ? OOM_PRECISION_AMP_FP16 : OOM_PRECISION_AMP_BF16;
    size_t n = 0;
    out[n++] = b->precision;
    if (!(s->r->allow & OOM_ALLOW_PRECISION) || !s->w)
        return n;
    if (b->method == OOM_METHOD_FULL) {
        ADD_UNIQUE(out, n, amp);
        ADD_UNIQUE(out, n, p16);
    } else if (b->method == OOM_METHOD_LORA) {
        ADD_UNIQUE(out, n, p16);
    } else if (b->method == OOM_METHOD_INFERENCE) {
        ADD_UNIQUE(out, n, p16);
        ADD_UNIQUE(out, n, OOM_PRECISION_INT8);
        ADD_UNIQUE(out, n, OOM_PRECISION_4BIT);
    }
    return n;
}

/* ZeRO-3 layouts the search would try besides the workload's own, for a model deeper than the
 * replay of DeepSpeed's coordinator follows (estimate_zero3.c): left out, with a notice */
bool oomi_search_zero3_too_deep(const search *s)
{
    return s->w && s->base.method != OOM_METHOD_INFERENCE &&
           s->base.sharding != OOM_SHARDING_ZERO3 &&
           ((s->gpus > 1 && (s->r->allow & OOM_ALLOW_SHARDING)) ||
            (s->r->allow & OOM_ALLOW_OFFLOAD)) &&
           s->w->model->layers + s->w->model->enc_layers > OOMI_ZERO3_MAX_BLOCKS;
}

/* (sharding, offload) pairs */
static size_t layouts(const search *s, oom_sharding *sh, oom_offload *off)
{
    const oom_knobs *b = &s->base;
    size_t n = 0, i;
    bool z3 = !oomi_search_zero3_too_deep(s);
    sh[n] = b->sharding, off[n++] = b->offload;
    if (!s->w || b->method == OOM_METHOD_INFERENCE)
        return n;
    if (s->gpus > 1 && (s->r->allow & OOM_ALLOW_SHARDING))
        for (i = 0; i < 4; i++)
            if (!(i == b->sharding && b->offload == OOM_OFFLOAD_NONE) &&
                (z3 || i != OOM_SHARDING_ZERO3))
                sh[n] = (oom_sharding)i, off[n++] = OOM_OFFLOAD_NONE;
    if (s->r->allow & OOM_ALLOW_OFFLOAD) {
        static const oom_sharding osh[] = {OOM_SHARDING_ZERO2, OOM_SHARDING_ZERO3,
                                           OOM_SHARDING_ZERO3};
        static const oom_offload oof[] = {OOM_OFFLOAD_OPTIMIZER, OOM_OFFLOAD_OPTIMIZER,
                                          OOM_OFFLOAD_OPTIMIZER_PARAMS};
        for (i = 0; i < 3; i++)
            if (!(osh[i] == b->sharding && oof[i] == b->offload) &&
                (z3 || osh[i] != OOM_SHARDING_ZERO3))
                sh[n] = osh[i], off[n++] = oof[i];
    }
    return n;
}

/* the loss functions to try: the workload's, and a chunked one where allowed (training) */
static size_t losses(const search *s, oom_loss *out)
{
    size_t n = 0;
    out[n++] = s->base.loss;
    if (s->w && (s->r->allow & OOM_ALLOW_LOSS) && s->base.method != OOM_METHOD_INFERENCE &&
        s->base.loss != OOM_LOSS_CHUNKED)
        out[n++] = OOM_LOSS_CHUNKED;
    return n;
}

/* the attention kernels to try: the workload's, and those that keep less where allowed (eager
 * materialises the scores; SDPA may fall back to its math path; FlashAttention-2 never keeps
 * them) */
static size_t attentions(const search *s, oom_attention *out)
{
    size_t n = 0;
    int a;
    out[n++] = s->base.attention;
    if (s->w && (s->r->allow & OOM_ALLOW_ATTENTION))
        for (a = (int)s->base.attention + 1; a <= OOM_ATTENTION_FLASH; a++)
            out[n++] = (oom_attention)a;
    return n;
}

void oomi_search_families(search *s, bool relax_ck)
{
    oom_precision prec[4];
    oom_optimizer opt[2];
    oom_checkpointing ck[3];
    oom_sharding sh[8];
    oom_offload off[8];
    oom_loss loss[2];
    oom_attention attn[3];
    size_t np = precisions(s, prec), no = 0, nc = 0, nl = layouts(s, sh, off), a, b, c, d, e, f, v;
    bool searched = false;
    size_t nlo = losses(s, loss), nat = attentions(s, attn);
    const oom_knobs *k = &s->base;

    opt[no++] = k->optimizer;
    if ((s->r->allow & OOM_ALLOW_OPTIMIZER) && k->method != OOM_METHOD_INFERENCE &&
        (k->optimizer == OOM_OPTIMIZER_ADAMW || k->optimizer == OOM_OPTIMIZER_ADAMW_FUSED))
        opt[no++] = OOM_OPTIMIZER_ADAMW_8BIT;
    if (!s->w || k->method == OOM_METHOD_INFERENCE)
        ck[nc++] = k->checkpointing;
    else if (s->r->fixed_checkpointing && !relax_ck)
        ck[nc++] = k->checkpointing;
    else if (s->r->fixed_checkpointing || (s->r->allow & OOM_ALLOW_CHECKPOINTING)) {
        for (a = s->r->fixed_checkpointing ? (size_t)k->checkpointing : 0; a < 3; a++)
            ck[nc++] = (oom_checkpointing)a;
        searched = !s->r->fixed_checkpointing;
    } else
        ck[nc++] = k->checkpointing;
    s->nfam = 0;
    for (a = 0; a < nc; a++)
        for (v = 0; v < s->nvar; v++) {
            /* full: the workload's own variant where checkpointing is given, else plain full
             * and, where checkpointing is searched, the variants --checkpointing-variants names */
            bool full = ck[a] == OOM_CHECKPOINTING_FULL;
            if (!full && v)
                break;
            if (v != (s->r->fixed_checkpointing ? s->own : 0) && !(full && searched))
                continue;
            for (b = 0; b < nl; b++)
                for (c = 0; c < no; c++)
                    for (d = 0; d < np; d++)
                        for (e = 0; e < nlo; e++)
                            for (f = 0; f < nat && s->nfam < MAX_FAMILIES; f++)
                                s->fams[s->nfam++] = (family){prec[d], opt[c],  ck[a],   sh[b],
                                                              off[b],  loss[e], attn[f], v};
        }
}

static void add_micro(search *s, long m, long acc)
{
    const oom_plan_request *r = s->r;
    if (s->nmicro >= MAX_MICRO || (r->max_batch > 0 && m > r->max_batch))
        return;
    if (!r->fixed_batch && r->max_auto_batch > 0 && m > r->max_auto_batch)
        return;
    s->micro[s->nmicro] = m, s->accum[s->nmicro++] = acc;
}

/* micro-batches in ascending order with their accumulation; below: those under the fixed batch */
int oomi_search_micro(search *s, bool below)
{
    const oom_plan_request *r = s->r;
    long fb = r->fixed_batch, fa = r->fixed_grad_accum, per, m;
    bool inference = s->base.method == OOM_METHOD_INFERENCE;

    s->nmicro = 0;
    if (inference) {
        long cap = r->max_batch > 0 ? r->max_batch : INFERENCE_MAX_BATCH;
        if (!fb && r->max_auto_batch > 0 && r->max_auto_batch < cap)
            cap = r->max_auto_batch;
        if (fb && !below && (r->max_batch <= 0 || fb <= r->max_batch))
            add_micro(s, fb, 1);
        for (m = 1; !(fb && !below) && m <= cap && m <= INFERENCE_MAX_BATCH; m++)
            if (!fb || m < fb)
                add_micro(s, m, 1);
        goto check;
    }
    per = (s->eff + s->gpus - 1) / s->gpus; /* exact unless allow_inexact (checked in setup) */
    for (m = 1; m <= per && m <= OOMI_PLAN_MAX_MICRO_BATCH && s->nmicro < MAX_MICRO; m++) {
        long acc;
        if (fb && (below ? m >= fb : m != fb))
            continue;
        if (fa) {
            /* inexact: the micro-batches either side of per / fa */
            bool exact = m * fa == per, up = m * fa > per && (m - 1) * fa < per,
                 down = m * fa < per && (m + 1) * fa > per;
            if (!exact && !(r->allow_inexact && (up || down)) && !(below && m * fa < per))
                continue;
            acc = fa;
        } else if (per % m == 0) {
            acc = per / m;
        } else if (r->allow_inexact) {
            /* the accumulation whose effective batch is nearest per, rounding down or up (a tie
             * goes up: at least the samples asked for) */
            long lo = per / m, hi = lo + 1;
            acc = lo >= 1 && per - lo * m < hi * m - per ? lo : hi;
        } else {
            continue;
        }
        add_micro(s, m, acc);
    }
check:
    if (!fb && fa && !below && !s->nmicro)
        return oomi_fail(OOM_EINVAL,
                         "target effective batch %ld is no micro-batch x grad-accum %ld x %ld "
                         "GPUs; change --target-effective-batch or use --allow-inexact",
                         s->eff, fa, s->gpus);
    if (fb && !below && !s->nmicro) {
        if (r->max_batch > 0 && fb > r->max_batch)
            return oomi_fail(OOM_EINVAL, "batch size %ld is above --max-batch-size %ld", fb,
                             r->max_batch);
        return oomi_fail(OOM_EINVAL,
                         "target effective batch %ld is not batch size %ld x grad-accum %ld x %ld "
                         "GPUs; change --target-effective-batch or use --allow-inexact",
                         s->eff, fb, fa ? fa : s->eff / s->gpus / fb, s->gpus);
    }
    return OOM_OK;
}

/* sequence lengths to try, longest first */
void oomi_search_seqs(search *s, bool relax_seq)
{
    const oom_plan_request *r = s->r;
    long v;
    s->nseq = 0;
    if (r->seq_max > 0) {
        long lo = r->seq_min > 0 ? r->seq_min : 1;
        s->seqs[s->nseq++] = r->seq_max;
        for (v = 1; v < r->seq_max; v *= 2)
            ;
        for (v /= 2; v > lo && s->nseq < MAX_SEQS - 1; v /= 2)
            if (v < r->seq_max)
                s->seqs[s->nseq++] = v;
        if (lo < r->seq_max)
            s->seqs[s->nseq++] = lo;
        return;
    }
    s->seqs[s->nseq++] = s->base.seq_len;
    if (relax_seq)
        for (v = s->base.seq_len / 2; v >= 16 && s->nseq < MAX_SEQS; v /= 2)
            s->seqs[s->nseq++] = v;
}
