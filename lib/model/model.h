/*
 * model/model.h - model configs (config.json readers), presets and lookup, LoRA targets and the
 * workload (hfconfig*.c, preset.c, lookup.c, lora.c, workload.c, workload_set.c,
 * workload_check.c). Uses core.
 */
#ifndef OOMLESS_MODEL_MODEL_H
#define OOMLESS_MODEL_MODEL_H

#include "core/core.h"

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
    bool bias;  /* with a bias: an addmm on a GPU, which op-sac saves without counting it */
} oomi_linear;

#define OOMI_MAX_LINEARS 20

#define OOMI_SPARSE_MAP_LAYERS 1024

typedef struct oomi_model {
    char *name;   /* preset name or path */
    char *family; /* model_type */
    oomi_block block;
    oomi_head head;
    long layers, enc_layers; /* decoder (or only) layers; T5 encoder layers */
    long hidden, heads, kv_heads, head_dim, ffn, vocab, max_pos, experts, topk, labels;
    /* mixtures of experts: ffn is one expert's width; layers with the experts (the others are
     * dense, of width ffn_dense); a shared expert's width beside the routed ones (0: none) */
    long sparse_layers, ffn_dense, shared_ffn;
    /* experts a token goes through as the model's code runs them: topk, or every expert where
     * the code weights all of them by the router's scores instead of dispatching (transformers'
     * Llama4TextMoe) */
    long routed;
    /* MLP width a token goes through, averaged over the layers and at the widest layer (dense:
     * ffn; experts: top-k x ffn + the shared expert) */
    double ffn_tok_mean, ffn_tok_max;
    /* multi-head latent attention (DeepSeek V2/V3; kv_lora 0: none): the queries' low-rank width
     * (0: one q_proj), the key/value latent, a head's key width without and with RoPE, a head's
     * value width. head_dim is then qk_nope + qk_rope and kv_heads = heads (the expanded keys) */
    long q_lora, kv_lora, qk_nope, qk_rope, v_head;
    /* sliding-window attention: the window in tokens (0: none) and the layers that use it; Llama
     * 4's chunked attention layers as such, of a window of attention_chunk_size */
    long window, window_layers;
    bool gated;         /* SwiGLU / gated-GELU: three MLP matrices */
    bool qk_norm;       /* per-head RMSNorm of queries and keys (Qwen3) */
    bool logit_softcap; /* final_logit_softcapping: tanh-capped logits (Gemma 2) */
    /* eager attention's softmax in the compute dtype (Llama 4's text layers: transformers'
     * llama4 eager_attention_forward has no dtype=torch.float32), so a 16-bit model keeps one
     * 16-bit copy of the weights, not an fp32 softmax output and its 16-bit cast */
    bool eager_softmax_compute;
    /* the experts take the hidden states repeated once per expert and scaled by the router's
     * score (Llama4TextMoe: every expert on every token), a copy in the dtype of the hidden
     * states, which autocast leaves in fp32 */
    bool moe_repeat_input;
    bool tied;
    /* a pre-quantized checkpoint (quantization_config): bytes per weight of the linears inside
     * the blocks, scales and zero points included (0: not quantized), and what it is ("gptq 4-bit,
     * groups of 128") */
    double quant_bytes;
    char quant_desc[64];
    uint64_t params;         /* all parameters */
    uint64_t params_active;  /* used per token (MoE: topk experts) */
    uint64_t params_embed;   /* input embeddings (incl. positions), not quantised */
    uint64_t params_lm_head; /* untied output head (0 when tied) */
    uint64_t params_vision;  /* a multimodal checkpoint's vision tower and projector */
    uint64_t params_linear;  /* weights of the linears inside the blocks (quantisable) */
    /* 3-D weights the blocks multiply with torch.bmm (Llama 4's experts): autocast casts them
     * as it does the linears' weights, but they are neither quantized nor adapted */
    uint64_t params_bmm;
    uint64_t params_layer_max; /* the largest block's parameters (ZeRO-3 gather) */
    /* where layers with the experts and dense ones alternate (Llama 4 Maverick, DeepSeek's first
     * layers): the weights autocast casts in one of each (linears and bmm weights), and which
     * layers have the experts (bit i of sparse_map, for the first OOMI_SPARSE_MAP_LAYERS) */
    uint64_t cast_layer_sparse, cast_layer_dense;
    unsigned char sparse_map[OOMI_SPARSE_MAP_LAYERS / 8];
    uint64_t factored; /* Adafactor state elements: rows+cols per matrix, size per vector */
    uint64_t tensors;  /* parameter tensors (allocator rounding) */
    size_t nlinears;
    oomi_linear linears[OOMI_MAX_LINEARS];
    const char *default_targets; /* PEFT's default target modules for the family */
} oomi_model;

