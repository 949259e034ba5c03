/*
 * estimate/estimate.h - the estimator's shared parts: coefficients from data/coefficients.json
 * (estimate_coef.c) and the estimate's JSON (estimate_json.c). Uses model, gpu, core.
 */
#ifndef OOMLESS_ESTIMATE_ESTIMATE_H
#define OOMLESS_ESTIMATE_ESTIMATE_H

#include "core/core.h"
#include "gpu/gpu.h"
#include "model/model.h"

/* empirical coefficients (estimate_coef.c), loaded from data/coefficients.json */
typedef struct oomi_act_coef {
    /* bytes saved per token per layer, per element of: hidden size, q width (heads*head_dim),
     * k/v width (kv_heads*head_dim), MLP width; per head (fused attention's log-sum-exp); and per
     * attention score (eager attention: b*heads*s*s scores per layer) */
    double h, q, kv, f, lse, score;
    double frozen_h, frozen_q, frozen_f; /* not saved when the base linears are frozen */
    double final_h; /* the final norm after the last layer, per token per hidden element */
    double qk_norm, frozen_qk_norm; /* per-head q/k norms, per element of q and k/v widths */
    double sdpa_score; /* per attention score under SDPA when no fused kernel fits (math path) */
    double eager_h, eager_q, eager_kv, eager_f; /* eager attention beyond SDPA's terms (no lse) */
    /* at micro-batch 1, per element of q and k/v widths (SDPA path, eager path): a key/value head
     * that matmul broadcasts to the query heads is a view there and a copy at batch >= 2 */
    double b1_q, b1_kv, b1_eager_q, b1_eager_kv;
    /* a layer with experts, per token: per top-k x hidden element (the routed hidden states),
     * the part of it a frozen base does not keep, per expert slot (routing weights, indices) */
    double moe_kh, moe_frozen_kh, moe_k;
    /* multi-head latent attention (DeepSeek), in place of h, q and kv: per hidden element, per
     * element of the heads' key widths without and with RoPE and of their value width, per
     * element of the query and key/value latents; frozen: per hidden and per latent element */
    bool mla;
    double mla_h, mla_nope, mla_rope, mla_v, mla_q_lora, mla_kv_lora, mla_frozen_h;
    double mla_frozen_lora;
} oomi_act_coef;

enum { OOMI_REGIME_16BIT, OOMI_REGIME_AMP, OOMI_REGIME_FP32, OOMI_REGIMES };
enum { OOMI_COEF_BLOCKS = 5 };    /* llama, gpt, bert, t5, t5 gated */
enum { OOMI_COEF_FAMILIES = 16 }; /* sets fitted for one model_type, overriding its block's */

/* a prefill working set fitted for one model_type (inference.by_model_type): the MLP moment
 * (elements per token per hidden and MLP element), the attention moment for SDPA and for eager
 * attention (per hidden element, bytes per attention score, per element of multi-head latent
 * attention's expanded heads: heads x (2 x query/key width + value width)), and a layer with
 * experts (per top-k x hidden element; 0: the MLP term covers it) */
typedef struct oomi_infer_coef {
    char model_type[32];
    double h, f, sdpa_a, sdpa_score, sdpa_heads, eager_a, eager_score, eager_heads, moe_kh;
} oomi_infer_coef;

