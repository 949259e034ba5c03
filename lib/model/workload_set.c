/* workload_set.c - setting a workload's options from text and reading them back: one row per
 * option of workload_options.c (fields[]), a field of a kind or its own functions. Whether the
 * options make sense together is workload_check.c's. */
#include "model/model.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* a value of the option `key` (workload_options.c), as the index of its table */
static int parse_enum(unsigned *out, const char *key, const char *value)
{
    return oomi_option_parse(out, oomi_workload_option(key), value);
}

static int parse_count(long *out, const char *key, const char *value, long min)
{
    long long v;
    int err = oomi_parse_long(&v, value, min, 1LL << 30, key);
    if (!err)
        *out = (long)v;
    return err;
}

static int set_model(oom_workload *w, const char *key, const char *value)
{
    (void)key;
    oomi_model *m = NULL;
    char *arg;
    int err = oomi_model_load(&m, value);
    if (err)
        return err;
    if (!(arg = oomi_strdup(value))) {
        oomi_model_free(m);
        return oomi_nomem();
    }
    oomi_model_free(w->model);
    oomi_free(w->model_arg);
    w->model = m;
    w->model_arg = arg;
    return OOM_OK;
}

static int set_targets(oom_workload *w, const char *key, const char *value)
{
    (void)key;
    char *t;
    if (!*value)
        return oomi_fail(OOM_EINVAL, "lora-targets '' is empty");
    if (!(t = oomi_strdup(value)))
        return oomi_nomem();
    oomi_free(w->lora.targets);
    w->lora.targets = t;
    w->lora.targets_set = true;
    return OOM_OK;
}

static int set_dropout(oom_workload *w, const char *key, const char *value)
{
    double p;
    int err = oomi_parse_double(&p, value, key);
    if (err)
        return err;
    if (p < 0 || p >= 1)
        return oomi_fail(OOM_EINVAL, "lora-dropout '%s' must be in [0, 1)", value);
    w->lora.dropout = p;
    w->lora.dropout_set = true;
    return OOM_OK;
}

/* CUBLAS_WORKSPACE_CONFIG: ":SIZE_KIB:COUNT" pairs, the workspace being the sum of SIZE x COUNT
 * KiB (PyTorch's parseChosenWorkspaceSize, aten/src/ATen/cuda/CublasHandlePool.cpp) */
static int set_cublas(oom_workload *w, const char *key, const char *value)
{
    (void)key;
    const char *p = value;
    uint64_t total = 0;
    if (!*p)
        return oomi_fail(OOM_EINVAL, "cublas-workspace '' is empty");
    while (*p) {
        char *end;
        unsigned long long kib, n;
        if (*p != ':' || p[1] < '0' || p[1] > '9')
            break;
        kib = strtoull(p + 1, &end, 10);
        if (*end != ':' || end[1] < '0' || end[1] > '9')
            break;
        n = strtoull(end + 1, &end, 10);
        if (kib > (1ULL << 30) || n > (1ULL << 20))
            break;
        total += (uint64_t)kib * n * 1024;
        p = end;
    }
    if (*p)
        return oomi_fail(OOM_EINVAL,
                         "cublas-workspace '%s' is not ':SIZE_KIB:COUNT' pairs "
                         "(CUBLAS_WORKSPACE_CONFIG, e.g. :4096:8)",
                         value);
    w->runtime.cublas_ws = total;
    return OOM_OK;
}

/* "every:N": one layer in N checkpointed, the first of each N, as transformers'
 * activation_checkpointing_enable(every_n_layers=N) picks them (layer_index % N == 0,
 * modeling_utils.py _set_gradient_checkpointing, transformers 5.23); "nth:N": the N-th of each N,
 * as torchtitan's selective_ac_option = "N" (and torchtune's ac_option) picks them (a counter
 * from 1, checkpointed where count % N == 0: torchtitan/distributed/activation_checkpoint.py,
 * _apply_layer_sac). Both are full checkpointing on those layers only. "op-sac": every layer
 * checkpointed under torchtitan's op-level selective policy, which keeps some op outputs
 * (estimate_activations.c, oomi_est_op_sac). */
