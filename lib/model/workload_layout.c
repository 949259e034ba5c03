/* workload_layout.c - model-parallel training: the layout's options (pipeline, sequence, expert
 * and context parallelism, the engine, Megatron's recomputation; their rows and values are in
 * workload_options.c) set from text and read back, and what the engines refuse. The arithmetic is
 * in lib/estimate/estimate_layout.c and estimate_pipeline.c; docs/parallelism.md explains both. */
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

bool oomi_layout_on(const oom_workload *w)
{
    const oomi_layout *l = &w->layout;
    return w->k.method != OOM_METHOD_INFERENCE &&
           (w->parallel.tp > 1 || l->pp > 1 || l->ep > 1 || l->cp > 1 || l->engine_set);
}

bool oomi_layout_sp(const oom_workload *w)
{
    return w->layout.sp == 2 || (w->layout.sp == 0 && w->parallel.tp > 1);
}

long oomi_layout_etp(const oom_workload *w)
{
    if (w->layout.etp > 0)
        return w->layout.etp;
    return w->layout.engine == OOMI_ENGINE_MEGATRON ? w->parallel.tp : 1;
}

static int parse_count(long *out, const char *key, const char *value)
{
    long long v;
    int err = oomi_parse_long(&v, value, 1, 1LL << 20, key);
    if (!err)
        *out = (long)v;
    return err;
}

/* "1f1b" or "interleaved:N", N at least 2 */
static int set_schedule(oom_workload *w, const char *value)
{
    long long v;
    if (!strcmp(value, "1f1b")) {
        w->layout.vpp = 1;
        return OOM_OK;
    }
    if (strncmp(value, "interleaved:", 12) || oomi_parse_long(&v, value + 12, 2, 1 << 10, "pp"))
        return oomi_fail(OOM_EINVAL,
                         "pp-schedule '%s' is not one of: 1f1b, interleaved:N (N model chunks "
                         "per GPU, at least 2)",
                         value);
    w->layout.vpp = (long)v;
    return OOM_OK;
}

/* "auto" or a list of whole numbers, kept as given (checked against the model by
 * oomi_layout_stage_layers) */
static int set_layers(oom_workload *w, const char *value)
{
    const char *p = value;
    char *copy;
    if (strcmp(value, "auto")) {
        do {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || (*end && *end != ','))
                return oomi_fail(OOM_EINVAL,
                                 "pp-layers '%s' is not auto or a list of layer counts "
                                 "(4,5,5,4)",
                                 value);
            p = *end ? end + 1 : end;
        } while (*p);
    }
    copy = strcmp(value, "auto") ? oomi_strdup(value) : NULL;
    if (strcmp(value, "auto") && !copy)
        return oomi_nomem();
    oomi_free(w->layout.pp_layers);
    w->layout.pp_layers = copy;
    return OOM_OK;
}

int oomi_layout_set(oom_workload *w, const char *key, const char *value)
{
    oomi_layout *l = &w->layout;
    unsigned v;
    int err;
    if (!strcmp(key, "pipeline-parallel"))
        return parse_count(&l->pp, key, value);
    if (!strcmp(key, "expert-parallel"))
        return parse_count(&l->ep, key, value);
    if (!strcmp(key, "context-parallel"))
        return parse_count(&l->cp, key, value);
    if (!strcmp(key, "recompute-layers"))
        return parse_count(&l->recompute_layers, key, value);
    if (!strcmp(key, "pp-schedule"))
        return set_schedule(w, value);
    if (!strcmp(key, "pp-layers"))
        return set_layers(w, value);
    if (!strcmp(key, "expert-tensor-parallel")) {
        if (!strcmp(value, "auto")) {
            l->etp = 0;
            return OOM_OK;
        }
        return parse_count(&l->etp, key, value);
    }
    if (strcmp(key, "sequence-parallel") && strcmp(key, "engine") &&
        strcmp(key, "recompute-method"))
        return OOM_ENOTFOUND;
    if ((err = oomi_option_parse(&v, oomi_workload_option(key), value)))
        return err;
    if (key[0] == 's')
        l->sp = v;
    else if (key[0] == 'e')
        l->engine = v, l->engine_set = true;
    else
        l->recompute_method = v;
    return OOM_OK;
}