typedef struct oomi_coef {
    oomi_act_coef act[OOMI_COEF_BLOCKS][OOMI_REGIMES];
    struct {
        char model_type[32];
        oomi_act_coef act[OOMI_REGIMES];
    } family[OOMI_COEF_FAMILIES];
    size_t nfamilies;
    double decoder_factor; /* enc-dec: a decoder layer's saved bytes / an encoder layer's */
    double logits_fwd[2], logits_bwd[2]; /* bytes per logit: [0] 16-bit compute, [1] fp32 */
    double ce_fwd, ce_bwd;   /* heads whose loss is cross_entropy on the logits as they are:
                              * elements per logit of the loss dtype */
    double softcap_elems;    /* final-logit soft-capping: elements per logit (compute dtype) */
    double score_grads;      /* attention-weight gradients in flight in a layer's backward */
    double chunk_tokens;     /* chunked loss: tokens per chunk */
    double infer_h, infer_f; /* inference working set of one layer, x element size */
    /* fitted prefill working sets by model_type: the MLP moment (elements per token per hidden
     * and MLP element) and, where attention weights are kept, the attention moment (elements
     * per token per hidden element + bytes per score), for SDPA and for eager attention */
    oomi_infer_coef infer[OOMI_COEF_FAMILIES];
    size_t ninfer;
    double int8_bytes, adam8_bytes;
    double opt_temp[OOMI_OPTIMIZERS]; /* step temporaries, x one state copy, by oom_optimizer */
    double ddp_buckets;
    double frag, round;
    /* the caching allocator's blocks it cannot reuse, by what the peak is made of (measured on an
     * H100, bench/accuracy/h100-2026-11-25.csv): x one fp32 logits tensor at a forward/backward
     * peak of training, x the optimizer step's temporaries at an optimizer peak, x the transient
     * part (activations, logits, KV cache, temporaries) where there are no logits to train */
    double blocks_floor, blocks_logits, blocks_optimizer, blocks_transient;
    double lora_in_fp32; /* LoRA: bytes per adapted input element saved (cast to fp32 adapter) */
    double lora_dropout_in[2]; /* with dropout: bytes per adapted input element, [0] 16-bit, [1]
                                  fp32 */
    double ctx_generic;
    double cublas_default, cublas_hopper; /* cuBLAS workspace of a stream, bytes */
    /* NCCL's device buffers (data/coefficients.json parallel.nccl): per connection, SIMPLE's
     * default NCCL_BUFFSIZE and the LL and LL128 buffers; the ring's channels; NVLink SHARP's
     * channels and per-buffer alignment, the GPUs and compute capability it needs, GPUs a node */
    struct {
        double buffsize, ll, ll128, channels, nvls_channels, nvls_mem, nvls_min_gpus, nvls_min_cc;
        double node_gpus;
        /* point-to-point connections (pipeline sends, all-to-all, context-parallel rings): a
         * chunk per step in NCCL_STEPS steps, over NVLink and over the network, and the
         * channels a peer gets on each */
        double p2p_nvl_chunk, p2p_net_chunk, p2p_steps, p2p_nvl_channels, p2p_net_channels;
    } nccl;
    size_t nctx;
    struct {
        int major, minor;
        double bytes, inference_bytes; /* training loads more kernels than a prefill */
    } ctx[16];
} oomi_coef;
/* the coefficients, loaded once; OOM_EIO/OOM_EPARSE naming the file and key */
int oomi_coef_get(const oomi_coef **out);
/* A traced line (allocated bytes) as device bytes on a GPU of compute capability major.minor
 * (0.0: unknown): the batch-dependent part grows by the allocator's fragmentation, the CUDA
 * context is added, as the estimator does for its own components (estimate_run.c). */
int oomi_traced_to_device(oom_probe_fit *fit, int cc_major, int cc_minor);
/* The KV cache of an inference workload per layer type (estimate_inference.c): the layers that
 * keep every token, those that keep the last `window` tokens of each sequence, and the elements
 * one token takes in one layer on one GPU: 2 x KV heads x head_dim, or MLA's one latent of
 * kv_lora_rank + qk_rope_head_dim (the same on every tensor-parallel GPU). `vllm` false:
 * transformers' cache during a prefill (every layer every token). No cache: all zero. */
typedef struct oomi_kv_layout {
    long full, sliding, window;
    bool latent, vllm;
    double elems;
} oomi_kv_layout;
void oomi_kv_layout_of(oomi_kv_layout *out, const oom_workload *w);
/* Bytes of that cache for `batch` sequences of `seq` tokens, `e` bytes per element */
double oomi_kv_bytes(const oomi_kv_layout *kv, double batch, double seq, double e);
/* {"stack", "full", "sliding", "window", "latent", "elements_per_token"}; NULL without a cache
 * (estimate_json.c; the plan's JSON too) */
