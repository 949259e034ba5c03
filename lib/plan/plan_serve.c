/* plan_serve.c - a plan in the formats of a serving engine and an FSDP launcher: vLLM's
 * command-line settings with the KV-cache capacity vLLM will find, and an accelerate config
 * (FSDP2). docs/plan.md has a worked case of the vLLM arithmetic. */
#include "plan/plan.h"

#include <json-c/json.h>
#include <math.h>
#include <string.h>

/* the precision is 16-bit brain float (also for quantised bases, which compute in it) or half;
 * plan_output.c's formats use it too */
bool oomi_is16(oom_precision p, bool bf)
{
    return bf ? (p == OOM_PRECISION_BF16 || p == OOM_PRECISION_AMP_BF16 ||
                 p == OOM_PRECISION_4BIT || p == OOM_PRECISION_INT8)
              : (p == OOM_PRECISION_FP16 || p == OOM_PRECISION_AMP_FP16);
}

/* vLLM's block size and non-torch memory: plan.h */
#define VLLM_BLOCK_TOKENS OOMI_VLLM_BLOCK_TOKENS
#define VLLM_NON_TORCH_1  OOMI_VLLM_NON_TORCH_1
#define VLLM_NON_TORCH_TP OOMI_VLLM_NON_TORCH_TP

/* CUDA graphs: vLLM captures them after it has sized the KV cache, so they are not part of the
 * subtraction above: in vLLM's start-up logs the weights, peak activation, non-torch memory and
 * KV cache add up to total x gpu_memory_utilization by themselves, and the "CUDAGraph memory"
 * they print beside them is -0.88 to +0.10 GiB on an H100 (bench/accuracy/vllm-logs.csv: Qwen3-32B
 * -0.88, Llama-3.1-8B -0.45, Qwen3-0.6B +0.10 twice). What the graphs take comes out of the
 * memory the utilisation leaves free; vLLM's --enforce-eager captures none. Since v0.21.0 vLLM
 * profiles the capture (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on by default) and takes its
 * estimate from the KV cache: "Estimated CUDA graph memory: 0.17 GiB total" (4 x RTX 3090,
 * github.com/noonghunna/club-3090/issues/127), 0.36 GiB (github.com/gpustack/runner/pull/251).
 * The arithmetic above is that of the logs it was checked on; for vLLM 0.21 and later the KV
 * cache is smaller by that estimate. */
static const char *const VLLM_GRAPHS =
    "captured after the KV cache is sized, outside its budget (vLLM's logs: -0.88 to +0.10 GiB "
    "on an H100); vLLM 0.21 and later takes its estimate of them (0.17-0.36 GiB in published "
    "logs) from the KV cache instead; --enforce-eager captures none";

int oomi_plan_vllm(oomi_plan_vllm_kv *out, const oom_plan_result *r)
{
    const oom_estimate *e = &r->best->estimate;
    double total = (double)r->gpu_budget.target_bytes, nt;
    long tp = r->version >= 2 && r->tensor_parallel > 0 ? r->tensor_parallel : 1;

    memset(out, 0, sizeof(*out));
    if (!r->found || !r->inference || r->kv_bytes_per_token <= 0 || r->version < 2 ||
        !r->serve_batched_tokens || total <= 0)
        return oomi_fail(OOM_EUNSUPPORTED, "plan: the vllm format needs an inference plan of a "
                                           "model with a KV cache");
    out->tp = tp;
    /* the share of the GPU the plan allows (the usable budget), in vLLM's two decimals */
    out->utilisation = floor(100.0 * (double)r->gpu_budget.usable_bytes / total + 1e-9) / 100.0;
    out->batched_tokens = r->serve_batched_tokens;
    out->seqs =
        r->version >= 5 && r->serve_max_num_seqs > 0 ? r->serve_max_num_seqs : r->best->knobs.batch;
    /* Worker.determine_available_memory (vllm/v1/worker/gpu_worker.py): requested memory =
     * total x gpu_memory_utilization; available KV memory = requested - non_kv_cache_memory, the
     * weights (model_memory_usage) + the profile run's torch peak increase + its non-torch
     * increase */
    out->requested = (uint64_t)(total * out->utilisation);
    out->weights = e->weights + (r->version >= 5 ? r->serve_rope_bytes : 0);
    out->activation = r->serve_profile_bytes;
    nt = tp > 1 ? VLLM_NON_TORCH_TP : VLLM_NON_TORCH_1;
    out->non_torch = (uint64_t)llround(nt);
    if (out->requested > out->weights + out->activation + out->non_torch)
        out->available = out->requested - (out->weights + out->activation + out->non_torch);
    /* get_num_blocks (vllm/v1/core/kv_cache_utils.py): available // page_size // num_layers, the
     * page of one layer being 2 (K, V) x block_size x num_kv_heads x head_size x dtype bytes
     * (AttentionSpec.page_size_bytes, vllm/v1/kv_cache_interface.py): one block of all layers is
     * block_size x the KV bytes per token */
    out->block_bytes = (uint64_t)llround(VLLM_BLOCK_TOKENS * r->kv_bytes_per_token);
    out->blocks = out->block_bytes ? (long)(out->available / out->block_bytes) : 0;
    out->tokens = out->blocks * VLLM_BLOCK_TOKENS;
    return OOM_OK;
}

