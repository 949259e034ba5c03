/* plan_output.c - a plan as JSON and in the formats of the next step (env, args, DeepSpeed,
 * torchrun). The human report is in plan_text.c. */
#include "plan/plan.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static void put(json_object *o, const char *key, json_object *v)
{
    json_object_object_add(o, key, v);
}

static json_object *size(uint64_t v)
{
    return json_object_new_int64(v > INT64_MAX ? INT64_MAX : (int64_t)v);
}

static json_object *num(double v)
{
    return json_object_new_double(isfinite(v) ? round(v * 1000) / 1000 : 0);
}

static json_object *str(const char *s)
{
    return json_object_new_string(s);
}

/* precision as training frameworks name it (HF --bf16 and DeepSpeed bf16.enabled are autocast
 * / mixed precision): amp-bf16 -> "bf16", amp-fp16 -> "fp16"; the exact value is in
 * "estimate_precision" */
static const char *framework_precision(oom_precision p)
{
    return p == OOM_PRECISION_AMP_BF16   ? "bf16"
           : p == OOM_PRECISION_AMP_FP16 ? "fp16"
                                         : oom_precision_name(p);
}

/* the plan object `oomless apply` reads: exactly these keys */
static json_object *plan_json(const oom_plan_choice *c)
{
    json_object *o = json_object_new_object();
    const oom_knobs *k = &c->knobs;
    if (!o)
        return NULL;
    put(o, "batch_size", json_object_new_int64(k->batch));
    put(o, "grad_accum", json_object_new_int64(k->grad_accum));
    put(o, "effective_batch", json_object_new_int64(c->effective_batch));
    put(o, "seq_len", json_object_new_int64(k->seq_len));
    put(o, "checkpointing", str(oom_checkpointing_name(k->checkpointing)));
    put(o, "precision", str(framework_precision(k->precision)));
    put(o, "optimizer", str(oom_optimizer_name(k->optimizer)));
    put(o, "sharding", str(oom_sharding_name(k->sharding)));
    put(o, "offload", str(oom_offload_name(k->offload)));
    put(o, "gpus", json_object_new_int64(k->gpus));
    return o;
}

static json_object *throughput_json(const oom_plan_result *r, const oom_plan_choice *c)
{
    json_object *o;
    if (!c->has_throughput)
        return NULL;
    if (!(o = json_object_new_object()))
        return NULL;
    put(o, "tokens_per_s", num(c->tokens_per_s));
    put(o, "samples_per_s", num(c->samples_per_s));
    put(o, "step_seconds", num(c->step_s));
    put(o, "mfu", num(c->utilisation));
    put(o, "peak_tflops", num(r->peak_tflops));
    put(o, "flops_per_token", num(c->estimate.flops_per_token));
    return o;
}

static json_object *choice_json(const oom_plan_result *r, const oom_plan_choice *c)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    put(o, "plan", plan_json(c));
    put(o, "device_peak", size(c->estimate.device_peak));
    put(o, "fits", json_object_new_boolean(c->fits));
    put(o, "throughput", throughput_json(r, c));
    if (c->why)
        put(o, "why", str(c->why));
    return o;
}

static json_object *budget_json(const oom_plan_result *r)
{
    json_object *o = json_object_new_object();
    const oom_budget *b = &r->budget;
    if (!o)
        return NULL;
    put(o, "target_bytes", size(b->target_bytes));
    put(o, "safety_margin_bytes", size(b->safety_margin_bytes));
    put(o, "usable_bytes", size(b->usable_bytes));
    if (r->found) {
        uint64_t p = r->best->estimate.device_peak;
        put(o, "utilisation", num(b->usable_bytes ? (double)p / (double)b->usable_bytes : 0));
        put(o, "headroom_bytes", size(b->usable_bytes - p));
    }
    put(o, "gpu", str(r->gpu_id));
    put(o, "gpu_name", str(r->gpu_name));
    put(o, "fallback", json_object_new_boolean(r->target_fallback));
    return o;
}

static json_object *strings(char *const *s, size_t n)
{
    json_object *a = json_object_new_array();
    size_t i;
    for (i = 0; a && i < n; i++)
        json_object_array_add(a, str(s[i]));
    return a;
}

static json_object *extras_json(const oom_plan_result *r, json_object *root)
{
    json_object *a = json_object_new_array(), *o;
    size_t i;
    static const char *const names[] = {"batch", "seq", "checkpointing"};
    for (i = 0; a && i < 3; i++)
        if (r->downscaled & (1u << i))
            json_object_array_add(a, str(names[i]));
    put(root, "downscaled", a);
    if ((o = json_object_new_object())) {
        put(o, "batch_size", r->requested_batch ? json_object_new_int64(r->requested_batch) : NULL);
        put(o, "seq_len", r->requested_seq ? json_object_new_int64(r->requested_seq) : NULL);
        put(o, "target_effective_batch",
            r->target_effective_batch ? json_object_new_int64(r->target_effective_batch) : NULL);
    }
    put(root, "requested", o);
    put(root, "notices", strings(r->notices, r->n_notices));
    if ((o = json_object_new_object())) {
        put(o, "per_gpu", json_object_new_int64(r->workers));
        put(o, "max", json_object_new_int64(r->max_workers));
    }
    put(root, "workers", o);
    if ((a = json_object_new_array()))
        for (i = 0; i < r->n_suggestions; i++)
            json_object_array_add(a, str(r->suggestions[i]));
    put(root, "suggestions", a);
    return root;
}

