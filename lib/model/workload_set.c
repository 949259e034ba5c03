/* workload_set.c - setting a workload's options from text, reading them back, validation. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
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

static int set_model(oom_workload *w, const char *value)
{
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

static int set_targets(oom_workload *w, const char *value)
{
    char *t;
    if (!*value)
        return oomi_fail(OOM_EINVAL, "lora-targets '' is empty");
    if (!(t = oomi_strdup(value)))
        return oomi_nomem();
    oomi_free(w->lora_targets);
    w->lora_targets = t;
    w->lora_targets_set = true;
    return OOM_OK;
}

static int set_dropout(oom_workload *w, const char *value)
{
    double p;
    int err = oomi_parse_double(&p, value, "lora-dropout");
    if (err)
        return err;
    if (p < 0 || p >= 1)
        return oomi_fail(OOM_EINVAL, "lora-dropout '%s' must be in [0, 1)", value);
    w->lora_dropout = p;
    w->lora_dropout_set = true;
    return OOM_OK;
}

static int set_preference(oom_workload *w, const char *key, const char *value)
{
    unsigned v;
    int err = parse_enum(&v, key, value);
    if (err)
        return err;
    if (!strcmp(key, "objective"))
        w->objective = v;
    else if (!strcmp(key, "reference"))
        w->reference = v;
    else if (!strcmp(key, "reference-precision"))
        w->ref_precision = (oom_precision)v;
    else
        w->precompute_ref = v == 1;
    return OOM_OK;
}

/* CUBLAS_WORKSPACE_CONFIG: ":SIZE_KIB:COUNT" pairs, the workspace being the sum of SIZE x COUNT
 * KiB (PyTorch's parseChosenWorkspaceSize, aten/src/ATen/cuda/CublasHandlePool.cpp) */
static int set_cublas(oom_workload *w, const char *value)
{
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
    w->cublas_ws = total;
    return OOM_OK;
}

#define ENUM(field)                                                                                \
    do {                                                                                           \
        unsigned v_;                                                                               \
        if ((err = parse_enum(&v_, key, value)))                                                   \
            return err;                                                                            \
        w->k.field = v_;                                                                           \
        return OOM_OK;                                                                             \
    } while (0)

/* "every:N": one layer in N checkpointed, the first of each N, as transformers'
 * activation_checkpointing_enable(every_n_layers=N) picks them (layer_index % N == 0,
 * modeling_utils.py _set_gradient_checkpointing, transformers 5.23); "nth:N": the N-th of each N,
 * as torchtitan's selective_ac_option = "N" (and torchtune's ac_option) picks them (a counter
 * from 1, checkpointed where count % N == 0: torchtitan/distributed/activation_checkpoint.py,
 * _apply_layer_sac). Both are full checkpointing on those layers only. "op-sac": every layer
 * checkpointed under torchtitan's op-level selective policy, which keeps some op outputs
 * (estimate.c, op_sac_per_token). */
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
    w->ckpt_every = (long)every;
    w->ckpt_nth = nth;
    w->ckpt_offload = offload;
    w->ckpt_op = !strcmp(base, "op-sac");
    return OOM_OK;
}

/* sharding (fsdp2 is zero3 with the workload's fsdp2 flag), fsdp-param-dtype,
 * reshard-after-forward */
static int set_fsdp2(oom_workload *w, const char *key, const char *value)
{
    unsigned v;
    long long n;
    int err;
    if (!strcmp(key, "sharding")) {
        if ((err = parse_enum(&v, key, value)))
            return err;
        w->fsdp2 = v == OOM_SHARDING_ZERO3 + 1; /* the value after zero3 */
        w->k.sharding = w->fsdp2 ? OOM_SHARDING_ZERO3 : (oom_sharding)v;
        return OOM_OK;
    }
    if (!strcmp(key, "fsdp-param-dtype")) {
        if ((err = parse_enum(&v, key, value)))
            return err;
        w->fsdp_bf16 = v == 1, w->fsdp_dtype_set = true;
        return OOM_OK;
    }
    /* yes, no, or a count of GPUs (the form N) */
    if (value[0] >= '0' && value[0] <= '9') {
        if ((err = oomi_parse_long(&n, value, 2, 1LL << 30, key)))
            return err;
        w->fsdp_reshard = (long)n;
    } else if ((err = parse_enum(&v, key, value))) {
        return err;
    } else {
        w->fsdp_reshard = v == 1 ? -1 : 0;
    }
    w->reshard_set = true;
    return OOM_OK;
}

