/*
 * internal.h - what the library's files share and nobody outside sees.
 * Internal names start with oomi_ (public ones with oom_); the version script exports only oom_*.
 */
#ifndef OOMLESS_INTERNAL_H
#define OOMLESS_INTERNAL_H

#include "oomless.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define OOMI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define OOMI_PRINTF(f, a)
/* ---- YAML into json-c (yamlload.c) --------------------------------------------------------
 * Plain scalars follow the YAML 1.2 core schema (null, bool, int, float, string); quoted ones are
 * strings. OOM_EPARSE "name:line:col: problem" on bad YAML. An empty document gives NULL. */
struct json_object;
int oomi_yaml_load(struct json_object **out, const char *text, size_t len, const char *name);
int oomi_yaml_load_file(struct json_object **out, const char *path);

#endif

#define OOMI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors (error.c) ---------------------------------------------------------------------
 * oomi_fail() records code + message for oom_last_message() and returns the code, so that
 *     return oomi_fail(OOM_EINVAL, "size '%s' is not a number", text);
 * is the whole error path. oomi_fail_keep() returns the code of a failure already recorded by a
 * callee, optionally prefixing context ("model 'x.json': ").
 */
int oomi_fail(int code, const char *fmt, ...) OOMI_PRINTF(2, 3);
int oomi_failv(int code, const char *fmt, va_list ap);
int oomi_fail_prefix(int code, const char *fmt, ...) OOMI_PRINTF(2, 3);
int oomi_nomem(void);
void oomi_clear_error(void);

/* ---- memory (alloc.c): every allocation of the library goes through these --------------- */
void *oomi_malloc(size_t n);
void *oomi_calloc(size_t count, size_t size);
void *oomi_realloc(void *p, size_t n);
/* realloc of an array with overflow check; NULL (with p untouched) on failure */
void *oomi_reallocarray(void *p, size_t count, size_t size);
char *oomi_strdup(const char *s);
char *oomi_strndup(const char *s, size_t n);
void oomi_free(void *p);
char *oomi_asprintf(const char *fmt, ...) OOMI_PRINTF(1, 2);

/* ---- growable string (strbuf.c) -----------------------------------------------------------
 * A failed append latches `failed`; check once with oomi_sb_ok() at the end. */
typedef struct oomi_sb {
    char *buf;
    size_t len, cap;
    bool failed;
} oomi_sb;

#define OOMI_SB_INIT                                                                               \
    {                                                                                              \
        NULL, 0, 0, false                                                                          \
    }
void oomi_sb_add(oomi_sb *sb, const char *s, size_t n);
void oomi_sb_puts(oomi_sb *sb, const char *s);
void oomi_sb_putc(oomi_sb *sb, char c);
void oomi_sb_printf(oomi_sb *sb, const char *fmt, ...) OOMI_PRINTF(2, 3);
/* OOM_OK, or OOM_ENOMEM (recorded) if any append failed */
int oomi_sb_ok(oomi_sb *sb);
/* hands the buffer over (never NULL on success: "" for an empty buffer) and resets sb */
char *oomi_sb_steal(oomi_sb *sb);
void oomi_sb_free(oomi_sb *sb);

/* ---- files and data (file.c) -------------------------------------------------------------- */
/* Reads a whole file (NUL-terminated, *len without the NUL). OOM_EIO names the path + errno. */
int oomi_read_file(char **out, size_t *len, const char *path);
/* The data directory: $OOMLESS_DATA_DIR, else the installed one, else the source tree's. */
const char *oomi_data_dir(void);
/* "<data dir>/<relative>", allocated */
char *oomi_data_path(const char *relative);

/* ---- small helpers (util.c) ---------------------------------------------------------------- */
/* Case-insensitive compare treating '-', '_' and ' ' as equal ("a100_80gb" == "A100-80GB"). */
int oomi_name_cmp(const char *a, const char *b);
/* Levenshtein distance over the same normalisation, for "did you mean" lists. */
size_t oomi_name_distance(const char *a, const char *b);
/* Strict integer parse of a whole string into [min, max]; OOM_EINVAL naming `what`. */
int oomi_parse_long(long long *out, const char *text, long long min, long long max,
                    const char *what);
/* Strict floating parse of a whole string (finite); OOM_EINVAL naming `what`. */
int oomi_parse_double(double *out, const char *text, const char *what);

/* ==== estimate: model configs, workloads, coefficients (model.c, workload.c, estimate*.c) ==== */
typedef struct json_object json_object;

