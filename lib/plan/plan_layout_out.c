/*
 * plan_layout_out.c - a model-parallel plan written out: the plan JSON's "layout", the text
 * report's lines, and the formats of the engines that run it in their own keys: Megatron-LM's
 * pretrain_gpt.py arguments (megatron/training/arguments.py and the config dataclasses it turns
 * into flags), Megatron-Bridge's run_recipe.py overrides (ConfigContainer fields), a torchtitan
 * 0.3.0 config function (torchtitan/config/configs.py ParallelismConfig, TrainingConfig), and
 * the Slurm batch script that launches either with torchrun on every node.
 */
#include "plan/plan.h"

#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool has_layout(const oom_plan_result *r)
{
    return r->version >= 8 && r->pipeline_parallel > 0;
}

static const char *engine_name(const oom_plan_result *r)
{
    return OOMI_VALUE_NAME(oomi_engine_values, r->engine);
}

json_object *oomi_plan_layout_json(const oom_plan_result *r)
{
    json_object *o;
    const oom_knobs *k = &r->best->knobs;
    if (!has_layout(r) || !(o = json_object_new_object()))
        return NULL;
    oomi_json_put(o, "engine", json_object_new_string(engine_name(r)));
    oomi_json_put(o, "tensor_parallel", json_object_new_int64(r->tensor_parallel));
    oomi_json_put(o, "sequence_parallel", json_object_new_boolean(r->sequence_parallel));
    oomi_json_put(o, "context_parallel", json_object_new_int64(r->context_parallel));
    oomi_json_put(o, "pipeline_parallel", json_object_new_int64(r->pipeline_parallel));
    oomi_json_put(o, "virtual_stages", json_object_new_int64(r->virtual_stages));
    oomi_json_put(o, "schedule",
                  json_object_new_string(r->virtual_stages > 1 ? "interleaved" : "1f1b"));
    oomi_json_put(o, "stage_layers", oomi_json_string_or_null(r->stage_layers));
    oomi_json_put(o, "expert_parallel", json_object_new_int64(r->expert_parallel));
    oomi_json_put(o, "expert_tensor_parallel", json_object_new_int64(r->expert_tensor_parallel));
    oomi_json_put(o, "data_parallel", json_object_new_int64(k->gpus));
    oomi_json_put(o, "gpus", json_object_new_int64(r->nodes * r->gpus_per_node));
    oomi_json_put(o, "microbatches", json_object_new_int64(k->grad_accum));
    oomi_json_put(o, "pipeline_bubble", oomi_json_number(r->bubble, 3));
    oomi_json_put(o, "optimizer_cpu_offload",
                  json_object_new_boolean(k->offload == OOM_OFFLOAD_OPTIMIZER));
    return o;
}

void oomi_plan_layout_text(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_knobs *k = &r->best->knobs;
    if (!has_layout(r))
        return;
    oomi_sb_printf(sb, "  %-30s: tp %ld%s x cp %ld x pp %ld x dp %ld = %ld GPUs (%ld x %ld)\n",
                   "layout", r->tensor_parallel, r->sequence_parallel ? " (sequence parallel)" : "",
                   r->context_parallel, r->pipeline_parallel, k->gpus, r->nodes * r->gpus_per_node,
                   r->nodes, r->gpus_per_node);
    if (r->expert_parallel > 1 || r->expert_tensor_parallel > 1)
        oomi_sb_printf(sb, "  %-30s: ep %ld x etp %ld\n", "experts over", r->expert_parallel,
                       r->expert_tensor_parallel);
    if (r->pipeline_parallel > 1)
        oomi_sb_printf(sb, "  %-30s: %s, %ld micro-batches, layers %s, bubble %.0f%%\n", "pipeline",
                       r->virtual_stages > 1 ? "interleaved" : "1f1b", k->grad_accum,
                       r->stage_layers ? r->stage_layers : "-", 100 * r->bubble);
    oomi_sb_printf(sb, "  %-30s: %s (--format %s)\n", "engine", engine_name(r),
                   r->engine ? "torchtitan-parallel" : "megatron, megatron-bridge");
}

/* the layers of each virtual stage, or NULL where they are even (the engines' default) */
static bool uneven(const oom_plan_result *r)
{
    const char *p = r->stage_layers;
    long first = -1;
    while (p && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (first >= 0 && v != first)
            return true;
        first = v;
        p = *end ? end + 1 : end;
    }
    return false;
}