/* ZeRO-3's element counts: a whole number (1e9 or 1000000000) from min to 1e15 */
static int set_zero3(oom_workload *w, const char *key, const char *value)
{
    static const char *const keys[] = {"zero3-max-live-params", "zero3-prefetch-bucket",
                                       "zero3-persistence-threshold", "zero3-max-reuse-distance",
                                       "zero3-reduce-bucket"};
    double *const fields[] = {&w->z3_live, &w->z3_prefetch, &w->z3_persist, &w->z3_reuse,
                              &w->z3_reduce};
    size_t i;
    double v;
    int err;
    for (i = 0; i < OOMI_ARRAY_LEN(keys); i++)
        if (!strcmp(key, keys[i]))
            break;
    if (i == OOMI_ARRAY_LEN(keys))
        return oomi_fail(OOM_ENOTFOUND, "unknown workload option '%s'", key);
    if ((err = oomi_parse_double(&v, value, key)))
        return err;
    if (v != floor(v) || v < (i == 4 ? 1 : 0) || v > 1e15)
        return oomi_fail(OOM_EINVAL, "%s '%s' is not a whole number of elements from %d to 1e15",
                         key, value, i == 4 ? 1 : 0);
    *fields[i] = v;
    return OOM_OK;
}

static int set_one(oom_workload *w, const char *key, const char *value)
{
    int err;
    if (!strcmp(key, "model"))
        return set_model(w, value);
    if (!strcmp(key, "method"))
        ENUM(method);
    if (!strcmp(key, "precision"))
        ENUM(precision);
    if (!strcmp(key, "optimizer"))
        ENUM(optimizer);
    if (!strcmp(key, "checkpointing"))
        return set_checkpointing(w, key, value);
    if (!strcmp(key, "attention"))
        ENUM(attention);
    if (!strcmp(key, "loss"))
        ENUM(loss);
    if (!strcmp(key, "sharding") || !strcmp(key, "fsdp-param-dtype") ||
        !strcmp(key, "reshard-after-forward"))
        return set_fsdp2(w, key, value);
    if (!strcmp(key, "offload"))
        ENUM(offload);
    if (!strcmp(key, "batch"))
        return parse_count(&w->k.batch, key, value, 1);
    if (!strcmp(key, "seq"))
        return parse_count(&w->k.seq_len, key, value, 1);
    if (!strcmp(key, "grad-accum"))
        return parse_count(&w->k.grad_accum, key, value, 1);
    if (!strcmp(key, "gpus"))
        return parse_count(&w->k.gpus, key, value, 1);
    if (!strcmp(key, "decoder-seq"))
        return parse_count(&w->decoder_seq, key, value, 1);
    if (!strncmp(key, "zero3-", 6))
        return set_zero3(w, key, value);
    if (!strcmp(key, "tensor-parallel"))
        return parse_count(&w->tp, key, value, 1);
    if (!strcmp(key, "max-num-batched-tokens"))
        return parse_count(&w->serve_tokens, key, value, 1);
    if (!strcmp(key, "max-num-seqs"))
        return parse_count(&w->serve_seqs, key, value, 1);
    if (!strcmp(key, "max-positions"))
        return parse_count(&w->max_pos_override, key, value, 1);
    if (!strcmp(key, "lora-rank")) {
        if (!(err = parse_count(&w->lora_rank, key, value, 1)))
            w->lora_rank_set = true;
        return err;
    }
    if (!strcmp(key, "keep-grads") || !strcmp(key, "kv-cache") ||
        !strcmp(key, "optimizer-in-backward")) {
        unsigned v; /* no, yes; vllm, transformers */
        if ((err = parse_enum(&v, key, value)))
            return err;
        *(key[0] == 'o'                ? &w->optim_in_bwd
          : !strcmp(key, "keep-grads") ? &w->keep_grads
                                       : &w->kv_transformers) = v == 1;
        return OOM_OK;
    }
    if (!strcmp(key, "double-quant") || !strcmp(key, "kbit-prepare"))
        return parse_enum(key[0] == 'd' ? &w->double_quant : &w->kbit_prepare, key, value);
    if (!strcmp(key, "adapter-dtype"))
        return parse_enum(&w->adapter_dtype, key, value);
    if (!strcmp(key, "objective") || !strcmp(key, "reference") ||
        !strcmp(key, "reference-precision") || !strcmp(key, "precompute-ref"))
        return set_preference(w, key, value);
    if (!strcmp(key, "num-generations") || !strcmp(key, "completion-len")) {
        if (!(err = parse_count(key[0] == 'n' ? &w->num_generations : &w->completion_len, key,
                                value, 1)))
            w->grpo_set = true;
        return err;
    }
    if (!strcmp(key, "rollout"))
        return parse_enum(&w->rollout, key, value);
    if (!strcmp(key, "sleep-mode")) {
        unsigned v;
        if (!(err = parse_enum(&v, key, value))) /* levels 0, 1, 2 */
            w->sleep_level = (int)v, w->sleep_set = true;
        return err;
    }
    if (!strcmp(key, "packing") || !strcmp(key, "stack"))
        return parse_enum(key[0] == 'p' ? &w->packing : &w->stack, key, value);
    if (!strcmp(key, "tokens-per-batch"))
        return parse_count(&w->tokens_per_batch, key, value, 1);
    if (!strcmp(key, "lora-targets"))
        return set_targets(w, value);
    if (!strcmp(key, "lora-dropout"))
        return set_dropout(w, value);
    if (!strcmp(key, "overhead"))
        return oom_parse_size(&w->overhead, value, OOM_UNIT_MIB);
    if (!strcmp(key, "nccl-buffsize")) {
        uint64_t v;
        if ((err = oom_parse_size(&v, value, OOM_UNIT_BYTES)))
            return err;
        if (!v)
            return oomi_fail(OOM_EINVAL, "nccl-buffsize '%s' must be more than 0", value);
        w->nccl_buffsize = v;
        return OOM_OK;
    }
    if (!strcmp(key, "cublas-workspace"))
        return set_cublas(w, value);
    if (!strcmp(key, "nccl-channels"))
        return parse_count(&w->nccl_channels, key, value, 1);
    if (!strcmp(key, "nccl-communicators"))
        return parse_count(&w->nccl_comms, key, value, 1);
    if (!strcmp(key, "nccl-nvls"))
        return parse_enum(&w->nccl_nvls, key, value);
    return OOM_ENOTFOUND;
}

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
    char k[32];
    int err;

    if (!key || !norm_key(k, sizeof(k), key))
        return oomi_fail(OOM_ENOTFOUND, "unknown workload option '%s'", key ? key : "(null)");
    if (!value)
        return oomi_fail(OOM_EINVAL, "option '%s' needs a value", k);
    err = set_one(w, k, value);
    /* every setter writes only on success: a refused value leaves the workload as it was */
    if (err == OOM_ENOTFOUND && strcmp(k, "model"))
        return oomi_fail(OOM_ENOTFOUND, "unknown workload option '%s'", key);
    return err;
}