json_object *oomi_kv_layout_json(const oomi_kv_layout *kv);
/* A QLoRA workload's parts (estimate_run.c; docs/estimate.md, "QLoRA"), bytes per GPU: a 4-bit
 * base quantised at load (quantized): its 4-bit codes, first-level absmaxes (fp32, or 8-bit when
 * double-quantised), second-level fp32 constants, the weights left unquantised (embeddings, head,
 * norms), the dequantised weight of one linear in a forward or backward; the adapters (at
 * adapter_bytes a parameter); the optimizer states a paged optimizer keeps in CUDA unified memory,
 * outside the estimate's peaks */
typedef struct oomi_qlora {
    bool quantized, double_quant;
    double nf4, absmax, absmax2, unquantized, dequant, adapters, adapter_bytes, paged;
    bool bnb;           /* the base's linears are bitsandbytes': the next three are set */
    unsigned quantizer; /* OOMI_QUANTIZER_* */
    unsigned release;   /* quant.bitsandbytes: 0 (0.44 or later), 1 (0.43 or earlier) */
    double kept_inputs; /* 0.43: the 4-bit linears' inputs in the activations at the peak */
} oomi_qlora;
/* `e` is the workload's estimate (oom_estimate_run), which the parts read rather than redo */
int oomi_qlora_of(oomi_qlora *out, const oom_workload *w, const oom_estimate *e);
/* loading the weights (estimate_load.c): allocated while loading, the transient beside the
 * weights, what makes it */
typedef struct oomi_load {
    double peak, transient;
    const char *how; /* static */
} oomi_load;
int oomi_load_of(oomi_load *out, const oom_workload *w, const oom_estimate *e);
/* How sure an estimate is (estimate_confidence.c, data/confidence.json) */
enum { OOMI_CONF_KEY_MAX = 96, OOMI_CONF_LEVELS_MAX = 8 };
typedef enum oomi_conf_basis {
    OOMI_CONF_NONE,
    OOMI_CONF_MEASURED,
    OOMI_CONF_FALLBACK
} oomi_conf_basis;
typedef struct oomi_conf {
    char key[OOMI_CONF_KEY_MAX];      /* the workload's class: method/attention/checkpointing/... */
    char used[2 * OOMI_CONF_KEY_MAX]; /* the classes whose errors were used, per kind of
                                         measurement ("gpu: CLASS; trace: CLASS") */
    oomi_conf_basis basis;            /* measured (its own class), fallback, none (nothing on its
                                         chain: the widest class) */
    long cases;                       /* measured cases in the workload's own class */
    double level, under; /* the confidence; the relative under-prediction at it (>= 0) */
    double ctx;          /* bytes added to a device peak (context uncertainty) */
    /* the bias across setups in the GPU measurements' part: the quantile over the workload's
     * stack's own sources ("stack") or over every source ("cross-stack"), and how many */
    const char *spread;
    long spread_sources, stack_sources;  /* the sources it is over; the stack's own */
    double spread_under;                 /* that quantile at the level (may be < 0) */
    double unders[OOMI_CONF_LEVELS_MAX]; /* the under-prediction at each stored level */
} oomi_conf;
/* the lowest and highest confidence the data has quantiles for */
int oomi_confidence_range(double *lo, double *hi);
/* The class of a workload of knobs k (tp: tensor-parallel GPUs; overhead_given: --overhead set,
 * no context uncertainty; stack: oomi_stack, whose spread across setups it takes) at `level`;
 * OOM_EINVAL for a level outside oomi_confidence_range. */
int oomi_confidence_class(oomi_conf *out, const oom_knobs *k, long tp, bool overhead_given,
                          unsigned stack, double level);
/* peak x (1 + under), plus the context uncertainty for a device peak, rounded up */
uint64_t oomi_confidence_bound(const oomi_conf *c, uint64_t peak, bool device);
/* The confidence that a job of this device peak stays within `target` bytes, interpolated
 * between the stored levels; *side: -1 below the lowest level, 1 at or above the highest. */
double oomi_confidence_probability(const oomi_conf *c, uint64_t device_peak, uint64_t target,
                                   int *side);
const char *oomi_conf_basis_name(oomi_conf_basis b);
/* The memory outside PyTorch's caching allocator, part by part (estimate_overhead.c): the CUDA
 * context with the kernels a step loads, and NCCL's buffers when more than one GPU talks. Each
 * part says where its figure comes from and, when it rests on a default the user can change,
 * how to change it (NULL otherwise). A pure function of the workload and the coefficients. */
