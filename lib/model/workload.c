/* workload.c - a workload: the model, the method and the knobs, set from text or typed. */
#include "model/model.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- enum names (the option values of workload_options.c) ------------------------------------ */

static const char *const phase_names[] = {"forward", "backward", "optimizer",
                                          "prefill", "decode",   "load"};

#define NAME_OF(table, v) ((unsigned)(v) < OOMI_ARRAY_LEN(table) ? table[v] : "?")

const char *oom_method_name(oom_method v)
{
    return OOMI_VALUE_NAME(oomi_method_values, v);
}
const char *oom_precision_name(oom_precision v)
{
    return OOMI_VALUE_NAME(oomi_precision_values, v);
}
const char *oom_optimizer_name(oom_optimizer v)
{
    return OOMI_VALUE_NAME(oomi_optimizer_values, v);
}
const char *oom_checkpointing_name(oom_checkpointing v)
{
    return oomi_value_name(oomi_checkpointing_values, 3, (unsigned)v);
}
const char *oomi_checkpointing_text(char *buf, size_t size, const oom_workload *w)
{
    const char *off = w->ckpt.offload ? "+offload" : "";
    if (w->k.checkpointing != OOM_CHECKPOINTING_FULL)
        return oom_checkpointing_name(w->k.checkpointing);
    if (w->ckpt.op)
        return "op-sac";
    if (w->ckpt.every <= 1)
        oomi_snprintf(buf, size, "full%s", off);
    else
        oomi_snprintf(buf, size, "%s:%ld%s", w->ckpt.nth ? "nth" : "every", w->ckpt.every, off);
    return buf;
}

const char *oom_attention_name(oom_attention v)
{
    return OOMI_VALUE_NAME(oomi_attention_values, v);
}
const char *oom_loss_name(oom_loss v)
{
    return OOMI_VALUE_NAME(oomi_loss_values, v);
}
const char *oom_sharding_name(oom_sharding v)
{
    return oomi_value_name(oomi_sharding_values, 4, (unsigned)v);
}
const char *oom_offload_name(oom_offload v)
{
    return OOMI_VALUE_NAME(oomi_offload_values, v);
}
bool oomi_fsdp2(const oom_workload *w)
{
    return w->fsdp2.on && w->k.sharding == OOM_SHARDING_ZERO3;
}

const char *oomi_sharding_text(const oom_workload *w)
{
    return oomi_fsdp2(w) ? "fsdp2" : oom_sharding_name(w->k.sharding);
}

const char *oom_phase_name(oom_phase v)
{
    return NAME_OF(phase_names, v);
}

/* ---- create / free / clone ------------------------------------------------------------------- */

static void defaults(oom_workload *w)
{
    memset(w, 0, sizeof(*w));
    w->k.version = OOM_KNOBS_VERSION;
    w->k.batch = 1;
    w->k.grad_accum = 1;
    w->k.seq_len = 512;
    w->k.gpus = 1;
    w->k.attention = OOM_ATTENTION_SDPA;
    w->lora.rank = 16;
    w->lora.dropout = 0.05;
    w->runtime.overhead = OOM_UNKNOWN;
    w->runtime.cublas_ws = OOM_UNKNOWN;
    w->parallel.tp = 1;
    w->zero3.max_live = 1e9, w->zero3.prefetch = 5e7,
    w->zero3.persistence = 1e5; /* DeepSpeed's defaults */
    w->zero3.reuse = 1e9, w->zero3.reduce = 5e8;
    w->objective.num_generations = 8; /* GRPOConfig.num_generations */
    w->layout.pp = w->layout.vpp = w->layout.ep = w->layout.cp = 1;
    w->layout.recompute_layers = 1;
}

int oom_workload_create(oom_workload **out)
{
    oom_workload *w = oomi_malloc(sizeof(*w));
    *out = NULL;
    if (!w)
        return oomi_nomem();
    defaults(w);
    *out = w;
    return OOM_OK;
}

void oom_workload_free(oom_workload *w)
{
    if (!w)
        return;
    oomi_model_free(w->model);
    oomi_free(w->model_arg);
    oomi_free(w->lora.targets);
    oomi_free(w->layout.pp_layers);
    oomi_free(w);
}

int oom_workload_clone(oom_workload **out, const oom_workload *w)
{
    oom_workload *c = oomi_malloc(sizeof(*c));
    *out = NULL;
    if (!c)
        return oomi_nomem();
    *c = *w;
    c->model = NULL;
    c->zero3.cache = NULL;
    c->model_arg = w->model_arg ? oomi_strdup(w->model_arg) : NULL;
    c->lora.targets = w->lora.targets ? oomi_strdup(w->lora.targets) : NULL;
    c->layout.pp_layers = w->layout.pp_layers ? oomi_strdup(w->layout.pp_layers) : NULL;
    if ((w->model_arg && !c->model_arg) || (w->lora.targets && !c->lora.targets) ||
        (w->layout.pp_layers && !c->layout.pp_layers) ||
        (w->model && oomi_model_clone(&c->model, w->model))) {
        oom_workload_free(c);
        return oomi_nomem();
    }
    *out = c;
    return OOM_OK;
}