/* Megatron's --pipeline-model-parallel-layout of the plan's split: stages in virtual-stage order
 * split by '|', E the embedding, t a decoder layer, L the loss, "(x|)*n" n stages alike, commas
 * cosmetic (pipeline_parallel_layer_layout.py: "Ettt|(tt|)*29,m|L") */
static void layers_of(oomi_sb *sb, long n)
{
    if (n == 1)
        oomi_sb_putc(sb, 't');
    else if (n > 1)
        oomi_sb_printf(sb, "t*%ld", n);
}

static void megatron_layout(oomi_sb *sb, const oom_plan_result *r)
{
    const char *p = r->stage_layers;
    long prev = -1, run = 0, i = 0;
    while (p && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        p = *end ? end + 1 : end;
        if (i++ == 0) { /* the first stage, with the embedding */
            oomi_sb_putc(sb, 'E');
            layers_of(sb, v);
            oomi_sb_putc(sb, !*p ? 'L' : '|');
            continue;
        }
        if (!*p) { /* the last, with the loss */
            if (run)
                oomi_sb_puts(sb, "("), layers_of(sb, prev), oomi_sb_printf(sb, "|)*%ld,", run);
            layers_of(sb, v);
            oomi_sb_putc(sb, 'L');
            break;
        }
        if (v != prev && run) {
            oomi_sb_puts(sb, "("), layers_of(sb, prev), oomi_sb_printf(sb, "|)*%ld,", run);
            run = 0;
        }
        prev = v, run++;
    }
}

static const char *megatron_precision(oom_precision p)
{
    return p == OOM_PRECISION_FP32                                  ? NULL
           : p == OOM_PRECISION_FP16 || p == OOM_PRECISION_AMP_FP16 ? "--fp16"
                                                                    : "--bf16";
}

static void header(oomi_sb *sb, const oom_plan_result *r, const char *what)
{
    char a[16];
    oomi_sb_printf(sb,
                   "# %s, planned by oomless for %s on %ld x %s (%ld node%s x %ld), engine %s:\n"
                   "# %s per GPU at the highest pipeline rank's peak\n",
                   what, r->model, r->nodes * r->gpus_per_node, r->gpu_id[0] ? r->gpu_id : "GPU",
                   r->nodes, r->nodes > 1 ? "s" : "", r->gpus_per_node, engine_name(r),
                   OOMI_SZ(a, r->best->estimate.device_peak));
}

/* Megatron's validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor or context
 * parallelism before Blackwell (megatron/training/arguments.py: the kernels' launch order keeps
 * its communication overlapped); set from Blackwell on it is harmless */
static bool one_connection(const oom_plan_result *r)
{
    return !r->engine && (r->tensor_parallel > 1 || r->context_parallel > 1);
}

static void torchrun_line(oomi_sb *sb, const oom_plan_result *r, const char *entry)
{
    oomi_sb_printf(sb,
                   "%storchrun --nnodes %ld --nproc-per-node %ld --rdzv-backend c10d "
                   "--rdzv-endpoint \"$MASTER_ADDR:29500\" %s",
                   one_connection(r) ? "CUDA_DEVICE_MAX_CONNECTIONS=1 " : "", r->nodes,
                   r->gpus_per_node, entry);
}

/* Megatron-LM's pretrain_gpt.py: the parallel, batch and recomputation arguments, beside the
 * model's own (--num-layers, --hidden-size, ...: the model's, not the plan's) */
