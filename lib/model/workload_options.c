/* workload_options.c - the workload's options: each one's values, default, help and commands, the
 * one place these words are written (the tool's help and parsing, the man page, the completion,
 * the Python package, the tracer and the web page read them from here). */
#include "model/model.h"

#include <string.h>

/* the commands that take a workload option: estimate, plan, table, probe --set (W), and the
 * tracer (T) */
#define W  (OOM_COMMAND_ESTIMATE | OOM_COMMAND_PLAN | OOM_COMMAND_TABLE | OOM_COMMAND_PROBE)
#define WT (W | OOM_COMMAND_TRACE)
#define EP (OOM_COMMAND_ESTIMATE | OOM_COMMAND_PROBE)

/* a value (V) or a form (F: its capitals stand for a number or a name), taken by `cmds` */
#define V(cmds, name, help)                                                                        \
    &(const oom_option_value)                                                                      \
    {                                                                                              \
        OOM_OPTION_VALUE_VERSION, name, help, cmds, 0, NULL, NULL, NULL, 0                         \
    }
#define F(cmds, name, help)                                                                        \
    &(const oom_option_value)                                                                      \
    {                                                                                              \
        OOM_OPTION_VALUE_VERSION, name, help, cmds, 1, NULL, NULL, NULL, 0                         \
    }
/* an optimizer with the name transformers' TrainingArguments.optim gives it (OptimizerNames,
 * transformers/training_args.py, 5.23) and the optim_args it needs */
#define OPTIM(cmds, name, help, trainer, args)                                                     \
    &(const oom_option_value)                                                                      \
    {                                                                                              \
        OOM_OPTION_VALUE_VERSION, name, help, cmds, 0, trainer, args, NULL, 0                      \
    }

/* a training stack: the code whose memory is modelled, the versions it models, and whether `oomless
 * trace` runs that code on the meta device (1) or it is modelled from its source (0) */
#define STACK(cmds, name, help, versions, traced)                                                  \
    &(const oom_option_value)                                                                      \
    {                                                                                              \
        OOM_OPTION_VALUE_VERSION, name, help, cmds, 0, NULL, NULL, versions, traced                \
    }

/* ---- the values, the enumerated ones in the order of their enums ------------------------------
 */

const oom_option_value *const oomi_method_values[4] = {
    V(WT, "full", "every weight trained"),
    V(WT, "lora", "LoRA adapters trained on the frozen base (PEFT)"),
    V(W, "qlora", "LoRA on a frozen NF4 base (bitsandbytes), 16-bit compute"),
    V(WT, "inference", "forward only: the prefill of --seq tokens, with a KV cache"),
};

const oom_option_value *const oomi_precision_values[8] = {
    V(WT, "auto", "amp-bf16 for full, bf16 for lora and inference, 4bit for qlora"),
    V(WT, "fp32", "fp32 weights and compute"),
    V(WT, "fp16", "fp16 weights, the model cast to float16"),
    V(WT, "bf16", "bf16 weights, the model cast to bfloat16"),
    V(WT, "amp-fp16", "fp32 weights, fp16 autocast"),
    V(WT, "amp-bf16", "fp32 weights, bf16 autocast"),
    V(W, "int8", "a frozen bitsandbytes 8-bit base, for lora and inference"),
    V(W, "4bit", "a frozen bitsandbytes NF4 base, for lora and inference"),
};

const oom_option_value *const oomi_optimizer_values[] = {
    OPTIM(WT, "adamw", "torch.optim.AdamW, foreach: two fp32 states and a step temporary",
          "adamw_torch", NULL),
    OPTIM(WT, "adamw-8bit", "bitsandbytes AdamW8bit: two 8-bit states", "adamw_bnb_8bit", NULL),
    OPTIM(W, "adafactor", "transformers' Adafactor: a factored second moment, no momentum",
          "adafactor", NULL),
    OPTIM(WT, "sgd", "torch.optim.SGD without momentum: no state", "sgd", NULL),
    /* the Trainer's SGD takes momentum from optim_args (_get_sgd, transformers
     * trainer_optimizer.py); any momentum above 0 keeps the one buffer planned */
    OPTIM(WT, "sgd-momentum", "torch.optim.SGD with momentum: one state", "sgd", "momentum=0.9"),
    OPTIM(W, "lion", "Lion: one momentum state", "lion_32bit", NULL),
    OPTIM(WT, "none", "no optimizer step: gradients only", NULL, NULL),
    OPTIM(WT, "adamw-fused", "torch.optim.AdamW fused=True: no step-wide temporaries",
          "adamw_torch_fused", NULL),
    OPTIM(W, "paged-adamw",
          "bitsandbytes PagedAdamW32bit: the states of tensors of 100,000 elements or more in "
          "CUDA unified memory",
          "paged_adamw_32bit", NULL),
    OPTIM(W, "paged-adamw-8bit", "bitsandbytes PagedAdamW8bit, paged as paged-adamw",
          "paged_adamw_8bit", NULL),
};