/* How a block keeps its activations: selects the coefficient set in data/coefficients.json. */
typedef enum oomi_block {
    OOMI_BLOCK_LLAMA,
    OOMI_BLOCK_GPT,
    OOMI_BLOCK_BERT,
    OOMI_BLOCK_T5
} oomi_block;
typedef enum oomi_head {
    OOMI_HEAD_CAUSAL_LM,
    OOMI_HEAD_SEQ_CLS,
    OOMI_HEAD_MASKED_LM,
    OOMI_HEAD_SEQ2SEQ_LM,
    OOMI_HEAD_BASE
} oomi_head;

/* one kind of nn.Linear in the model (LoRA targets, quantisation) */
typedef struct oomi_linear {
    const char *name; /* HF module name: "q_proj" */
    long din, dout;
    long count; /* instances in the whole model */
} oomi_linear;

#define OOMI_MAX_LINEARS 20

typedef struct oomi_model {
    char *name;   /* preset name or path */
    char *family; /* model_type */
    oomi_block block;
    oomi_head head;
    long layers, enc_layers; /* decoder (or only) layers; T5 encoder layers */
    long hidden, heads, kv_heads, head_dim, ffn, vocab, max_pos, experts, topk, labels;
    bool gated; /* SwiGLU / gated-GELU: three MLP matrices */
    bool tied;
    uint64_t params;        /* all parameters */
    uint64_t params_active; /* used per token (MoE: topk experts) */
    uint64_t params_embed;  /* input embeddings (incl. positions), not quantised */
    uint64_t params_lm_head; /* untied output head (0 when tied) */
    uint64_t params_linear; /* weights of the linears inside the blocks (quantisable) */
    uint64_t params_layer_max; /* the largest block's parameters (ZeRO-3 gather) */
    uint64_t factored;      /* Adafactor state elements: rows+cols per matrix, size per vector */
    uint64_t tensors;       /* parameter tensors (allocator rounding) */
    size_t nlinears;
    oomi_linear linears[OOMI_MAX_LINEARS];
    const char *default_targets; /* PEFT's default target modules for the family */
} oomi_model;

/* Loads a preset name or a config path (a file or a folder with config.json). */
int oomi_model_load(oomi_model **out, const char *name_or_path);
int oomi_model_parse(oomi_model **out, json_object *cfg, const char *name, const char *path);
void oomi_model_free(oomi_model *m);
int oomi_model_clone(oomi_model **out, const oomi_model *m);
const char *oomi_head_name(oomi_head h);

/* LoRA target set resolution: the trainable adapter parameters and the adapted inputs per token
 * per model (sum of din over targeted linears / tokens). OOM_EINVAL naming an unknown module. */
typedef struct oomi_lora {
    uint64_t params;     /* r * (din + dout) summed */
    uint64_t in_elems;   /* sum of din over adapted linears (per token, whole model) */
    uint64_t n_adapted;  /* adapted linear instances */
} oomi_lora;
int oomi_lora_resolve(oomi_lora *out, const oomi_model *m, const char *targets, long rank);

/* the workload (workload.c), read by estimate.c */
struct oom_workload {
    oomi_model *model;
    char *model_arg;
    oom_knobs k;
    long lora_rank;
    char *lora_targets; /* NULL: the family's default */
    double lora_dropout;
    bool lora_rank_set, lora_targets_set, lora_dropout_set;
    long max_pos_override; /* 0: none */
    long decoder_seq;      /* enc-dec target length; 0: = seq */
    bool keep_grads;       /* zero_grad(set_to_none=False): gradients live in every phase */
    uint64_t overhead;     /* OOM_UNKNOWN: from the GPU generation */
    bool has_gpu;
    int cc_major, cc_minor;
    char gpu_id[64];
};
oom_precision oomi_resolved_precision(const oom_workload *w);
/* option values, indexed by the public enums (workload.c) */
extern const char *const oomi_method_names[4], *const oomi_precision_names[8];
extern const char *const oomi_optimizer_names[8], *const oomi_checkpointing_names[3];
extern const char *const oomi_attention_names[3], *const oomi_loss_names[2];
extern const char *const oomi_sharding_names[4], *const oomi_offload_names[3];

/* empirical coefficients (estimate_coef.c), loaded from data/coefficients.json */
typedef struct oomi_act_coef {
    /* bytes saved per token per layer, per element of: hidden size, q width (heads*head_dim),
     * k/v width (kv_heads*head_dim), MLP width; per head (fused attention's log-sum-exp); and per
     * attention score (eager attention: b*heads*s*s scores per layer) */
    double h, q, kv, f, lse, score;
    double frozen_h, frozen_q, frozen_f; /* not saved when the base linears are frozen */
} oomi_act_coef;