typedef struct oomi_overhead_part {
    const char *name; /* "cuda_context", "nccl", "given" (--overhead) */
    double bytes;
    const char *source; /* where the figure comes from */
    const char *change; /* a default: the option (and environment variable) that changes it */
} oomi_overhead_part;
typedef struct oomi_overhead {
    oomi_overhead_part part[2];
    size_t n;
    double total;
    /* NCCL as resolved: GPUs in the communicator, its channels, SIMPLE's buffer, NVLS used, the
     * ring's and NVLS's bytes (all 0 without NCCL) */
    long ranks, channels, comms;
    double buffsize, ring, nvls_bytes; /* per communicator */
    bool nvls;
} oomi_overhead;
int oomi_overhead_of(oomi_overhead *out, const oom_workload *w);
/* The cuBLAS workspace of the compute stream: the workload's cublas-workspace, else 32 MiB on
 * compute capability 9.x and 8.125 MiB elsewhere (data/coefficients.json cublas_workspace).
 * PyTorch takes it from its caching allocator: the estimate counts it in the temporaries.
 * *is_default (may be NULL): not set by the user. */
double oomi_cublas_workspace(const oom_workload *w, const oomi_coef *c, bool *is_default);
/* {"bytes", "counted_in", "source", "default", "change"} of that workspace */
json_object *oomi_cublas_json(const oom_workload *w);
/* {"total", "parts": [{"name", "bytes", "source", "default", "change"}], "nccl": {...}} */
json_object *oomi_overhead_json(const oom_workload *w);
/* What DeepSpeed ZeRO-3 keeps on one GPU beside the shards, in bytes (estimate_zero3.c), replayed
 * over one step with `act` bytes of activations at the turn from the forward to the backward. At
 * the step's worst moment (the most ZeRO-3 bytes less the activations not alive then,
 * `fewer_activations`): the parameters gathered (of which `prefetched` just now), the device
 * copies of offloaded partitions on their way in, a trained module's weight gradient before the
 * bucket takes it; all the time, the tensors under the persistence threshold and the reduce
 * bucket; `end`: parameters still gathered after the backward; `turn`: the first five less
 * fewer_activations, what the estimate adds to a phase with all of `act`. All zero without
 * --sharding zero3. */
/* the blocks a replay follows (one tensor each at least; far above any model's) */
#define OOMI_ZERO3_MAX_BLOCKS 1024
typedef struct oomi_zero3 {
    double gathered, prefetched, copies, gradient, persistent, bucket, fewer_activations, end, turn;
} oomi_zero3;
int oomi_zero3_of(oomi_zero3 *out, const oom_workload *w, double act);
typedef struct oomi_zero3_cache oomi_zero3_cache;
/* Replays kept for w->zero3.cache (model.h): a searcher's scratch workload estimated at many knobs
 * replays each distinct ZeRO-3 step once (estimate_zero3.c). _new: OOM_OK or OOM_ENOMEM. */
int oomi_zero3_cache_new(oomi_zero3_cache **out);
void oomi_zero3_cache_free(oomi_zero3_cache *c);
/* its JSON, with the knobs used (*out NULL without ZeRO-3); OOM_ENOMEM, or OOM_EUNSUPPORTED for
 * a model of more blocks than the replay follows */
int oomi_zero3_json(json_object **out, const oom_workload *w, double act);
/* ---- model-parallel training (estimate_layout.c, estimate_pipeline.c; docs/parallelism.md) ----
 * What one virtual pipeline stage (a chunk of layers) of one GPU holds, in bytes: its weights,
 * gradients and optimizer states (`grads_kept`: from the start, as Megatron's gradient buffer,
 * else made by the first backward) and the step's temporaries; per micro-batch the activations
 * saved until its backward (`loss`: of them, the loss path's), what its forward and backward add
 * for a moment (`fws`, `bws`; the loss path's `loss_fws`, `loss_bws`; `bws_first` more on its
 * first backward); the output kept until the backward (`out`), what stays from each backward
 * until the step ends (`keep`) and until the next send (`pend`), the buffers allocated once
 * (`recv`: the pipeline's per micro-batch, DDP's), FSDP2's unsharded parameters during the
 * forward and backward (`gathered`); one fp32 logits tensor. */
