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
#endif

#define OOMI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors (error.c) ---------------------------------------------------------------------
 * oomi_fail() records code + message for oom_last_message() and returns the code, so that
 *     return oomi_fail(OOM_EINVAL, "size '%s' is not a number", text);
 * is the whole error path. oomi_fail_keep() returns the code of a failure already recorded by a
 * callee, optionally prefixing context ("model 'x.json': ").
 */
int oomi_fail(int code, const char *fmt, ...) OOMI_PRINTF(2, 3);
int oomi_failv(int code, const char *fmt, va_list ap) OOMI_PRINTF(2, 0);
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

/* ---- YAML into json-c (yamlload.c) --------------------------------------------------------
 * Plain scalars follow the YAML 1.2 core schema (null, bool, int, float, string); quoted ones are
 * strings. OOM_EPARSE "name:line:col: problem" on bad YAML. An empty document gives NULL. */
struct json_object;
int oomi_yaml_load(struct json_object **out, const char *text, size_t len, const char *name);
int oomi_yaml_load_file(struct json_object **out, const char *path);

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
    uint64_t params;           /* all parameters */
    uint64_t params_active;    /* used per token (MoE: topk experts) */
    uint64_t params_embed;     /* input embeddings (incl. positions), not quantised */
    uint64_t params_lm_head;   /* untied output head (0 when tied) */
    uint64_t params_linear;    /* weights of the linears inside the blocks (quantisable) */
    uint64_t params_layer_max; /* the largest block's parameters (ZeRO-3 gather) */
    uint64_t factored;         /* Adafactor state elements: rows+cols per matrix, size per vector */
    uint64_t tensors;          /* parameter tensors (allocator rounding) */
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
    uint64_t params;    /* r * (din + dout) summed */
    uint64_t in_elems;  /* sum of din over adapted linears (per token, whole model) */
    uint64_t n_adapted; /* adapted linear instances */
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
    double gelu_tanh_f;    /* extra bytes per MLP element for GPT-2's composed tanh GELU (x e) */
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
/* the "memory" object of the estimate JSON, shared by plan (estimate_json.c); NULL on ENOMEM */
json_object *oomi_estimate_memory_json(const oom_estimate *e);

/* ==== apply (apply.c, apply_value.c, apply_yaml.c, apply_json.c, diff.c, safewrite.c) ======
 * Appended by the apply work. A config file is parsed into a small tree of oomi_node with byte
 * offsets into the original buffer; edits are splices of those byte spans. */

/* a typed scalar value; `s` is owned (STRING only) */
typedef enum oomi_avtype {
    OOMI_AV_NULL,
    OOMI_AV_BOOL,
    OOMI_AV_INT,
    OOMI_AV_FLOAT,
    OOMI_AV_STRING,
} oomi_avtype;

typedef struct oomi_aval {
    oomi_avtype type;
    bool b;
    long long i;
    double d;
    char *s;
} oomi_aval;

void oomi_aval_clear(oomi_aval *v);
int oomi_aval_copy(oomi_aval *dst, const oomi_aval *src);
bool oomi_aval_equal(const oomi_aval *a, const oomi_aval *b);
const char *oomi_avtype_name(oomi_avtype t);
/* resolves a plain YAML scalar as OmegaConf/PyYAML do (null, bool incl. yes/no/on/off, int, float)
 */
int oomi_aval_from_plain(oomi_aval *out, const char *text);
/* the value as JSON text ("8", "true", "\"bf16\"") appended to sb */
void oomi_aval_json(oomi_sb *sb, const oomi_aval *v);
/* the shortest text of a double that reads back exactly and looks like a float ("2.0", "1e-05") */
void oomi_format_float(char *buf, size_t size, double d);

typedef enum oomi_nkind { OOMI_N_SCALAR, OOMI_N_MAP, OOMI_N_SEQ, OOMI_N_ALIAS } oomi_nkind;
typedef enum oomi_quote { OOMI_Q_PLAIN, OOMI_Q_SINGLE, OOMI_Q_DOUBLE, OOMI_Q_BLOCK } oomi_quote;

typedef struct oomi_node {
    oomi_nkind kind;
    oomi_quote quote;  /* scalars */
    bool flow;         /* flow collection ({...}, [...]; every JSON collection) */
    bool anchored;     /* has an anchor (&a): aliases elsewhere share it */
    bool tagged;       /* has an explicit tag (!!str, !custom) */
    oomi_aval val;     /* scalars: the typed value */
    size_t start, end; /* byte span (scalars include their quotes) */
    size_t close;      /* flow collections: offset of the closing bracket */
    size_t n, cap;
    struct oomi_node **keys; /* maps: key nodes (NULL for sequences) */
    struct oomi_node **vals; /* maps: values; sequences: items */
} oomi_node;