/* a copy of the name of value v of option `key` */
static char *value_of(const char *key, unsigned v)
{
    const oom_option *o = oomi_workload_option(key);
    return oomi_strdup(oomi_value_name(o->values, o->n_values, v));
}

int oom_workload_get(char **out, const oom_workload *w, const char *key)
{
    char k[32], *s = NULL;
    oom_knobs kn = OOM_KNOBS_INIT;
    char ck[OOMI_CKPT_TEXT];

    *out = NULL;
    if (!key || !norm_key(k, sizeof(k), key))
        return oomi_fail(OOM_ENOTFOUND, "unknown workload option '%s'", key ? key : "(null)");
    oom_workload_get_knobs(&kn, w);
#define IS(name) (!strcmp(k, name))
    if (IS("model"))
        s = oomi_strdup(w->model_arg ? w->model_arg : "");
    else if (IS("method"))
        s = oomi_strdup(oom_method_name(kn.method));
    else if (IS("precision"))
        s = oomi_strdup(oom_precision_name(kn.precision));
    else if (IS("optimizer"))
        s = oomi_strdup(oom_optimizer_name(kn.optimizer));
    else if (IS("checkpointing"))
        s = oomi_strdup(oomi_checkpointing_text(ck, sizeof ck, w));
    else if (IS("attention"))
        s = oomi_strdup(oom_attention_name(kn.attention));
    else if (IS("loss"))
        s = oomi_strdup(oom_loss_name(kn.loss));
    else if (IS("sharding"))
        s = oomi_strdup(oomi_sharding_text(w));
    else if (IS("fsdp-param-dtype"))
        s = value_of(k, w->fsdp_bf16);
    else if (IS("reshard-after-forward"))
        s = w->fsdp_reshard > 1 ? oomi_asprintf("%ld", w->fsdp_reshard)
                                : value_of(k, w->fsdp_reshard ? 1 : 0);
    else if (IS("offload"))
        s = oomi_strdup(oom_offload_name(kn.offload));
    else if (IS("batch"))
        s = oomi_asprintf("%ld", kn.batch);
    else if (IS("seq"))
        s = oomi_asprintf("%ld", kn.seq_len);
    else if (IS("grad-accum"))
        s = oomi_asprintf("%ld", kn.grad_accum);
    else if (IS("gpus"))
        s = oomi_asprintf("%ld", kn.gpus);
    else if (IS("tensor-parallel"))
        s = oomi_asprintf("%ld", w->tp);
    else if (IS("max-num-batched-tokens"))
        s = w->serve_tokens ? oomi_asprintf("%ld", w->serve_tokens) : oomi_strdup("");
    else if (IS("max-num-seqs"))
        s = w->serve_seqs ? oomi_asprintf("%ld", w->serve_seqs) : oomi_strdup("");
    else if (IS("keep-grads") || IS("optimizer-in-backward"))
        s = value_of(k, IS("keep-grads") ? w->keep_grads : w->optim_in_bwd);
    else if (IS("kbit-prepare"))
        s = value_of(k, w->kbit_prepare);
    else if (IS("double-quant"))
        s = value_of(k, w->double_quant);
    else if (IS("adapter-dtype"))
        s = oomi_strdup(OOMI_VALUE_NAME(oomi_adapter_dtype_values, w->adapter_dtype));
    else if (IS("kv-cache"))
        s = oomi_strdup(OOMI_VALUE_NAME(oomi_kv_cache_values, w->kv_transformers));
    else if (IS("objective"))
        s = oomi_strdup(OOMI_VALUE_NAME(oomi_objective_values, w->objective));
    else if (IS("reference"))
        s = oomi_strdup(OOMI_VALUE_NAME(oomi_reference_values, oomi_reference_of(w)));
    else if (IS("reference-precision"))
        s = oomi_strdup(oom_precision_name(w->ref_precision));
    else if (IS("precompute-ref"))
        s = value_of(k, w->precompute_ref);
    else if (IS("num-generations"))
        s = oomi_asprintf("%ld", w->num_generations);
    else if (IS("completion-len"))
        s = w->completion_len ? oomi_asprintf("%ld", w->completion_len) : oomi_strdup("");
    else if (IS("rollout"))
        s = oomi_strdup(OOMI_VALUE_NAME(oomi_rollout_values, w->rollout));
    else if (IS("sleep-mode"))
        s = oomi_asprintf("%d", w->sleep_level);
    else if (IS("packing") || IS("stack"))
        s = value_of(k, IS("stack") ? w->stack : w->packing);
    else if (IS("tokens-per-batch"))
        s = w->tokens_per_batch ? oomi_asprintf("%ld", w->tokens_per_batch) : oomi_strdup("");
    else if (IS("lora-rank"))
        s = oomi_asprintf("%ld", w->lora_rank);
    else if (IS("lora-targets"))
        s = oomi_strdup(w->lora_targets ? w->lora_targets : "default");
    else if (IS("lora-dropout"))
        s = oomi_asprintf("%g", w->lora_dropout);
    else if (IS("zero3-max-live-params"))
        s = oomi_asprintf("%.0f", w->z3_live);
    else if (IS("zero3-prefetch-bucket"))
        s = oomi_asprintf("%.0f", w->z3_prefetch);
    else if (IS("zero3-persistence-threshold"))
        s = oomi_asprintf("%.0f", w->z3_persist);
    else if (IS("zero3-max-reuse-distance"))
        s = oomi_asprintf("%.0f", w->z3_reuse);
    else if (IS("zero3-reduce-bucket"))
        s = oomi_asprintf("%.0f", w->z3_reduce);
    else if (IS("decoder-seq"))
        s = w->decoder_seq ? oomi_asprintf("%ld", w->decoder_seq) : oomi_strdup("");
    else if (IS("max-positions"))
        s = w->max_pos_override ? oomi_asprintf("%ld", w->max_pos_override) : oomi_strdup("");
    else if (IS("overhead"))
        s = w->overhead != OOM_UNKNOWN ? oomi_asprintf("%llu", (unsigned long long)w->overhead)
                                       : oomi_strdup("");
    else if (IS("nccl-buffsize"))
        s = w->nccl_buffsize ? oomi_asprintf("%llu", (unsigned long long)w->nccl_buffsize)
                             : oomi_strdup("");
    else if (IS("cublas-workspace"))
        s = w->cublas_ws != OOM_UNKNOWN
                ? oomi_asprintf(":%llu:1", (unsigned long long)(w->cublas_ws / 1024))
                : oomi_strdup("");
    else if (IS("nccl-channels"))
        s = w->nccl_channels ? oomi_asprintf("%ld", w->nccl_channels) : oomi_strdup("");
    else if (IS("nccl-communicators"))
        s = w->nccl_comms ? oomi_asprintf("%ld", w->nccl_comms) : oomi_strdup("");
    else if (IS("nccl-nvls"))
        s = value_of(k, w->nccl_nvls);
    else
        return oomi_fail(OOM_ENOTFOUND, "unknown workload option '%s'", key);
#undef IS
    if (!s)
        return oomi_nomem();
    *out = s;
    return OOM_OK;
}