static int set_checkpointing(oom_workload *w, const char *key, const char *value)
{
    unsigned v;
    long long every = 0;
    char base[OOMI_CKPT_TEXT];
    size_t n = strlen(value);
    bool offload = n > 8 && !strcmp(value + n - 8, "+offload"), nth;
    if (offload)
        n -= 8;
    if (n >= sizeof base)
        n = sizeof base - 1;
    memcpy(base, value, n);
    base[n] = '\0';
    nth = !strncmp(base, "nth:", 4);
    if (!strcmp(base, "op-sac") && !offload) {
        v = OOM_CHECKPOINTING_FULL;
    } else if (nth || !strncmp(base, "every:", 6)) {
        if (oomi_parse_long(&every, base + (nth ? 4 : 6), 1, 1L << 20, key))
            return oomi_fail(OOM_EINVAL,
                             "checkpointing '%s': N must be a whole number of layers, at least 1",
                             value);
        v = OOM_CHECKPOINTING_FULL;
    } else if (parse_enum(&v, key, base) || v > OOM_CHECKPOINTING_FULL ||
               (offload && v != OOM_CHECKPOINTING_FULL)) {
        oomi_sb sb = OOMI_SB_INIT;
        oomi_option_values_text(&sb, oomi_workload_option(key), ", ");
        oomi_fail(OOM_EINVAL, "checkpointing '%s' is not one of: %s", value, sb.buf ? sb.buf : "");
        oomi_sb_free(&sb);
        return OOM_EINVAL;
    }
    w->k.checkpointing = (oom_checkpointing)v;
    w->ckpt.every = (long)every;
    w->ckpt.nth = nth;
    w->ckpt.offload = offload;
    w->ckpt.op = !strcmp(base, "op-sac");
    return OOM_OK;
}

/* sharding: fsdp2 is zero3 with the workload's fsdp2 flag */
static int set_sharding(oom_workload *w, const char *key, const char *value)
{
    unsigned v;
    int err = parse_enum(&v, key, value);
    if (err)
        return err;
    w->fsdp2.on = v == OOM_SHARDING_ZERO3 + 1; /* the value after zero3 */
    w->k.sharding = w->fsdp2.on ? OOM_SHARDING_ZERO3 : (oom_sharding)v;
    return OOM_OK;
}

/* yes, no, or a count of GPUs (the form N) */
static int set_reshard(oom_workload *w, const char *key, const char *value)
{
    unsigned v;
    long long n;
    int err;
    if (value[0] >= '0' && value[0] <= '9') {
        if ((err = oomi_parse_long(&n, value, 2, 1LL << 30, key)))
            return err;
        w->fsdp2.reshard = (long)n;
    } else if ((err = parse_enum(&v, key, value))) {
        return err;
    } else {
        w->fsdp2.reshard = v == 1 ? -1 : 0;
    }
    w->fsdp2.reshard_set = true;
    return OOM_OK;
}

static int set_buffsize(oom_workload *w, const char *key, const char *value)
{
    uint64_t v;
    int err = oom_parse_size(&v, value, OOM_UNIT_BYTES);
    (void)key;
    if (err)
        return err;
    if (!v)
        return oomi_fail(OOM_EINVAL, "nccl-buffsize '%s' must be more than 0", value);
    w->nccl.buffsize = v;
    return OOM_OK;
}

static int set_overhead(oom_workload *w, const char *key, const char *value)
{
    (void)key;
    return oom_parse_size(&w->runtime.overhead, value, OOM_UNIT_MIB);
}

/* the reference model as set (AUTO is resolved where it is read: oomi_reference_of) */
static int set_reference(oom_workload *w, const char *key, const char *value)
{
    return parse_enum(&w->objective.reference, key, value);
}

static int set_ref_precision(oom_workload *w, const char *key, const char *value)
{
    unsigned v;
    int err = parse_enum(&v, key, value); /* the precision enum's order */
    if (!err)
        w->objective.ref_precision = (oom_precision)v;
    return err;
}

static int set_sleep(oom_workload *w, const char *key, const char *value)
{
    unsigned v;
    int err = parse_enum(&v, key, value); /* levels 0, 1, 2 */
    if (!err)
        w->objective.sleep_level = (int)v, w->objective.sleep_set = true;
    return err;
}

/* ---- reading an option back as text --------------------------------------------------------- */

/* a copy of the name of value v of option `key` */
static char *value_of(const char *key, unsigned v)
{
    const oom_option *o = oomi_workload_option(key);
    return oomi_strdup(oomi_value_name(o->values, o->n_values, v));
}

static oom_knobs knobs_of(const oom_workload *w)
{
    oom_knobs k = OOM_KNOBS_INIT;
    oom_workload_get_knobs(&k, w);
    return k;
}

