/*
 * plan/plan.h - what the planner's files share (plan*.c, svg.c, table.c). Uses estimate, model,
 * calib, gpu, core.
 */
#ifndef OOMLESS_PLAN_PLAN_H
#define OOMLESS_PLAN_PLAN_H

#include "calib/calib.h"
#include "core/core.h"
#include "estimate/estimate.h"
#include "gpu/gpu.h"
#include "model/model.h"

/* Fills c's throughput fields from its knobs and estimate, with the planner constants k
 * (docs/plan.md, "Objective"; gpu/consts.c). */
void oomi_plan_throughput(oom_plan_choice *c, const oom_plan_request *r, long nodes,
                          const struct oomi_plan_consts *k);
/* The share of the peak FLOP/s a micro-batch of `tokens` tokens reaches (plan_cost.c): the
 * roofline curve mfu_max x t / (t + ridge) of docs/plan.md, "The objective" */
double oomi_plan_utilisation(const oom_plan_request *r, double tokens, double peak_flops,
                             const struct oomi_plan_consts *k);
/* Training past one node (plan_layout.c): where the request allows layouts and the model takes
 * them, searches tensor x pipeline x expert x context x data parallel layouts of the GPUs with
 * their micro-batch and recomputation, and puts the fastest that fits in `res` when data
 * parallelism found nothing that fits without ZeRO-3 or offload (or the request fixed a layout
 * or an engine). `err` is the data-parallel search's; returns what the plan returns. */
int oomi_plan_layout(oom_plan_result *res, const oom_plan_request *r,
                     const struct oomi_plan_consts *k, int err);
/* the plan JSON's "layout" (NULL without one) (plan_layout_out.c) */
json_object *oomi_plan_layout_json(const oom_plan_result *r);
/* the plan text's lines for a layout */
void oomi_plan_layout_text(oomi_sb *sb, const oom_plan_result *r);
/* The peak TFLOP/s the profile gives for a precision (0 TFLOP/s bf16 falls back to fp16; a
 * profile without figures gets k's default). */
double oomi_plan_tflops(const oom_gpu_profile *gpu, oom_precision p,
                        const struct oomi_plan_consts *k);
/* oom_plan_run with the planner constants k (NULL: the defaults); confidence > 0: plan to the
 * device peak's bound at that confidence within the target instead of the margin. */
int oomi_plan_run(oom_plan_result **out, const oom_plan_request *r,
                  const struct oomi_plan_consts *k, double confidence);
/* Fills res->suggestions for a plan where nothing fits (w: a scratch clone; NULL for lines). */
int oomi_plan_suggest(oom_plan_result *res, const oom_plan_request *r, oom_workload *w,
                      const oom_knobs *smallest);
/* Appends a notice to res->notices: OOM_OK or OOM_ENOMEM (recorded). */
int oomi_plan_note(oom_plan_result *res, const char *fmt, ...) OOMI_PRINTF(2, 3);
/* A measured line planned without a sequence length (no --seq, none in its record): its seq_len
 * is 1 inside the search and "not known" in the outputs. */
#define OOMI_PLAN_SEQ_KNOWN(res, c)                                                                \
    (!(res)->measured || (res)->requested_seq > 0 || (c)->knobs.seq_len > 1)
/* a size as text, in a caller's 16-byte buffer */
#define OOMI_SZ(buf, b) oom_format_size((buf), sizeof(buf), (b))
/* Resolves options for a given GPU id (NULL: the options' own) and plans (plan_options.c). */
int oomi_plan_options_run_gpu(oom_plan_result **out, const oom_plan_options *o, const char *gpu);
/* The safety margin the user asked for, per job (with fit-confidence, budget holds the one the
 * bound needs instead) (plan_text.c) */