/* ---- validation ------------------------------------------------------------------------------ */

static int validate_precision(const oom_workload *w)
{
    oom_precision p = oomi_resolved_precision(w);
    oom_method m = w->k.method;
    if (m == OOM_METHOD_QLORA && (p == OOM_PRECISION_FP32 || p == OOM_PRECISION_INT8))
        return oomi_fail(OOM_EINVAL,
                         "method 'qlora' needs a 4-bit base with 16-bit compute; "
                         "precision '%s' is not possible (use 4bit, bf16 or fp16)",
                         oom_precision_name(p));
    if (m == OOM_METHOD_FULL && (p == OOM_PRECISION_INT8 || p == OOM_PRECISION_4BIT))
        return oomi_fail(OOM_EINVAL,
                         "precision '%s' quantizes frozen weights: it needs method "
                         "lora, qlora or inference, not 'full'",
                         oom_precision_name(p));
    if (w->has_gpu && w->cc_major > 0 && w->cc_major < 8 &&
        (p == OOM_PRECISION_BF16 || p == OOM_PRECISION_AMP_BF16 ||
         (m == OOM_METHOD_QLORA && p == OOM_PRECISION_4BIT)))
        return oomi_fail(OOM_EINVAL,
                         "precision '%s' needs bf16, which GPU '%s' (compute capability "
                         "%d.%d) lacks: use fp16 or amp-fp16",
                         oom_precision_name(p), w->gpu_id, w->cc_major, w->cc_minor);
    return OOM_OK;
}