static char *get_model(const oom_workload *w, const char *key)
{
    (void)key;
    return oomi_strdup(w->model_arg ? w->model_arg : "");
}

/* the knobs' enums by their names (precision AUTO resolved, as oom_workload_get_knobs gives it) */
#define KNOB_ENUM(field, type, name_of)                                                            \
    static int set_##field(oom_workload *w, const char *key, const char *value)                    \
    {                                                                                              \
        unsigned v;                                                                                \
        int err = parse_enum(&v, key, value);                                                      \
        if (!err)                                                                                  \
            w->k.field = (type)v;                                                                  \
        return err;                                                                                \
    }                                                                                              \
    static char *get_##field(const oom_workload *w, const char *key)                               \
    {                                                                                              \
        (void)key;                                                                                 \
        return oomi_strdup(name_of(knobs_of(w).field));                                            \
    }
KNOB_ENUM(method, oom_method, oom_method_name)
KNOB_ENUM(precision, oom_precision, oom_precision_name)
KNOB_ENUM(optimizer, oom_optimizer, oom_optimizer_name)
KNOB_ENUM(attention, oom_attention, oom_attention_name)
KNOB_ENUM(loss, oom_loss, oom_loss_name)
KNOB_ENUM(offload, oom_offload, oom_offload_name)
#undef KNOB_ENUM

static char *get_checkpointing(const oom_workload *w, const char *key)
{
    char ck[OOMI_CKPT_TEXT];
    (void)key;
    return oomi_strdup(oomi_checkpointing_text(ck, sizeof ck, w));
}

static char *get_sharding(const oom_workload *w, const char *key)
{
    (void)key;
    return oomi_strdup(oomi_sharding_text(w));
}

static char *get_reshard(const oom_workload *w, const char *key)
{
    return w->fsdp2.reshard > 1 ? oomi_asprintf("%ld", w->fsdp2.reshard)
                                : value_of(key, w->fsdp2.reshard ? 1 : 0);
}

static char *get_targets(const oom_workload *w, const char *key)
{
    (void)key;
    return oomi_strdup(w->lora.targets ? w->lora.targets : "default");
}

static char *get_dropout(const oom_workload *w, const char *key)
{
    (void)key;
    return oomi_asprintf("%g", w->lora.dropout);
}

static char *get_reference(const oom_workload *w, const char *key)
{
    return value_of(key, oomi_reference_of(w));
}

static char *get_ref_precision(const oom_workload *w, const char *key)
{
    (void)key;
    return oomi_strdup(oom_precision_name(w->objective.ref_precision));
}

static char *get_sleep(const oom_workload *w, const char *key)
{
    (void)key;
    return oomi_asprintf("%d", w->objective.sleep_level);
}

static char *get_overhead(const oom_workload *w, const char *key)
{
    (void)key;
    return w->runtime.overhead != OOM_UNKNOWN
               ? oomi_asprintf("%llu", (unsigned long long)w->runtime.overhead)
               : oomi_strdup("");
}

static char *get_buffsize(const oom_workload *w, const char *key)
{
    (void)key;
    return w->nccl.buffsize ? oomi_asprintf("%llu", (unsigned long long)w->nccl.buffsize)
                            : oomi_strdup("");
}

static char *get_cublas(const oom_workload *w, const char *key)
{
    (void)key;
    return w->runtime.cublas_ws != OOM_UNKNOWN
               ? oomi_asprintf(":%llu:1", (unsigned long long)(w->runtime.cublas_ws / 1024))
               : oomi_strdup("");
}

/* ---- the options' table --------------------------------------------------------------------- */

/* How one workload option is set from text and read back. Most options are one field of a kind:
 * COUNT, a whole number from 1 (COUNT_OR_NONE: 0, its default, reads as ""); CHOICE, the index of
 * one of the option's values (workload_options.c); YES, a bool set by the option's second value
 * (no/yes, vllm/transformers); ELEMENTS, DeepSpeed's element counts (a whole number from 0, 1 for
 * the reduce bucket, to 1e15). `given`, where set, is a bool the option's being given sets (the
 * checks of other methods and objectives read it). The others have their own functions. */
enum { COUNT, COUNT_OR_NONE, CHOICE, YES, ELEMENTS, OWN };
typedef struct option_field {
    const char *name;
    unsigned kind;
    size_t field, given; /* offsets in oom_workload; given 0: not tracked */
    int (*set)(oom_workload *w, const char *key, const char *value);
    char *(*get)(const oom_workload *w, const char *key);
} option_field;