void oomi_node_free(oomi_node *node);
/* appends a child (key NULL for sequences); takes ownership of both, also on failure */
int oomi_node_add(oomi_node *parent, oomi_node *key, oomi_node *val);

/* key paths: "a.b[0].c" */
typedef struct oomi_pathseg {
    char *key; /* NULL for an index */
    size_t index;
} oomi_pathseg;

int oomi_path_parse(oomi_pathseg **out, size_t *count, const char *path);
void oomi_path_free(oomi_pathseg *segs, size_t count);

/* Parsers: OOM_EPARSE naming `file` with line and column. */
int oomi_yaml_parse(oomi_node **root, const char *buf, size_t len, const char *file);
int oomi_json_parse(oomi_node **root, const char *buf, size_t len, const char *file);
/* line (1-based) and column (1-based, in characters) of a byte offset */
void oomi_line_col(const char *buf, size_t off, size_t *line, size_t *col);

/* Text of a new scalar in the old node's style; NULL on allocation failure. */
char *oomi_yaml_render(const oomi_node *old, const char *buf, const oomi_aval *v);
char *oomi_json_render(const oomi_aval *v);
/* Text that creates segs[0..n) under `map` (a missing key chain ending in v), inserted at *pos.
 * OOM_EREFUSED when the chain cannot be created (an index, a non-map parent). */
int oomi_yaml_create(char **text, size_t *pos, const oomi_node *map, const char *buf, size_t len,
                     const oomi_pathseg *segs, size_t n, const char *v_text);
int oomi_json_create(char **text, size_t *pos, const oomi_node *map, const char *buf, size_t len,
                     const oomi_pathseg *segs, size_t n, const char *v_text);

/* Unified diff (context 3) of two texts, "--- a/NAME" / "+++ b/NAME" headers, appended to sb;
 * nothing when they are equal. */
int oomi_diff(oomi_sb *sb, const char *name, const char *a, size_t alen, const char *b,
              size_t blen);

/* Safe writes (safewrite.c). */
typedef void (*oomi_step_fn)(const char *step, const char *file, void *user);
/* Refuses (OOM_EREFUSED) a path that reaches outside the current directory through a symlink,
 * unless follow; *real gets the file to write (the symlink's target, allocated). */
int oomi_resolve_target(char **real, const char *path, bool follow);
/* Writes data to a new temporary file beside `path` (mkstemp, 0600, fsync, then `mode`);
 * *tmp gets its name. Nothing is left behind on failure. */
int oomi_write_temp(char **tmp, const char *path, unsigned mode, const char *data, size_t len,
                    oomi_step_fn step, void *user);
/* rename(tmp, path) then fsync of the directory */
int oomi_commit_temp(const char *tmp, const char *path, oomi_step_fn step, void *user);

/* Value specs and presets (apply_spec.c). */
struct json_object;
/* OOM_EINVAL naming the spec when it is malformed */
int oomi_spec_check(const char *spec);
/* *missing (and OOM_OK) when the plan lacks the field; OOM_EINVAL when a plan is needed and
 * `plan` is NULL, or the field is not a scalar */
int oomi_spec_resolve(oomi_aval *out, bool *missing, struct json_object *plan, const char *spec);
typedef int (*oomi_preset_fn)(const char *key, const char *spec, void *user);
/* calls fn for each assignment of the named preset (user file first, then the data file) */
int oomi_preset_each(const char *name, oomi_preset_fn fn, void *user);

/* One assignment in one text (apply_edit.c). */
typedef struct oomi_edit_result {
    const char *action; /* "set", "create", "unchanged", "skipped" */
    oomi_aval old;      /* valid for set/unchanged */
    bool has_old;
    char *reason;  /* skipped: why (allocated) */
    bool inserted; /* the text was inserted (create, or a value after "key:") */
} oomi_edit_result;

/* Edits *text in place (reallocated). flags: OOM_APPLY_CREATE, OOM_APPLY_FORCE_TYPE. */
int oomi_edit_text(char **text, size_t *len, bool json, const char *file, const char *key,
                   const oomi_aval *v, bool optional, unsigned flags, oomi_edit_result *res);
/* OOM_OK when `key` in the text reads back as `v`; otherwise OOM_EREFUSED for inserted text (an
 * unusual spot: explicit '?' keys, ...) and OOM_EINTERNAL for a replaced value (a bug) */
int oomi_edit_verify(const char *text, size_t len, bool json, const char *file, const char *key,
                     const oomi_aval *v, bool inserted);

/* ==== supervise: child processes (proc.c), one launch (launch.c), OOM patterns ==============
 * Appended by the probe/run work; see the supervise section of oomless.h. */
