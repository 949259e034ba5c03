/* plan_output.c - a plan as JSON and in the formats of the next step (env, args, DeepSpeed,
 * torchrun; vLLM, accelerate and torchtitan in plan_serve.c). The human report is in
 * plan_text.c. */
#include "plan/plan.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_object *num(double v)
{
    return json_object_new_double(isfinite(v) ? round(v * 1000) / 1000 : 0);
}

/* precision as training frameworks name it (HF --bf16 and DeepSpeed bf16.enabled are autocast
 * / mixed precision): amp-bf16 -> "bf16", amp-fp16 -> "fp16"; the exact value (autocast or pure
 * 16-bit weights, which Lightning tells apart as "bf16-mixed" / "bf16-true") is in
 * "exact_precision" */
static const char *framework_precision(oom_precision p)
{
    return p == OOM_PRECISION_AMP_BF16   ? "bf16"
           : p == OOM_PRECISION_AMP_FP16 ? "fp16"
                                         : oom_precision_name(p);
}

static json_object *deepspeed_json(const oom_plan_choice *c);

/* a model-parallel layout (version 8): no data-parallel framework runs it */
static bool split_model(const oom_plan_result *r)
{
    return r->version >= 8 && r->pipeline_parallel > 0;
}

/* the plan object `oomless apply` reads: exactly these keys */
static json_object *plan_json(const oom_plan_result *r, const oom_plan_choice *c)
{
    json_object *o = json_object_new_object();
    const oom_knobs *k = &c->knobs;
    if (!o)
        return NULL;
    oomi_json_put(o, "batch_size", json_object_new_int64(k->batch));
    oomi_json_put(o, "grad_accum", json_object_new_int64(k->grad_accum));
    oomi_json_put(o, "effective_batch", json_object_new_int64(c->effective_batch));
    oomi_json_put(o, "seq_len",
                  OOMI_PLAN_SEQ_KNOWN(r, c) ? json_object_new_int64(k->seq_len) : NULL);
    oomi_json_put(o, "checkpointing", json_object_new_string(oomi_plan_ck(c)));
    oomi_json_put(o, "precision", json_object_new_string(framework_precision(k->precision)));
    oomi_json_put(o, "exact_precision", json_object_new_string(oom_precision_name(k->precision)));
    oomi_json_put(o, "optimizer", json_object_new_string(oom_optimizer_name(k->optimizer)));
    oomi_json_put(o, "sharding", json_object_new_string(oom_sharding_name(k->sharding)));
    oomi_json_put(o, "offload", json_object_new_string(oom_offload_name(k->offload)));
    /* a measured line's kernels are whatever ran when it was measured: not known */
    oomi_json_put(o, "loss", r->measured ? NULL : json_object_new_string(oom_loss_name(k->loss)));
    oomi_json_put(o, "attention",
                  r->measured ? NULL : json_object_new_string(oom_attention_name(k->attention)));
    oomi_json_put(o, "gpus", json_object_new_int64(k->gpus));
    return o;
}

static json_object *throughput_json(const oom_plan_result *r, const oom_plan_choice *c)
{
    json_object *o;
    if (!c->has_throughput)
        return NULL;
    if (!(o = json_object_new_object()))
        return NULL;
    oomi_json_put(o, "tokens_per_s", OOMI_PLAN_SEQ_KNOWN(r, c) ? num(c->tokens_per_s) : NULL);
    oomi_json_put(o, "samples_per_s", num(c->samples_per_s));
    oomi_json_put(o, "step_seconds", num(c->step_s));
    oomi_json_put(o, "mfu", num(c->utilisation));
    oomi_json_put(o, "peak_tflops", num(r->peak_tflops));
    oomi_json_put(o, "flops_per_token", num(c->estimate.flops_per_token));
    if (oomi_plan_ck_variant(c)) /* forwards recomputed per forward (plan_ckpt.c) */
        oomi_json_put(o, "recompute_forwards", num(c->recompute));
    return o;
}

static json_object *choice_json(const oom_plan_result *r, const oom_plan_choice *c)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    oomi_json_put(o, "plan", plan_json(r, c));
    oomi_json_put(o, "device_peak", oomi_json_size(c->estimate.device_peak));
    oomi_json_put(o, "fits", json_object_new_boolean(c->fits));
    oomi_json_put(o, "throughput", throughput_json(r, c));
    if (c->why)
        oomi_json_put(o, "why", json_object_new_string(c->why));
    return o;
}