/* Loads what a model argument names: a config path (a file or a folder with config.json), a
 * preset, a Hub id in the local Hugging Face cache (lookup.c, the rules of oom_model_resolve). */
/* ---- the Hugging Face Hub (http.c, hub.c) --------------------------------------------------
 * One HTTP(S) GET through libcurl (dlopen'd: $OOMLESS_CURL_LIBRARY, libcurl.so.4,
 * libcurl-gnutls.so.4), TLS verified, bounded in time (timeout_s to connect, as long without a
 * byte, 6 times as long in all) and size (max_bytes of body, else OOM_EIO). Any status is OK;
 * failures to reach the server are OOM_EIO naming the URL. */
typedef struct oomi_http_request {
    const char *url;
    const char *bearer; /* sent as "Authorization: Bearer ...", or NULL */
    long timeout_s;
    size_t max_bytes;
} oomi_http_request;
typedef struct oomi_http_response {
    long status;
    char *body; /* NUL-terminated, len bytes */
    size_t len;
    char *etag, *linked_etag, *commit, *error_code, *error_message; /* headers, or NULL */
} oomi_http_response;
int oomi_http_get(oomi_http_response *out, const oomi_http_request *req);
void oomi_http_response_free(oomi_http_response *r);
/* $HF_HUB_OFFLINE is set (1, ON, YES, TRUE) */
bool oomi_hub_offline(void);
/* The Hub cache: $HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub or
 * ~/.cache/huggingface/hub; *out NULL when none can be named. */
int oomi_hub_cache(char **out);
/* config.json of the Hub repository `id` ("ORG/NAME") at `revision`, fetched into the cache
 * folder `repo` (<cache>/models--ORG--NAME) as huggingface_hub lays it out; *out the snapshot's
 * config.json. OOM_ENOTFOUND for a missing, gated or private repository, revision or file, and
 * OOM_EIO offline, unreachable, too slow or too large: the message says why of the model ("it is
 * gated ...", "$HF_HUB_OFFLINE is set"), for the caller to put after the model's name. */
int oomi_hub_fetch(char **out, const char *repo, const char *id, const char *revision);

int oomi_model_load(oomi_model **out, const char *name_or_path);
/* Reads and parses one config.json; `name` is what the model is called (hfconfig.c). */
int oomi_model_load_file(oomi_model **out, const char *path, const char *name);
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
    uint64_t paged; /* params of the A and B matrices a paged optimizer pages (OOMI_PAGED_MIN) */
} oomi_lora;
/* bitsandbytes' paged optimizers keep the states of a tensor of at least this many elements in
 * CUDA unified memory, smaller ones in ordinary device memory (Optimizer8bit.get_state_buffer:
 * `if not self.is_paged or p.numel() < 1e5`, bitsandbytes/optim/optimizer.py) */
#define OOMI_PAGED_MIN 100000
int oomi_lora_resolve(oomi_lora *out, const oomi_model *m, const char *targets, long rank);
/* whether `targets` (as oomi_lora_resolve reads them) adapt the linears named `name` */
bool oomi_lora_adapts(const oomi_model *m, const char *targets, const char *name);

/* Model-parallel training (docs/parallelism.md; workload_layout.c): the layout beside the
 * workload's tensor-parallel size (`tp`, also inference's) and data-parallel GPUs (`k.gpus`: the
 * copies of the model, each of tp x pp x cp GPUs), and the engine whose memory is modelled */