bool oomi_plan_vllm_holds(const oom_plan_result *r, long seq)
{
    oomi_plan_vllm_kv v;
    return r && r->found && !oomi_plan_vllm(&v, r) &&
           v.blocks >= (seq + VLLM_BLOCK_TOKENS - 1) / VLLM_BLOCK_TOKENS;
}

json_object *oomi_plan_vllm_json(const oom_plan_result *r)
{
    oomi_plan_vllm_kv v;
    json_object *o;
    size_t i;
    if (oomi_plan_vllm(&v, r) || !(o = json_object_new_object()))
        return NULL;
    {
        /* the terms of vLLM's subtraction, in its order */
        const struct {
            const char *key;
            uint64_t bytes;
        } terms[] = {{"requested_bytes", v.requested},
                     {"weights_bytes", v.weights},
                     {"peak_activation_bytes", v.activation},
                     {"non_torch_bytes", v.non_torch},
                     {"kv_cache_bytes", v.available}};
        oomi_json_put(o, "gpu_memory_utilization", json_object_new_double(v.utilisation));
        oomi_json_put(o, "max_num_batched_tokens", json_object_new_int64(v.batched_tokens));
        oomi_json_put(o, "max_num_seqs", json_object_new_int64(v.seqs));
        for (i = 0; i < OOMI_ARRAY_LEN(terms); i++)
            oomi_json_put(o, terms[i].key, oomi_json_size(terms[i].bytes));
    }
    oomi_json_put(o, "block_size", json_object_new_int(VLLM_BLOCK_TOKENS));
    oomi_json_put(o, "num_gpu_blocks", json_object_new_int64(v.blocks));
    oomi_json_put(o, "kv_tokens", json_object_new_int64(v.tokens));
    {
        json_object *g = json_object_new_object();
        if (g) {
            oomi_json_put(g, "in_kv_budget", json_object_new_boolean(0));
            oomi_json_put(g, "left_free_bytes",
                          oomi_json_size((uint64_t)r->gpu_budget.target_bytes - v.requested));
            oomi_json_put(g, "source", json_object_new_string(VLLM_GRAPHS));
        }
        oomi_json_put(o, "cuda_graphs", g);
    }
    return o;
}

/* vLLM's --dtype for the plan's precision (quantised bases keep their own config) */
static const char *vllm_dtype(oom_precision p)
{
    return p == OOM_PRECISION_BF16 || p == OOM_PRECISION_AMP_BF16   ? "bfloat16"
           : p == OOM_PRECISION_FP16 || p == OOM_PRECISION_AMP_FP16 ? "float16"
           : p == OOM_PRECISION_FP32                                ? "float32"
                                                                    : NULL;
}

static int format_vllm(oomi_sb *sb, const oom_plan_result *r, const oomi_format *fmt)
{
    oomi_plan_vllm_kv v;
    const oom_knobs *k = &r->best->knobs;
    const char *dtype = vllm_dtype(k->precision);
    char a[16], b[16], c[16], d[16], f[16];
    int err;
    if ((err = oomi_plan_vllm(&v, r)))
        return err;
    /* KV-cache dtype "auto": the model's dtype, as the estimate counts it */
    oomi_sb_printf(sb,
                   "--tensor-parallel-size %ld --gpu-memory-utilization %.2f --max-model-len %ld "
                   "--max-num-seqs %ld --max-num-batched-tokens %ld --kv-cache-dtype auto",
                   v.tp, v.utilisation, k->seq_len, v.seqs, v.batched_tokens);
    if (dtype)
        oomi_sb_printf(sb, " --dtype %s", dtype);
    oomi_sb_printf(sb,
                   "\n# KV cache per GPU: %s requested - (%s weights + %s peak activation + %s "
                   "non-torch) = %s\n# GPU blocks: %ld x %d tokens = %ld tokens (%ld sequences of "
                   "%ld)\n",
                   OOMI_SZ(a, v.requested), OOMI_SZ(b, v.weights), OOMI_SZ(c, v.activation),
                   OOMI_SZ(d, v.non_torch), OOMI_SZ(f, v.available), v.blocks, VLLM_BLOCK_TOKENS,
                   v.tokens, k->seq_len ? v.tokens / k->seq_len : 0, k->seq_len);
    oomi_sb_printf(sb, "# CUDA graphs: from the %s the utilisation leaves free; %s\n",
                   OOMI_SZ(a, (uint64_t)r->gpu_budget.target_bytes - v.requested), VLLM_GRAPHS);
    oomi_sb_printf(sb, "# the settings and arithmetic of %s %s\n", fmt->framework, fmt->version);
    if (r->version >= 4 && r->kv_elements > 0) {
        oomi_sb_printf(sb, "# KV cache layers: %ld full", r->kv_full_layers);
        if (r->kv_sliding_layers > 0)
            oomi_sb_printf(sb, ", %ld sliding (the last %ld tokens)", r->kv_sliding_layers,
                           r->kv_window);
        oomi_sb_printf(sb, "%s, %ld elements per token and layer\n",
                       r->kv_latent ? ", one latent each (MLA)" : "", r->kv_elements);
    }
    return OOM_OK;
}

