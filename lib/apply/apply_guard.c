/* apply_guard.c - apply never changes a run silently: the effective batch a file states kept
 * against a plan made for another (or the change said, or refused), and the keys the plan's
 * memory needs that a file lacks (refused, or said). */
#include "apply/apply.h"

#include <json-c/json.h>
#include <string.h>

/* ---- the effective batch the file states ------------------------------------------------------
 */

/* the plan, with the accumulation (and the effective batch) that keep `eff` at its micro-batch */
static int plan_with_accum(struct json_object **out, struct json_object *plan, long long accum,
                           long long eff)
{
    struct json_object *copy = NULL, *p;

    *out = NULL;
    if (json_object_deep_copy(plan, &copy, NULL) || !copy)
        return oomi_nomem();
    if (!(p = json_object_object_get(copy, "plan")) ||
        json_object_object_add(p, "grad_accum", json_object_new_int64(accum)) ||
        json_object_object_add(p, "effective_batch", json_object_new_int64(eff))) {
        json_object_put(copy);
        return oomi_nomem();
    }
    *out = copy;
    return OOM_OK;
}

/* A file that states an effective batch (its micro-batch and accumulation, or its global
 * batch), and assignments that write the plan's micro-batch with an accumulation or a global
 * batch: the file's effective batch is the target unless OOM_APPLY_ALLOW_BATCH_CHANGE. *kept:
 * the plan to edit the file again with, and *note what to say then; or a note now, or a
 * refusal. */
int oomi_apply_keep_batch(const oom_apply *a, struct file *f, unsigned flags,
                          struct json_object **kept, char **note)
{
    struct batch b;
    const struct factor *m = &b.f[R_MICRO], *ac = &b.f[R_ACCUM], *g = &b.f[R_GLOBAL];
    long long per, accum;
    bool stated;
    int err;

    *kept = NULL;
    *note = NULL;
    if ((err = oomi_apply_batch(a, f, &b)))
        return err;
    /* a file without the second factor's key: the partial-write guard of apply_run.c; one that gets
     * it created (OOM_APPLY_CREATE) stated no accumulation: the plan's is written, and said */
    stated = (ac->present && !ac->created) || (g->present && !g->created);
    if (!m->assigned || !m->has_plan || !(ac->present || g->present) || !b.has_old ||
        b.plan_eff <= 0 || b.old == b.plan_eff)
        return OOM_OK;
    if (!stated || (flags & OOM_APPLY_ALLOW_BATCH_CHANGE))
        return oomi_apply_note(f, 0,
                               oomi_asprintf("the effective batch changes from %lld to %lld, the "
                                             "plan's (%s)",
                                             b.old, b.plan_eff,
                                             stated ? "--allow-effective-batch-change"
                                                    : "the file set no accumulation"));
    per = m->plan * b.gpus;
    if (!oomi_apply_factor_ok(per) || b.old % per)
        return oomi_fail(OOM_EREFUSED,
                         "'%s' states an effective batch of %lld, and the plan was made for %lld: "
                         "its micro-batch %lld x %lld GPU%s does not divide %lld, so no "
                         "accumulation keeps it; plan with --target-effective-batch %lld, or give "
                         "--allow-effective-batch-change to write the plan's; no file is changed",
                         f->name, b.old, b.plan_eff, m->plan, b.gpus, b.gpus == 1 ? "" : "s", b.old,
                         b.old);
    accum = b.old / per;
    if (!(*note = oomi_asprintf("the file's effective batch %lld is kept: micro-batch %lld x "
                                "accumulation %lld x %lld GPU%s (the plan's accumulation was for "
                                "an effective batch of %lld; --allow-effective-batch-change "
                                "writes it)",
                                b.old, m->plan, accum, b.gpus, b.gpus == 1 ? "" : "s", b.plan_eff)))
        return oomi_nomem();
    if ((err = plan_with_accum(kept, a->plan, accum, b.old))) {
        oomi_free(*note);
        *note = NULL;
    }
    return err;
}