typedef enum oomi_engine { OOMI_ENGINE_MEGATRON, OOMI_ENGINE_TORCHTITAN } oomi_engine;
extern const oom_option_value *const oomi_engine_values[2];
typedef struct oomi_layout {
    long pp;         /* pipeline stages (1: none) */
    long vpp;        /* model chunks per pipeline rank: 1 (1f1b) or V (interleaved:V) */
    char *pp_layers; /* layers of each virtual stage, "4,5,5,4" as given; NULL: auto */
    unsigned sp;     /* sequence parallel: 0 auto (yes with tp > 1), 1 no, 2 yes */
    long ep, etp;    /* expert parallel; expert tensor parallel (0: auto, the engine's default) */
    long cp;         /* context parallel */
    unsigned engine; /* oomi_engine */
    bool engine_set; /* the engine given: its model even without model parallelism */
    /* Megatron's full recomputation: recompute_method (0 uniform, 1 block) and
     * recompute_num_layers */
    unsigned recompute_method;
    long recompute_layers;
} oomi_layout;
/* whether the workload trains with a model-parallel layout (tp, pp, ep or cp above 1), or under
 * an engine given by name */
bool oomi_layout_on(const oom_workload *w);
/* sequence parallelism and the expert tensor-parallel size as resolved */
bool oomi_layout_sp(const oom_workload *w);
long oomi_layout_etp(const oom_workload *w);
/* the layers of each of the pp x vpp virtual stages, in stage order, into `out` (an array of
 * at least pp x vpp; auto: as even as can be, the remainder to the stages after the first);
 * OOM_EINVAL naming pp-layers when its list does not fit the model */
int oomi_layout_stage_layers(long *out, const oom_workload *w);
/* the layout's options (workload_layout.c): OOM_ENOTFOUND for a key that is not one of them */
int oomi_layout_set(oom_workload *w, const char *key, const char *value);
int oomi_layout_get(char **out, const oom_workload *w, const char *key);
int oomi_layout_validate(const oom_workload *w);

/* the workload (workload.c, its options set in workload_set.c), read by the estimator
 * (estimate/) and the planner; grouped by what each part describes */