_Static_assert(OOMI_ARRAY_LEN(oomi_optimizer_values) == OOMI_OPTIMIZERS,
               "one value per oom_optimizer");

/* none, selective and full are the enum's; the rest are full checkpointing on some layers */
static const oom_option_value *const checkpointing_values[] = {
    V(WT, "none", "every saved activation kept"),
    V(W, "selective", "the attention core recomputed, as Megatron-LM's selective recomputation"),
    V(WT, "full", "every layer recomputed: only each layer's input kept"),
    V(WT, "full+offload", "full, the layers' inputs in pinned host memory: torch's save_on_cpu"),
    F(WT, "every:N", "one layer in N, the first of each N: transformers' every_n_layers"),
    F(WT, "every:N+offload", "every:N, the wrapped layers' inputs in host memory"),
    F(WT, "nth:N", "one layer in N, the N-th of each N, as torchtitan and torchtune pick them"),
    F(WT, "nth:N+offload", "nth:N, the wrapped layers' inputs in host memory"),
    V(WT, "op-sac",
      "torchtitan's op-level selective checkpointing on every layer, for dense Llama-style "
      "decoders"),
};
const oom_option_value *const *const oomi_checkpointing_values = checkpointing_values;

const oom_option_value *const oomi_attention_values[3] = {
    V(WT, "eager", "the scores materialised: batch x heads x seq^2 per layer"),
    V(WT, "sdpa", "torch's scaled_dot_product_attention, fused kernels"),
    V(WT, "flash", "FlashAttention-2"),
};

const oom_option_value *const oomi_loss_values[2] = {
    V(WT, "standard",
      "the full logits, upcast to fp32 for the cross-entropy, as transformers does"),
    V(WT, "chunked", "chunked or fused linear + cross-entropy, as Liger-Kernel and torchtune do"),
};

/* zero1..3 are the enum's; fsdp2 is zero3 with the workload's fsdp2 flag */
const oom_option_value *const oomi_sharding_values[5] = {
    V(W, "none", "no sharding; DDP when --gpus is above 1"),
    V(W, "zero1", "DeepSpeed ZeRO-1: the optimizer states sharded"),
    V(W, "zero2", "DeepSpeed ZeRO-2: the optimizer states and gradients sharded"),
    V(W, "zero3", "DeepSpeed ZeRO-3, or FSDP1's full shard: the parameters too"),
    V(EP, "fsdp2",
      "torch's fully_shard per block + root, computing in --precision's 16-bit dtype; estimated, "
      "not planned"),
};

static const oom_option_value *const fsdp_dtype_values[] = {
    V(W, "fp32", "fp32, with bf16 compute torchtitan's MixedPrecisionPolicy"),
    V(W, "bf16", "bf16, as a model loaded in bf16"),
};

static const oom_option_value *const reshard_values[] = {
    V(W, "yes", "freed after the forward, gathered again in the backward"),
    V(W, "no", "kept for the backward"),
    F(W, "N", "a 1/N shard kept; N divides --gpus and is smaller"),
};

const oom_option_value *const oomi_offload_values[3] = {
    V(W, "none", "nothing offloaded"),
    V(W, "optimizer", "the optimizer states and the fp32 master on the CPU"),
    V(W, "optimizer+params", "the parameters too, under ZeRO-3"),
};

static const oom_option_value *const seq_values[] = {
    F(WT, "N", "tokens"),
    V(OOM_COMMAND_PLAN, "auto",
      "method inference: the longest sequence the KV cache vLLM finds holds, vLLM's "
      "max_model_len"),
};

static const oom_option_value *const targets_values[] = {
    V(WT, "default", "PEFT's targets for the model type"),
    V(WT, "all-linear", "every linear layer but the output head"),
    F(WT, "M1,M2", "the modules of these names"),
};