static void format_megatron(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_knobs *k = &r->best->knobs;
    const char *prec = megatron_precision(k->precision);
    header(sb, r, "Megatron-LM (Megatron-Core) arguments of pretrain_gpt.py");
    oomi_sb_puts(sb, "MODEL_PARALLEL_ARGS=(\n");
    oomi_sb_printf(sb, "    --tensor-model-parallel-size %ld\n", r->tensor_parallel);
    if (r->sequence_parallel)
        oomi_sb_puts(sb, "    --sequence-parallel\n");
    oomi_sb_printf(sb, "    --pipeline-model-parallel-size %ld\n", r->pipeline_parallel);
    if (r->virtual_stages > 1 && !uneven(r))
        oomi_sb_printf(sb, "    --num-virtual-stages-per-pipeline-rank %ld\n", r->virtual_stages);
    if (uneven(r)) {
        oomi_sb_puts(sb, "    --pipeline-model-parallel-layout \"");
        megatron_layout(sb, r);
        oomi_sb_puts(sb, "\"\n");
    }
    if (r->expert_parallel > 1 || r->expert_tensor_parallel > 0)
        oomi_sb_printf(sb,
                       "    --expert-model-parallel-size %ld\n"
                       "    --expert-tensor-parallel-size %ld\n",
                       r->expert_parallel, r->expert_tensor_parallel);
    oomi_sb_printf(sb, "    --context-parallel-size %ld\n", r->context_parallel);
    if (k->sharding == OOM_SHARDING_ZERO1)
        oomi_sb_puts(sb, "    --use-distributed-optimizer\n");
    oomi_sb_puts(sb, ")\nTRAINING_ARGS=(\n");
    oomi_sb_printf(sb, "    --micro-batch-size %ld\n    --global-batch-size %ld\n", k->batch,
                   r->best->effective_batch);
    oomi_sb_printf(sb, "    --seq-length %ld\n", k->seq_len);
    if (prec)
        oomi_sb_printf(sb, "    %s\n", prec);
    if (k->checkpointing == OOM_CHECKPOINTING_FULL)
        oomi_sb_printf(sb,
                       "    --recompute-granularity full\n    --recompute-method %s\n"
                       "    --recompute-num-layers %ld\n",
                       r->recompute_method ? "block" : "uniform", r->recompute_layers);
    else if (k->checkpointing == OOM_CHECKPOINTING_SELECTIVE)
        oomi_sb_puts(sb, "    --recompute-granularity selective\n");
    if (k->offload == OOM_OFFLOAD_OPTIMIZER)
        oomi_sb_puts(sb,
                     "    --optimizer-cpu-offload\n    --overlap-cpu-optimizer-d2h-h2d\n"
                     "    --optimizer-offload-fraction 1.0\n    --use-precision-aware-optimizer\n");
    oomi_sb_puts(sb, ")\n# on every node, with MODEL_ARGS the model's own arguments:\n");
    torchrun_line(sb, r,
                  "pretrain_gpt.py \"${MODEL_ARGS[@]}\" \"${MODEL_PARALLEL_ARGS[@]}\" "
                  "\"${TRAINING_ARGS[@]}\"\n");
}

/* Megatron-Bridge's recipe stem of a preset ("llama-3.1-70b" -> "llama31_70b",
 * "qwen3-235b-a22b" -> "qwen3_235b_a22b"), the --model of scripts/training/run_recipe.py; "" for
 * a model given by path */
static void bridge_stem(char *out, size_t size, const char *model)
{
    size_t n = 0;
    const char *p = model;
    if (strchr(model, '/') || strstr(model, ".json")) {
        out[0] = '\0';
        return;
    }
    for (; *p && n + 1 < size; p++) {
        if (*p == '.')
            continue;
        if (*p == '-' && !strncmp(model, "llama-", 6) && p == model + 5)
            continue; /* llama31_70b: the family and its version run together */
        out[n++] = *p == '-' ? '_' : (char)oomi_tolower((unsigned char)*p);
    }
    out[n] = '\0';
}

