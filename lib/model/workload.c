/* workload.c - a workload: the model, the method and the knobs, set from text or typed. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- enum names (the option values) ---------------------------------------------------------- */

const char *const oomi_method_names[4] = {"full", "lora", "qlora", "inference"};
const char *const oomi_precision_names[8] = {"auto",     "fp32",     "fp16", "bf16",
                                             "amp-fp16", "amp-bf16", "int8", "4bit"};
const char *const oomi_optimizer_names[10] = {
    "adamw", "adamw-8bit", "adafactor",   "sgd",         "sgd-momentum",
    "lion",  "none",       "adamw-fused", "paged-adamw", "paged-adamw-8bit"};
const char *const oomi_checkpointing_names[3] = {"none", "selective", "full"};
const char *const oomi_attention_names[3] = {"eager", "sdpa", "flash"};
const char *const oomi_loss_names[2] = {"standard", "chunked"};
const char *const oomi_sharding_names[4] = {"none", "zero1", "zero2", "zero3"};
const char *const oomi_offload_names[3] = {"none", "optimizer", "optimizer+params"};
const char *const oomi_kv_cache_names[2] = {"vllm", "transformers"};
const char *const oomi_adapter_dtype_names[3] = {"auto", "fp32", "bf16"};
const char *const oomi_rollout_names[2] = {"none", "vllm-colocate"};
const char *const oomi_packing_names[3] = {"none", "padding-free", "block-mask"};
const char *const oomi_objective_names[8] = {"sft",  "dpo", "ipo",    "simpo",
                                             "orpo", "kto", "reward", "grpo"};
const char *const oomi_reference_names[4] = {"auto", "copy", "adapter", "none"};
static const char *const phase_names[] = {"forward", "backward", "optimizer", "prefill"};

#define NAME_OF(table, v) ((unsigned)(v) < OOMI_ARRAY_LEN(table) ? table[v] : "?")

const char *oom_method_name(oom_method v)
{
    return NAME_OF(oomi_method_names, v);
}
const char *oom_precision_name(oom_precision v)
{
    return NAME_OF(oomi_precision_names, v);
}
const char *oom_optimizer_name(oom_optimizer v)
{
    return NAME_OF(oomi_optimizer_names, v);
}
const char *oom_checkpointing_name(oom_checkpointing v)
{
    return NAME_OF(oomi_checkpointing_names, v);
}
const char *oomi_checkpointing_text(char *buf, size_t size, const oom_workload *w)
{
    const char *off = w->ckpt_offload ? "+offload" : "";
    if (w->k.checkpointing != OOM_CHECKPOINTING_FULL)
        return oom_checkpointing_name(w->k.checkpointing);
    if (w->ckpt_op)
        return "op-sac";
    if (w->ckpt_every <= 1)
        oomi_snprintf(buf, size, "full%s", off);
    else
        oomi_snprintf(buf, size, "%s:%ld%s", w->ckpt_nth ? "nth" : "every", w->ckpt_every, off);
    return buf;
}

const char *oom_attention_name(oom_attention v)
{
    return NAME_OF(oomi_attention_names, v);
}
const char *oom_loss_name(oom_loss v)
{
    return NAME_OF(oomi_loss_names, v);
}
const char *oom_sharding_name(oom_sharding v)
{
    return NAME_OF(oomi_sharding_names, v);
}
const char *oom_offload_name(oom_offload v)
{
    return NAME_OF(oomi_offload_names, v);
}
bool oomi_fsdp2(const oom_workload *w)
{
    return w->fsdp2 && w->k.sharding == OOM_SHARDING_ZERO3;
}

const char *oomi_sharding_text(const oom_workload *w)
{
    return oomi_fsdp2(w) ? "fsdp2" : oom_sharding_name(w->k.sharding);
}

const char *oom_phase_name(oom_phase v)
{
    return NAME_OF(phase_names, v);
}

/* ---- the option table ------------------------------------------------------------------------ */

