/* plan_ckpt.c - the variants of full checkpointing the planner tries beside none, selective and
 * full (docs/plan.md, "Checkpointing variants"), and what they cost. */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

/* the variants `--checkpointing-variants` names, in the order the planner lists them */
static const struct {
    const char *name;
    unsigned bit;
    oomi_ckvar v;
} variants[] = {
    {"op-sac", OOMI_CKS_OPSAC, {0, false, false, true}},
    {"nth:2", OOMI_CKS_NTH2, {2, true, false, false}},
    {"every:2", OOMI_CKS_EVERY2, {2, false, false, false}},
    {"full+offload", OOMI_CKS_OFFLOAD, {0, false, true, false}},
};

int oomi_ckvar_parse(unsigned *out, const char *value)
{
    const char *p = value;
    size_t i;
    *out = 0;
    if (!strcmp(value, "none"))
        return OOM_OK;
    while (*p) {
        size_t len = strcspn(p, ",");
        bool found = false;
        /* the groups: what each stack can run (transformers' every_n_layers and offload=True;
         * torchtitan's layer-level and op-level selective modes) */
        static const struct {
            const char *name;
            unsigned bits;
        } groups[] = {{"all", OOMI_CKS_OPSAC | OOMI_CKS_NTH2 | OOMI_CKS_EVERY2 | OOMI_CKS_OFFLOAD},
                      {"transformers", OOMI_CKS_EVERY2 | OOMI_CKS_OFFLOAD},
                      {"torchtitan", OOMI_CKS_OPSAC | OOMI_CKS_NTH2}};
        for (i = 0; i < OOMI_ARRAY_LEN(variants) && !found; i++)
            if (strlen(variants[i].name) == len && !strncmp(p, variants[i].name, len))
                *out |= variants[i].bit, found = true;
        for (i = 0; i < OOMI_ARRAY_LEN(groups) && !found; i++)
            if (strlen(groups[i].name) == len && !strncmp(p, groups[i].name, len))
                *out |= groups[i].bits, found = true;
        if (!found)
            return oomi_fail(OOM_EINVAL,
                             "checkpointing-variants '%s' is not a list of: op-sac, nth:2, "
                             "every:2, full+offload, or transformers, torchtitan, all, none",
                             value);
        p += len;
        if (*p == ',')
            p++;
    }
    return OOM_OK;
}

static bool same(const oomi_ckvar *a, const oomi_ckvar *b)
{
    return a->every == b->every && a->nth == b->nth && a->offload == b->offload && a->op == b->op;
}

size_t oomi_ckvar_list(oomi_ckvar *out, size_t *own, const oom_workload *w)
{
    size_t n = 0, i;
    oomi_ckvar user = {w->ckpt_every > 1 ? w->ckpt_every : 0, w->ckpt_every > 1 && w->ckpt_nth,
                       w->ckpt_offload, w->ckpt_op};
    out[n++] = (oomi_ckvar){0, false, false, false}; /* plain full */
    *own = 0;
    if (user.every || user.offload || user.op)
        *own = n, out[n++] = user;
    for (i = 0; i < OOMI_ARRAY_LEN(variants); i++)
        if ((w->ckpt_search & variants[i].bit) && !same(&variants[i].v, &user))
            out[n++] = variants[i].v;
    return n;
}

void oomi_ckvar_apply(oom_workload *w, const oomi_ckvar *v)
{
    w->ckpt_every = v->every;
    w->ckpt_nth = v->nth;
    w->ckpt_offload = v->offload;
    w->ckpt_op = v->op;
}

int oomi_ckvar_recompute(oom_plan_choice *c, oom_workload *w)
{
    oom_estimate none = {.version = OOM_ESTIMATE_VERSION};
    oom_knobs k = c->knobs;
    int err;

    c->recompute = 0;
    if (!w || k.checkpointing != OOM_CHECKPOINTING_FULL || k.method == OOM_METHOD_INFERENCE ||
        !c->estimate.flops_per_token)
        return OOM_OK;
    /* the FLOPs the checkpointing adds, in forwards: (with - without) / one forward, where one
     * forward is the no-checkpointing FLOPs over the passes they count (3 for a full fine-tune,
     * 2 under LoRA: flops() in estimate.c) */
    k.checkpointing = OOM_CHECKPOINTING_NONE;
    if ((err = oom_workload_set(w, "checkpointing", "none")) ||
        (err = oom_workload_set_knobs(w, &k)) || (err = oom_estimate_run(&none, w)))
        return err;
    if (none.flops_per_token > 0)
        c->recompute = (c->estimate.flops_per_token - none.flops_per_token) /
                       (none.flops_per_token / oomi_estimate_passes(w));
    /* w as c has it again */
    if ((err = oom_workload_set(w, "checkpointing", c->checkpointing)))
        return err;
    return oom_workload_set_knobs(w, &c->knobs);
}

const char *oomi_plan_ck(const oom_plan_choice *c)
{
    return c->version >= 2 && c->checkpointing[0] ? c->checkpointing
                                                  : oom_checkpointing_name(c->knobs.checkpointing);
}

bool oomi_plan_ck_variant(const oom_plan_choice *c)
{
    return strcmp(oomi_plan_ck(c), oom_checkpointing_name(c->knobs.checkpointing)) != 0;
}

/* Which stacks run a variant: transformers' activation_checkpointing_enable takes every_n_layers
 * and offload (TrainingArguments.activation_checkpointing_kwargs, transformers 5.23); torchtitan
 * takes the layer-level nth:N and the op-level op-sac (selective_ac_option "N" or "op"); verl's
 * config has one switch (enable_gradient_checkpointing). */
int oomi_plan_ck_check(const oom_plan_result *r, const char *format)
{
    const char *ck = oomi_plan_ck(r->best);
    bool titan = !strncmp(ck, "nth:", 4) || !strcmp(ck, "op-sac");
    bool hf = !strcmp(format, "args") || !strcmp(format, "torchrun") || !strcmp(format, "trl");
    if (!oomi_plan_ck_variant(r->best))
        return OOM_OK;
    if ((hf && titan) || (!strcmp(format, "torchtitan") && !titan) || !strcmp(format, "verl"))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: the %s format cannot express checkpointing '%s' (transformers "
                         "runs every:N and +offload, torchtitan nth:N and op-sac: "
                         "--checkpointing-variants transformers or torchtitan)",
                         format, ck);
    return OOM_OK;
}

void oomi_plan_hf_ck_kwargs(oomi_sb *sb, const oom_plan_choice *c, const char *pre,
                            const char *post)
{
    const char *ck = oomi_plan_ck(c);
    long every = !strncmp(ck, "every:", 6) ? strtol(ck + 6, NULL, 10) : 1;
    bool offload = strstr(ck, "+offload") != NULL;
    oomi_sb_printf(sb, "%s{\"every_n_layers\": %ld%s}%s", pre, every,
                   offload ? ", \"offload\": true" : "", post);
}