/* tensor parallelism splits the attention heads over the GPUs: vLLM asserts that the query heads
 * divide evenly and that the KV heads either divide evenly or are replicated (tp a multiple of
 * them): vllm/model_executor/models/llama.py, LlamaAttention.__init__ */
static int validate_tp(const oom_workload *w)
{
    const oomi_model *m = w->model;
    long kv = m->kv_heads > 0 ? m->kv_heads : m->heads;
    if (w->tp == 1)
        return OOM_OK;
    if (w->k.method != OOM_METHOD_INFERENCE)
        return oomi_fail(OOM_EINVAL, "tensor-parallel '%ld' is for method 'inference' (got '%s')",
                         w->tp, oom_method_name(w->k.method));
    if (m->heads % w->tp)
        return oomi_fail(OOM_EINVAL,
                         "tensor-parallel '%ld' does not divide the %ld attention heads of '%s'",
                         w->tp, m->heads, m->name);
    if (kv >= w->tp ? kv % w->tp : w->tp % kv)
        return oomi_fail(OOM_EINVAL,
                         "tensor-parallel '%ld' neither divides nor is a multiple of the %ld KV "
                         "heads of '%s'",
                         w->tp, kv, m->name);
    return OOM_OK;
}

/* what FSDP2 is modelled for: full training whose compute dtype --precision gives (its 16-bit
 * dtype is MixedPrecisionPolicy's param_dtype; amp-* means the same, FSDP2's policy replacing
 * autocast), without offload; reshard-after-forward N a proper divisor of the GPUs, as
 * fully_shard requires */
static int validate_fsdp2(const oom_workload *w)
{
    oom_precision p = oomi_resolved_precision(w);
    if (!oomi_fsdp2(w))
        return w->fsdp_dtype_set || w->reshard_set
                   ? oomi_fail(OOM_EINVAL, "%s is for sharding 'fsdp2' (got '%s')",
                               w->fsdp_dtype_set ? "fsdp-param-dtype" : "reshard-after-forward",
                               oom_sharding_name(w->k.sharding))
                   : OOM_OK;
    if (w->k.method != OOM_METHOD_FULL)
        return oomi_fail(OOM_EINVAL, "sharding 'fsdp2' is modelled for method 'full' (got '%s')",
                         oom_method_name(w->k.method));
    if (w->k.offload != OOM_OFFLOAD_NONE)
        return oomi_fail(OOM_EINVAL, "sharding 'fsdp2' takes no offload (got '%s')",
                         oom_offload_name(w->k.offload));
    if (p == OOM_PRECISION_INT8 || p == OOM_PRECISION_4BIT ||
        (w->fsdp_bf16 && p != OOM_PRECISION_BF16 && p != OOM_PRECISION_AMP_BF16))
        return oomi_fail(OOM_EINVAL,
                         "sharding 'fsdp2' %s precision '%s' (fp32, fp16 or bf16 compute%s)",
                         "does not take", oom_precision_name(p),
                         w->fsdp_bf16 ? "; bf16 for fsdp-param-dtype 'bf16'" : "");
    if (w->fsdp_reshard > 1 && (w->k.gpus % w->fsdp_reshard || w->fsdp_reshard >= w->k.gpus))
        return oomi_fail(OOM_EINVAL,
                         "reshard-after-forward '%ld' must divide gpus '%ld' and be smaller",
                         w->fsdp_reshard, w->k.gpus);
    return OOM_OK;
}