static void format_bridge(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_knobs *k = &r->best->knobs;
    char stem[64], entry[160];
    header(sb, r, "Megatron-Bridge ConfigContainer overrides of scripts/training/run_recipe.py");
    bridge_stem(stem, sizeof stem, r->model);
    oomi_snprintf(entry, sizeof entry,
                  "scripts/training/run_recipe.py --model %s --mode pretrain \\\n    ",
                  stem[0] ? stem : "YOUR_MODEL");
    if (!stem[0])
        oomi_sb_puts(sb, "# the model is a config file: name its recipe in --model\n");
    torchrun_line(sb, r, entry);
    oomi_sb_printf(sb,
                   "model.tensor_model_parallel_size=%ld model.sequence_parallel=%s \\\n"
                   "    model.pipeline_model_parallel_size=%ld",
                   r->tensor_parallel, r->sequence_parallel ? "true" : "false",
                   r->pipeline_parallel);
    if (r->virtual_stages > 1) /* else null: a recipe's own would stay */
        oomi_sb_printf(sb, " model.virtual_pipeline_model_parallel_size=%ld", r->virtual_stages);
    else
        oomi_sb_puts(sb, " model.virtual_pipeline_model_parallel_size=null");
    /* the estimated split, always: a recipe's own (account_for_*_in_pipeline_split,
     * num_layers_in_first/last_pipeline_stage, DeepSeek-V3's layout builder) would differ, and
     * Megatron-Core refuses a layout beside them (TransformerConfig.__post_init__) */
    if (r->pipeline_parallel > 1) {
        oomi_sb_puts(sb, " \\\n    'model.pipeline_model_parallel_layout=\"");
        megatron_layout(sb, r);
        oomi_sb_puts(sb, "\"' model.account_for_embedding_in_pipeline_split=false \\\n"
                         "    model.account_for_loss_in_pipeline_split=false "
                         "model.num_layers_in_first_pipeline_stage=null \\\n"
                         "    model.num_layers_in_last_pipeline_stage=null");
    }
    /* no multi-token prediction: the planned model has none (DeepSeek-V3's recipe adds one) */
    oomi_sb_puts(sb, " model.mtp_num_layers=null");
    oomi_sb_printf(sb,
                   " \\\n    model.expert_model_parallel_size=%ld "
                   "model.expert_tensor_parallel_size=%ld model.context_parallel_size=%ld \\\n"
                   "    train.micro_batch_size=%ld train.global_batch_size=%ld "
                   "dataset.seq_length=%ld model.seq_length=%ld \\\n"
                   "    ddp.use_distributed_optimizer=%s",
                   r->expert_parallel,
                   r->expert_tensor_parallel > 0 ? r->expert_tensor_parallel : 1,
                   r->context_parallel, k->batch, r->best->effective_batch, k->seq_len, k->seq_len,
                   k->sharding == OOM_SHARDING_ZERO1 ? "true" : "false");
    if (k->checkpointing == OOM_CHECKPOINTING_FULL)
        oomi_sb_printf(sb,
                       " \\\n    model.recompute_granularity=full model.recompute_method=%s "
                       "model.recompute_num_layers=%ld",
                       r->recompute_method ? "block" : "uniform", r->recompute_layers);
    else if (k->checkpointing == OOM_CHECKPOINTING_SELECTIVE)
        oomi_sb_puts(sb, " \\\n    model.recompute_granularity=selective");
    else
        oomi_sb_puts(sb, " \\\n    model.recompute_granularity=null");
    if (k->offload == OOM_OFFLOAD_OPTIMIZER)
        oomi_sb_puts(sb, " \\\n    optimizer.optimizer_cpu_offload=true "
                         "optimizer.overlap_cpu_optimizer_d2h_h2d=true "
                         "optimizer.optimizer_offload_fraction=1.0 "
                         "optimizer.use_precision_aware_optimizer=true");
    oomi_sb_putc(sb, '\n');
}

/* torchtitan 0.3.0's model (--module) and flavor of a preset, and a config function of its
 * registry to start from (torchtitan/models/<module>/config_registry.py) */
typedef struct titan_model {
    const char *preset, *module, *flavor, *base, *hf; /* hf: the checkpoint's repository */
} titan_model;

static const titan_model titan_models[] = {
    {"llama-3.2-1b", "llama3", "1B", "llama3_8b", "Llama-3.2-1B"},
    {"llama-3.2-3b", "llama3", "3B", "llama3_8b", "Llama-3.2-3B"},
    {"llama-3.1-8b", "llama3", "8B", "llama3_8b", "Llama-3.1-8B"},
    {"llama-3.1-70b", "llama3", "70B", "llama3_70b", "Llama-3.1-70B"},
    {"llama-3.3-70b", "llama3", "70B", "llama3_70b", "Llama-3.3-70B-Instruct"},
    {"qwen3-0.6b", "qwen3", "0.6B", "qwen3_0_6b", "Qwen3-0.6B"},
    {"qwen3-1.7b", "qwen3", "1.7B", "qwen3_1_7b", "Qwen3-1.7B"},
    {"qwen3-4b", "qwen3", "4B", "qwen3_14b", "Qwen3-4B"},
    {"qwen3-8b", "qwen3", "8B", "qwen3_14b", "Qwen3-8B"},
    {"qwen3-14b", "qwen3", "14B", "qwen3_14b", "Qwen3-14B"},
    {"qwen3-32b", "qwen3", "32B", "qwen3_32b", "Qwen3-32B"},
    {"qwen3-30b-a3b", "qwen3", "30B-A3B", "qwen3_30b_a3b", "Qwen3-30B-A3B"},
    {"qwen3-235b-a22b", "qwen3", "235B-A22B", "qwen3_30b_a3b", "Qwen3-235B-A22B"},
    {"deepseek-v2-lite", "deepseek_v3", "16B", "deepseek_v3_16b", "DeepSeek-V2-Lite"},
    {"deepseek-v3", "deepseek_v3", "671B", "deepseek_v3_671b", "DeepSeek-V3"},
};