static json_object *budget_json(const oom_plan_result *r)
{
    json_object *o = json_object_new_object();
    const oom_budget *b = &r->budget;
    if (!o)
        return NULL;
    oomi_json_put(o, "target_bytes", oomi_json_size(b->target_bytes));
    oomi_json_put(o, "safety_margin_bytes", oomi_json_size(b->safety_margin_bytes));
    oomi_json_put(o, "usable_bytes", oomi_json_size(b->usable_bytes));
    if (r->found) {
        uint64_t p = r->best->estimate.device_peak;
        oomi_json_put(o, "utilisation",
                      num(b->usable_bytes ? (double)p / (double)b->usable_bytes : 0));
        oomi_json_put(o, "headroom_bytes", oomi_json_size(b->usable_bytes - p));
    }
    oomi_json_put(o, "gpu", json_object_new_string(r->gpu_id));
    oomi_json_put(o, "gpu_name", json_object_new_string(r->gpu_name));
    oomi_json_put(o, "fallback", json_object_new_boolean(r->target_fallback));
    oomi_json_put(o, "others_bytes", oomi_json_size(r->version >= 2 ? r->others_bytes : 0));
    oomi_json_put(o, "others", oomi_json_string_or_null(r->version >= 2 ? r->others : NULL));
    return o;
}

static json_object *strings(char *const *s, size_t n)
{
    json_object *a = json_object_new_array();
    size_t i;
    for (i = 0; a && i < n; i++)
        json_object_array_add(a, json_object_new_string(s[i]));
    return a;
}

static json_object *extras_json(const oom_plan_result *r, json_object *root)
{
    json_object *a = json_object_new_array(), *o;
    size_t i;
    static const char *const names[] = {"batch", "seq", "checkpointing"};
    for (i = 0; a && i < 3; i++)
        if (r->downscaled & (1u << i))
            json_object_array_add(a, json_object_new_string(names[i]));
    oomi_json_put(root, "downscaled", a);
    if ((o = json_object_new_object())) {
        oomi_json_put(o, "batch_size",
                      r->requested_batch ? json_object_new_int64(r->requested_batch) : NULL);
        oomi_json_put(o, "seq_len",
                      r->requested_seq ? json_object_new_int64(r->requested_seq) : NULL);
        oomi_json_put(o, "target_effective_batch",
                      r->target_effective_batch ? json_object_new_int64(r->target_effective_batch)
                                                : NULL);
    }
    oomi_json_put(root, "requested", o);
    oomi_json_put(root, "notices", strings(r->notices, r->n_notices));
    if ((o = json_object_new_object())) {
        oomi_json_put(o, "per_gpu", json_object_new_int64(r->workers));
        oomi_json_put(o, "max", json_object_new_int64(r->max_workers));
    }
    oomi_json_put(root, "workers", o);
    if ((a = json_object_new_array()))
        for (i = 0; i < r->n_suggestions; i++)
            json_object_array_add(a, json_object_new_string(r->suggestions[i]));
    oomi_json_put(root, "suggestions", a);
    return root;
}

static json_object *inference_json(const oom_plan_result *r)
{
    json_object *o;
    if (!r->inference || !r->found || !(o = json_object_new_object()))
        return NULL;
    oomi_json_put(o, "max_batch", json_object_new_int64(r->best->knobs.batch));
    oomi_json_put(o, "seq_len", json_object_new_int64(r->best->knobs.seq_len)); /* a model's */
    oomi_json_put(o, "kv_cache_budget_bytes", oomi_json_size(r->kv_budget_bytes));
    oomi_json_put(o, "kv_bytes_per_token", num(r->kv_bytes_per_token));
    oomi_json_put(
        o, "kv_tokens",
        json_object_new_int64(r->kv_bytes_per_token > 0
                                  ? (int64_t)((double)r->kv_budget_bytes / r->kv_bytes_per_token)
                                  : 0));
    oomi_json_put(
        o, "tensor_parallel",
        json_object_new_int64(r->version >= 2 && r->tensor_parallel > 0 ? r->tensor_parallel : 1));
    if (r->version >= 4 && r->kv_elements > 0) {
        oomi_kv_layout kv = {r->kv_full_layers, r->kv_sliding_layers, r->kv_window,
                             r->kv_latent != 0, r->kv_vllm != 0,      (double)r->kv_elements};
        oomi_json_put(o, "kv_cache_layers", oomi_kv_layout_json(&kv));
    }
    oomi_json_put(o, "vllm", oomi_plan_vllm_json(r));
    return o;
}

/* How sure the plan is (version 3): the probability it fits the target, the device peak's bound
 * and what margin that bound needs beside the user's */