static int validate_parallel(const oom_workload *w)
{
    int err;
    if ((err = validate_fsdp2(w)))
        return err;
    if (w->k.offload == OOM_OFFLOAD_OPTIMIZER_PARAMS && w->k.sharding != OOM_SHARDING_ZERO3)
        return oomi_fail(OOM_EINVAL, "offload 'optimizer+params' needs sharding 'zero3' (got '%s')",
                         oom_sharding_name(w->k.sharding));
    if (w->k.offload != OOM_OFFLOAD_NONE && w->k.sharding == OOM_SHARDING_NONE)
        return oomi_fail(OOM_EINVAL,
                         "offload '%s' needs a ZeRO stage (--sharding zero1|zero2|zero3)",
                         oom_offload_name(w->k.offload));
    if (w->k.method == OOM_METHOD_INFERENCE &&
        (w->k.sharding != OOM_SHARDING_NONE || w->k.grad_accum > 1))
        return oomi_fail(OOM_EINVAL, "method 'inference' takes no %s",
                         w->k.grad_accum > 1 ? "grad-accum" : "sharding");
    if ((w->serve_tokens || w->serve_seqs) && w->k.method != OOM_METHOD_INFERENCE)
        return oomi_fail(OOM_EINVAL, "%s is for method 'inference' (got '%s')",
                         w->serve_tokens ? "max-num-batched-tokens" : "max-num-seqs",
                         oom_method_name(w->k.method));
    return validate_tp(w);
}

/* what TRL refuses at a given batch: checked by the estimate, not by oom_workload_validate, so
 * that a plan searching the batch skips these candidates instead of failing */
int oomi_objective_check_batch(const oom_workload *w)
{
    /* KTOTrainer.__init__: "Actual (not effective) batch size must be > 1" for its KL term, whose
     * mismatched pairs are the batch's completions shifted by one */
    if (w->objective == OOMI_OBJECTIVE_KTO && w->k.batch < 2)
        return oomi_fail(OOM_EINVAL,
                         "objective 'kto' needs a micro-batch of at least 2: its KL term pairs "
                         "each prompt with another example's completion (batch is %ld)",
                         w->k.batch);
    /* GRPOConfig.__post_init__: generation_batch_size % num_generations == 0 */
    if (w->objective == OOMI_OBJECTIVE_GRPO &&
        (w->k.batch * w->k.grad_accum * w->k.gpus) % w->num_generations)
        return oomi_fail(OOM_EINVAL,
                         "objective 'grpo': the generation batch (batch x grad-accum x gpus = "
                         "%ld completions) must be a multiple of num-generations %ld",
                         w->k.batch * w->k.grad_accum * w->k.gpus, w->num_generations);
    return OOM_OK;
}

