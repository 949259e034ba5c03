/* lora.c - LoRA target resolution: which linears an adapter set covers, its parameters. */
#include "model/model.h"

#include <string.h>

/* adds the linears named `name` (all of them: "dense" or "c_proj" may name several shapes) */
static bool add_target(oomi_lora *l, const oomi_model *m, const char *name, size_t len, long r)
{
    size_t i;
    bool found = false;
    for (i = 0; i < m->nlinears; i++) {
        const oomi_linear *x = &m->linears[i];
        if (strlen(x->name) != len || strncmp(x->name, name, len))
            continue;
        l->params += (uint64_t)x->count * (uint64_t)r * (uint64_t)(x->din + x->dout);
        l->in_elems += (uint64_t)x->count * (uint64_t)x->din;
        l->n_adapted += (uint64_t)x->count;
        /* A is r x din, B dout x r: each paged or not by its own size */
        l->paged += (uint64_t)x->count * ((r * x->din >= OOMI_PAGED_MIN ? r * x->din : 0) +
                                          (r * x->dout >= OOMI_PAGED_MIN ? r * x->dout : 0));
        found = true;
    }
    return found;
}

/* the target list as given, or the family's default */
static const char *target_list(const oomi_model *m, const char *targets)
{
    return !targets || !*targets || !strcmp(targets, "default") ? m->default_targets : targets;
}

static bool all_linear(const char *targets)
{
    return !strcmp(targets, "all-linear") || !strcmp(targets, "all_linear");
}

bool oomi_lora_adapts(const oomi_model *m, const char *targets, const char *name)
{
    const char *p;
    size_t n = strlen(name);
    targets = target_list(m, targets);
    if (all_linear(targets))
        return true;
    for (p = targets; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, name, n))
            return true;
        p += len;
        if (*p == ',')
            p++;
    }
    return false;
}

int oomi_lora_resolve(oomi_lora *out, const oomi_model *m, const char *targets, long rank)
{
    const char *p;
    size_t i;

    memset(out, 0, sizeof(*out));
    targets = target_list(m, targets);
    if (all_linear(targets)) {
        /* PEFT's all-linear: every nn.Linear except the output head */
        for (i = 0; i < m->nlinears; i++)
            add_target(out, m, m->linears[i].name, strlen(m->linears[i].name), rank);
        return OOM_OK;
    }
    for (p = targets; *p;) {
        size_t len = strcspn(p, ",");
        if (len == 0 || !add_target(out, m, p, len, rank)) {
            oomi_sb names = OOMI_SB_INIT;
            for (i = 0; i < m->nlinears; i++)
                oomi_sb_printf(&names, "%s%s", i ? "," : "", m->linears[i].name);
            oomi_fail(OOM_EINVAL, "lora-targets '%s': module '%.*s' is not a linear of %s (%s)",
                      targets, (int)len, p, m->family, names.buf ? names.buf : "none");
            oomi_sb_free(&names);
            return OOM_EINVAL;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return OOM_OK;
}