/* auto, no, yes: the order of the workload's fields (0 auto, 1 no, 2 yes) */
static const oom_option_value *const double_quant_values[] = {
    V(W, "auto", "yes under qlora, no for --precision 4bit"),
    V(W, "no", "fp32 absmax constants"),
    V(W, "yes", "8-bit absmax constants, one fp32 constant per 256 blocks"),
};

const oom_option_value *const oomi_adapter_dtype_values[3] = {
    V(W, "auto",
      "fp32, PEFT's autocast_adapter_dtype; TRL's trainers cast a 4-bit model's to bf16"),
    V(W, "fp32", "fp32"),
    V(W, "bf16", "bf16, as TRL leaves a 4-bit model's and torchtune builds them"),
};

/* the quant.bitsandbytes order */
const oom_option_value *const oomi_bitsandbytes_values[2] = {
    V(W, "0.44", "0.44 or later: a 4-bit linear keeps only its packed weight for the backward"),
    V(W, "0.43",
      "0.43 or earlier: MatMul4Bit also keeps each 4-bit linear's 16-bit input (bitsandbytes "
      "PR #1270 dropped it in 0.44.0)"),
};

/* the OOMI_QUANTIZER_* order */
const oom_option_value *const oomi_quantizer_values[2] = {
    V(W, "transformers",
      "BitsAndBytesConfig (transformers, PEFT, TRL, axolotl): every linear but the output head, "
      "quantized in the load dtype"),
    V(W, "fabric",
      "Lightning Fabric's BitsandbytesPrecision (LitGPT): every nn.Linear, the output head too, "
      "quantized from an fp16 copy"),
};

static const oom_option_value *const kbit_prepare_values[] = {
    V(W, "auto", "yes for simpo and orpo, whose TRL trainers call it, else no"),
    V(W, "no", "the base as loaded"),
    V(W, "yes", "embeddings, head and norms upcast to fp32"),
};

static const oom_option_value *const keep_grads_values[] = {
    V(W, "no", "freed by zero_grad's set_to_none, PyTorch 2.0 and later"),
    V(W, "yes", "kept and zeroed in place, as zero_grad before PyTorch 2.0"),
};

static const oom_option_value *const optim_in_bwd_values[] = {
    V(WT, "no", "one optimizer step after the backward, every gradient kept until then"),
    V(WT, "yes",
      "each parameter stepped in its gradient's hook and the gradient freed at once: torchtune's "
      "optimizer_in_bwd"),
};

static const oom_option_value *const compile_values[] = {
    V(W, "no", "eager PyTorch"),
    V(W, "yes",
      "torch.compile as torchtune's compile=True: its chunked loss compiled, the fp32 upcast "
      "fused into the cross-entropy; the layers counted as eager"),
};

static const oom_option_value *const nvls_values[] = {
    V(W, "auto", "on for compute capability 9.0 or later with more than 2 GPUs"),
    V(W, "no", "off, as NCCL_NVLS_ENABLE=0"),
    V(W, "yes", "on"),
};

const oom_option_value *const oomi_kv_cache_values[2] = {
    V(W, "vllm", "a serving engine's: sliding-window layers keep only the window"),
    V(W, "transformers", "transformers' prefill: every layer keeps every token"),
};

const oom_option_value *const oomi_objective_values[8] = {
    V(WT, "sft", "supervised fine-tuning; --batch counts samples"),
    V(WT, "dpo", "DPOTrainer; --batch counts pairs; a reference model"),
    V(WT, "ipo", "DPOTrainer with loss_type ipo; pairs; a reference model"),
    V(WT, "simpo", "CPOTrainer with loss_type simpo; pairs; no reference model"),
    V(WT, "orpo", "ORPOTrainer; pairs; no reference model"),
    V(WT, "kto", "KTOTrainer; --batch counts examples, at least 2; a reference model"),
    V(WT, "reward", "RewardTrainer; pairs"),
    V(W, "grpo", "GRPOTrainer; --batch counts completions"),
};

const oom_option_value *const oomi_reference_values[4] = {
    V(WT, "auto",
      "adapter under lora and qlora, else copy; none for grpo, whose beta defaults to 0"),
    V(WT, "copy", "a frozen copy of the model"),
    V(WT, "adapter", "the policy with its LoRA adapter disabled"),
    V(WT, "none", "no reference model"),
};