/* what TRL refuses or ignores, refused here rather than estimated wrongly */
static int validate_objective(const oom_workload *w)
{
    const char *obj = OOMI_VALUE_NAME(oomi_objective_values, w->objective);
    bool lora = w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;
    if (w->grpo_set && w->objective != OOMI_OBJECTIVE_GRPO)
        return oomi_fail(OOM_EINVAL,
                         "num-generations and completion-len are for objective 'grpo' (got '%s')",
                         obj);
    if (w->rollout != OOMI_ROLLOUT_NONE && w->objective != OOMI_OBJECTIVE_GRPO)
        return oomi_fail(OOM_EINVAL,
                         "rollout '%s' generates completions for objective 'grpo' "
                         "(got '%s')",
                         OOMI_VALUE_NAME(oomi_rollout_values, w->rollout), obj);
    if (w->sleep_set && w->rollout == OOMI_ROLLOUT_NONE)
        return oomi_fail(OOM_EINVAL, "sleep-mode is the colocated engine's: it needs rollout "
                                     "vllm-colocate");
    if (w->rollout != OOMI_ROLLOUT_NONE && w->tp > 1)
        return oomi_fail(OOM_EINVAL, "rollout vllm-colocate is planned with one engine per GPU "
                                     "(tensor-parallel 1)");
    if (w->objective == OOMI_OBJECTIVE_SFT) {
        if (w->reference != OOMI_REFERENCE_AUTO || w->precompute_ref ||
            w->ref_precision != OOM_PRECISION_AUTO)
            return oomi_fail(OOM_EINVAL, "a reference model is for objectives dpo, ipo, kto and "
                                         "grpo (objective is 'sft')");
        return OOM_OK;
    }
    if (w->k.method == OOM_METHOD_INFERENCE)
        return oomi_fail(OOM_EINVAL, "objective '%s' trains: method 'inference' takes none", obj);
    /* SimPO and ORPO are reference-free by construction (CPOTrainer with loss_type "simpo",
     * ORPOTrainer: trl/experimental/cpo, trl/experimental/orpo); a reward model has none */
    if (!oomi_objective_has_reference(w->objective) &&
        ((w->reference != OOMI_REFERENCE_AUTO && w->reference != OOMI_REFERENCE_NONE) ||
         w->precompute_ref))
        return oomi_fail(OOM_EINVAL, "objective '%s' has no reference model: reference is 'none'",
                         obj);
    if (oomi_reference_of(w) == OOMI_REFERENCE_ADAPTER && !lora)
        return oomi_fail(OOM_EINVAL,
                         "reference 'adapter' is the policy with its LoRA adapter disabled: "
                         "it needs method lora or qlora (got '%s')",
                         oom_method_name(w->k.method));
    if (w->ref_precision != OOM_PRECISION_AUTO && oomi_reference_of(w) != OOMI_REFERENCE_COPY)
        return oomi_fail(OOM_EINVAL,
                         "reference-precision is for a reference copy "
                         "(reference is '%s')",
                         OOMI_VALUE_NAME(oomi_reference_values, oomi_reference_of(w)));
    if (w->objective == OOMI_OBJECTIVE_REWARD && w->model->head != OOMI_HEAD_CAUSAL_LM &&
        w->model->head != OOMI_HEAD_SEQ_CLS)
        return oomi_fail(OOM_EINVAL, "objective 'reward' needs a decoder model (got '%s')",
                         w->model->family);
    if (w->objective != OOMI_OBJECTIVE_REWARD && w->model->head != OOMI_HEAD_CAUSAL_LM)
        return oomi_fail(OOM_EINVAL, "objective '%s' needs a causal language model (got '%s')", obj,
                         w->model->family);
    if (w->objective == OOMI_OBJECTIVE_GRPO && w->precompute_ref)
        return oomi_fail(OOM_EINVAL, "objective 'grpo' scores its own completions: its reference "
                                     "log-probs cannot be precomputed");
    if (w->objective == OOMI_OBJECTIVE_GRPO && w->completion_len >= w->k.seq_len)
        return oomi_fail(OOM_EINVAL,
                         "completion-len '%ld' must be shorter than seq '%ld' (the prompt and "
                         "the completion together)",
                         w->completion_len, w->k.seq_len);
    return OOM_OK;
}

/* packing as TRL and torchtune run it: training of a decoder on its own text (SFT) */
static int validate_packing(const oom_workload *w)
{
    const char *p = OOMI_VALUE_NAME(oomi_packing_values, w->packing);
    const char *obj = OOMI_VALUE_NAME(oomi_objective_values, w->objective);
    if (w->packing == OOMI_PACKING_NONE) {
        if (w->tokens_per_batch)
            return oomi_fail(OOM_EINVAL,
                             "tokens-per-batch '%ld' counts packed tokens: it needs "
                             "--packing padding-free or block-mask",
                             w->tokens_per_batch);
        return OOM_OK;
    }
    if (w->k.method == OOM_METHOD_INFERENCE || w->objective != OOMI_OBJECTIVE_SFT ||
        w->model->head != OOMI_HEAD_CAUSAL_LM)
        return oomi_fail(OOM_EINVAL,
                         "packing '%s' is for training a causal language model with objective "
                         "sft (got method '%s', objective '%s', a %s head)",
                         p, oom_method_name(w->k.method), obj, oomi_head_name(w->model->head));
    if (w->tokens_per_batch && w->packing == OOMI_PACKING_BLOCK_MASK &&
        w->tokens_per_batch % w->k.batch)
        return oomi_fail(OOM_EINVAL,
                         "tokens-per-batch '%ld' is not a whole number of rows: block-mask packs "
                         "--batch %ld rows of equal length",
                         w->tokens_per_batch, w->k.batch);
    if (w->tokens_per_batch) {
        long rows, len;
        oomi_packed_shape(w, &rows, &len);
        if (w->k.seq_len > len)
            return oomi_fail(OOM_EINVAL,
                             "seq '%ld' (the longest document) is longer than a packed row of "
                             "%ld tokens",
                             w->k.seq_len, len);
    }
    return OOM_OK;
}