static const titan_model *titan_of(const char *model)
{
    size_t i;
    for (i = 0; i < OOMI_ARRAY_LEN(titan_models); i++)
        if (!oomi_strcasecmp(model, titan_models[i].preset))
            return &titan_models[i];
    return NULL;
}

/* torchtitan's module names of each virtual stage (tok_embeddings, layers.N, norm, lm_head:
 * torchtitan/models/common/decoder.py), parallelism.module_fqns_per_model_part */
static void titan_parts(oomi_sb *sb, const oom_plan_result *r)
{
    const char *p = r->stage_layers;
    long layer = 0;
    oomi_sb_puts(sb, "    config.parallelism.module_fqns_per_model_part = [\n");
    while (p && *p) {
        char *end;
        long v = strtol(p, &end, 10), i;
        oomi_sb_printf(sb, "        [%s", layer == 0 ? "\"tok_embeddings\", " : "");
        for (i = 0; i < v; i++)
            oomi_sb_printf(sb, "%s\"layers.%ld\"", i ? ", " : "", layer + i);
        oomi_sb_printf(sb, "%s],\n", *end ? "" : ", \"norm\", \"lm_head\"");
        layer += v;
        p = *end ? end + 1 : end;
    }
    oomi_sb_puts(sb, "    ]\n");
}

static int format_titan(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_knobs *k = &r->best->knobs;
    const titan_model *t = titan_of(r->model);
    if (!t)
        return oomi_fail(OOM_EUNSUPPORTED,
                         "torchtitan 0.3.0 has no model of '%s' (its llama3, qwen3 and "
                         "deepseek_v3 flavors)",
                         r->model);
    if (k->precision != OOM_PRECISION_BF16 && k->precision != OOM_PRECISION_AMP_BF16 &&
        k->precision != OOM_PRECISION_FP32)
        return oomi_fail(OOM_EUNSUPPORTED,
                         "torchtitan 0.3.0 trains in bfloat16 or float32 (training.dtype, "
                         "mixed_precision_param), not precision '%s'",
                         oom_precision_name(k->precision));
    oomi_sb_puts(sb, "\"\"\"");
    header(sb, r, "torchtitan 0.3.0 config function");
    oomi_sb_puts(sb, "# Save as oomless_torchtitan_plan.py on PYTHONPATH; on every node:\n# ");
    torchrun_line(sb, r,
                  "-m torchtitan.train --module oomless_torchtitan_plan --config plan\n\"\"\"\n");
    if (k->checkpointing == OOM_CHECKPOINTING_FULL)
        oomi_sb_puts(sb, "from torchtitan.distributed.activation_checkpoint import FullAC\n");
    oomi_sb_printf(sb,
                   "from torchtitan.models.%s import model_registry\n"
                   "from torchtitan.models.%s.config_registry import %s\n\n\n"
                   "def plan():\n    config = %s()\n"
                   "    config.model_spec = model_registry(\"%s\")\n"
                   "    config.hf_assets_path = \"./assets/hf/%s\"  # tokenizer and checkpoint\n",
                   t->module, t->module, t->base, t->base, t->flavor, t->hf);
    oomi_sb_printf(sb,
                   "    config.training.local_batch_size = %ld\n"
                   "    config.training.global_batch_size = %ld\n"
                   "    config.training.seq_len = %ld\n"
                   "    config.training.dtype = \"%s\"\n"
                   "    config.training.mixed_precision_param = \"%s\"\n"
                   "    # eager, as estimated: CUDA graphs (a pool of their own) refuse pipeline\n"
                   "    # parallelism and the default expert-parallel dispatcher (trainer.py)\n"
                   "    config.training.disable_cuda_graphs = True\n",
                   k->batch * (r->pipeline_parallel > 1 ? k->grad_accum : 1),
                   r->best->effective_batch, k->seq_len,
                   k->precision == OOM_PRECISION_BF16 ? "bfloat16" : "float32",
                   k->precision == OOM_PRECISION_FP32 ? "float32" : "bfloat16");
    oomi_sb_printf(sb,
                   "    config.parallelism.data_parallel_shard_degree = %ld\n"
                   "    config.parallelism.tensor_parallel_degree = %ld\n"
                   "    config.parallelism.enable_sequence_parallel = %s\n"
                   "    config.parallelism.context_parallel_degree = %ld\n"
                   "    config.parallelism.expert_parallel_degree = %ld\n"
                   "    config.parallelism.pipeline_parallel_degree = %ld\n",
                   k->gpus, r->tensor_parallel, r->sequence_parallel ? "True" : "False",
                   r->context_parallel, r->expert_parallel, r->pipeline_parallel);
    if (r->pipeline_parallel > 1) {
        oomi_sb_printf(sb,
                       "    config.parallelism.pipeline_parallel_schedule = \"%s\"\n"
                       "    config.parallelism.pipeline_parallel_microbatch_size = %ld\n",
                       r->virtual_stages > 1 ? "Interleaved1F1B" : "1F1B", k->batch);
        titan_parts(sb, r);
    }
    if (k->checkpointing == OOM_CHECKPOINTING_FULL)
        oomi_sb_puts(sb, "    config.activation_checkpoint = FullAC.Config()\n");
    else
        oomi_sb_puts(sb, "    config.activation_checkpoint = None\n");
    oomi_sb_puts(sb, "    return config\n");
    return OOM_OK;
}