/* the precision enum's order */
static const oom_option_value *const ref_precision_values[] = {
    V(W, "auto", "as the policy's"),
    V(W, "fp32", "fp32 weights"),
    V(W, "fp16", "fp16 weights"),
    V(W, "bf16", "bf16 weights"),
    V(W, "amp-fp16", "fp32 weights under the policy's autocast"),
    V(W, "amp-bf16", "fp32 weights under the policy's autocast"),
    V(W, "int8", "a bitsandbytes 8-bit copy"),
    V(W, "4bit", "a bitsandbytes NF4 copy"),
};

static const oom_option_value *const precompute_values[] = {
    V(W, "no", "the reference model in memory, one forward per step"),
    V(W, "yes", "precompute_ref_log_probs: no reference model in memory"),
};

const oom_option_value *const oomi_rollout_values[2] = {
    V(W, "none", "transformers' generate in the trainer"),
    V(W, "vllm-colocate",
      "a vLLM engine sharing the trainer's GPU, as TRL's vllm_mode colocate and verl; plan "
      "splits the GPU between them"),
};

static const oom_option_value *const sleep_values[] = {
    V(W, "0", "the engine keeps its memory"),
    V(W, "1", "its weights offloaded to the CPU, its KV cache freed"),
    V(W, "2", "its weights discarded, its KV cache freed"),
};

/* the oomi_stack order; docs/stacks.md says what each keeps and where it was read */
const oom_option_value *const oomi_stack_values[OOMI_STACKS] = {
    STACK(WT, "transformers", "Hugging Face transformers 5.x with PEFT, Trainer or TRL",
          "transformers 5.23.0, peft 0.21.2", 1),
    STACK(WT, "transformers-4", "Hugging Face transformers 4.4x-4.5x with PEFT",
          "transformers 4.57.6, peft 0.17.1", 1),
    STACK(W, "liger",
          "transformers with Liger-Kernel: fused linear cross-entropy, RMSNorm, SwiGLU, RoPE "
          "(axolotl, LLaMA-Factory)",
          "liger-kernel 0.8.2 on transformers 5.23.0", 0),
    STACK(WT, "torchtune", "torchtune's single-device and distributed recipes",
          "torchtune 0.6.1, torchao 0.15.0", 1),
    STACK(WT, "torchtitan", "torchtitan's trainer: FSDP2, its own Llama 3, Qwen3, DeepSeek-V3",
          "torchtitan 0.3.0", 1),
    STACK(W, "unsloth",
          "Unsloth: Triton LoRA kernels, chunked cross-entropy, activations offloaded to the CPU",
          "unsloth 2026.8.19", 0),
};

const oom_option_value *const oomi_packing_values[3] = {
    V(WT, "none", "padded rows"),
    V(WT, "padding-free",
      "TRL padding_free: one row of batch x seq tokens, position ids restarting"),
    V(WT, "block-mask", "torchtune packed: batch rows with a document mask"),
};

/* model-parallel training (workload_layout.c) */

const oom_option_value *const oomi_engine_values[2] = {
    V(W, "megatron",
      "Megatron-Core (Megatron-LM, Megatron-Bridge, NeMo): fp32 gradient buffers, "
      "the distributed optimizer, Transformer Engine's kernels"),
    V(W, "torchtitan",
      "torchtitan 0.3: DTensor tensor parallelism, torch.distributed.pipelining, "
      "FSDP2"),
};

const oom_option_value *const oomi_sp_values[3] = {
    V(W, "auto", "yes with --tensor-parallel above 1"),
    V(W, "no", "the norms' activations replicated on every tensor-parallel GPU"),
    V(W, "yes", "the norms' activations split along the sequence, Megatron's --sequence-parallel"),
};

const oom_option_value *const oomi_pp_schedule_values[2] = {
    V(W, "1f1b", "one forward, one backward: stage r of P holds P - r micro-batches"),
    F(W, "interleaved:N", "N model chunks per GPU (virtual stages), Megatron's interleaved 1F1B"),
};

const oom_option_value *const oomi_pp_layers_values[2] = {
    V(W, "auto", "as even as the layers allow, the remainder to the stages after the first"),
    F(W, "N1,N2,...", "the layers of each stage (each virtual stage under interleaved:N)"),
};