struct oom_workload {
    oomi_model *model; /* the model as its config.json reads */
    char *model_arg;   /* --model as given */
    oom_knobs k;       /* what the planner searches: method, precision, batch, seq, ... */
    unsigned stack;    /* oomi_stack: the training code whose memory the estimate models */
    /* the model's sequences beyond k.seq_len */
    struct {
        long max_positions; /* raised max positions (RoPE scaling); 0: the model's */
        long decoder_seq;   /* an encoder-decoder's target tokens; 0: = seq */
    } shape;
    /* the method: LoRA's adapters (the *_set flags: given, for the checks of other methods) */
    struct {
        long rank;
        char *targets; /* NULL: the family's default */
        double dropout;
        unsigned adapter_dtype; /* oomi_adapter_dtype: the adapters, their grads and states */
        bool rank_set, targets_set, dropout_set;
    } lora;
    /* the precision of a quantised base (docs/estimate.md, "QLoRA"): bnb_4bit_use_double_quant
     * (0 auto: yes under qlora, BitsAndBytesConfig's no elsewhere; 1 no; 2 yes); PEFT's
     * prepare_model_for_kbit_training, unquantised params in fp32 (0 auto: simpo and orpo on a
     * bitsandbytes base, whose TRL trainers call it; 1 no; 2 yes; oomi_kbit_prepare); the
     * bitsandbytes release (0: 0.44 or later; 1: 0.43 or earlier, whose 4-bit linears keep their
     * inputs for the backward: oomi_bnb_keeps_inputs); the code that quantizes it
     * (OOMI_QUANTIZER_*) */
    struct {
        unsigned double_quant;
        unsigned kbit_prepare;
        unsigned bitsandbytes;
        unsigned quantizer;
    } quant;
    /* checkpointing full: one layer in N checkpointed (every 0, 1: every one), the N-th of each N
     * (nth: torchtitan) else the first (transformers); the checkpointed layers' inputs kept in
     * host memory (offload: save_on_cpu); every layer under torchtitan's op-level selective
     * policy (op: "op-sac", estimate_activations.c oomi_est_op_sac); the variants of full a plan
     * may try (search: OOMI_CKS_*, plan_ckpt.c) */
    struct {
        long every;
        bool nth, offload, op;
        unsigned search;
    } ckpt;
    /* DeepSpeed ZeRO-3's knobs, in elements (zero_optimization in the DeepSpeed config; defaults
     * DeepSpeed's, deepspeed/runtime/zero/config.py): stage3_max_live_parameters,
     * stage3_prefetch_bucket_size, stage3_param_persistence_threshold, stage3_max_reuse_distance,
     * reduce_bucket_size; and the replays a search keeps (estimate/estimate_zero3.c), borrowed
     * from the searcher (NULL: none; a clone has none) */
    struct {
        double max_live, prefetch, persistence, reuse, reduce;
        struct oomi_zero3_cache *cache;
    } zero3;
    /* sharding fsdp2 (torch's fully_shard; k.sharding is zero3): the sharded parameters in bf16
     * (else fp32), reshard_after_forward (0: True, -1: False, N > 1: to N GPUs), each option
     * given */
    struct {
        bool on, bf16, dtype_set, reshard_set;
        long reshard;
    } fsdp2;
    /* tensor parallelism: inference's GPUs per model copy (1: none) */
    struct {
        long tp;
    } parallel;
    oomi_layout layout; /* model-parallel training: pipeline, expert, context parallel */
    /* inference as a serving engine runs it: transformers' KV cache instead of the engine's
     * (kv_transformers); its max_num_batched_tokens (0: planned) and max_num_seqs (0: the
     * plan's batch) */
    struct {
        bool kv_transformers;
        long tokens, seqs;
    } serve;
    /* preference fine-tuning and RL as TRL runs them (docs/estimate.md, "Objectives") */
    struct {
        unsigned kind;               /* oomi_objective */
        unsigned reference;          /* oomi_reference: as set (AUTO: oomi_reference_of) */
        oom_precision ref_precision; /* a reference copy's weights; AUTO: as the policy's */
        bool precompute_ref;         /* reference log-probs computed before training */
        long num_generations;        /* GRPO: completions per prompt */
        long completion_len;         /* GRPO: generated tokens of --seq; 0: half of it. Inference:
                                        generated after a prompt of the rest; 0: none */
        bool grpo_set;               /* num-generations given */
        bool completion_set;         /* completion-len given */
        unsigned rollout;            /* oomi_rollout: GRPO's generation engine */
        int sleep_level;             /* rollout vllm-colocate: vLLM's sleep level (0: none) */
        bool sleep_set;              /* sleep-mode given */
    } objective;
    /* sequence packing (docs/estimate.md, "Sequence packing"): oomi_packing, and the packed
     * tokens of one micro-batch (0: batch x seq) */
    struct {
        unsigned mode;
        long tokens_per_batch;
    } packing;
    /* the process around PyTorch: gradients kept between steps (zero_grad(set_to_none=False));
     * each parameter stepped in its gradient's hook (torchtune's optimizer_in_bwd); torch.compile;
     * the CUDA
     * context + workspaces outside PyTorch (OOM_UNKNOWN: from the GPU generation); the cuBLAS
     * workspace, CUBLAS_WORKSPACE_CONFIG in bytes (OOM_UNKNOWN: the default) */
    struct {
        bool keep_grads;
        bool optim_in_bwd;
        bool compile; /* torch.compile: torchtune's compile=True (its chunked loss compiled) */
        uint64_t overhead;
        uint64_t cublas_ws;
    } runtime;
    /* NCCL's buffers: NCCL_BUFFSIZE in bytes (0: NCCL's default), NCCL_MAX_NCHANNELS (0: the
     * default of data/coefficients.json), NVLS (0 auto: cc 9.0+ and more than 2 GPUs, 1 no, 2
     * yes), communicators (0: 1, 2 for a serving engine's tensor parallel) */
    struct {
        uint64_t buffsize;
        long channels;
        unsigned nvls;
        long comms;
    } nccl;
    /* the GPU it runs on (oom_workload_set_gpu): its compute capability and profile id */
    struct {
        bool known;
        int cc_major, cc_minor;
        char id[64];
    } gpu;
};

/* the training stack whose code the workload runs (workload option stack, docs/stacks.md): the
 * values' order; each value's versions and traced say what it models */
