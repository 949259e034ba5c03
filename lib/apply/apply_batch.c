/* apply_batch.c - what a file says of the effective batch (micro-batch x accumulation x GPUs, or
 * a global batch) before and after its edits, and the notes of a file's report. */
#include "apply/apply.h"

#include <json-c/json.h>
#include <string.h>

int oomi_apply_role(const char *spec)
{
    if (!strncmp(spec, "plan.", 5))
        spec += 5;
    if (!strcmp(spec, "batch_size"))
        return R_MICRO;
    if (!strcmp(spec, "grad_accum"))
        return R_ACCUM;
    if (!strcmp(spec, "global_batch") || !strcmp(spec, "effective_batch"))
        return R_GLOBAL;
    return -1;
}

static void note_factor(struct factor *fc, const char *key, const struct edit *e)
{
    bool skipped = !strcmp(e->res.action, "skipped");

    if (!fc->assigned) {
        fc->key = key;
        fc->has_plan = e->val.type == OOMI_AV_INT;
        fc->plan = e->val.i;
    }
    fc->assigned = true;
    if ((skipped && !e->res.has_old) || fc->present) /* the file lacks it, or known already */
        return;
    fc->present = true;
    fc->key = key;
    fc->created = !strcmp(e->res.action, "create");
    fc->has_old = e->res.has_old && e->res.old.type == OOMI_AV_INT;
    fc->old = e->res.old.i;
    fc->has_new = !skipped && e->val.type == OOMI_AV_INT;
    fc->nw = e->val.i;
}

/* *n: the plan's int field (or `dflt`) */
int oomi_apply_plan_int(struct json_object *plan, const char *field, long long dflt, long long *n)
{
    oomi_aval v = {0};
    bool missing = true;
    int err = plan ? oomi_spec_resolve(&v, &missing, plan, field) : OOM_OK;

    *n = !err && !missing && v.type == OOMI_AV_INT ? v.i : dflt;
    oomi_aval_clear(&v);
    return err == OOM_ENOMEM ? err : OOM_OK; /* a field of another type: the default */
}

/* a factor of the effective batch, when it is a sensible one (a product cannot overflow) */
bool oomi_apply_factor_ok(long long n)
{
    return n > 0 && n <= 1000000;
}

/* the effective batch from the factors: old (the file before) or new (after) */
static bool effective(const struct batch *b, bool old, long long *out)
{
    const struct factor *m = &b->f[R_MICRO], *g = &b->f[R_GLOBAL], *ac = &b->f[R_ACCUM];
    long long micro = old ? m->old : m->nw;
    long long accum = 1; /* an accumulation a config does not set is 1: the default of
                          * Lightning's accumulate_grad_batches and of HF's and DeepSpeed's
                          * gradient_accumulation_steps (their documentation) */

    if (g->present) {
        *out = old ? g->old : g->nw;
        return old ? g->has_old : g->has_new;
    }
    if (!m->present || !(old ? m->has_old : m->has_new) || !oomi_apply_factor_ok(micro))
        return false;
    if (ac->present && !(old && ac->created)) {
        accum = old ? ac->old : ac->nw;
        if (!(old ? ac->has_old : ac->has_new) || !oomi_apply_factor_ok(accum))
            return false;
    }
    if (!oomi_apply_factor_ok(b->gpus))
        return false;
    *out = micro * accum * b->gpus;
    return true;
}

/* what one file says of the effective batch */
int oomi_apply_batch(const oom_apply *a, const struct file *f, struct batch *b)
{
    size_t i;
    int r, err;

    memset(b, 0, sizeof(*b));
    for (i = 0; i < a->nas && i < f->nedits; i++)
        if ((r = oomi_apply_role(a->as[i].spec)) >= 0 && f->edits[i].has_val &&
            f->edits[i].res.action)
            note_factor(&b->f[r], a->as[i].key, &f->edits[i]);
    if ((err = oomi_apply_plan_int(a->plan, "gpus", 1, &b->gpus)) ||
        (err = oomi_apply_plan_int(a->plan, "global_batch", 0, &b->plan_eff)))
        return err;
    b->has_old = effective(b, true, &b->old);
    b->has_new = effective(b, false, &b->nw);
    return OOM_OK;
}

int oomi_apply_note(struct file *f, size_t line, char *msg)
{
    struct note *grown;
    size_t i;

    if (!msg)
        return oomi_nomem();
    for (i = 0; i < f->nnotes; i++)
        if (f->notes[i].line == line && !strcmp(f->notes[i].msg, msg)) {
            oomi_free(msg);
            return OOM_OK;
        }
    if (!(grown = oomi_reallocarray(f->notes, f->nnotes + 1, sizeof(*grown)))) {
        oomi_free(msg);
        return oomi_nomem();
    }
    f->notes = grown;
    f->notes[f->nnotes++] = (struct note){line, msg};
    return OOM_OK;
}