int oom_workload_set_gpu(oom_workload *w, const oom_gpu_profile *gpu)
{
    int err;
    if (gpu && (err = oomi_check_version(gpu->version, OOM_GPU_PROFILE_VERSION, "oom_gpu_profile")))
        return err;
    w->gpu.known = gpu != NULL;
    w->gpu.cc_major = gpu ? gpu->cc_major : 0;
    w->gpu.cc_minor = gpu ? gpu->cc_minor : 0;
    oomi_snprintf(w->gpu.id, sizeof(w->gpu.id), "%s", gpu && gpu->id ? gpu->id : "");
    return OOM_OK;
}

oom_precision oomi_resolved_precision(const oom_workload *w)
{
    if (w->k.precision != OOM_PRECISION_AUTO)
        return w->k.precision;
    switch (w->k.method) {
    case OOM_METHOD_FULL:
        return OOM_PRECISION_AMP_BF16;
    case OOM_METHOD_QLORA:
        return OOM_PRECISION_4BIT;
    default:
        return OOM_PRECISION_BF16;
    }
}

bool oomi_gpu_lacks_bf16(const oom_gpu_profile *gpu)
{
    return gpu &&
           ((gpu->has_tflops && gpu->bf16_tflops <= 0) || (gpu->cc_major > 0 && gpu->cc_major < 8));
}

bool oomi_bnb_base(const oom_workload *w)
{
    oom_precision p = oomi_resolved_precision(w);
    if (w->model && w->model->quant_bytes > 0)
        return !strncmp(w->model->quant_desc, "bitsandbytes", 12);
    return p == OOM_PRECISION_INT8 || p == OOM_PRECISION_4BIT;
}

bool oomi_nf4_base(const oom_workload *w)
{
    return !(w->model && w->model->quant_bytes > 0) &&
           (w->k.method == OOM_METHOD_QLORA || oomi_resolved_precision(w) == OOM_PRECISION_4BIT);
}

bool oomi_kbit_prepare(const oom_workload *w)
{
    return oomi_bnb_base(w) &&
           (w->quant.kbit_prepare == 2 ||
            (w->quant.kbit_prepare == 0 && (w->objective.kind == OOMI_OBJECTIVE_SIMPO ||
                                            w->objective.kind == OOMI_OBJECTIVE_ORPO)));
}

bool oomi_double_quant(const oom_workload *w)
{
    return oomi_nf4_base(w) && (w->quant.double_quant == 2 ||
                                (w->quant.double_quant == 0 && w->k.method == OOM_METHOD_QLORA));
}

/* whether the stack's 4-bit linears are bitsandbytes' (torchtune and torchtitan quantize with
 * torchao's NF4Tensor, Unsloth with its own fast_dequantize and LoRA kernels) */
bool oomi_bnb_linears(const oom_workload *w)
{
    return oomi_nf4_base(w) && w->stack != OOMI_STACK_TORCHTUNE &&
           w->stack != OOMI_STACK_TORCHTITAN && w->stack != OOMI_STACK_UNSLOTH;
}

bool oomi_bnb_keeps_inputs(const oom_workload *w)
{
    return w->quant.bitsandbytes == 1 && oomi_bnb_linears(w);
}

oom_precision oomi_precision_without_bf16(oom_precision p)
{
    return p == OOM_PRECISION_BF16       ? OOM_PRECISION_FP16
           : p == OOM_PRECISION_AMP_BF16 ? OOM_PRECISION_AMP_FP16
                                         : p;
}

/* trl/trainer/dpo_trainer.py (1.16.0), DPOTrainer.__init__: with no ref_model, a PEFT policy is
 * its own reference (adapter disabled by use_adapter), otherwise a copy is loaded from the same
 * checkpoint; the same in kto_trainer.py and grpo_trainer.py */
oomi_reference oomi_reference_of(const oom_workload *w)
{
    bool lora = w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;
    if (!oomi_objective_has_reference(w->objective.kind))
        return OOMI_REFERENCE_NONE;
    if (w->objective.reference != OOMI_REFERENCE_AUTO)
        return (oomi_reference)w->objective.reference;
    /* GRPOConfig.beta defaults to 0.0: "the reference model is not loaded" (grpo_config.py) */
    if (w->objective.kind == OOMI_OBJECTIVE_GRPO)
        return OOMI_REFERENCE_NONE;
    return lora ? OOMI_REFERENCE_ADAPTER : OOMI_REFERENCE_COPY;
}

bool oomi_objective_has_reference(unsigned objective)
{
    return objective == OOMI_OBJECTIVE_DPO || objective == OOMI_OBJECTIVE_IPO ||
           objective == OOMI_OBJECTIVE_KTO || objective == OOMI_OBJECTIVE_GRPO;
}