typedef struct oomi_chunk {
    long first_layer, layers;
    bool first, last;
    double params, w, g, o, topt;
    double act, loss, out, fws, bws, loss_fws, loss_bws, bws_first, keep, pend, recv, gathered;
    double logits_fp32;
} oomi_chunk;
/* the layout's sizes as resolved */
typedef struct oomi_dims {
    long tp, pp, vpp, ep, etp, cp, dp, edp, m; /* m: micro-batches per step (grad-accum) */
    bool sp, titan, grads_kept, runtime;       /* runtime: torch's _PipelineScheduleRuntime */
    double vocab_local;                        /* vocabulary entries per tensor-parallel GPU */
    double te_workspace; /* Transformer Engine's cuBLAS workspaces (Megatron) */
} oomi_dims;
void oomi_layout_dims(oomi_dims *d, const oom_workload *w);
/* the chunk of `layers` layers from `first_layer` of virtual stage `stage` */
void oomi_layout_chunk(oomi_chunk *out, const oom_workload *w, const oomi_coef *c,
                       const oomi_dims *d, long stage, long first_layer, long layers);
/* One pipeline rank at its peak: the parts (as the estimate's), the phase, the micro-batches
 * in flight then (chunks x micro-batches under interleaving), the layers it holds; the largest
 * tensor its step makes and frees (an fp32 logits tensor on the last, a layer's backward moment
 * elsewhere: what the caching allocator keeps beside the peak), its buffers */
typedef struct oomi_rank_mem {
    double w, g, o, a, l, t, peak;
    int phase; /* oom_phase */
    long in_flight, layers, chunks;
    double block, buffers;
} oomi_rank_mem;
/* every pipeline rank (n = pp) and the one that limits */
typedef struct oomi_layout_result {
    oomi_dims d;
    oomi_rank_mem *rank;
    size_t n, limiting;
} oomi_layout_result;
/* the layout's part of the estimate report (estimate_pipeline.c): dims, engine, every rank */
int oomi_layout_report(oom_estimate_report *out, const oom_workload *w);
int oomi_layout_run(oomi_layout_result *out, const oom_workload *w);
void oomi_layout_result_free(oomi_layout_result *r);
/* the estimate JSON's "parallel": the layout, every stage's peak, the rank that limits */
json_object *oomi_layout_json(const oom_workload *w);
/* The process groups a GPU of the layout talks in (ranks placed tensor-parallel first, then
 * context, data, pipeline, as Megatron's and torchtitan's meshes order them; the experts' within
 * the tensor x context x data GPUs, expert-tensor first): their names, GPUs, the point-to-point
 * peers of this GPU (0: collectives) and whether they stay within a node of `node_gpus` */
typedef struct oomi_group {
    const char *name;
    long size, peers;
    bool intra;
} oomi_group;
enum { OOMI_GROUPS_MAX = 8 };
size_t oomi_layout_groups(oomi_group *out, const oom_workload *w, double node_gpus);
/* NCCL's buffers of those groups on one GPU (estimate_overhead.c): a collective group's ring
 * (and NVLS buffers within a node), a point-to-point group's connections per peer; `each` (may be
 * NULL) gets each group's bytes */
double oomi_layout_nccl(const oom_workload *w, const oomi_coef *c, double each[OOMI_GROUPS_MAX]);

/* the "memory" object of the estimate JSON, shared by plan (estimate_json.c); NULL on ENOMEM */
json_object *oomi_estimate_memory_json(const oom_estimate *e);
/* fills a report (estimate_report.c) from an estimate already run (NULL: the workload's parts
 * only) and an optional budget; `out` zeroed by the caller, its strings its own on failure too */
int oomi_estimate_report_fill(oom_estimate_report *out, const oom_workload *w,
                              const oom_estimate *e, const oom_budget *budget);
/* the passes over the model a training step's FLOPs count without checkpointing: forward,
 * backward (and the weight gradients of a full fine-tune), a reference's forward
 * (estimate_run.c) */
double oomi_estimate_passes(const oom_workload *w);

#endif