const oom_option_value *const oomi_etp_values[2] = {
    V(W, "auto", "megatron: the tensor-parallel size (its default); torchtitan: 1"),
    F(W, "N", "GPUs each expert is split over"),
};

const oom_option_value *const oomi_recompute_method_values[2] = {
    V(W, "uniform", "the layers in groups of --recompute-layers, each group's input kept"),
    V(W, "block", "the first --recompute-layers layers of each stage recomputed, the rest kept"),
};

/* ---- the options --------------------------------------------------------------------------------
 */

#define OPT(name, metavar, help, dflt, cmds, vals)                                                 \
    &(const oom_option)                                                                            \
    {                                                                                              \
        OOM_OPTION_VERSION, name, metavar, help, vals, OOMI_ARRAY_LEN(vals), dflt, cmds, 0         \
    }
#define FREE(name, metavar, help, dflt, cmds)                                                      \
    &(const oom_option)                                                                            \
    {                                                                                              \
        OOM_OPTION_VERSION, name, metavar, help, NULL, 0, dflt, cmds, 0                            \
    }

/* pointers, so that oom_option can grow behind its version */
static const oom_option *const options[] = {
    FREE("model", "NAME|PATH",
         "a preset (--list-models), a config.json or its folder, or a Hugging Face Hub id "
         "ORG/NAME in the local Hub cache",
         NULL, WT),
    OPT("method", "METHOD", "what is run", "full", WT, oomi_method_values),
    OPT("precision", "PRECISION", "dtype of the weights and the compute", "auto", WT,
        oomi_precision_values),
    OPT("optimizer", "OPTIMIZER", "the optimizer, whose states the memory holds", "adamw", WT,
        oomi_optimizer_values),
    FREE("batch", "N", "micro-batch per GPU", "1", WT),
    OPT("seq", "N", "tokens per sample; inference: prompt + generated", "512", WT, seq_values),
    FREE("grad-accum", "N", "gradient accumulation steps", "1", WT),
    OPT("checkpointing", "MODE", "activation checkpointing", "none", WT, checkpointing_values),
    OPT("attention", "KERNEL", "attention implementation", "sdpa", WT, oomi_attention_values),
    OPT("loss", "LOSS", "the loss over the vocabulary", "standard", WT, oomi_loss_values),
    FREE("gpus", "N",
         "data-parallel GPUs: copies of the model, each over tensor x pipeline x context "
         "parallel GPUs",
         "1", W),
    OPT("sharding", "STAGE", "what is sharded over the GPUs", "none", W, oomi_sharding_values),
    OPT("fsdp-param-dtype", "DTYPE",
        "fsdp2: dtype of the sharded parameters, gradients and AdamW "
        "states",
        "fp32", W, fsdp_dtype_values),
    OPT("reshard-after-forward", "WHAT",
        "fsdp2: the blocks' gathered parameters after the forward (the root never reshards)", "yes",
        W, reshard_values),
    OPT("offload", "WHAT", "CPU offload", "none", W, oomi_offload_values),
    FREE("zero3-max-live-params", "N",
         "zero3: gathered elements beyond which DeepSpeed stops prefetching, as "
         "stage3_max_live_parameters",
         "1e9", W),
    FREE("zero3-prefetch-bucket", "N",
         "zero3: elements gathered ahead of use, as stage3_prefetch_bucket_size; 0: no prefetch",
         "5e7", W),
    FREE("zero3-persistence-threshold", "N",
         "zero3: tensors smaller than N elements stay gathered, as "
         "stage3_param_persistence_threshold",
         "1e5", W),
    FREE("zero3-max-reuse-distance", "N",
         "zero3: a module used again within N elements keeps its parameters gathered, as "
         "stage3_max_reuse_distance",
         "1e9", W),
    FREE("zero3-reduce-bucket", "N",
         "zero3: elements of the gradient bucket, as reduce_bucket_size", "5e8", W),
    FREE("lora-rank", "R", "LoRA rank", "16", WT),
    OPT("lora-targets", "MODULES", "adapted modules, Hugging Face names", "default", WT,
        targets_values),
    FREE("lora-dropout", "P", "LoRA dropout probability", "0.05", WT),
    OPT("double-quant", "WHEN", "4-bit base: bnb_4bit_use_double_quant", "auto", W,
        double_quant_values),
    OPT("adapter-dtype", "DTYPE", "LoRA adapters, their gradients and AdamW states", "auto", W,
        oomi_adapter_dtype_values),
    OPT("bitsandbytes", "VERSION",
        "4-bit base: the bitsandbytes release its 4-bit linears run (0.43: each keeps its input)",
        "0.44", W, oomi_bitsandbytes_values),
    OPT("quantizer", "CODE", "4-bit base: the code that quantizes it at load", "transformers", W,
        oomi_quantizer_values),
    OPT("kbit-prepare", "WHEN",
        "bitsandbytes base: PEFT's prepare_model_for_kbit_training, which upcasts embeddings, "
        "head and norms to fp32",
        "auto", W, kbit_prepare_values),
    FREE("decoder-seq", "N", "encoder-decoder models: target tokens (default = seq)", NULL, W),
    FREE("max-positions", "N",
         "raise the model's max positions (RoPE scaling) to allow a longer --seq", NULL, W),
    OPT("keep-grads", "WHEN", "keep gradients between steps", "no", W, keep_grads_values),
    OPT("optimizer-in-backward", "WHEN", "the optimizer step fused into the backward", "no", WT,
        optim_in_bwd_values),
    OPT("compile", "WHEN", "torch.compile (modelled: torchtune's compiled chunked loss)", "no", W,
        compile_values),
    FREE("overhead", "SIZE",
         "CUDA context + workspaces outside PyTorch (default: per GPU generation)", NULL, W),
    FREE("cublas-workspace", ":KIB:COUNT[:KIB:COUNT...]",
         "cuBLAS workspace of the compute stream, as CUBLAS_WORKSPACE_CONFIG (default "
         ":4096:2:16:8, on compute capability 9.x :4096:8)",
         NULL, W),
    FREE("nccl-buffsize", "SIZE",
         "NCCL's SIMPLE buffer per channel, as NCCL_BUFFSIZE (bare number = bytes; default 4 "
         "MiB)",
         NULL, W),
    FREE("nccl-channels", "N", "NCCL channels, as NCCL_MAX_NCHANNELS (default 32)", NULL, W),
    FREE("nccl-communicators", "N",
         "NCCL communicators with buffers (default 1; 2 for vLLM's tensor parallelism: its own "
         "and torch.distributed's)",
         NULL, W),
    OPT("nccl-nvls", "WHEN", "NVLink SHARP buffers, as NCCL_NVLS_ENABLE", "auto", W, nvls_values),
    FREE("tensor-parallel", "N",
         "GPUs each layer is split over: vLLM's --tensor-parallel-size; in training Megatron's "
         "--tensor-model-parallel-size, torchtitan's tensor_parallel_degree",
         "1", W),
    OPT("sequence-parallel", "WHEN",
        "training with tensor parallelism: the norms' activations split along the sequence", "auto",
        W, oomi_sp_values),
    FREE("pipeline-parallel", "N",
         "training: pipeline stages, the layers split over them (Megatron's "
         "--pipeline-model-parallel-size); --grad-accum counts the micro-batches",
         "1", W),
    OPT("pp-schedule", "SCHEDULE", "training with pipeline stages: the schedule", "1f1b", W,
        oomi_pp_schedule_values),
    OPT("pp-layers", "LAYERS", "training with pipeline stages: the layers of each stage", "auto", W,
        oomi_pp_layers_values),
    FREE("expert-parallel", "N",
         "training: GPUs the experts are spread over (Megatron's --expert-model-parallel-size)",
         "1", W),
    OPT("expert-tensor-parallel", "N",
        "training: GPUs each expert is split over (Megatron's --expert-tensor-parallel-size)",
        "auto", W, oomi_etp_values),
    FREE("context-parallel", "N",
         "training: GPUs each sequence is split over, attention as a ring (Megatron's "
         "--context-parallel-size)",
         "1", W),
    OPT("engine", "ENGINE",
        "training with tensor, pipeline, expert or context parallelism: whose memory is "
        "modelled",
        "megatron", W, oomi_engine_values),
    OPT("recompute-method", "METHOD",
        "engine megatron, checkpointing full: which layers are recomputed, Megatron's "
        "--recompute-method",
        "uniform", W, oomi_recompute_method_values),
    FREE("recompute-layers", "N",
         "engine megatron, checkpointing full: Megatron's --recompute-num-layers", "1", W),
    OPT("kv-cache", "STACK", "inference: whose KV cache is counted", "vllm", W,
        oomi_kv_cache_values),
    OPT("objective", "OBJECTIVE", "training objective as TRL runs it", "sft", WT,
        oomi_objective_values),
    OPT("reference", "MODEL", "dpo, ipo, kto and grpo: the reference model", "auto", WT,
        oomi_reference_values),
    OPT("reference-precision", "PRECISION", "weights of a reference copy", "auto", W,
        ref_precision_values),
    OPT("precompute-ref", "WHEN", "reference log-probs computed before training", "no", W,
        precompute_values),
    FREE("num-generations", "G", "grpo: completions per prompt", "8", W),
    FREE("completion-len", "N",
         "grpo: generated tokens of the --seq total (default half of it); inference: tokens "
         "generated after a prompt of the rest (default 0: a prefill of all --seq tokens)",
         NULL, W),
    OPT("rollout", "WHERE", "grpo: where the completions are generated", "none", W,
        oomi_rollout_values),
    OPT("sleep-mode", "LEVEL", "rollout vllm-colocate: vLLM's sleep level while the trainer trains",
        "0", W, sleep_values),
    OPT("packing", "MODE", "documents packed into rows", "none", WT, oomi_packing_values),
    OPT("stack", "STACK", "the training code whose memory is modelled, and its versions",
        "transformers", WT, oomi_stack_values),
    FREE("tokens-per-batch", "N",
         "packing: packed tokens per micro-batch (default batch x seq); estimate: --seq is then "
         "the longest document; plan: N / seq packs of --seq, fixed",
         NULL, WT),
    FREE("max-num-batched-tokens", "N",
         "plan --format vllm: the tokens of vLLM's start-up profile run, as its "
         "--max-num-batched-tokens (default: the plan's sequence, or its batch if larger)",
         NULL, W),
    FREE("max-num-seqs", "N",
         "plan --format vllm: the sequences vLLM's sampler is profiled over, as its "
         "--max-num-seqs (default: the plan's batch)",
         NULL, W),
};