uint64_t oomi_plan_user_margin(const oom_plan_result *r);
/* no micro-batch above this is considered (plan_space.c, plan_awkward.c) */
#define OOMI_PLAN_MAX_MICRO_BATCH 65536
/* The search's families as plan_awkward.c sees them: family i's knobs on a choice's (its seq,
 * GPUs, batch and accumulation); knobs k of family i estimated into *c (*valid false where the
 * estimator refuses them); c's throughput again from its knobs and estimate */
typedef struct oomi_plan_families {
    void *ctx;
    size_t n;
    oom_knobs (*knobs)(const void *ctx, size_t i, const oom_plan_choice *c);
    int (*eval)(void *ctx, size_t i, const oom_knobs *k, oom_plan_choice *c, bool *valid);
    void (*rescore)(const void *ctx, oom_plan_choice *c);
} oomi_plan_families;
/* The notice for an effective batch `eff` over `gpus` GPUs whose divisors leave only small
 * micro-batches (b, the plan, has one below eff / gpus): the nearest effective batches within a
 * quarter that allow a faster plan with a larger micro-batch, as "96 = 12 x 8". Families that
 * cannot beat b are left out after two estimates (plan_awkward.c). */
int oomi_plan_awkward(oom_plan_result *res, const oomi_plan_families *f, const oom_plan_choice *b,
                      long eff, long gpus);
/* the human report of a plan (plan_text.c) */
int oomi_plan_text(char **out, const oom_plan_result *r);

/* vLLM's KV-cache arithmetic for an inference plan (plan_serve.c) */
typedef struct oomi_plan_vllm_kv {
    long tp, batched_tokens, seqs, blocks, tokens;
    double utilisation;
    uint64_t requested, weights, activation, non_torch, available, block_bytes;
} oomi_plan_vllm_kv;
int oomi_plan_vllm(oomi_plan_vllm_kv *out, const oom_plan_result *r);
json_object *oomi_plan_vllm_json(const oom_plan_result *r);
/* the blocks vLLM finds for the plan hold one sequence of `seq` tokens (cdiv(seq, block size)
 * blocks: vLLM's max_memory_usage_bytes for full attention) */
bool oomi_plan_vllm_holds(const oom_plan_result *r, long seq);
/* the output format `name` of `command` (OOM_COMMAND_PLAN or _TABLE), or NULL; and the
 * OOM_EINVAL for one that is not, naming every format of the command (plan_output.c) */
const oom_plan_format_info *oomi_format_find(const char *name, unsigned command);
int oomi_format_unknown(const char *what, const char *name, unsigned command);
/* A format being written (plan_output.c): its name, its framework, and the version of that
 * framework whose keys it writes, as its row lists it ("0.3"; NULL for oomless's own formats) */
typedef struct oomi_format {
    const char *name, *framework, *version;
} oomi_format;
/* the layout formats of a plan (plan_layout_out.c): "megatron", "megatron-bridge",
 * "torchtitan-parallel", "slurm" */
int oomi_plan_format_layout(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f);
/* Versions (plan_version.c): the numbers of "5.23.0" (at most 3; a leading 'v' and what
 * follows the numbers, "rc1", "+cpu", are read past), false when it does not start with one; a
 * version against another, number by number, missing numbers 0 (<0, 0, >0; *ok false when
 * either is not one); `want` against a listed version on the numbers the listed one has (0.3.1
 * is 0.3); whether the version a format writes is `v` or later */
bool oomi_version_numbers(long v[3], size_t *n, const char *s);
int oomi_version_cmp(const char *a, const char *b, bool *ok);
int oomi_version_against(const char *listed, const char *want);
bool oomi_format_since(const oomi_format *f, const char *v);
/* "vllm", "accelerate" into sb (plan_serve.c) */
int oomi_plan_format_serve(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f);
/* "torchtitan" (0.2: a TOML job config; 0.3: a config function) and "torchtune" (tune run's
 * key=value overrides) into sb (plan_native.c) */