static void confidence_json(const oom_plan_result *r, json_object *root)
{
    bool known = r->version >= 3 && r->found && r->has_fit_probability;
    json_object *o = known ? json_object_new_object() : NULL;
    uint64_t peak = r->found ? r->best->estimate.device_peak : 0, need;

    oomi_json_put(root, "fit_probability", known ? num(r->fit_probability) : NULL);
    if (o) {
        need = r->device_peak_bound > peak ? r->device_peak_bound - peak : 0;
        oomi_json_put(o, "level", r->fit_confidence > 0 ? num(r->fit_confidence) : NULL);
        oomi_json_put(o, "fit_probability_side",
                      json_object_new_string(r->fit_probability_side < 0   ? "below"
                                             : r->fit_probability_side > 0 ? "at_least"
                                                                           : "about"));
        oomi_json_put(o, "bound_level", num(r->fit_confidence > 0 ? r->fit_confidence : 0.95));
        oomi_json_put(o, "device_peak_bound", oomi_json_size(r->device_peak_bound));
        oomi_json_put(o, "needed_margin_bytes", oomi_json_size(need));
        oomi_json_put(o, "margin_bytes", oomi_json_size(oomi_plan_user_margin(r)));
        oomi_json_put(
            o, "margin_excess_bytes",
            oomi_json_size(oomi_plan_user_margin(r) > need ? oomi_plan_user_margin(r) - need : 0));
    }
    oomi_json_put(root, "confidence", o);
}

static json_object *result_json(const oom_plan_result *r)
{
    json_object *root = json_object_new_object(), *alts = json_object_new_array(), *o;
    size_t i;
    if (!root || !alts) {
        json_object_put(root), json_object_put(alts);
        return NULL;
    }
    oomi_json_put(root, "plan", r->found ? plan_json(r, r->best) : NULL);
    oomi_json_put(root, "found", json_object_new_boolean(r->found));
    oomi_json_put(root, "estimate_precision",
                  r->found ? json_object_new_string(oom_precision_name(r->best->knobs.precision))
                           : NULL);
    oomi_json_put(root, "model", json_object_new_string(r->model));
    oomi_json_put(root, "stack",
                  r->measured || r->version < 8 ? NULL : oomi_stack_json((unsigned)r->stack));
    oomi_json_put(root, "memory", r->found ? oomi_estimate_memory_json(&r->best->estimate) : NULL);
    oomi_json_put(root, "peak_phase",
                  r->found ? json_object_new_string(oom_phase_name(r->best->estimate.peak_phase))
                           : NULL);
    oomi_json_put(root, "budget", budget_json(r));
    oomi_json_put(root, "throughput", r->found ? throughput_json(r, r->best) : NULL);
    /* those that fit first (each in the planner's order), then those that do not */
    for (i = 0; i < 2 * r->n_alternatives; i++)
        if (r->alternatives[i % r->n_alternatives]->fits == (i < r->n_alternatives))
            json_object_array_add(alts, choice_json(r, r->alternatives[i % r->n_alternatives]));
    oomi_json_put(root, "alternatives", alts);
    oomi_json_put(root, "inference", inference_json(r));
    oomi_json_put(root, "rollout", oomi_plan_rollout_json(r));
    oomi_json_put(root, "packing", oomi_plan_packing_json(r));
    oomi_json_put(root, "layout", r->found ? oomi_plan_layout_json(r) : NULL);
    /* the DeepSpeed config (--format deepspeed) when the plan shards or offloads, for helpers
     * that hand it to a framework (oomless.hf, oomless.lightning); none for a layout */
    oomi_json_put(root, "deepspeed",
                  r->found && !r->inference && !split_model(r) &&
                          (r->best->knobs.sharding != OOM_SHARDING_NONE ||
                           r->best->knobs.offload != OOM_OFFLOAD_NONE)
                      ? deepspeed_json(r->best)
                      : NULL);
    extras_json(r, root);
    confidence_json(r, root);
    oomi_json_put(root, "smallest", r->found ? NULL : choice_json(r, r->smallest));
    if ((o = json_object_new_object())) {
        oomi_json_put(o, "candidates", json_object_new_int64(r->candidates));
        oomi_json_put(o, "nodes", json_object_new_int64(r->nodes));
        oomi_json_put(o, "gpus_per_node", json_object_new_int64(r->gpus_per_node));
    }
    oomi_json_put(root, "search", o);
    return root;
}