/* ---- the keys the plan's memory needs ---------------------------------------------------------
 */

/* the plan field a spec reads ("checkpointing" of "checkpointing!=none"), into buf */
static const char *spec_field(char *buf, size_t size, const char *spec)
{
    size_t n = strcspn(spec, "=!");
    if (!strncmp(spec, "plan.", 5))
        spec += 5, n -= n >= 5 ? 5 : n;
    oomi_snprintf(buf, size, "%.*s", (int)n, spec);
    return buf;
}

/* whether the plan's value of a memory knob is one the plan needs: checkpointing, offload or
 * sharding other than "none", a ZeRO stage above 0; *value gets its text */
static int needed(bool *need, char *value, size_t size, struct json_object *plan, const char *field)
{
    oomi_aval v = {0};
    bool missing = true, knob = !strcmp(field, "checkpointing") || !strcmp(field, "offload") ||
                                !strcmp(field, "sharding") || !strcmp(field, "zero_stage");
    int err;

    *need = false;
    if (!knob || (err = oomi_spec_resolve(&v, &missing, plan, field)))
        return knob ? err : OOM_OK;
    if (!missing && v.type == OOMI_AV_STRING) {
        oomi_snprintf(value, size, "%s", v.s);
        *need = strcmp(v.s, "none") != 0;
    } else if (!missing && v.type == OOMI_AV_INT) {
        oomi_snprintf(value, size, "%lld", v.i);
        *need = v.i != 0;
    }
    oomi_aval_clear(&v);
    return OOM_OK;
}

/* a skipped assignment whose key the file lacks, where the framework's default for it is not
 * what the plan needs: refused, or noted with OOM_APPLY_ALLOW_SKIPPED */
static int memory_key(const oom_apply *a, struct file *f, size_t i, unsigned flags)
{
    const struct assign *as = &a->as[i];
    const struct edit *e = &f->edits[i];
    char field[64], value[64] = "", dflt[96] = "";
    oomi_aval d = {0};
    bool need, same;
    size_t j;
    int err;

    if (!e->res.action || strcmp(e->res.action, "skipped") || !e->has_val || e->res.has_old ||
        e->res.instead)
        return OOM_OK;
    for (j = 0; as->group && j < i; j++) /* a group is said once, by its first key */
        if (a->as[j].group == as->group)
            return OOM_OK;
    spec_field(field, sizeof(field), as->spec);
    if ((err = needed(&need, value, sizeof(value), a->plan, field)) || !need)
        return err;
    if (as->unset) {
        if ((err = oomi_aval_from_plain(&d, as->unset)))
            return err;
        same = oomi_aval_equal(&d, &e->val);
        oomi_aval_clear(&d);
        if (same) /* the framework does it by itself */
            return OOM_OK;
        oomi_snprintf(dflt, sizeof(dflt), "; without the key the framework uses %s", as->unset);
    }
    if (flags & OOM_APPLY_ALLOW_SKIPPED)
        return oomi_apply_note(f, 0,
                               oomi_asprintf("no '%s' (--allow-skipped): the plan fits only with "
                                             "%s %s%s, so the run may run out of memory",
                                             as->key, field, value, dflt));
    return oomi_fail(OOM_EREFUSED,
                     "'%s' has no '%s': the plan fits only with %s %s%s, so the run would not "
                     "fit; --create adds '%s', --allow-skipped writes the rest anyway; no file is "
                     "changed",
                     f->name, as->key, field, value, dflt, as->key);
}

int oomi_apply_memory_keys(oom_apply *a, unsigned flags)
{
    size_t i, j;
    int err = OOM_OK;

    for (i = 0; !err && i < a->nfiles; i++)
        for (j = 0; !err && j < a->files[i].nedits && j < a->nas; j++)
            err = memory_key(a, &a->files[i], j, flags);
    return err;
}