int oomi_plan_format_native(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f);
/* vLLM's default KV-cache block size on CUDA: CacheConfig.block_size = 16 (vllm/config/cache.py) */
#define OOMI_VLLM_BLOCK_TOKENS 16
/* The memory vLLM's profile run sees grow outside PyTorch's allocator (cuBLAS workspaces,
 * custom all-reduce and NCCL buffers under tensor parallelism): vLLM's start-up log line "... GiB
 * for non-torch memory" on H100, 0.13 GiB alone and 0.55 GiB at --tensor-parallel-size 2
 * (vLLM logs collected in github.com/llm-d/llm-d-benchmark, config_explorer/
 * empirical-vllm-memory-results.md) */
#define OOMI_VLLM_NON_TORCH_1  (0.13 * 1073741824.0)
#define OOMI_VLLM_NON_TORCH_TP (0.55 * 1073741824.0)
/* a serving engine's profile run (plan_profile.c): the forward over `tokens` tokens at batch 1 (its
 * working set and its output hidden states), the sampler over `rows` rows, the rotary cache */
int oomi_serve_forward(const oom_workload *w, oom_knobs k, long tokens, double *fwd, double *out);
double oomi_serve_sampler(const oomi_model *m, long rows);
uint64_t oomi_serve_rope(const oomi_model *m, oom_precision p);

/* Variants of full checkpointing (plan_ckpt.c): one layer in `every` (the N-th of each N where
 * nth), the checkpoints' inputs offloaded, torchtitan's op-level policy; all zero: plain full */
typedef struct oomi_ckvar {
    long every;
    bool nth, offload, op;
} oomi_ckvar;
#define OOMI_CKS_OPSAC   0x1u
#define OOMI_CKS_NTH2    0x2u
#define OOMI_CKS_EVERY2  0x4u
#define OOMI_CKS_OFFLOAD 0x8u
#define OOMI_CKVAR_MAX   6 /* plain full, the workload's own, the four above */
/* --checkpointing-variants: a list of its values (the variants, their groups, all, none) */
#define OOMI_CKVAR_VALUES 8
extern const oom_option_value *const oomi_ckvar_values[OOMI_CKVAR_VALUES];
int oomi_ckvar_parse(unsigned *out, const char *value);
/* a list of values of allow or allow-downscale into their OOM_ALLOW_* / OOM_DOWNSCALE_* bits
 * (plan_vocab.c) */
int oomi_plan_list_bits(unsigned *out, const char *key, const char *value);
/* the variants a plan tries for w (at most OOMI_CKVAR_MAX): [0] plain full, *own the index of
 * the workload's own (0 when it is plain full), then those w->ckpt.search names */
size_t oomi_ckvar_list(oomi_ckvar *out, size_t *own, const oom_workload *w);
void oomi_ckvar_apply(oom_workload *w, const oomi_ckvar *v);
/* c->recompute: the forwards its checkpointing recomputes, from the estimate's FLOPs and those
 * without checkpointing (w: a scratch workload, changed; NULL for a measured line: 0) */
int oomi_ckvar_recompute(oom_plan_choice *c, oom_workload *w);
/* c's checkpointing as --checkpointing spells it; whether it is a variant of full */
const char *oomi_plan_ck(const oom_plan_choice *c);
bool oomi_plan_ck_variant(const oom_plan_choice *c);
/* OOM_EUNSUPPORTED where `format`'s stack cannot run the best plan's checkpointing variant:
 * `can` says which it runs, transformers' every:N and +offload (OOMI_CK_HF), torchtitan's nth:N
 * and op-sac (OOMI_CK_TITAN) */
#define OOMI_CK_HF    0x1u
#define OOMI_CK_TITAN 0x2u
int oomi_plan_ck_check(const oom_plan_result *r, const char *format, unsigned can);
/* transformers' activation_checkpointing_kwargs for c's every:N / +offload, as JSON between pre
 * and post: {"every_n_layers": N, "offload": true} */