int oom_plan_to_json(char **out, const oom_plan_result *r)
{
    int err;
    if (!out || !r)
        return oomi_fail(OOM_EINVAL, "plan: missing argument");
    *out = NULL;
    if ((err = oomi_check_version(r->version, OOM_PLAN_RESULT_VERSION, "oom_plan_result")))
        return err;
    return oomi_json_finish(out, result_json(r));
}

/* (no OOMLESS_SEQ_LEN line where the sequence length is not known) */
static void format_env(oomi_sb *sb, const oom_plan_result *r, const oom_plan_choice *c)
{
    const oom_knobs *k = &c->knobs;
    oomi_sb_printf(sb,
                   "export OOMLESS_BATCH_SIZE=%ld\nexport OOMLESS_GRAD_ACCUM=%ld\n"
                   "export OOMLESS_EFFECTIVE_BATCH=%ld\n",
                   k->batch, k->grad_accum, c->effective_batch);
    if (OOMI_PLAN_SEQ_KNOWN(r, c))
        oomi_sb_printf(sb, "export OOMLESS_SEQ_LEN=%ld\n", k->seq_len);
    oomi_sb_printf(sb,
                   "export OOMLESS_CHECKPOINTING=%s\nexport OOMLESS_PRECISION=%s\n"
                   "export OOMLESS_OPTIMIZER=%s\nexport OOMLESS_SHARDING=%s\n"
                   "export OOMLESS_OFFLOAD=%s\nexport OOMLESS_GPUS=%ld\n",
                   oomi_plan_ck(c), framework_precision(k->precision),
                   oom_optimizer_name(k->optimizer), oom_sharding_name(k->sharding),
                   oom_offload_name(k->offload), k->gpus);
    if (!r->measured)
        oomi_sb_printf(sb, "export OOMLESS_LOSS=%s\nexport OOMLESS_ATTENTION=%s\n",
                       oom_loss_name(k->loss), oom_attention_name(k->attention));
}

/* Hugging Face TrainingArguments, of the transformers version f writes */
static void format_args(oomi_sb *sb, const oom_plan_result *r, const oom_plan_choice *c,
                        bool inference, const oomi_format *f)
{
    const oom_knobs *k = &c->knobs;
    const char *ck = oomi_hf_ck_key(f);
    char pre[64];
    if (inference) {
        oomi_sb_printf(sb, "--per_device_eval_batch_size %ld", k->batch);
        goto precision;
    }
    oomi_sb_printf(sb, "--per_device_train_batch_size %ld --gradient_accumulation_steps %ld",
                   k->batch, k->grad_accum);
    if (k->checkpointing != OOM_CHECKPOINTING_NONE) /* a bare flag reads as true */
        oomi_sb_printf(sb, " --%s", ck);
    oomi_snprintf(pre, sizeof(pre), " --%s_kwargs '", ck);
    if (oomi_plan_ck_variant(c)) /* every:N, +offload (oomi_plan_ck_check) */
        oomi_plan_hf_ck_kwargs(sb, c, pre, "'");
    if ((unsigned)k->optimizer < OOMI_OPTIMIZERS) { /* its TrainingArguments.optim (the table) */
        const oom_option_value *o = oomi_optimizer_values[k->optimizer];
        if (o->trainer)
            oomi_sb_printf(sb, " --optim %s", o->trainer);
        if (o->trainer_args)
            oomi_sb_printf(sb, " --optim_args %s", o->trainer_args);
    }
    if (k->sharding != OOM_SHARDING_NONE || k->offload != OOM_OFFLOAD_NONE)
        oomi_sb_puts(sb, " --deepspeed ds_config.json");
    if (k->loss == OOM_LOSS_CHUNKED) /* Liger-Kernel's fused linear + cross-entropy */
        oomi_sb_puts(sb, " --use_liger_kernel");
    oomi_plan_packing_args(sb, r);
precision:
    if (oomi_is16(k->precision, true))
        oomi_sb_puts(sb, " --bf16");
    else if (oomi_is16(k->precision, false))
        oomi_sb_puts(sb, " --fp16");
}