int oom_workload_validate(const oom_workload *w)
{
    const oomi_model *m = w->model;
    bool lora = w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;
    long maxp;
    int err;

    if (!m)
        return oomi_fail(OOM_EINVAL, "no model is set (use --model NAME|PATH)");
    if (w->k.gpus < 1 || w->k.batch < 1 || w->k.seq_len < 1 || w->k.grad_accum < 1)
        return oomi_fail(OOM_EINVAL,
                         "gpus '%ld', batch '%ld', seq '%ld' and grad-accum '%ld' must "
                         "all be at least 1",
                         w->k.gpus, w->k.batch, w->k.seq_len, w->k.grad_accum);
    if (!lora && (w->lora_rank_set || w->lora_targets_set || w->lora_dropout_set))
        return oomi_fail(OOM_EINVAL, "lora-%s is set but method '%s' is not lora or qlora",
                         w->lora_rank_set      ? "rank"
                         : w->lora_targets_set ? "targets"
                                               : "dropout",
                         oom_method_name(w->k.method));
    if (w->adapter_dtype != OOMI_ADAPTER_AUTO && !lora)
        return oomi_fail(OOM_EINVAL, "adapter-dtype is set but method '%s' is not lora or qlora",
                         oom_method_name(w->k.method));
    if (w->kbit_prepare == 2 && !oomi_bnb_base(w))
        return oomi_fail(OOM_EINVAL,
                         "kbit-prepare is for a bitsandbytes base (method qlora, precision int8 "
                         "or 4bit, or a bitsandbytes checkpoint), not precision '%s'%s%s",
                         oom_precision_name(oomi_resolved_precision(w)),
                         m->quant_bytes > 0 ? " of a " : "",
                         m->quant_bytes > 0 ? m->quant_desc : "");
    if (w->double_quant && m->quant_bytes > 0)
        return oomi_fail(OOM_EINVAL,
                         "double-quant is set but model '%s' is pre-quantized (%s): its "
                         "quantization_config says how it is stored",
                         w->model_arg ? w->model_arg : m->family, m->quant_desc);
    if (w->double_quant && !oomi_nf4_base(w))
        return oomi_fail(OOM_EINVAL,
                         "double-quant is for a 4-bit base (method qlora or precision 4bit), "
                         "not precision '%s'",
                         oom_precision_name(oomi_resolved_precision(w)));
    if (m->quant_bytes > 0 && w->k.method == OOM_METHOD_FULL)
        return oomi_fail(OOM_EINVAL,
                         "model '%s' is pre-quantized (%s): its weights are not trained; use "
                         "--method lora (adapters on the frozen quantized base) or inference",
                         m->name, m->quant_desc);
    if (w->ckpt_op && (m->block != OOMI_BLOCK_LLAMA || m->sparse_layers > 0 || m->kv_lora > 0))
        return oomi_fail(OOM_EINVAL,
                         "checkpointing 'op-sac' is modelled for dense Llama-style decoders; "
                         "'%s' is %s (use full, nth:N or selective)",
                         m->name, m->family);
    if ((err = validate_precision(w)) || (err = validate_parallel(w)) ||
        (err = validate_objective(w)) || (err = validate_packing(w)))
        return err;
    if (lora) {
        oomi_lora l;
        if ((err = oomi_lora_resolve(&l, m, w->lora_targets, w->lora_rank)))
            return err;
    }
    maxp = w->max_pos_override ? w->max_pos_override : m->max_pos;
    if (maxp > 0 && w->k.seq_len > maxp)
        return oomi_fail(OOM_EINVAL,
                         "seq '%ld' exceeds the %ld positions of model '%s' (set "
                         "--max-positions to override, e.g. with RoPE scaling)",
                         w->k.seq_len, maxp, m->name);
    if (w->decoder_seq && m->block != OOMI_BLOCK_T5)
        return oomi_fail(OOM_EINVAL, "decoder-seq '%ld' is for encoder-decoder models; '%s' is %s",
                         w->decoder_seq, m->name, m->family);
    return OOM_OK;
}