/* pointers, so that oom_option can grow behind its version */
static const oom_option *const options[] = {
    &(const oom_option){OOM_OPTION_VERSION, "model", "NAME|PATH",
                        "a preset (--list-models), a config.json or its folder, or a Hugging Face "
                        "Hub id ORG/NAME in the local Hub cache"},
    &(const oom_option){OOM_OPTION_VERSION, "method", "full|lora|qlora|inference",
                        "what is run (default full)"},
    &(const oom_option){OOM_OPTION_VERSION, "precision",
                        "auto|fp32|fp16|bf16|amp-fp16|amp-bf16|int8|4bit",
                        "dtype (default auto: amp-bf16 full, bf16 lora/inference, 4bit qlora)"},
    &(const oom_option){OOM_OPTION_VERSION, "optimizer",
                        "adamw|adamw-fused|adamw-8bit|paged-adamw|paged-adamw-8bit|adafactor|sgd|"
                        "sgd-momentum|lion|none",
                        "(default adamw: torch foreach; paged-*: bitsandbytes' states in CUDA "
                        "unified memory)"},
    &(const oom_option){OOM_OPTION_VERSION, "batch", "N", "micro-batch per GPU (default 1)"},
    &(const oom_option){OOM_OPTION_VERSION, "seq", "N",
                        "tokens per sample; inference: prompt + generated (default 512; plan "
                        "--method inference: auto, the longest that fits)"},
    &(const oom_option){OOM_OPTION_VERSION, "grad-accum", "N",
                        "gradient accumulation steps (default 1)"},
    &(const oom_option){OOM_OPTION_VERSION, "checkpointing",
                        "none|selective|full|every:N|nth:N[+offload]|op-sac",
                        "activation checkpointing; every:N, nth:N: one layer in N; +offload: "
                        "inputs in host memory; op-sac: torchtitan's op-level selective (default "
                        "none)"},
    &(const oom_option){OOM_OPTION_VERSION, "attention", "eager|sdpa|flash",
                        "attention implementation (default sdpa)"},
    &(const oom_option){OOM_OPTION_VERSION, "loss", "standard|chunked",
                        "full fp32 logits, or chunked/fused cross-entropy (default standard)"},
    &(const oom_option){OOM_OPTION_VERSION, "gpus", "N", "data-parallel GPUs (default 1)"},
    &(const oom_option){
        OOM_OPTION_VERSION, "sharding", "none|zero1|zero2|zero3|fsdp2",
        "DeepSpeed ZeRO stage (FSDP1 full shard: zero3); fsdp2: torch fully_shard per "
        "block + root, computing in --precision's 16-bit dtype (default none)"},
    &(const oom_option){OOM_OPTION_VERSION, "fsdp-param-dtype", "fp32|bf16",
                        "fsdp2: dtype of the sharded parameters, gradients and AdamW states; "
                        "fp32 with bf16 compute is torchtitan's MixedPrecisionPolicy (default "
                        "fp32)"},
    &(const oom_option){OOM_OPTION_VERSION, "reshard-after-forward", "yes|no|N",
                        "fsdp2: the blocks free their gathered parameters after forward (yes), "
                        "keep them for backward (no) or keep a 1/N shard (default yes; the root "
                        "never reshards)"},
    &(const oom_option){OOM_OPTION_VERSION, "offload", "none|optimizer|optimizer+params",
                        "CPU offload (default none)"},
    &(const oom_option){OOM_OPTION_VERSION, "zero3-max-live-params", "N",
                        "zero3: gathered elements beyond which DeepSpeed stops prefetching, as "
                        "stage3_max_live_parameters (default 1e9)"},
    &(const oom_option){OOM_OPTION_VERSION, "zero3-prefetch-bucket", "N",
                        "zero3: elements gathered ahead of use, as stage3_prefetch_bucket_size "
                        "(default 5e7; 0: no prefetch)"},
    &(const oom_option){OOM_OPTION_VERSION, "zero3-persistence-threshold", "N",
                        "zero3: tensors smaller than N elements stay gathered, as "
                        "stage3_param_persistence_threshold (default 1e5)"},
    &(const oom_option){OOM_OPTION_VERSION, "zero3-max-reuse-distance", "N",
                        "zero3: a module used again within N elements keeps its parameters "
                        "gathered, as stage3_max_reuse_distance (default 1e9)"},
    &(const oom_option){OOM_OPTION_VERSION, "zero3-reduce-bucket", "N",
                        "zero3: elements of the gradient bucket, as reduce_bucket_size (default "
                        "5e8)"},
    &(const oom_option){OOM_OPTION_VERSION, "lora-rank", "R", "LoRA rank (default 16)"},
    &(const oom_option){OOM_OPTION_VERSION, "lora-targets", "default|all-linear|M1,M2",
                        "adapted modules, HF names (default: PEFT's per family)"},
    &(const oom_option){OOM_OPTION_VERSION, "lora-dropout", "P",
                        "LoRA dropout probability (default 0.05)"},
    &(const oom_option){OOM_OPTION_VERSION, "double-quant", "auto|no|yes",
                        "4-bit base: bnb_4bit_use_double_quant, 8-bit absmax constants (default "
                        "auto: yes under qlora, no for --precision 4bit)"},
    &(const oom_option){OOM_OPTION_VERSION, "adapter-dtype", "auto|fp32|bf16",
                        "LoRA adapters, their gradients and AdamW states (default auto: fp32, "
                        "PEFT's autocast_adapter_dtype; TRL's trainers cast a 4-bit model's to "
                        "bf16)"},
    &(const oom_option){OOM_OPTION_VERSION, "kbit-prepare", "auto|no|yes",
                        "bitsandbytes base: PEFT's prepare_model_for_kbit_training, embeddings, "
                        "head and norms upcast to fp32 (default auto: yes for simpo and orpo, "
                        "whose TRL trainers call it, else no)"},
    &(const oom_option){OOM_OPTION_VERSION, "decoder-seq", "N",
                        "encoder-decoder models: target tokens (default = seq)"},
    &(const oom_option){OOM_OPTION_VERSION, "max-positions", "N",
                        "raise the model's max positions (RoPE scaling) to allow a longer --seq"},
    &(const oom_option){OOM_OPTION_VERSION, "keep-grads", "no|yes",
                        "keep gradients between steps (zero_grad of PyTorch < 2.0) (default no)"},
    &(const oom_option){OOM_OPTION_VERSION, "overhead", "SIZE",
                        "CUDA context + workspaces outside PyTorch (default: per GPU generation)"},
    &(const oom_option){OOM_OPTION_VERSION, "cublas-workspace", ":KIB:COUNT[:KIB:COUNT...]",
                        "cuBLAS workspace of the compute stream, as CUBLAS_WORKSPACE_CONFIG "
                        "(default :4096:2:16:8, on compute capability 9.x :4096:8)"},
    &(const oom_option){OOM_OPTION_VERSION, "nccl-buffsize", "SIZE",
                        "NCCL's SIMPLE buffer per channel, as NCCL_BUFFSIZE (bare number = "
                        "bytes; default 4 MiB)"},
    &(const oom_option){OOM_OPTION_VERSION, "nccl-channels", "N",
                        "NCCL channels, as NCCL_MAX_NCHANNELS (default 32)"},
    &(const oom_option){OOM_OPTION_VERSION, "nccl-communicators", "N",
                        "NCCL communicators with buffers (default 1; 2 for vLLM's tensor "
                        "parallelism: its own and torch.distributed's)"},
    &(const oom_option){OOM_OPTION_VERSION, "nccl-nvls", "auto|no|yes",
                        "NVLink SHARP buffers, as NCCL_NVLS_ENABLE (default auto: compute "
                        "capability 9.0 or later with more than 2 GPUs)"},
    &(const oom_option){OOM_OPTION_VERSION, "tensor-parallel", "N",
                        "inference: GPUs one model copy is split over, as vLLM's "
                        "--tensor-parallel-size (default 1)"},
    &(const oom_option){OOM_OPTION_VERSION, "kv-cache", "vllm|transformers",
                        "inference: the KV cache of a serving engine (sliding-window layers "
                        "keep the window) or of transformers' prefill (every layer every "
                        "token) (default vllm)"},
    &(const oom_option){OOM_OPTION_VERSION, "objective", "sft|dpo|ipo|simpo|orpo|kto|reward|grpo",
                        "training objective as TRL runs it; --batch counts pairs (dpo, ipo, "
                        "simpo, orpo, reward), examples (kto) or completions (grpo) (default sft)"},
    &(const oom_option){OOM_OPTION_VERSION, "reference", "auto|copy|adapter|none",
                        "dpo/ipo/kto/grpo reference model: a frozen copy, the policy with its "
                        "LoRA adapter disabled, or none (default auto: adapter under lora/qlora, "
                        "else copy; none for grpo, whose beta defaults to 0)"},
    &(const oom_option){OOM_OPTION_VERSION, "reference-precision", "auto|fp32|fp16|bf16|int8|4bit",
                        "weights of a reference copy (default auto: as the policy's)"},
    &(const oom_option){OOM_OPTION_VERSION, "precompute-ref", "no|yes",
                        "reference log-probs computed before training "
                        "(precompute_ref_log_probs): no reference in memory (default no)"},
    &(const oom_option){OOM_OPTION_VERSION, "num-generations", "G",
                        "grpo: completions per prompt (default 8)"},
    &(const oom_option){OOM_OPTION_VERSION, "completion-len", "N",
                        "grpo: generated tokens of the --seq total (default half of it)"},
    &(const oom_option){OOM_OPTION_VERSION, "rollout", "none|vllm-colocate",
                        "grpo: where completions are generated: transformers' generate in the "
                        "trainer, or a vLLM engine sharing the trainer's GPU (TRL vllm_mode "
                        "colocate, verl); plan splits the GPU between them (default none)"},
    &(const oom_option){OOM_OPTION_VERSION, "sleep-mode", "0|1|2",
                        "rollout vllm-colocate: vLLM's sleep level while the trainer trains; 1 "
                        "offloads its weights to the CPU, 2 discards them, both free its KV "
                        "cache; 0: the engine keeps its memory (default 0)"},
    &(const oom_option){OOM_OPTION_VERSION, "packing", "none|padding-free|block-mask",
                        "documents packed into rows: padding-free (TRL padding_free: one row of "
                        "batch x seq tokens, position ids restarting), block-mask (torchtune "
                        "packed: batch rows with a document mask) (default none: padded rows)"},
    &(const oom_option){OOM_OPTION_VERSION, "tokens-per-batch", "N",
                        "packing: packed tokens per micro-batch (default batch x seq); "
                        "estimate: --seq is then the longest document; plan: N / seq packs of "
                        "--seq, fixed"},
    &(const oom_option){OOM_OPTION_VERSION, "max-num-batched-tokens", "N",
                        "plan --format vllm: the tokens of vLLM's start-up profile run, as "
                        "its --max-num-batched-tokens (default: the plan's sequence, or its batch "
                        "if larger)"},
    &(const oom_option){OOM_OPTION_VERSION, "max-num-seqs", "N",
                        "plan --format vllm: the sequences vLLM's sampler is profiled over, as "
                        "its --max-num-seqs (default: the plan's batch)"},
};