int oomi_layout_get(char **out, const oom_workload *w, const char *key)
{
    const oomi_layout *l = &w->layout;
    char *s;
    if (!strcmp(key, "pipeline-parallel"))
        s = oomi_asprintf("%ld", l->pp);
    else if (!strcmp(key, "expert-parallel"))
        s = oomi_asprintf("%ld", l->ep);
    else if (!strcmp(key, "context-parallel"))
        s = oomi_asprintf("%ld", l->cp);
    else if (!strcmp(key, "recompute-layers"))
        s = oomi_asprintf("%ld", l->recompute_layers);
    else if (!strcmp(key, "pp-schedule"))
        s = l->vpp > 1 ? oomi_asprintf("interleaved:%ld", l->vpp) : oomi_strdup("1f1b");
    else if (!strcmp(key, "pp-layers"))
        s = oomi_strdup(l->pp_layers ? l->pp_layers : "auto");
    else if (!strcmp(key, "expert-tensor-parallel"))
        s = l->etp ? oomi_asprintf("%ld", l->etp) : oomi_strdup("auto");
    else if (!strcmp(key, "sequence-parallel"))
        s = oomi_strdup(OOMI_VALUE_NAME(oomi_sp_values, l->sp));
    else if (!strcmp(key, "engine"))
        s = oomi_strdup(OOMI_VALUE_NAME(oomi_engine_values, l->engine));
    else if (!strcmp(key, "recompute-method"))
        s = oomi_strdup(OOMI_VALUE_NAME(oomi_recompute_method_values, l->recompute_method));
    else
        return OOM_ENOTFOUND;
    if (!s)
        return oomi_nomem();
    *out = s;
    return OOM_OK;
}

int oomi_layout_stage_layers(long *out, const oom_workload *w)
{
    long n = w->layout.pp * w->layout.vpp, L = w->model->layers, i, sum = 0;
    const char *p = w->layout.pp_layers;
    if (!p) {
        for (i = 0; i < n; i++) /* the remainder to stages 1, 2, ... (0 has the embedding) */
            out[i] = L / n + (i >= 1 && i <= L % n ? 1 : 0);
        return OOM_OK;
    }
    for (i = 0; i < n && *p; i++) {
        char *end;
        out[i] = strtol(p, &end, 10);
        sum += out[i];
        p = *end ? end + 1 : end;
    }
    if (i != n || *p || sum != L)
        return oomi_fail(OOM_EINVAL,
                         "pp-layers '%s' must list %ld stages (pipeline-parallel x model chunks) "
                         "whose layers add up to the %ld of '%s'",
                         w->layout.pp_layers, n, L, w->model->name);
    return OOM_OK;
}

/* a refusal naming what the layout is not modelled with */
static int not_with(const char *what, const char *value)
{
    return oomi_fail(OOM_EINVAL,
                     "%s '%s' is not modelled with model-parallel training (tensor, pipeline, "
                     "expert or context parallelism; docs/parallelism.md)",
                     what, value);
}

/* the model: a Llama-style decoder (dense, mixture of experts, multi-head latent attention),
 * whose heads, key/value heads and experts the sizes divide */