typedef enum oomi_stack {
    OOMI_STACK_TRANSFORMERS,
    OOMI_STACK_TRANSFORMERS4,
    OOMI_STACK_LIGER,
    OOMI_STACK_TORCHTUNE,
    OOMI_STACK_TORCHTITAN,
    OOMI_STACK_UNSLOTH,
    OOMI_STACKS
} oomi_stack;
extern const oom_option_value *const oomi_stack_values[OOMI_STACKS];
/* what every output says of a stack (estimate and plan JSON, key "stack"): {"name", "version" (the
 * versions it models), "traced" (whether oomless trace runs its code)}; NULL when out of memory */
json_object *oomi_stack_json(unsigned stack);

/* how packed documents share a row: none (padded rows), padding-free (TRL padding_free /
 * DataCollatorWithFlattening: one row, position ids restarting per document), block-mask
 * (torchtune PackedDataset: rows of packs, a block-causal document mask) */
enum { OOMI_PACKING_NONE, OOMI_PACKING_PADDING_FREE, OOMI_PACKING_BLOCK_MASK };
extern const oom_option_value *const oomi_packing_values[3];
/* the micro-batch as the model sees it: *rows of *len tokens each (batch x seq unpacked) */
void oomi_packed_shape(const oom_workload *w, long *rows, long *len);

typedef enum oomi_adapter_dtype {
    OOMI_ADAPTER_AUTO, /* fp32: PEFT's autocast_adapter_dtype=True */
    OOMI_ADAPTER_FP32,
    OOMI_ADAPTER_BF16
} oomi_adapter_dtype;
extern const oom_option_value *const oomi_adapter_dtype_values[3];
/* the quant.quantizer and quant.bitsandbytes orders */
extern const oom_option_value *const oomi_quantizer_values[2];
extern const oom_option_value *const oomi_bitsandbytes_values[2];
/* the base is quantised to NF4 at load (method qlora or precision 4bit, no quantization_config);
 * its double quantization as resolved (auto: under --method qlora) */
bool oomi_nf4_base(const oom_workload *w);
bool oomi_double_quant(const oom_workload *w);
/* who quantizes a bitsandbytes 4-bit base at load (workload option quantizer): transformers'
 * BitsAndBytesConfig (every linear but the output head, in the load dtype) or Lightning
 * Fabric's BitsandbytesPrecision (every nn.Linear, the head too, from an fp16 copy) */
enum { OOMI_QUANTIZER_TRANSFORMERS, OOMI_QUANTIZER_FABRIC };
/* a 4-bit base of bitsandbytes' linears; one whose MatMul4Bit keeps its input (--bitsandbytes
 * 0.43) */
bool oomi_bnb_linears(const oom_workload *w);
bool oomi_bnb_keeps_inputs(const oom_workload *w);
/* PEFT's prepare_model_for_kbit_training as resolved (auto: TRL's CPOTrainer and ORPOTrainer call
 * it for a model loaded in 4 or 8 bits, its SFT, DPO, KTO, GRPO and reward trainers do not) */
bool oomi_kbit_prepare(const oom_workload *w);
/* the base is quantised by bitsandbytes: at load (int8, 4bit) or in its checkpoint */
bool oomi_bnb_base(const oom_workload *w);
/* bytes per weight of a bitsandbytes NF4 linear, with or without double quantization
 * (hfconfig.c) */
double oomi_nf4_bytes(bool double_quant);

/* where GRPO's completions are generated: transformers' generate in the trainer, or a vLLM engine
 * in the trainer's process on the same GPU (TRL's vllm_mode="colocate", verl's hybrid engine) */
typedef enum oomi_rollout { OOMI_ROLLOUT_NONE, OOMI_ROLLOUT_VLLM_COLOCATE } oomi_rollout;
extern const oom_option_value *const oomi_rollout_values[2];

typedef enum oomi_objective {
    OOMI_OBJECTIVE_SFT,
    OOMI_OBJECTIVE_DPO,
    OOMI_OBJECTIVE_IPO,
    OOMI_OBJECTIVE_SIMPO,
    OOMI_OBJECTIVE_ORPO,
    OOMI_OBJECTIVE_KTO,
    OOMI_OBJECTIVE_REWARD,
    OOMI_OBJECTIVE_GRPO
} oomi_objective;

typedef enum oomi_reference {
    OOMI_REFERENCE_AUTO,
    OOMI_REFERENCE_COPY,
    OOMI_REFERENCE_ADAPTER,
    OOMI_REFERENCE_NONE
} oomi_reference;