const oom_option *const *oom_workload_options(size_t *count)
{
    *count = OOMI_ARRAY_LEN(options);
    return options;
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
    w->lora_rank = 16;
    w->lora_dropout = 0.05;
    w->overhead = OOM_UNKNOWN;
    w->cublas_ws = OOM_UNKNOWN;
    w->tp = 1;
    w->z3_live = 1e9, w->z3_prefetch = 5e7, w->z3_persist = 1e5; /* DeepSpeed's defaults */
    w->z3_reuse = 1e9, w->z3_reduce = 5e8;
    w->num_generations = 8; /* GRPOConfig.num_generations */
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
    oomi_free(w->lora_targets);
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
    c->z3_cache = NULL;
    c->model_arg = w->model_arg ? oomi_strdup(w->model_arg) : NULL;
    c->lora_targets = w->lora_targets ? oomi_strdup(w->lora_targets) : NULL;
    if ((w->model_arg && !c->model_arg) || (w->lora_targets && !c->lora_targets) ||
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
    w->has_gpu = gpu != NULL;
    w->cc_major = gpu ? gpu->cc_major : 0;
    w->cc_minor = gpu ? gpu->cc_minor : 0;
    oomi_snprintf(w->gpu_id, sizeof(w->gpu_id), "%s", gpu && gpu->id ? gpu->id : "");
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
    return oomi_bnb_base(w) && (w->kbit_prepare == 2 ||
                                (w->kbit_prepare == 0 && (w->objective == OOMI_OBJECTIVE_SIMPO ||
                                                          w->objective == OOMI_OBJECTIVE_ORPO)));
}

bool oomi_double_quant(const oom_workload *w)
{
    return oomi_nf4_base(w) &&
           (w->double_quant == 2 || (w->double_quant == 0 && w->k.method == OOM_METHOD_QLORA));
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
    if (!oomi_objective_has_reference(w->objective))
        return OOMI_REFERENCE_NONE;
    if (w->reference != OOMI_REFERENCE_AUTO)
        return (oomi_reference)w->reference;
    /* GRPOConfig.beta defaults to 0.0: "the reference model is not loaded" (grpo_config.py) */
    if (w->objective == OOMI_OBJECTIVE_GRPO)
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
        {"method", OOMI_ARRAY_LEN(oomi_method_names)},
        {"precision", OOMI_ARRAY_LEN(oomi_precision_names)},
        {"optimizer", OOMI_ARRAY_LEN(oomi_optimizer_names)},
        {"checkpointing", OOMI_ARRAY_LEN(oomi_checkpointing_names)},
        {"attention", OOMI_ARRAY_LEN(oomi_attention_names)},
        {"loss", OOMI_ARRAY_LEN(oomi_loss_names)},
        {"sharding", OOMI_ARRAY_LEN(oomi_sharding_names)},
        {"offload", OOMI_ARRAY_LEN(oomi_offload_names)},
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
                            w->max_pos_override ? w->max_pos_override : m->max_pos,
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
    long tokens = w->tokens_per_batch ? w->tokens_per_batch : w->k.batch * w->k.seq_len;
    *rows = w->k.batch, *len = w->k.seq_len;
    if (w->packing == OOMI_PACKING_PADDING_FREE)
        *rows = 1, *len = tokens;
    else if (w->packing == OOMI_PACKING_BLOCK_MASK)
        *len = tokens / w->k.batch;
}