/* FSDP has no stage that shards only the optimizer: ZeRO-1 and ZeRO-2 plans both keep the
 * gathered parameters after the forward (FSDP2's reshard_after_forward=False, ZeRO-2's
 * behaviour); ZeRO-3 reshards them */
static bool reshards(const oom_knobs *k)
{
    return k->sharding == OOM_SHARDING_ZERO3;
}

static const char *yes(bool b)
{
    return b ? "true" : "false";
}

/* An accelerate config file (`accelerate launch --config_file`), keys as accelerate 1.15.0's
 * `accelerate config` writes them (accelerate/commands/config/cluster.py, get_cluster_input;
 * FSDP2 state dict types in accelerate/utils/constants.py). FSDP2's offload (CPUOffloadPolicy)
 * moves parameters, gradients and optimizer states together: it stands for either offload. */
static void format_accelerate(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    const oom_knobs *k = &r->best->knobs;
    long nodes = r->nodes > 1 ? r->nodes : 1;
    const char *mp = oomi_is16(k->precision, true)    ? "bf16"
                     : oomi_is16(k->precision, false) ? "fp16"
                                                      : "no";

    oomi_sb_printf(sb,
                   "# %s %s: accelerate launch --config_file accelerate.yaml train.py "
                   "(micro-batch %ld, gradient accumulation %ld, effective batch %ld)\n",
                   f->framework, f->version, k->batch, k->grad_accum, r->best->effective_batch);
    if (k->checkpointing == OOM_CHECKPOINTING_SELECTIVE)
        oomi_sb_puts(sb, "# selective checkpointing was planned; FSDP checkpoints whole layers "
                         "(less memory)\n");
    else if (oomi_plan_ck_variant(r->best))
        oomi_sb_printf(sb,
                       "# checkpointing %s was planned (%.2f of a forward recomputed); FSDP "
                       "checkpoints every layer, the script may run the variant itself\n",
                       oomi_plan_ck(r->best), r->best->recompute);
    oomi_sb_puts(sb, "compute_environment: LOCAL_MACHINE\n");
    if (k->sharding != OOM_SHARDING_NONE) {
        oomi_sb_printf(sb,
                       "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
                       "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                       "  fsdp_reshard_after_forward: %s\n  fsdp_offload_params: %s\n"
                       "  fsdp_activation_checkpointing: %s\n"
                       "  fsdp_cpu_ram_efficient_loading: true\n"
                       "  fsdp_state_dict_type: SHARDED_STATE_DICT\n",
                       yes(reshards(k)), yes(k->offload != OOM_OFFLOAD_NONE),
                       yes(k->checkpointing != OOM_CHECKPOINTING_NONE));
    } else {
        /* quoted: YAML 1.1 (accelerate reads it with PyYAML) takes a bare NO for false */
        oomi_sb_printf(sb, "distributed_type: %s\n", k->gpus > 1 ? "MULTI_GPU" : "'NO'");
    }
    oomi_sb_printf(sb,
                   "machine_rank: 0\nmain_training_function: main\nmixed_precision: %s\n"
                   "num_machines: %ld\nnum_processes: %ld\nrdzv_backend: %s\n"
                   "same_network: true\nuse_cpu: false\n",
                   mp, nodes, k->gpus, nodes > 1 ? "c10d" : "static");
}

int oomi_plan_format_serve(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    if (!strcmp(f->name, "vllm"))
        return format_vllm(sb, r, f);
    if (r->inference || r->measured)
        return oomi_fail(OOM_EUNSUPPORTED, "plan: the %s format is for training plans of a model",
                         f->name);
    format_accelerate(sb, r, f);
    return OOM_OK;
}