const oom_option *const *oom_workload_options(size_t *count)
{
    if (count)
        *count = OOMI_ARRAY_LEN(options);
    return options;
}

const oom_option *oomi_workload_option(const char *name)
{
    size_t i;
    for (i = 0; name && i < OOMI_ARRAY_LEN(options); i++)
        if (!strcmp(options[i]->name, name))
            return options[i];
    return NULL;
}

/* ---- reading values
 * ------------------------------------------------------------------------------ */

void oomi_option_values_text(oomi_sb *sb, const oom_option *o, const char *sep)
{
    size_t i;
    for (i = 0; i < o->n_values; i++)
        oomi_sb_printf(sb, "%s%s", i ? sep : "", o->values[i]->name);
}

int oomi_option_parse(unsigned *out, const oom_option *o, const char *text)
{
    oomi_sb sb = OOMI_SB_INIT;
    size_t i;
    for (i = 0; i < o->n_values; i++)
        if (!o->values[i]->form && !oomi_name_cmp(text, o->values[i]->name)) {
            *out = (unsigned)i;
            return OOM_OK;
        }
    oomi_option_values_text(&sb, o, ", ");
    oomi_fail(OOM_EINVAL, "%s '%s' is not one of: %s", o->name, text, sb.buf ? sb.buf : "");
    oomi_sb_free(&sb);
    return OOM_EINVAL;
}

const char *oomi_value_name(const oom_option_value *const *values, size_t n, unsigned v)
{
    return v < n ? values[v]->name : "?";
}

int oom_option_help(char **out, const oom_option *o)
{
    oomi_sb sb = OOMI_SB_INIT;
    size_t i;

    if (!out || !o)
        return oomi_fail(OOM_EINVAL, "option help: missing argument");
    *out = NULL;
    oomi_sb_puts(&sb, o->help);
    if (o->version >= 2 && o->default_value) {
        const char *vh = NULL;
        for (i = 0; i < o->n_values && !vh; i++)
            if (!o->values[i]->form && !strcmp(o->values[i]->name, o->default_value))
                vh = o->values[i]->help;
        oomi_sb_printf(&sb, " (default %s%s%s)", o->default_value, vh ? ": " : "", vh ? vh : "");
    }
    return oomi_sb_finish(&sb, out);
}