static int validate_model(const oom_workload *w)
{
    const oomi_model *m = w->model;
    const oomi_layout *l = &w->layout;
    long kv = m->kv_heads > 0 ? m->kv_heads : m->heads, etp = oomi_layout_etp(w);
    if (m->block != OOMI_BLOCK_LLAMA || m->routed > m->topk)
        return oomi_fail(OOM_EINVAL,
                         "model-parallel training is modelled for Llama-style decoders whose "
                         "tokens go to their top-k experts (llama, mistral, mixtral, qwen2/3, "
                         "qwen2_moe, qwen3_moe, deepseek_v2/v3, gemma); '%s' is %s",
                         m->name, m->family);
    if (m->heads % w->parallel.tp ||
        (kv >= w->parallel.tp ? kv % w->parallel.tp : w->parallel.tp % kv))
        return oomi_fail(OOM_EINVAL,
                         "tensor-parallel '%ld' must divide the %ld attention heads of '%s' and "
                         "divide or be a multiple of its %ld key/value heads",
                         w->parallel.tp, m->heads, m->name, kv);
    if (l->ep > 1 && (m->experts <= 0 || m->experts % l->ep))
        return oomi_fail(OOM_EINVAL, "expert-parallel '%ld' must divide the %ld experts of '%s'",
                         l->ep, m->experts, m->name);
    if (m->experts > 0 && (w->parallel.tp * l->cp * w->k.gpus) % (l->ep * etp))
        return oomi_fail(OOM_EINVAL,
                         "expert-parallel x expert-tensor-parallel (%ld x %ld) must divide the "
                         "GPUs of a pipeline stage, tensor x context x data parallel (%ld x %ld "
                         "x %ld)",
                         l->ep, etp, w->parallel.tp, l->cp, w->k.gpus);
    if (l->engine == OOMI_ENGINE_TORCHTITAN && etp != 1 && etp != w->parallel.tp)
        return oomi_fail(OOM_EINVAL,
                         "engine torchtitan splits experts over 1 or tensor-parallel GPUs "
                         "(expert-tensor-parallel '%ld')",
                         etp);
    if (m->layers < l->pp * l->vpp)
        return oomi_fail(OOM_EINVAL,
                         "pipeline-parallel x model chunks (%ld x %ld) exceeds the %ld "
                         "layers of '%s'",
                         l->pp, l->vpp, m->layers, m->name);
    return OOM_OK;
}