/* The reference model the objective keeps (AUTO resolved as TRL does: the policy with its adapter
 * disabled under PEFT, else a frozen copy; none for objectives without one). */
oomi_reference oomi_reference_of(const oom_workload *w);
/* Whether the objective has a reference model at all (DPO, IPO, KTO, GRPO) */
bool oomi_objective_has_reference(unsigned objective);
/* Sequences through the policy with gradients per sample of the micro-batch: 2 where TRL
 * concatenates chosen and rejected (DPO, IPO, SimPO, ORPO, reward), else 1 */
long oomi_objective_sequences(unsigned objective);
/* OOM_EINVAL where TRL refuses the micro-batch (KTO below 2; a GRPO generation batch that is no
 * multiple of num-generations) */
int oomi_objective_check_batch(const oom_workload *w);
/* What one unit of --batch counts ("samples", "pairs", "examples", "completions") */
const char *oomi_objective_unit(unsigned objective);
oom_precision oomi_resolved_precision(const oom_workload *w);
/* Whether a GPU lacks bf16 tensor cores (profile bf16_tflops 0, or compute capability below 8.0:
 * bf16 arrived with Ampere, CUDA C Programming Guide, "Compute Capabilities"), and the 16-bit
 * precision used there instead of `p` (bf16 -> fp16, amp-bf16 -> amp-fp16; others unchanged). */
bool oomi_gpu_lacks_bf16(const oom_gpu_profile *gpu);
oom_precision oomi_precision_without_bf16(oom_precision p);
/* ---- the option tables (workload_options.c) ------------------------------------------------
 * The values of the enumerated options, indexed by their enums (sharding's fsdp2 and
 * checkpointing's forms follow the enum's values). */
extern const oom_option_value *const oomi_method_values[4], *const oomi_precision_values[8];
#define OOMI_OPTIMIZERS (OOM_OPTIMIZER_PAGED_ADAMW_8BIT + 1) /* the last oom_optimizer, + 1 */
extern const oom_option_value *const oomi_optimizer_values[OOMI_OPTIMIZERS];
extern const oom_option_value *const *const oomi_checkpointing_values; /* none, selective, full */
extern const oom_option_value *const oomi_attention_values[3], *const oomi_loss_values[2];
extern const oom_option_value *const oomi_sharding_values[5], *const oomi_offload_values[3];
extern const oom_option_value *const oomi_kv_cache_values[2]; /* "vllm", "transformers" */
extern const oom_option_value *const oomi_objective_values[8], *const oomi_reference_values[4];
/* the workload option of this exact name, or NULL */
const oom_option *oomi_workload_option(const char *name);
/* the index of `text` among the option's values that are not forms (compared as oomi_name_cmp
 * does); OOM_EINVAL naming the option, the text and every value */
int oomi_option_parse(unsigned *out, const oom_option *o, const char *text);
/* the option's values into sb, separated by `sep` ("none, zero1, ...") */
void oomi_option_values_text(oomi_sb *sb, const oom_option *o, const char *sep);
/* the values of the layout's enumerated options (workload_layout.c) */
extern const oom_option_value *const oomi_sp_values[3], *const oomi_pp_schedule_values[2];
extern const oom_option_value *const oomi_pp_layers_values[2], *const oomi_etp_values[2];
extern const oom_option_value *const oomi_recompute_method_values[2];
/* values[v]->name, "?" when v is not below n */
const char *oomi_value_name(const oom_option_value *const *values, size_t n, unsigned v);
#define OOMI_VALUE_NAME(values, v) oomi_value_name(values, OOMI_ARRAY_LEN(values), (unsigned)(v))
/* the workload's checkpointing as the option spells it ("full", "every:2", "nth:4+offload"): a
 * name, or `buf` (OOMI_CKPT_TEXT bytes) written */
#define OOMI_CKPT_TEXT 32
const char *oomi_checkpointing_text(char *buf, size_t size, const oom_workload *w);
/* whether the workload trains under FSDP2 (sharding fsdp2), and its sharding as the option spells
 * it ("fsdp2", else the knob's name) */
bool oomi_fsdp2(const oom_workload *w);
const char *oomi_sharding_text(const oom_workload *w);

#endif