static json_object *inference_json(const oom_plan_result *r)
{
    json_object *o;
    if (!r->inference || !r->found || !(o = json_object_new_object()))
        return NULL;
    put(o, "max_batch", json_object_new_int64(r->best->knobs.batch));
    put(o, "seq_len", json_object_new_int64(r->best->knobs.seq_len));
    put(o, "kv_cache_budget_bytes", size(r->kv_budget_bytes));
    put(o, "kv_bytes_per_token", num(r->kv_bytes_per_token));
    put(o, "kv_tokens",
        json_object_new_int64(r->kv_bytes_per_token > 0
                                  ? (int64_t)((double)r->kv_budget_bytes / r->kv_bytes_per_token)
                                  : 0));
    return o;
}

static json_object *result_json(const oom_plan_result *r)
{
    json_object *root = json_object_new_object(), *alts = json_object_new_array(), *o;
    size_t i;
    if (!root || !alts) {
        json_object_put(root), json_object_put(alts);
        return NULL;
    }
    put(root, "plan", r->found ? plan_json(r->best) : NULL);
    put(root, "found", json_object_new_boolean(r->found));
    put(root, "estimate_precision",
        r->found ? str(oom_precision_name(r->best->knobs.precision)) : NULL);
    put(root, "model", str(r->model));
    put(root, "memory", r->found ? oomi_estimate_memory_json(&r->best->estimate) : NULL);
    put(root, "peak_phase", r->found ? str(oom_phase_name(r->best->estimate.peak_phase)) : NULL);
    put(root, "budget", budget_json(r));
    put(root, "throughput", r->found ? throughput_json(r, r->best) : NULL);
    for (i = 0; i < r->n_alternatives; i++)
        json_object_array_add(alts, choice_json(r, r->alternatives[i]));
    put(root, "alternatives", alts);
    put(root, "inference", inference_json(r));
    extras_json(r, root);
    put(root, "smallest", r->found ? NULL : choice_json(r, r->smallest));
    if ((o = json_object_new_object())) {
        put(o, "candidates", json_object_new_int64(r->candidates));
        put(o, "nodes", json_object_new_int64(r->nodes));
        put(o, "gpus_per_node", json_object_new_int64(r->gpus_per_node));
    }
    put(root, "search", o);
    return root;
}

static int finish(char **out, json_object *root, int flags)
{
    const char *text;
    int err = OOM_OK;
    if (!root)
        return oomi_nomem();
    text = json_object_to_json_string_ext(root, flags | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!text || !(*out = oomi_strdup(text)))
        err = oomi_nomem();
    json_object_put(root);
    return err;
}

int oom_plan_to_json(char **out, const oom_plan_result *r)
{
    int err;
    if (!out || !r)
        return oomi_fail(OOM_EINVAL, "plan: missing argument");
    *out = NULL;
    if ((err = oomi_check_version(r->version, OOM_PLAN_RESULT_VERSION, "oom_plan_result")))
        return err;
    return finish(out, result_json(r), JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED);
}

static bool is16(oom_precision p, bool bf)
{
    return bf ? (p == OOM_PRECISION_BF16 || p == OOM_PRECISION_AMP_BF16 ||
                 p == OOM_PRECISION_4BIT || p == OOM_PRECISION_INT8)
              : (p == OOM_PRECISION_FP16 || p == OOM_PRECISION_AMP_FP16);
}

static void format_env(oomi_sb *sb, const oom_plan_choice *c)
{
    const oom_knobs *k = &c->knobs;
    oomi_sb_printf(sb,
                   "export OOMLESS_BATCH_SIZE=%ld\nexport OOMLESS_GRAD_ACCUM=%ld\n"
                   "export OOMLESS_EFFECTIVE_BATCH=%ld\nexport OOMLESS_SEQ_LEN=%ld\n"
                   "export OOMLESS_CHECKPOINTING=%s\nexport OOMLESS_PRECISION=%s\n"
                   "export OOMLESS_OPTIMIZER=%s\nexport OOMLESS_SHARDING=%s\n"
                   "export OOMLESS_OFFLOAD=%s\nexport OOMLESS_GPUS=%ld\n",
                   k->batch, k->grad_accum, c->effective_batch, k->seq_len,
                   oom_checkpointing_name(k->checkpointing), framework_precision(k->precision),
                   oom_optimizer_name(k->optimizer), oom_sharding_name(k->sharding),
                   oom_offload_name(k->offload), k->gpus);
}