/* the run: full training, the engines' precisions, optimizers, sharding and checkpointing */
static int validate_run(const oom_workload *w)
{
    const oomi_layout *l = &w->layout;
    oom_precision p = oomi_resolved_precision(w);
    bool titan = l->engine == OOMI_ENGINE_TORCHTITAN;
    char ck[OOMI_CKPT_TEXT];
    if (w->k.method != OOM_METHOD_FULL)
        return not_with("method", oom_method_name(w->k.method));
    if (w->objective.kind != OOMI_OBJECTIVE_SFT)
        return not_with("objective", OOMI_VALUE_NAME(oomi_objective_values, w->objective.kind));
    if (w->packing.mode != OOMI_PACKING_NONE)
        return not_with("packing", OOMI_VALUE_NAME(oomi_packing_values, w->packing.mode));
    /* Megatron's optimizer CPU offload (HybridDeviceOptimizer, --optimizer-cpu-offload) keeps
     * the distributed optimizer's states on the CPU */
    if (w->k.offload != OOM_OFFLOAD_NONE &&
        (titan || w->k.offload != OOM_OFFLOAD_OPTIMIZER || w->k.sharding != OOM_SHARDING_ZERO1))
        return oomi_fail(OOM_EINVAL,
                         "offload '%s' with model-parallel training: megatron offloads the "
                         "distributed optimizer's states (--offload optimizer --sharding zero1)",
                         oom_offload_name(w->k.offload));
    if (p == OOM_PRECISION_INT8 || p == OOM_PRECISION_4BIT)
        return not_with("precision", oom_precision_name(p));
    if (w->k.optimizer != OOM_OPTIMIZER_ADAMW && w->k.optimizer != OOM_OPTIMIZER_ADAMW_FUSED &&
        w->k.optimizer != OOM_OPTIMIZER_SGD && w->k.optimizer != OOM_OPTIMIZER_SGD_MOMENTUM &&
        w->k.optimizer != OOM_OPTIMIZER_NONE)
        return not_with("optimizer", oom_optimizer_name(w->k.optimizer));
    if ((titan && w->k.sharding != OOM_SHARDING_NONE && !oomi_fsdp2(w)) ||
        (!titan && w->k.sharding != OOM_SHARDING_NONE && w->k.sharding != OOM_SHARDING_ZERO1) ||
        (!titan && oomi_fsdp2(w)))
        return oomi_fail(OOM_EINVAL,
                         "sharding '%s' with engine %s: megatron shards the optimizer (zero1, "
                         "its distributed optimizer), torchtitan shards with fsdp2",
                         oomi_sharding_text(w), OOMI_VALUE_NAME(oomi_engine_values, l->engine));
    oomi_checkpointing_text(ck, sizeof ck, w);
    if (w->ckpt.offload || (w->ckpt.every > 1 && !w->ckpt.nth) ||
        (titan && w->k.checkpointing == OOM_CHECKPOINTING_SELECTIVE) ||
        (!titan && (w->ckpt.op || w->ckpt.nth)))
        return oomi_fail(OOM_EINVAL,
                         "checkpointing '%s' with engine %s: megatron recomputes selective or "
                         "full (--recompute-method, --recompute-layers), torchtitan full, nth:N "
                         "or op-sac",
                         ck, OOMI_VALUE_NAME(oomi_engine_values, l->engine));
    if ((l->recompute_method || l->recompute_layers != 1) &&
        (titan || w->k.checkpointing != OOM_CHECKPOINTING_FULL))
        return oomi_fail(OOM_EINVAL, "recompute-method and recompute-layers are Megatron's full "
                                     "recomputation: --engine megatron --checkpointing full");
    if (w->ckpt.op && w->model->sparse_layers > 0)
        return not_with("checkpointing", "op-sac (experts)");
    return OOM_OK;
}

int oomi_layout_validate(const oom_workload *w)
{
    const oomi_layout *l = &w->layout;
    long stages[1];
    int err;
    if (!oomi_layout_on(w))
        return l->pp_layers || l->vpp > 1 || l->etp || l->sp == 2
                   ? oomi_fail(OOM_EINVAL,
                               "%s is for model-parallel training: --pipeline-parallel, "
                               "--tensor-parallel, --expert-parallel or --context-parallel above 1",
                               l->pp_layers ? "pp-layers"
                               : l->vpp > 1 ? "pp-schedule interleaved"
                               : l->etp     ? "expert-tensor-parallel"
                                            : "sequence-parallel")
                   : OOM_OK;
    if ((err = validate_model(w)) || (err = validate_run(w)))
        return err;
    if (l->vpp > 1 && (l->pp < 2 || w->k.grad_accum % l->pp))
        return oomi_fail(OOM_EINVAL,
                         "pp-schedule interleaved:%ld needs pipeline-parallel above 1 and a "
                         "number of micro-batches (grad-accum %ld) that it divides",
                         l->vpp, w->k.grad_accum);
    if (w->k.seq_len % (l->cp * (l->cp > 1 ? 2 : 1) * (oomi_layout_sp(w) ? w->parallel.tp : 1)))
        return oomi_fail(OOM_EINVAL,
                         "seq '%ld' must split evenly over context-parallel (in 2 x %ld chunks) "
                         "and sequence-parallel GPUs",
                         w->k.seq_len, l->cp);
    if (l->pp_layers) { /* checked against the model with a list as long as its stages */
        long n = l->pp * l->vpp, *buf = n > 1 ? oomi_calloc((size_t)n, sizeof(long)) : stages;
        if (!buf)
            return oomi_nomem();
        err = oomi_layout_stage_layers(buf, w);
        if (buf != stages)
            oomi_free(buf);
    }
    return err;
}