static void format_slurm(oomi_sb *sb, const oom_plan_result *r)
{
    oomi_sb_puts(sb, "#!/bin/bash\n");
    header(sb, r, "a Slurm batch script");
    oomi_sb_printf(sb,
                   "#SBATCH --nodes=%ld\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=%ld\n"
                   "#SBATCH --exclusive\n"
                   "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
                   "export MASTER_ADDR\n",
                   r->nodes, r->gpus_per_node);
    if (r->engine) {
        oomi_sb_puts(sb, "# oomless_torchtitan_plan.py: oomless plan --format torchtitan-parallel\n"
                         "srun ");
        torchrun_line(sb, r,
                      "-m torchtitan.train --module oomless_torchtitan_plan --config plan\n");
        return;
    }
    oomi_sb_puts(sb, "# MODEL_PARALLEL_ARGS, TRAINING_ARGS: oomless plan --format megatron; "
                     "MODEL_ARGS: the model's\n"
                     "srun ");
    if (one_connection(r)) /* srun runs a command: the variable through env */
        oomi_sb_puts(sb, "env ");
    torchrun_line(sb, r,
                  "pretrain_gpt.py \"${MODEL_ARGS[@]}\" \"${MODEL_PARALLEL_ARGS[@]}\" "
                  "\"${TRAINING_ARGS[@]}\"\n");
}

int oomi_plan_format_layout(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    const char *format = f->name;
    bool titan = !strcmp(format, "torchtitan-parallel");
    if (!has_layout(r))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "format '%s' writes a model-parallel layout; this plan is data "
                         "parallel (plan more GPUs with --nodes and --gpus-per-node, or fix a "
                         "layout with --tensor-parallel, --pipeline-parallel, --engine)",
                         format);
    if (strcmp(format, "slurm") && titan != (r->engine == OOMI_ENGINE_TORCHTITAN))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "format '%s' is %s's, this plan's memory is %s's: plan with --engine %s",
                         format, titan ? "torchtitan" : "Megatron", engine_name(r),
                         titan ? "torchtitan" : "megatron");
    if (!strcmp(format, "megatron"))
        format_megatron(sb, r);
    else if (!strcmp(format, "megatron-bridge"))
        format_bridge(sb, r);
    else if (titan)
        return format_titan(sb, r);
    else
        format_slurm(sb, r);
    return OOM_OK;
}