void oomi_plan_hf_ck_kwargs(oomi_sb *sb, const oom_plan_choice *c, const char *pre,
                            const char *post);
/* TrainingArguments' checkpointing switch in the transformers version `f` writes:
 * activation_checkpointing from 5.23 (gradient_checkpointing is its deprecated alias there, to be
 * removed in v6), gradient_checkpointing before; "_kwargs" after it names the kwargs. And
 * OOM_EUNSUPPORTED for a plan with every:N or +offload before 5.23, whose Trainer has no
 * every_n_layers or offload (those kwargs went to torch.utils.checkpoint) */
const char *oomi_hf_ck_key(const oomi_format *f);
int oomi_plan_hf_ck_version(const oom_plan_result *r, const oomi_format *f);

/* GRPO with a vLLM engine on the trainer's GPU (plan_rollout.c, docs/plan.md "RL with a
 * colocated rollout engine"): what the engine needs, set up once per plan */
typedef struct oomi_rollout_engine {
    bool on;
    int sleep;            /* the engine's sleep level while the trainer trains (0: awake) */
    oom_workload *engine; /* the policy as the engine loads it: inference, 16-bit or 4-bit */
    uint64_t total;       /* the GPU's memory, what gpu_memory_utilization is a share of */
    uint64_t weights;     /* the engine's weights and rotary cache */
    double fwd, out;      /* its profile forward's working set and output */
    long kv_seq;          /* the sequence kv_per_token was taken at (0: none yet) */
    double kv_per_token;
    long generations, completion; /* num_generations, completion tokens (0: half the seq) */
    bool reference, keep_grads;
} oomi_rollout_engine;
/* the split for one candidate of the trainer (its knobs, its estimate) */
typedef struct oomi_rollout_split {
    bool fits;
    long seqs;              /* completions generated at once per GPU: vLLM's max_num_seqs */
    double utilisation;     /* gpu_memory_utilization planned */
    double min_utilisation; /* the least that holds every sequence at once */
    uint64_t profile, requested, kv, resident, sleeping, training_peak, rollout_peak;
    uint64_t kv_needed; /* the KV cache of every sequence at once */
    long kv_tokens;
} oomi_rollout_split;
int oomi_rollout_setup(oomi_rollout_engine *ro, const oom_workload *w, uint64_t total);
void oomi_rollout_free(oomi_rollout_engine *ro);
int oomi_rollout_split_of(oomi_rollout_split *out, oomi_rollout_engine *ro, const oom_knobs *k,
                          const oom_estimate *e, uint64_t usable);
/* fills res's rollout fields (version 6) from the split of its best choice */
void oomi_rollout_fill(oom_plan_result *res, const oomi_rollout_engine *ro,
                       const oomi_rollout_split *sp);
json_object *oomi_plan_rollout_json(const oom_plan_result *r);
/* the engine's lines of the text report's budget */
void oomi_plan_rollout_text(oomi_sb *sb, const oom_plan_result *r);
/* "trl", "verl" into sb */
int oomi_plan_format_rl(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f);
/* sequence packing (plan_packing.c, docs/plan.md "Sequence packing"): the result's "packing"
 * object (NULL without packing), its text line, "trl" for sft (padding-free) and "torchtune",
 * and TRL's flags for --format args */
json_object *oomi_plan_packing_json(const oom_plan_result *r);
void oomi_plan_packing_text(oomi_sb *sb, const oom_plan_result *r);
int oomi_plan_format_packing(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f);
/* whether the plan packs sequences (a training plan of a version-7 result with packing) */
bool oomi_plan_packed(const oom_plan_result *r);
void oomi_plan_packing_args(oomi_sb *sb, const oom_plan_result *r);
/* the precision is 16-bit brain float (bf, also for quantised bases) or half (plan_serve.c) */
bool oomi_is16(oom_precision p, bool bf);

#endif
