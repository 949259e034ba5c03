/* plan_ckpt.c - the variants of full checkpointing the planner tries beside none, selective and
 * full (docs/plan.md, "Checkpointing variants"), and what they cost. */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

#define PT (OOM_COMMAND_PLAN | OOM_COMMAND_TABLE)
#define V(name, help)                                                                              \
    &(const oom_option_value)                                                                      \
    {                                                                                              \
        OOM_OPTION_VALUE_VERSION, name, help, PT, 0, NULL, NULL, NULL, 0                           \
    }

/* the values of `--checkpointing-variants` (the option in plan_vocab.c): the variants, in the
 * order the planner lists them, then the groups of what each stack can run (transformers'
 * every_n_layers and offload=True; torchtitan's layer-level and op-level selective modes) */
const oom_option_value *const oomi_ckvar_values[OOMI_CKVAR_VALUES] = {
    V("op-sac", "torchtitan's op-level selective checkpointing"),
    V("nth:2", "every other layer, the second of each two (torchtitan)"),
    V("every:2", "every other layer, the first of each two (transformers)"),
    V("full+offload", "full, the layers' inputs in host memory"),
    V("transformers", "what transformers runs: every:2, full+offload"),
    V("torchtitan", "what torchtitan runs: op-sac, nth:2"),
    V("all", "every variant"),
    V("none", "plain full checkpointing only"),
};
/* each value's variants, and the variant itself for the first four */
static const unsigned value_bits[] = {
    OOMI_CKS_OPSAC,
    OOMI_CKS_NTH2,
    OOMI_CKS_EVERY2,
    OOMI_CKS_OFFLOAD,
    OOMI_CKS_EVERY2 | OOMI_CKS_OFFLOAD,
    OOMI_CKS_OPSAC | OOMI_CKS_NTH2,
    OOMI_CKS_OPSAC | OOMI_CKS_NTH2 | OOMI_CKS_EVERY2 | OOMI_CKS_OFFLOAD,
    0,
};
_Static_assert(OOMI_ARRAY_LEN(value_bits) == OOMI_CKVAR_VALUES, "one set of bits per value");
static const oomi_ckvar variants[] = {
    {0, false, false, true},  /* op-sac */
    {2, true, false, false},  /* nth:2 */
    {2, false, false, false}, /* every:2 */
    {0, false, true, false},  /* full+offload */
};

int oomi_ckvar_parse(unsigned *out, const char *value)
{
    const char *p = value;
    size_t i;
    *out = 0;
    while (*p) {
        size_t len = strcspn(p, ",");
        for (i = 0; i < OOMI_CKVAR_VALUES; i++)
            if (strlen(oomi_ckvar_values[i]->name) == len &&
                !strncmp(p, oomi_ckvar_values[i]->name, len))
                break;
        if (i == OOMI_CKVAR_VALUES) {
            oomi_sb sb = OOMI_SB_INIT;
            for (i = 0; i < OOMI_CKVAR_VALUES; i++)
                oomi_sb_printf(&sb, "%s%s", i ? ", " : "", oomi_ckvar_values[i]->name);
            oomi_fail(OOM_EINVAL, "checkpointing-variants '%s' is not a list of: %s", value,
                      sb.buf ? sb.buf : "");
            oomi_sb_free(&sb);
            return OOM_EINVAL;
        }
        *out |= value_bits[i];
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
    oomi_ckvar user = {w->ckpt.every > 1 ? w->ckpt.every : 0, w->ckpt.every > 1 && w->ckpt.nth,
                       w->ckpt.offload, w->ckpt.op};
    out[n++] = (oomi_ckvar){0, false, false, false}; /* plain full */
    *own = 0;
    if (user.every || user.offload || user.op)
        *own = n, out[n++] = user;
    for (i = 0; i < OOMI_ARRAY_LEN(variants); i++)
        if ((w->ckpt.search & value_bits[i]) && !same(&variants[i], &user))
            out[n++] = variants[i];
    return n;
}

void oomi_ckvar_apply(oom_workload *w, const oomi_ckvar *v)
{
    w->ckpt.every = v->every;
    w->ckpt.nth = v->nth;
    w->ckpt.offload = v->offload;
    w->ckpt.op = v->op;
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
     * 2 under LoRA: flops() in estimate_run.c) */
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
 * config has one switch (enable_gradient_checkpointing). Each format's `can` is in its row of
 * the format table (plan_output.c). */
int oomi_plan_ck_check(const oom_plan_result *r, const char *format, unsigned can)
{
    const char *ck = oomi_plan_ck(r->best);
    bool titan = !strncmp(ck, "nth:", 4) || !strcmp(ck, "op-sac");
    if (!oomi_plan_ck_variant(r->best))
        return OOM_OK;
    if (!(can & (titan ? OOMI_CK_TITAN : OOMI_CK_HF)))
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

/* transformers 5.23's TrainingArguments: activation_checkpointing and its kwargs, with
 * gradient_checkpointing(_kwargs) "deprecated alias[es] ..., will be removed in v6"
 * (transformers/training_args.py, __post_init__); the kwargs' every_n_layers and offload are
 * popped by the Trainer for activation_checkpointing_enable */
#define HF_AC_SINCE "5.23"

const char *oomi_hf_ck_key(const oomi_format *f)
{
    return oomi_format_since(f, HF_AC_SINCE) ? "activation_checkpointing"
                                             : "gradient_checkpointing";
}

int oomi_plan_hf_ck_version(const oom_plan_result *r, const oomi_format *f)
{
    if (!oomi_plan_ck_variant(r->best) || oomi_format_since(f, HF_AC_SINCE))
        return OOM_OK;
    return oomi_fail(OOM_EUNSUPPORTED,
                     "plan: checkpointing '%s' needs transformers %s or later (its Trainer's "
                     "every_n_layers and offload); the %s format for transformers %s "
                     "checkpoints every layer: --format-version %s, or plan with "
                     "--checkpointing-variants none",
                     oomi_plan_ck(r->best), HF_AC_SINCE, f->name, f->version, HF_AC_SINCE);
}