#define AT(member) offsetof(oom_workload, member)
#define FIELD(name, kind, member)                                                                  \
    {                                                                                              \
        name, kind, AT(member), 0, NULL, NULL                                                      \
    }
#define GIVEN(name, kind, member, flag)                                                            \
    {                                                                                              \
        name, kind, AT(member), AT(flag), NULL, NULL                                               \
    }
#define OWN(name, set, get)                                                                        \
    {                                                                                              \
        name, OWN, 0, 0, set, get                                                                  \
    }

/* every option of workload_options.c, in its order (unit.test_vocab holds the two together) */
static const option_field fields[] = {
    OWN("model", set_model, get_model),
    OWN("method", set_method, get_method),
    OWN("precision", set_precision, get_precision),
    OWN("optimizer", set_optimizer, get_optimizer),
    FIELD("batch", COUNT, k.batch),
    FIELD("seq", COUNT, k.seq_len),
    FIELD("grad-accum", COUNT, k.grad_accum),
    OWN("checkpointing", set_checkpointing, get_checkpointing),
    OWN("attention", set_attention, get_attention),
    OWN("loss", set_loss, get_loss),
    FIELD("gpus", COUNT, k.gpus),
    OWN("sharding", set_sharding, get_sharding),
    GIVEN("fsdp-param-dtype", YES, fsdp2.bf16, fsdp2.dtype_set),
    OWN("reshard-after-forward", set_reshard, get_reshard),
    OWN("offload", set_offload, get_offload),
    FIELD("zero3-max-live-params", ELEMENTS, zero3.max_live),
    FIELD("zero3-prefetch-bucket", ELEMENTS, zero3.prefetch),
    FIELD("zero3-persistence-threshold", ELEMENTS, zero3.persistence),
    FIELD("zero3-max-reuse-distance", ELEMENTS, zero3.reuse),
    FIELD("zero3-reduce-bucket", ELEMENTS, zero3.reduce),
    GIVEN("lora-rank", COUNT, lora.rank, lora.rank_set),
    OWN("lora-targets", set_targets, get_targets),
    OWN("lora-dropout", set_dropout, get_dropout),
    FIELD("double-quant", CHOICE, quant.double_quant),
    FIELD("adapter-dtype", CHOICE, lora.adapter_dtype),
    FIELD("bitsandbytes", CHOICE, quant.bitsandbytes),
    FIELD("quantizer", CHOICE, quant.quantizer),
    FIELD("kbit-prepare", CHOICE, quant.kbit_prepare),
    FIELD("decoder-seq", COUNT_OR_NONE, shape.decoder_seq),
    FIELD("max-positions", COUNT_OR_NONE, shape.max_positions),
    FIELD("keep-grads", YES, runtime.keep_grads),
    FIELD("optimizer-in-backward", YES, runtime.optim_in_bwd),
    FIELD("compile", YES, runtime.compile),
    OWN("overhead", set_overhead, get_overhead),
    OWN("cublas-workspace", set_cublas, get_cublas),
    OWN("nccl-buffsize", set_buffsize, get_buffsize),
    FIELD("nccl-channels", COUNT_OR_NONE, nccl.channels),
    FIELD("nccl-communicators", COUNT_OR_NONE, nccl.comms),
    FIELD("nccl-nvls", CHOICE, nccl.nvls),
    FIELD("tensor-parallel", COUNT, parallel.tp),
    FIELD("kv-cache", YES, serve.kv_transformers),
    FIELD("objective", CHOICE, objective.kind),
    OWN("reference", set_reference, get_reference),
    OWN("reference-precision", set_ref_precision, get_ref_precision),
    FIELD("precompute-ref", YES, objective.precompute_ref),
    GIVEN("num-generations", COUNT, objective.num_generations, objective.grpo_set),
    GIVEN("completion-len", COUNT_OR_NONE, objective.completion_len, objective.completion_set),
    FIELD("rollout", CHOICE, objective.rollout),
    OWN("sleep-mode", set_sleep, get_sleep),
    FIELD("packing", CHOICE, packing.mode),
    FIELD("stack", CHOICE, stack),
    FIELD("tokens-per-batch", COUNT_OR_NONE, packing.tokens_per_batch),
    FIELD("max-num-batched-tokens", COUNT_OR_NONE, serve.tokens),
    FIELD("max-num-seqs", COUNT_OR_NONE, serve.seqs),
};