long oomi_objective_sequences(unsigned objective)
{
    return objective == OOMI_OBJECTIVE_SFT || objective == OOMI_OBJECTIVE_KTO ||
                   objective == OOMI_OBJECTIVE_GRPO
               ? 1
               : 2;
}

const char *oomi_objective_unit(unsigned objective)
{
    switch (objective) {
    case OOMI_OBJECTIVE_SFT:
        return "samples";
    case OOMI_OBJECTIVE_KTO:
        return "examples";
    case OOMI_OBJECTIVE_GRPO:
        return "completions";
    default:
        return "pairs";
    }
}

int oom_workload_get_knobs(oom_knobs *out, const oom_workload *w)
{
    int err;
    if ((err = oomi_check_version(out->version, OOM_KNOBS_VERSION, "oom_knobs")))
        return err;
    *out = w->k;
    out->precision = oomi_resolved_precision(w);
    return OOM_OK;
}

int oom_workload_set_knobs(oom_workload *w, const oom_knobs *k)
{
    static const struct {
        const char *name;
        size_t n;
    } lim[] = {
        {"method", OOMI_ARRAY_LEN(oomi_method_values)},
        {"precision", OOMI_ARRAY_LEN(oomi_precision_values)},
        {"optimizer", OOMI_ARRAY_LEN(oomi_optimizer_values)},
        {"checkpointing", OOM_CHECKPOINTING_FULL + 1},
        {"attention", OOMI_ARRAY_LEN(oomi_attention_values)},
        {"loss", OOMI_ARRAY_LEN(oomi_loss_values)},
        {"sharding", OOM_SHARDING_ZERO3 + 1},
        {"offload", OOMI_ARRAY_LEN(oomi_offload_values)},
    };
    const unsigned vals[] = {k->method,    k->precision, k->optimizer, k->checkpointing,
                             k->attention, k->loss,      k->sharding,  k->offload};
    const long counts[] = {k->batch, k->grad_accum, k->seq_len, k->gpus};
    static const char *const count_names[] = {"batch", "grad-accum", "seq", "gpus"};
    size_t i;
    int err;

    if ((err = oomi_check_version(k->version, OOM_KNOBS_VERSION, "oom_knobs")))
        return err;
    for (i = 0; i < OOMI_ARRAY_LEN(counts); i++)
        if (counts[i] < 1 || counts[i] > (1L << 30))
            return oomi_fail(OOM_EINVAL, "%s '%ld' must be between 1 and 2^30", count_names[i],
                             counts[i]);
    for (i = 0; i < OOMI_ARRAY_LEN(lim); i++)
        if (vals[i] >= lim[i].n)
            return oomi_fail(OOM_EINVAL, "%s value %u is out of range", lim[i].name, vals[i]);
    w->k = *k;
    return OOM_OK;
}

int oom_workload_model(oom_model_info *out, const oom_workload *w)
{
    const oomi_model *m = w->model;
    int err;
    if ((err = oomi_check_version(out->version, OOM_MODEL_INFO_VERSION, "oom_model_info")))
        return err;
    if (!m)
        return oomi_fail(OOM_EINVAL, "no model is set (use --model NAME|PATH)");
    *out = (oom_model_info){OOM_MODEL_INFO_VERSION,
                            m->name,
                            m->family,
                            oomi_head_name(m->head),
                            m->layers,
                            m->enc_layers,
                            m->hidden,
                            m->heads,
                            m->kv_heads,
                            m->head_dim,
                            m->ffn,
                            m->vocab,
                            w->shape.max_positions ? w->shape.max_positions : m->max_pos,
                            m->experts,
                            m->topk,
                            m->params};
    return OOM_OK;
}

/* padding-free concatenates the micro-batch's packs into one row (TRL's padding_free flattens
 * the batch: DataCollatorForLanguageModeling with padding_free=True, trl/trainer/sft_trainer.py);
 * block-mask keeps `batch` rows of packs (torchtune's PackedDataset pads each pack to
 * max_seq_len, torchtune/datasets/_packed.py) */
void oomi_packed_shape(const oom_workload *w, long *rows, long *len)
{
    long tokens =
        w->packing.tokens_per_batch ? w->packing.tokens_per_batch : w->k.batch * w->k.seq_len;
    *rows = w->k.batch, *len = w->k.seq_len;
    if (w->packing.mode == OOMI_PACKING_PADDING_FREE)
        *rows = 1, *len = tokens;
    else if (w->packing.mode == OOMI_PACKING_BLOCK_MASK)
        *len = tokens / w->k.batch;
}

json_object *oomi_stack_json(unsigned stack)
{
    const oom_option_value *v = oomi_stack_values[stack < OOMI_STACKS ? stack : 0];
    json_object *o = json_object_new_object();
    if (o) {
        oomi_json_put(o, "name", json_object_new_string(v->name));
        oomi_json_put(o, "version", json_object_new_string(v->versions));
        oomi_json_put(o, "traced", json_object_new_boolean(v->traced));
    }
    return o;
}