enum { OOMI_REGIME_16BIT, OOMI_REGIME_AMP, OOMI_REGIME_FP32, OOMI_REGIMES };
enum { OOMI_COEF_BLOCKS = 5 }; /* llama, gpt, bert, t5, t5 gated */

typedef struct oomi_coef {
    oomi_act_coef act[OOMI_COEF_BLOCKS][OOMI_REGIMES];
    double gelu_tanh_f; /* extra bytes per MLP element for GPT-2's composed tanh GELU (x e) */
    double decoder_factor; /* enc-dec: a decoder layer's saved bytes / an encoder layer's */
    double logits_fwd[2], logits_bwd[2]; /* bytes per logit: [0] 16-bit compute, [1] fp32 */
    double chunk_tokens;                 /* chunked loss: tokens per chunk */
    double infer_h, infer_f;             /* inference working set of one layer, x element size */
    double nf4_bytes, int8_bytes, adam8_bytes;
    double opt_temp[8]; /* optimizer-step temporaries, x one state copy, by oom_optimizer */
    double ddp_buckets, zero3_live_layers;
    double frag, tensor_waste, round;
    double lora_in_fp32; /* LoRA: bytes per adapted input element saved (cast to fp32 adapter) */
    double ctx_generic, nccl;
    size_t nctx;
    struct {
        int major, minor;
        double bytes;
    } ctx[16];
} oomi_coef;
/* the coefficients, loaded once; OOM_EIO/OOM_EPARSE naming the file and key */
int oomi_coef_get(const oomi_coef **out);

/* ---- YAML into json-c (yamlload.c) --------------------------------------------------------
 * Plain scalars follow the YAML 1.2 core schema (null, bool, int, float, string); quoted ones are
 * strings. OOM_EPARSE "name:line:col: problem" on bad YAML. An empty document gives NULL. */
struct json_object;
int oomi_yaml_load(struct json_object **out, const char *text, size_t len, const char *name);
int oomi_yaml_load_file(struct json_object **out, const char *path);

#endif

/* ==== plan (plan*.c, svg.c, table.c): shared by the planner's files ==================== */
/* Throughput model constants (docs/plan.md, "Objective"). */
#define OOMI_PLAN_MFU_MAX 0.5        /* model-FLOPs utilisation of a large micro-batch */
#define OOMI_PLAN_RIDGE_DEFAULT 200.0 /* FLOP per byte when the profile lacks bandwidth/TFLOP/s */
#define OOMI_PLAN_TFLOPS_DEFAULT 100.0
#define OOMI_PLAN_LINK_INTRA 100e9   /* bytes/s between GPUs of one node (NVLink-class, busbw) */
#define OOMI_PLAN_LINK_INTER 25e9    /* bytes/s between nodes (200 Gb/s InfiniBand) */
#define OOMI_PLAN_PCIE 25e9          /* bytes/s host <-> device (PCIe 4.0 x16, effective) */
#define OOMI_PLAN_CPU_ADAM 1e9       /* parameters/s a CPU Adam step updates (DeepSpeed CPUAdam) */
/* Fills c's throughput fields from its knobs and estimate. */
void oomi_plan_throughput(oom_plan_choice *c, const oom_plan_request *r, long nodes);
/* The peak TFLOP/s the profile gives for a precision (0 TFLOP/s bf16 falls back to fp16). */
double oomi_plan_tflops(const oom_gpu_profile *gpu, oom_precision p);
/* Fills res->suggestions for a plan where nothing fits (w: a scratch clone; NULL for lines). */
int oomi_plan_suggest(oom_plan_result *res, const oom_plan_request *r, oom_workload *w,
                      const oom_knobs *smallest);
/* printf into a fixed note array (truncating) */
void oomi_plan_note(char (*notes)[240], size_t *n, const char *fmt, ...) OOMI_PRINTF(3, 4);
/* a size as text, in a caller's 16-byte buffer */
#define OOMI_SZ(buf, b) oom_format_size((buf), sizeof(buf), (b))
/* Resolves options for a given GPU id (NULL: the options' own) and plans (plan_options.c). */
int oomi_plan_options_run_gpu(oom_plan_result **out, const oom_plan_options *o, const char *gpu);
/* the human report of a plan (plan_text.c) */
int oomi_plan_text(char **out, const oom_plan_result *r);