#include <sys/types.h>

/* A running child: its own process group (pgid == pid), stdout/stderr read through pipes. */
typedef struct oomi_proc {
    pid_t pid;
    int out_fd, err_fd; /* read ends, -1 once closed */
} oomi_proc;

/* Finds argv0 in $PATH (or takes it as is when it holds a '/'). OOM_ENOTFOUND / OOM_EJOB with
 * *err_no set to ENOENT / EACCES when no executable is found. */
int oomi_proc_resolve(char **path, int *err_no, const char *argv0);
/* fork + execve in a new process group, with argv/envp built by the caller. Only
 * async-signal-safe calls run between fork and exec. When exec fails the child _exits(127) and
 * *exec_errno receives its errno (0 on success). Makes the caller a child subreaper (Linux). */
int oomi_proc_spawn(oomi_proc *p, int *exec_errno, const char *path, char *const argv[],
                    char *const envp[]);
/* What belongs to a job: its process group; the pids in `known` (seen in its tree earlier) and
 * the processes started since `since` (clock ticks since boot, as /proc/PID/stat field 22; 0:
 * unknown) when they are now our children (orphans that had left the group, reparented to us,
 * the subreaper); and every descendant of those. A pid that died and was reused by an unrelated
 * process is never counted: it is not our child, or it started before the job. */
typedef struct oomi_tree {
    pid_t pgid;
    unsigned long long since;
    const pid_t *known;
    size_t nknown;
} oomi_tree;
/* Fills pids with the job's live processes; returns the count (at most max). */
size_t oomi_proc_tree(pid_t *pids, size_t max, const oomi_tree *t);
/* SIGKILLs the job's processes, reaps those that are our children, and repeats until none is
 * left (bounded: about 10 s). */
void oomi_proc_kill_all(const oomi_tree *t);
/* The start time of a process (clock ticks since boot), 0 when unknown. */
unsigned long long oomi_proc_start_time(pid_t pid);
/* Exit code as a shell reports it: status, or 128+N for signal N. */
int oomi_proc_exit_code(int wait_status);
double oomi_now_mono(void);
double oomi_now_unix(void);

/* One launch of a job, supervised until it ends. */
typedef struct oomi_launch {
    /* in */
    const oom_job *job;
    int batch, accum, seq, attempt;
    double timeout_s, sample_interval_s, kill_grace_s;
    oom_gpu_session *gpu; /* NULL: no sampling */
    const oom_patterns *patterns;
    const volatile sig_atomic_t *stop;
    oom_job_event_fn on_event;
    void *user;
    /* out */
    long pid;
    int exit_code;
    int oom, timed_out, exec_failed, stop_signal;
    uint64_t peak_bytes;
    double duration_s;
    long step;
    char message[256]; /* exec failure text */
} oomi_launch;

/* Runs one launch. OOM_OK when it ran (whatever its status), OOM_EJOB when it could not be
 * started (exit_code 127/126, message says why), OOM_ENOMEM. */
int oomi_launch_run(oomi_launch *l);
/* Substitutes the placeholders of one argv element (allocated). */
char *oomi_expand_arg(const char *tmpl, int batch, int accum, int seq, int attempt);
/* The event for a launch (kind, time, pid, attempt, batch, accum, peak, exit, step filled). */
void oomi_launch_event(const oomi_launch *l, oom_job_event_kind kind);
/* Pretty-prints root into *out (allocated) and releases root. (probe.c) */
int oomi_json_finish(char **out, struct json_object *root);
/* A JSON number printed with at most `decimals` decimals (trailing zeros dropped). (probe.c) */
struct json_object *oomi_json_number(double v, int decimals);

/* ==== plan (plan*.c, svg.c, table.c): shared by the planner's files ==================== */
/* Throughput model constants (docs/plan.md, "Objective"). */
#define OOMI_PLAN_MFU_MAX        0.5   /* model-FLOPs utilisation of a large micro-batch */
#define OOMI_PLAN_RIDGE_DEFAULT  200.0 /* FLOP per byte when the profile lacks bandwidth/TFLOP/s */
#define OOMI_PLAN_TFLOPS_DEFAULT 100.0
#define OOMI_PLAN_LINK_INTRA     100e9 /* bytes/s between GPUs of one node (NVLink-class, busbw) */
#define OOMI_PLAN_LINK_INTER     25e9  /* bytes/s between nodes (200 Gb/s InfiniBand) */
#define OOMI_PLAN_PCIE           25e9  /* bytes/s host <-> device (PCIe 4.0 x16, effective) */
#define OOMI_PLAN_CPU_ADAM       1e9 /* parameters/s a CPU Adam step updates (DeepSpeed CPUAdam) */
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

#endif