#undef AT
#undef FIELD
#undef GIVEN
#undef OWN

static const option_field *field_of(const char *key)
{
    size_t i;
    for (i = 0; i < OOMI_ARRAY_LEN(fields); i++)
        if (!strcmp(fields[i].name, key))
            return &fields[i];
    return NULL;
}

#define AT(w, f, type) ((type *)((char *)(w) + (f)->field))

/* ZeRO-3's element counts: a whole number (1e9 or 1000000000) from min to 1e15 */
static int set_elements(double *out, const char *key, const char *value)
{
    long min = !strcmp(key, "zero3-reduce-bucket");
    double v;
    int err = oomi_parse_double(&v, value, key);
    if (err)
        return err;
    if (v != floor(v) || v < (double)min || v > 1e15)
        return oomi_fail(OOM_EINVAL, "%s '%s' is not a whole number of elements from %ld to 1e15",
                         key, value, min);
    *out = v;
    return OOM_OK;
}

/* sets the field; every setter writes only on success (a refused value leaves the workload as
 * it was) */
static int set_field(oom_workload *w, const option_field *f, const char *value)
{
    unsigned v;
    int err;
    switch (f->kind) {
    case COUNT:
    case COUNT_OR_NONE:
        err = parse_count(AT(w, f, long), f->name, value, 1);
        break;
    case CHOICE:
        err = parse_enum(AT(w, f, unsigned), f->name, value);
        break;
    case YES:
        if (!(err = parse_enum(&v, f->name, value)))
            *AT(w, f, bool) = v == 1;
        break;
    case ELEMENTS:
        err = set_elements(AT(w, f, double), f->name, value);
        break;
    default:
        return f->set(w, f->name, value);
    }
    if (!err && f->given)
        *(bool *)((char *)w + f->given) = true;
    return err;
}

static char *get_field(const oom_workload *w, const option_field *f)
{
    const char *base = (const char *)w + f->field;
    switch (f->kind) {
    case COUNT:
        return oomi_asprintf("%ld", *(const long *)base);
    case COUNT_OR_NONE:
        return *(const long *)base ? oomi_asprintf("%ld", *(const long *)base) : oomi_strdup("");
    case CHOICE:
        return value_of(f->name, *(const unsigned *)base);
    case YES:
        return value_of(f->name, *(const bool *)base);
    case ELEMENTS:
        return oomi_asprintf("%.0f", *(const double *)base);
    default:
        return f->get(w, f->name);
    }
}

#undef AT

/* "lora_rank" -> "lora-rank" into buf; false when too long */
static bool norm_key(char *buf, size_t size, const char *key)
{
    size_t i;
    for (i = 0; key[i]; i++) {
        if (i + 1 >= size)
            return false;
        buf[i] = key[i] == '_' ? '-' : key[i];
    }
    buf[i] = 0;
    return true;
}

int oom_workload_set(oom_workload *w, const char *key, const char *value)
{
    const option_field *f;
    char k[32];

    int err;

    if (!key || !norm_key(k, sizeof(k), key))
        return oomi_fail(OOM_ENOTFOUND, "unknown workload option '%s'", key ? key : "(null)");
    if (!value)
        return oomi_fail(OOM_EINVAL, "option '%s' needs a value", k);
    if ((f = field_of(k)))
        return set_field(w, f, value);
    /* pipeline, expert, context parallelism (workload_layout.c) */
    if ((err = oomi_layout_set(w, k, value)) == OOM_ENOTFOUND)
        return oomi_fail(OOM_ENOTFOUND, "unknown workload option '%s'", key);
    return err;
}

int oom_workload_get(char **out, const oom_workload *w, const char *key)
{
    const option_field *f;
    char k[32];

    *out = NULL;
    if (!key || !norm_key(k, sizeof(k), key))
        return oomi_fail(OOM_ENOTFOUND, "unknown workload option '%s'", key ? key : "(null)");
    if (!(f = field_of(k))) {
        int err = oomi_layout_get(out, w, k); /* pipeline, expert, context parallelism */
        if (err == OOM_ENOTFOUND)
            return oomi_fail(OOM_ENOTFOUND, "unknown workload option '%s'", key);
        return err;
    }
    if (!(*out = get_field(w, f)))
        return oomi_nomem();
    return OOM_OK;
}