static json_object *offload_obj(void)
{
    json_object *o = json_object_new_object();
    if (o) {
        oomi_json_put(o, "device", json_object_new_string("cpu"));
        oomi_json_put(o, "pin_memory", json_object_new_boolean(1));
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
    oomi_json_put(root, "train_micro_batch_size_per_gpu", json_object_new_int64(k->batch));
    oomi_json_put(root, "gradient_accumulation_steps", json_object_new_int64(k->grad_accum));
    oomi_json_put(root, "train_batch_size", json_object_new_int64(c->effective_batch));
    oomi_json_put(z, "stage",
                  json_object_new_int(k->sharding ? (int)k->sharding : (k->offload ? 2 : 0)));
    if (k->offload != OOM_OFFLOAD_NONE)
        oomi_json_put(z, "offload_optimizer", offload_obj());
    if (k->offload == OOM_OFFLOAD_OPTIMIZER_PARAMS)
        oomi_json_put(z, "offload_param", offload_obj());
    oomi_json_put(root, "zero_optimization", z);
    if ((b = json_object_new_object()))
        oomi_json_put(b, "enabled", json_object_new_boolean(oomi_is16(k->precision, true)));
    oomi_json_put(root, "bf16", b);
    if ((f = json_object_new_object())) {
        oomi_json_put(f, "enabled", json_object_new_boolean(oomi_is16(k->precision, false)));
        if (oomi_is16(k->precision, false))
            oomi_json_put(f, "loss_scale", json_object_new_int(0));
    }
    oomi_json_put(root, "fp16", f);
    oomi_json_put(root, "gradient_clipping", json_object_new_double(1.0));
    return root;
}

static void format_torchrun(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    const oom_knobs *k = &r->best->knobs;
    /* the attention kernel has no Trainer argument: the script reads it (from_pretrained's
     * attn_implementation), and the loss beside it, as from the env format */
    if (!r->measured)
        oomi_sb_printf(sb, "OOMLESS_ATTENTION=%s OOMLESS_LOSS=%s ",
                       oom_attention_name(k->attention), oom_loss_name(k->loss));
    if (r->nodes > 1)
        oomi_sb_printf(sb,
                       "torchrun --nnodes=%ld --nproc_per_node=%ld --node_rank=$NODE_RANK "
                       "--rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29500",
                       r->nodes, r->gpus_per_node);
    else
        oomi_sb_printf(sb, "torchrun --standalone --nnodes=1 --nproc_per_node=%ld",
                       k->gpus / (r->nodes > 0 ? r->nodes : 1));
    oomi_sb_puts(sb, " train.py ");
    format_args(sb, r, r->best, r->inference, f);
}

/* ---- the formats ------------------------------------------------------------------------------
 */

/* the writers of the machine formats, into sb */
static int write_env(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    (void)f;
    format_env(sb, r, r->best);
    return OOM_OK;
}

static int write_args(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    format_args(sb, r, r->best, r->inference, f);
    oomi_sb_putc(sb, '\n');
    return OOM_OK;
}

static int write_torchrun(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    format_torchrun(sb, r, f);
    oomi_sb_putc(sb, '\n');
    return OOM_OK;
}

static int write_deepspeed(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    char *text = NULL;
    int err = oomi_json_finish(&text, deepspeed_json(r->best));
    (void)f;
    if (!err)
        oomi_sb_puts(sb, text);
    oomi_free(text);
    return err;
}

/* trl: GRPOConfig for a plan with a colocated rollout engine, else SFTConfig's packing keys */
static int write_trl(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    return r->version >= 6 && r->rollout_max_num_seqs > 0 ? oomi_plan_format_rl(sb, r, f)
                                                          : oomi_plan_format_packing(sb, r, f);
}

/* the checkpointing variants a format's stack can run (oomi_plan_ck_check) */
#define CK_ANY OOMI_CK_HF | OOMI_CK_TITAN

#define PLAN  OOM_COMMAND_PLAN
#define TABLE OOM_COMMAND_TABLE
/* where a format's text takes the stack's comment line (stack_comment): none (no comments, or
 * lines a command substitution splits), first, or after its first line (vllm's flags, a
 * script's #! line) */
enum { NO_NOTE, NOTE_FIRST, NOTE_SECOND };
/* a row's versions: the list (each a static string, for oom_plan_format_pick) and the same
 * joined with ", " (the info's; unit.test_vocab checks they agree) */
#define VERSIONS(...) ((const char *const[]){__VA_ARGS__, NULL})
/* (through FORMAT, so that HF and NONE stand for two arguments) */
#define FORMAT(...) FORMAT_(__VA_ARGS__)
#define FORMAT_(name, help, framework, list, versions, package, cmds, write, ck, note)             \
    {                                                                                              \
        {OOM_PLAN_FORMAT_INFO_VERSION, name, help, framework, versions, cmds, package}, write, ck, \
            list, note                                                                             \
    }
/* TrainingArguments' keys: transformers 4.56 (the oldest TRL 1.16 takes: its requirement
 * transformers>=4.56.2) and 5.23 (activation_checkpointing: oomi_hf_ck_key) */
#define HF   VERSIONS("4.56", "5.23"), "4.56, 5.23"
#define NONE NULL, NULL

/* Every output format: what it is, what reads it, the versions of that framework whose keys it
 * can write (oldest first; the last is the default) and the Python distribution that has that
 * version, and its writer (NULL: text and json, which plan writes apart, and table's own). The
 * keys were checked against each version's source: transformers 5.23 (training_args.py), TRL
 * 1.16 (trl/trainer/grpo_config.py, sft_config.py), accelerate 1.15.0, torchtitan 0.2.2
 * (config/job_config.py) and 0.3.0 (config/configs.py, trainer.py), torchtune 0.6.1
 * (recipes/configs), DeepSpeed 0.19.5 (deepspeed/runtime/constants.py, zero/config.py), verl 0.7.0
 * (verl/trainer/config/_generated_ppo_trainer.yaml), vLLM 0.21 (plan_serve.c). */
static const struct plan_format {
    oom_plan_format_info info;
    int (*write)(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f);
    unsigned ck;
    const char *const *list; /* the versions, oldest first; NULL for none */
    int note;                /* NO_NOTE, NOTE_FIRST, NOTE_SECOND */
} formats[] = {
    FORMAT("text", "the human report (the default)", NULL, NONE, NULL, PLAN | TABLE, NULL, CK_ANY, NO_NOTE),
    FORMAT("json", "one JSON document (the same as --json)", NULL, NONE, NULL, PLAN | TABLE, NULL,
           CK_ANY, NO_NOTE),
    FORMAT("env", "OOMLESS_BATCH_SIZE=... lines for eval", NULL, NONE, NULL, PLAN, write_env,
           CK_ANY, NOTE_FIRST),
    FORMAT("args", "TrainingArguments flags (inference: the eval batch)",
           "Hugging Face transformers", HF, "transformers", PLAN, write_args, OOMI_CK_HF, NO_NOTE),
    FORMAT("deepspeed", "a ds_config.json: micro-batch, accumulation, ZeRO stage, offload",
           "DeepSpeed", VERSIONS("0.19"), "0.19", "deepspeed", PLAN, write_deepspeed, CK_ANY, NO_NOTE),
    FORMAT("torchrun", "the launch line, with the TrainingArguments flags",
           "PyTorch torchrun, Hugging Face transformers", HF, "transformers", PLAN, write_torchrun,
           OOMI_CK_HF, NO_NOTE),
    FORMAT("vllm", "inference: vLLM's settings and the KV-cache capacity it will find", "vLLM",
           VERSIONS("0.21"), "0.21", "vllm", PLAN, oomi_plan_format_serve, CK_ANY, NOTE_SECOND),
    FORMAT("accelerate", "training: an FSDP2 config file (YAML)", "accelerate", VERSIONS("1.15"),
           "1.15", "accelerate", PLAN, oomi_plan_format_serve, CK_ANY, NOTE_FIRST),
    FORMAT("torchtitan",
           "training, full fine-tune: 0.3 a config function's settings (Python), 0.2 a job "
           "config (TOML)",
           "torchtitan", VERSIONS("0.2", "0.3"), "0.2, 0.3", "torchtitan", PLAN,
           oomi_plan_format_native, OOMI_CK_TITAN, NOTE_FIRST),
    FORMAT("trl",
           "grpo with --rollout vllm-colocate: GRPOConfig YAML with vLLM's KV capacity; "
           "--packing padding-free: SFTConfig YAML",
           "TRL 1.16 on Hugging Face transformers", HF, "transformers", PLAN, write_trl,
           OOMI_CK_HF, NOTE_FIRST),
    FORMAT("verl", "grpo with --rollout vllm-colocate: Hydra overrides with vLLM's KV capacity",
           "verl", VERSIONS("0.7"), "0.7", "verl", PLAN, oomi_plan_format_rl, 0, NOTE_FIRST),
    FORMAT("torchtune",
           "training: tune run's key=value overrides (batch_size, dataset.packed, dtype, ...)",
           "torchtune", VERSIONS("0.6"), "0.6", "torchtune", PLAN, oomi_plan_format_native, CK_ANY, NO_NOTE),
    FORMAT("megatron",
           "training with a model-parallel layout: pretrain_gpt.py's parallel, batch and "
           "recomputation arguments, the torchrun line",
           "Megatron-LM (Megatron-Core)", VERSIONS("0.20"), "0.20", "megatron-core", PLAN,
           oomi_plan_format_layout, CK_ANY, NOTE_FIRST),
    FORMAT("megatron-bridge",
           "training with a model-parallel layout: run_recipe.py and its ConfigContainer "
           "overrides",
           "Megatron-Bridge", VERSIONS("0.7"), "0.7", "megatron-bridge", PLAN,
           oomi_plan_format_layout, CK_ANY, NOTE_FIRST),
    FORMAT("torchtitan-parallel",
           "training with a model-parallel layout: a config function (parallelism, training, "
           "activation_checkpoint) for torchtitan.train",
           "torchtitan", VERSIONS("0.3"), "0.3", "torchtitan", PLAN, oomi_plan_format_layout,
           CK_ANY, NOTE_FIRST),
    FORMAT("slurm", "training with a model-parallel layout: an sbatch script, torchrun per node",
           NULL, NONE, NULL, PLAN, oomi_plan_format_layout, CK_ANY, NOTE_SECOND),
    FORMAT("markdown", "a Markdown table", NULL, NONE, NULL, TABLE, NULL, CK_ANY, NO_NOTE),
    FORMAT("csv", "comma-separated values with a header line", NULL, NONE, NULL, TABLE, NULL,
           CK_ANY, NO_NOTE),
};

/* the public view of each row (the info is its first member) */
#define INFO(i) &formats[i].info
static const oom_plan_format_info *const infos[] = {
    INFO(0), INFO(1),  INFO(2),  INFO(3),  INFO(4),  INFO(5),  INFO(6),  INFO(7),  INFO(8),
    INFO(9), INFO(10), INFO(11), INFO(12), INFO(13), INFO(14), INFO(15), INFO(16), INFO(17)};
_Static_assert(OOMI_ARRAY_LEN(infos) == OOMI_ARRAY_LEN(formats), "one info per format");

const oom_plan_format_info *const *oom_plan_formats(size_t *count)
{
    if (count)
        *count = OOMI_ARRAY_LEN(infos);
    return infos;
}

static const struct plan_format *find(const char *name, unsigned command)
{
    size_t i;
    for (i = 0; name && i < OOMI_ARRAY_LEN(formats); i++)
        if ((formats[i].info.commands & command) && !strcmp(formats[i].info.name, name))
            return &formats[i];
    return NULL;
}

const oom_plan_format_info *oomi_format_find(const char *name, unsigned command)
{
    const struct plan_format *f = find(name, command);
    return f ? &f->info : NULL;
}

int oomi_format_unknown(const char *what, const char *name, unsigned command)
{
    oomi_sb sb = OOMI_SB_INIT;
    size_t i, n = 0;
    for (i = 0; i < OOMI_ARRAY_LEN(formats); i++)
        if (formats[i].info.commands & command)
            oomi_sb_printf(&sb, "%s%s", n++ ? ", " : "", formats[i].info.name);
    oomi_fail(OOM_EINVAL, "unknown %s format '%s' (%s)", what, name ? name : "(null)",
              sb.buf ? sb.buf : "");
    oomi_sb_free(&sb);
    return OOM_EINVAL;
}

/* the comment line naming the stack whose memory the plan models (none for a measured line) */
static int stack_comment(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_option_value *v;
    if (r->measured || r->version < 8 || r->stack < 0 || r->stack >= OOMI_STACKS)
        return OOM_OK;
    v = oomi_stack_values[r->stack];
    oomi_sb_printf(sb, "# memory modelled for the %s stack (%s; %s)\n", v->name, v->versions,
                   v->traced ? "traced on the meta device" : "from its source, not traced");
    return OOM_OK;
}

/* the stack's comment after the first line of the text in sb */
static int second(oomi_sb *sb, const oom_plan_result *r)
{
    oomi_sb note = OOMI_SB_INIT, all = OOMI_SB_INIT;
    const char *nl = sb->buf ? strchr(sb->buf, '\n') : NULL;
    stack_comment(&note, r);
    if (!nl || !note.buf || note.failed) {
        bool failed = note.failed;
        oomi_sb_free(&note);
        return failed ? oomi_nomem() : OOM_OK;
    }
    oomi_sb_printf(&all, "%.*s%s%s", (int)(nl - sb->buf + 1), sb->buf, note.buf, nl + 1);
    oomi_sb_free(&note);
    if (all.failed || !all.buf) {
        oomi_sb_free(&all);
        return oomi_nomem();
    }
    oomi_sb_free(sb);
    *sb = all;
    return OOM_OK;
}

/* ---- versions ---------------------------------------------------------------------------------
 */

/* the newest listed version not newer than `want` (NULL: the last listed) */
static int pick(const char **picked, const struct plan_format *f, const char *want)
{
    size_t i, n = 0;
    long w[3];

    *picked = NULL;
    if (!f->list) {
        if (!want)
            return OOM_OK;
        return oomi_fail(OOM_EINVAL,
                         "--format-version '%s': the %s format follows no framework's version",
                         want, f->info.name);
    }
    while (f->list[n])
        n++;
    if (!want) {
        *picked = f->list[n - 1];
        return OOM_OK;
    }
    if (!oomi_version_numbers(w, &i, want))
        return oomi_fail(OOM_EINVAL, "--format-version '%s' is not a version (%s: %s)", want,
                         f->info.framework, f->info.versions);
    for (i = 0; i < n && oomi_version_against(f->list[i], want) <= 0; i++)
        *picked = f->list[i];
    if (!*picked)
        return oomi_fail(OOM_EINVAL,
                         "--format-version '%s': the %s format writes %s %s and later (it does not "
                         "know the keys of older versions)",
                         want, f->info.name, f->info.framework, f->list[0]);
    if (i == n && oomi_version_against(f->list[n - 1], want) < 0) /* newer than any listed */
        oomi_notice("%s %s is newer than the versions the %s format knows (%s): writing the keys "
                    "of %s",
                    f->info.framework, want, f->info.name, f->info.versions, *picked);
    return OOM_OK;
}

int oom_plan_format_pick(const char **written, const char *format, const char *version)
{
    const struct plan_format *f = find(format, OOM_COMMAND_PLAN | OOM_COMMAND_TABLE);
    const char *picked = NULL;
    int err;
    if (written)
        *written = NULL;
    if (!format)
        return oomi_fail(OOM_EINVAL, "plan: missing argument");
    if (!f)
        return oomi_format_unknown("plan", format, OOM_COMMAND_PLAN | OOM_COMMAND_TABLE);
    if ((err = pick(&picked, f, version)))
        return err;
    if (written)
        *written = picked;
    return OOM_OK;
}

int oom_plan_format_version(char **out, const char **written, const oom_plan_result *r,
                            const char *format, const char *version)
{
    const struct plan_format *f;
    oomi_format fmt = {format, NULL, NULL};
    oomi_sb sb = OOMI_SB_INIT;
    int err;

    if (written)
        *written = NULL;
    if (!out || !r || !format)
        return oomi_fail(OOM_EINVAL, "plan: missing argument");
    *out = NULL;
    if ((err = oomi_check_version(r->version, OOM_PLAN_RESULT_VERSION, "oom_plan_result")))
        return err;
    if (!(f = find(format, OOM_COMMAND_PLAN)))
        return oomi_format_unknown("plan", format, OOM_COMMAND_PLAN);
    if ((err = pick(&fmt.version, f, version)))
        return err;
    fmt.framework = f->info.framework;
    if (written)
        *written = fmt.version;
    if (!strcmp(format, "json"))
        return oom_plan_to_json(out, r);
    if (!strcmp(format, "text"))
        return oomi_plan_text(out, r);
    if (!r->found)
        return oomi_fail(OOM_ENOFIT, "nothing fits: no %s output", format);
    if (split_model(r) && f->write != oomi_plan_format_layout)
        return oomi_fail(OOM_EUNSUPPORTED,
                         "format '%s' writes a data-parallel job; this plan splits the model "
                         "(tensor %ld x context %ld x pipeline %ld x data %ld parallel): --format "
                         "megatron, megatron-bridge or slurm (torchtitan-parallel under --engine "
                         "torchtitan), or --allow without layout for a data-parallel plan",
                         format, r->tensor_parallel, r->context_parallel, r->pipeline_parallel,
                         r->best->knobs.gpus);
    if ((err = oomi_plan_ck_check(r, format, f->ck)) ||
        (f->info.package && !strcmp(f->info.package, "transformers") &&
         (err = oomi_plan_hf_ck_version(r, &fmt))) ||
        (f->note == NOTE_FIRST && (err = stack_comment(&sb, r))) ||
        (err = f->write(&sb, r, &fmt)) || (f->note == NOTE_SECOND && (err = second(&sb, r)))) {
        oomi_sb_free(&sb);
        return err;
    }
    return oomi_sb_finish(&sb, out);
}

int oom_plan_format(char **out, const oom_plan_result *r, const char *format)
{
    return oom_plan_format_version(out, NULL, r, format, NULL);
}