/* Hugging Face TrainingArguments */
static void format_args(oomi_sb *sb, const oom_plan_choice *c, bool inference)
{
    const oom_knobs *k = &c->knobs;
    if (inference) {
        oomi_sb_printf(sb, "--per_device_eval_batch_size %ld", k->batch);
        goto precision;
    }
    oomi_sb_printf(sb, "--per_device_train_batch_size %ld --gradient_accumulation_steps %ld",
                   k->batch, k->grad_accum);
    if (k->checkpointing != OOM_CHECKPOINTING_NONE)
        oomi_sb_puts(sb, " --gradient_checkpointing");
    if (k->optimizer == OOM_OPTIMIZER_ADAMW_8BIT)
        oomi_sb_puts(sb, " --optim adamw_bnb_8bit");
    if (k->sharding != OOM_SHARDING_NONE || k->offload != OOM_OFFLOAD_NONE)
        oomi_sb_puts(sb, " --deepspeed ds_config.json");
precision:
    if (is16(k->precision, true))
        oomi_sb_puts(sb, " --bf16");
    else if (is16(k->precision, false))
        oomi_sb_puts(sb, " --fp16");
}

static json_object *offload_obj(void)
{
    json_object *o = json_object_new_object();
    if (o) {
        put(o, "device", str("cpu"));
        put(o, "pin_memory", json_object_new_boolean(1));
    }
    return o;
}

static json_object *deepspeed_json(const oom_plan_choice *c)
{
    const oom_knobs *k = &c->knobs;
    json_object *root = json_object_new_object(), *z = json_object_new_object(), *b, *f;
    if (!root || !z) {
        json_object_put(root), json_object_put(z);
        return NULL;
    }
    put(root, "train_micro_batch_size_per_gpu", json_object_new_int64(k->batch));
    put(root, "gradient_accumulation_steps", json_object_new_int64(k->grad_accum));
    put(root, "train_batch_size", json_object_new_int64(c->effective_batch));
    put(z, "stage", json_object_new_int(k->sharding ? (int)k->sharding : (k->offload ? 2 : 0)));
    if (k->offload != OOM_OFFLOAD_NONE)
        put(z, "offload_optimizer", offload_obj());
    if (k->offload == OOM_OFFLOAD_OPTIMIZER_PARAMS)
        put(z, "offload_param", offload_obj());
    put(root, "zero_optimization", z);
    if ((b = json_object_new_object()))
        put(b, "enabled", json_object_new_boolean(is16(k->precision, true)));
    put(root, "bf16", b);
    if ((f = json_object_new_object())) {
        put(f, "enabled", json_object_new_boolean(is16(k->precision, false)));
        if (is16(k->precision, false))
            put(f, "loss_scale", json_object_new_int(0));
    }
    put(root, "fp16", f);
    put(root, "gradient_clipping", json_object_new_double(1.0));
    return root;
}

static void format_torchrun(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_knobs *k = &r->best->knobs;
    if (r->nodes > 1)
        oomi_sb_printf(sb,
                       "torchrun --nnodes=%ld --nproc_per_node=%ld --node_rank=$NODE_RANK "
                       "--rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29500",
                       r->nodes, r->gpus_per_node);
    else
        oomi_sb_printf(sb, "torchrun --standalone --nnodes=1 --nproc_per_node=%ld",
                       k->gpus / (r->nodes > 0 ? r->nodes : 1));
    oomi_sb_puts(sb, " train.py ");
    format_args(sb, r->best, r->inference);
}

int oom_plan_format(char **out, const oom_plan_result *r, const char *format)
{
    oomi_sb sb = OOMI_SB_INIT;
    int err;
    if (!out || !r || !format)
        return oomi_fail(OOM_EINVAL, "plan: missing argument");
    *out = NULL;
    if ((err = oomi_check_version(r->version, OOM_PLAN_RESULT_VERSION, "oom_plan_result")))
        return err;
    if (!strcmp(format, "json"))
        return oom_plan_to_json(out, r);
    if (!strcmp(format, "text"))
        return oomi_plan_text(out, r);
    if (strcmp(format, "env") && strcmp(format, "args") && strcmp(format, "deepspeed") &&
        strcmp(format, "torchrun"))
        return oomi_fail(OOM_EINVAL,
                         "unknown plan format '%s' (text, json, env, args, deepspeed, torchrun)",
                         format);
    if (!r->found)
        return oomi_fail(OOM_ENOFIT, "nothing fits: no %s output", format);
    if (!strcmp(format, "deepspeed"))
        return finish(out, deepspeed_json(r->best),
                      JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED);
    if (!strcmp(format, "env"))
        format_env(&sb, r->best);
    else if (!strcmp(format, "args"))
        format_args(&sb, r->best, r->inference);
    else
        format_torchrun(&sb, r);
    if (strcmp(format, "env"))
        oomi_sb_putc(&sb, '\n');
    if ((err = oomi_sb_ok(&sb))) {
        oomi_sb_free(&sb);
        return err;
    }
    *out = oomi_sb_steal(&sb);
    return OOM_OK;
}
