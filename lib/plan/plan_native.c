/* plan_native.c - a training plan in the formats of the PyTorch-native trainers: torchtitan (0.2:
 * a TOML job config; 0.3: a function that sets the plan on the Trainer.Config of a config
 * function) and torchtune (tune run's key=value overrides). Each refuses, saying why, what its
 * framework cannot run. */
#include "plan/plan.h"

#include <string.h>

static const char *yes(bool b)
{
    return b ? "true" : "false";
}

/* Python's spelling, as torchtune's configs write booleans (OmegaConf reads both) */
static const char *py(bool b)
{
    return b ? "True" : "False";
}

static int training_only(const oom_plan_result *r, const oomi_format *f)
{
    if (r->inference || r->measured)
        return oomi_fail(OOM_EUNSUPPORTED, "plan: the %s format is for training plans of a model",
                         f->name);
    return OOM_OK;
}

/* ---- torchtitan ------------------------------------------------------------------------------ */

/* What torchtitan cannot run. LoRA: 0.2.2 has none (config/job_config.py); 0.3.0 has a
 * LoRAConverter (components/lora.py), a converter of the model a config function builds
 * (model_registry(flavor, converters=[...]), as models/llama3/config_registry.py's
 * llama3_debugmodel_float8_emulate_lora), which settings put on a built config cannot add.
 * Precision: training.dtype and mixed_precision_param are "bfloat16" or "float32". Optimizers:
 * OptimizersContainer's "Adam" and "AdamW" (components/optimizer/optimizer.py). Checkpointing:
 * 0.2's ActivationCheckpoint takes mode full/selective with selective_ac_option N or "op"; 0.3's
 * activation_checkpoint is FullAC.Config, SelectiveAC.Config (op-level) or None
 * (distributed/activation_checkpoint.py); neither offloads a checkpoint's inputs. */
static int titan_check(const oom_plan_result *r, const oomi_format *f, bool v03)
{
    const oom_knobs *k = &r->best->knobs;
    const char *ck = oomi_plan_ck(r->best);
    int err;

    if ((err = training_only(r, f)))
        return err;
    if (k->method == OOM_METHOD_LORA || k->method == OOM_METHOD_QLORA)
        return oomi_fail(OOM_EUNSUPPORTED,
                         v03 ? "plan: torchtitan 0.3 takes LoRA only as a converter of the model "
                               "its config function builds (model_registry(flavor, "
                               "converters=[LoRAConverter.Config(rank, alpha, target_modules)])), "
                               "which settings on a built config cannot add: plan a full "
                               "fine-tune (--method full), or write the %s plan with --format "
                               "args or torchtune"
                             : "plan: torchtitan 0.2 has no LoRA: plan a full fine-tune "
                               "(--method full), or write the %s plan with --format args or "
                               "torchtune",
                         oom_method_name(k->method));
    if (oomi_is16(k->precision, false))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: torchtitan trains in bfloat16 or float32 (training.dtype, "
                         "mixed_precision_param), not %s: plan with --precision amp-bf16, bf16 or "
                         "fp32",
                         oom_precision_name(k->precision));
    if (k->optimizer != OOM_OPTIMIZER_ADAMW && k->optimizer != OOM_OPTIMIZER_ADAMW_FUSED)
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: torchtitan steps with AdamW or Adam (its OptimizersContainer), not "
                         "%s: plan with --optimizer adamw",
                         oom_optimizer_name(k->optimizer));
    if (strstr(ck, "+offload"))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: torchtitan does not offload the checkpoints' inputs "
                         "(checkpointing '%s'): plan with --checkpointing-variants torchtitan",
                         ck);
    if (v03 && !strncmp(ck, "nth:", 4))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: torchtitan 0.3 checkpoints every layer, fully or op by op "
                         "(FullAC, SelectiveAC), not one layer in N (checkpointing '%s'): plan "
                         "with --checkpointing-variants op-sac, or --format-version 0.2",
                         ck);
    return OOM_OK;
}

/* ZeRO-3 reshards the gathered parameters after the forward (FSDP's full shard); ZeRO-1 and 2
 * keep them (FSDP has no stage that shards only the optimizer) */
static bool reshards(const oom_knobs *k)
{
    return k->sharding == OOM_SHARDING_ZERO3;
}

/* training.dtype: "bfloat16" for pure bf16 weights (no fp32 copy), else float32 with
 * mixed_precision_param for the compute */
static const char *titan_dtype(const oom_knobs *k)
{
    return k->precision == OOM_PRECISION_BF16 ? "bfloat16" : "float32";
}

static const char *titan_mp(const oom_knobs *k)
{
    return oomi_is16(k->precision, true) ? "bfloat16" : "float32";
}

static void titan_selective_note(oomi_sb *sb)
{
    /* torchtitan's "selective" is op- or layer-level SAC, not the attention-core recomputation
     * planned: whole layers are its nearest, with less memory */
    oomi_sb_puts(sb, "# selective (attention-core) checkpointing was planned; torchtitan has no "
                     "such mode: full checkpoints whole layers (less memory)\n");
}

/* 0.2: a job config fragment (TOML), sections and keys of JobConfig (torchtitan/config/
 * job_config.py, v0.2.2): torchtitan derives the accumulation from global_batch_size /
 * (local_batch_size x data-parallel degree) */
static void titan_toml(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    const oom_knobs *k = &r->best->knobs;
    bool shard = k->sharding != OOM_SHARDING_NONE;

    oomi_sb_printf(sb,
                   "# %s %s job config (TOML: --job.config_file): micro-batch %ld x accumulation "
                   "%ld x %ld GPUs\n",
                   f->framework, f->version, k->batch, k->grad_accum, k->gpus);
    oomi_sb_printf(sb,
                   "[training]\nlocal_batch_size = %ld\nglobal_batch_size = %ld\nseq_len = %ld\n"
                   "dtype = \"%s\"\nmixed_precision_param = \"%s\"\nenable_cpu_offload = %s\n\n",
                   k->batch, r->best->effective_batch, k->seq_len, titan_dtype(k), titan_mp(k),
                   yes(k->offload != OOM_OFFLOAD_NONE));
    oomi_sb_printf(sb,
                   "[parallelism]\ndata_parallel_replicate_degree = %ld\n"
                   "data_parallel_shard_degree = %ld\nfsdp_reshard_after_forward = \"%s\"\n\n",
                   shard ? 1 : k->gpus, shard ? k->gpus : 1, reshards(k) ? "always" : "never");
    /* nth:N and op-sac: selective_ac_option "N" or "op" */
    if (oomi_plan_ck_variant(r->best)) {
        const char *ck = oomi_plan_ck(r->best);
        oomi_sb_printf(sb,
                       "[activation_checkpoint]\nmode = \"selective\"\n"
                       "selective_ac_option = \"%s\"\n",
                       strcmp(ck, "op-sac") ? ck + 4 : "op");
    } else if (k->checkpointing == OOM_CHECKPOINTING_SELECTIVE) {
        titan_selective_note(sb);
        oomi_sb_puts(sb, "[activation_checkpoint]\nmode = \"full\"\n");
    } else
        oomi_sb_printf(sb, "[activation_checkpoint]\nmode = \"%s\"\n",
                       oom_checkpointing_name(k->checkpointing));
}

/* 0.3: a module whose plan(config) sets the plan on the Trainer.Config a config function returns
 * (torchtitan/trainer.py Trainer.Config; training, parallelism: config/configs.py), for
 * `torchtitan.train --module M --config F` (config/manager.py) */
static void titan_python(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    const oom_knobs *k = &r->best->knobs;
    bool shard = k->sharding != OOM_SHARDING_NONE;
    const char *ck = oomi_plan_ck(r->best);
    const char *ac = !strcmp(ck, "op-sac")                        ? "SelectiveAC"
                     : k->checkpointing == OOM_CHECKPOINTING_NONE ? NULL
                                                                  : "FullAC";
    long per_node = k->gpus / (r->nodes > 1 ? r->nodes : 1);

    oomi_sb_printf(sb,
                   "\"\"\"oomless plan for %s %s: %s, micro-batch %ld x accumulation %ld x %ld "
                   "data-parallel\nranks = %ld sequences of %ld tokens per step.\n\n"
                   "torchtitan %s reads a config function (--module MODULE --config FUNCTION). "
                   "Save this file\nbeside your job's module as oomless_plan.py and wrap your "
                   "config function in plan():\n\n"
                   "    from oomless_plan import plan\n\n"
                   "    def planned():\n        return plan(llama3_8b())   # your config "
                   "function\n\n"
                   "torchrun --nproc_per_node=%ld%s -m torchtitan.train --module MODULE --config "
                   "planned\n\"\"\"\n",
                   f->framework, f->version, r->model, k->batch, k->grad_accum, k->gpus,
                   r->best->effective_batch, k->seq_len, f->version, per_node,
                   r->nodes > 1 ? " --nnodes=$NNODES --node_rank=$NODE_RANK --rdzv_backend=c10d "
                                  "--rdzv_endpoint=$MASTER_ADDR:29500"
                                : "");
    if (ac)
        oomi_sb_printf(sb, "from torchtitan.distributed.activation_checkpoint import %s\n", ac);
    oomi_sb_puts(
        sb, "\n\ndef plan(config):\n"
            "    \"\"\"The plan's settings on a torchtitan Trainer.Config; returns it.\"\"\"\n");
    oomi_sb_printf(sb,
                   "    config.training.local_batch_size = %ld\n"
                   "    config.training.global_batch_size = %ld\n"
                   "    config.training.seq_len = %ld\n"
                   "    config.training.dtype = \"%s\"\n"
                   "    config.training.mixed_precision_param = \"%s\"\n"
                   "    config.training.enable_cpu_offload = %s\n"
                   "    config.parallelism.data_parallel_replicate_degree = %ld\n"
                   "    config.parallelism.data_parallel_shard_degree = %ld\n",
                   k->batch, r->best->effective_batch, k->seq_len, titan_dtype(k), titan_mp(k),
                   py(k->offload != OOM_OFFLOAD_NONE), shard ? 1 : k->gpus, shard ? k->gpus : 1);
    if (shard)
        oomi_sb_printf(sb, "    config.parallelism.fsdp_reshard_after_forward = \"%s\"\n",
                       reshards(k) ? "always" : "never");
    if (k->checkpointing == OOM_CHECKPOINTING_SELECTIVE) {
        oomi_sb_puts(sb, "    ");
        titan_selective_note(sb);
    }
    if (ac)
        oomi_sb_printf(sb, "    config.activation_checkpoint = %s.Config()\n", ac);
    else
        oomi_sb_puts(sb, "    config.activation_checkpoint = None\n");
    oomi_sb_puts(sb, "    return config\n");
}

/* ---- torchtune ------------------------------------------------------------------------------- */

/* tune run's overrides (torchtune/config/_parse.py: `tune run RECIPE --config CONFIG key=value`),
 * one a line, so that $(oomless plan ... --format torchtune) passes them; the keys of the recipe
 * configs of torchtune 0.6.1 (recipes/configs/llama3_2/1B_full.yaml ...) and of the recipes that
 * read them: dataset.packed (PackedDataset packs to the tokenizer's max_seq_len),
 * enable_activation_checkpointing and enable_activation_offloading (offloads the checkpointed
 * layers' activations: needs checkpointing), ac_mode / ac_option (full_finetune_distributed:
 * selective checkpointing, one layer in N or op by op, with enable_activation_checkpointing
 * False), fsdp_cpu_offload and fsdp_reshard_after_forward (the distributed recipes), dtype (bf16
 * or fp32: the recipes refuse fp16). */
static int tune_check(const oom_plan_result *r, const oomi_format *f)
{
    const oom_knobs *k = &r->best->knobs;
    const char *ck = oomi_plan_ck(r->best);
    int err;

    if ((err = training_only(r, f)))
        return err;
    if (r->version >= 7 && r->packing == OOMI_PACKING_PADDING_FREE)
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: torchtune packs rows with a document mask: plan with --packing "
                         "block-mask, or --format trl for padding-free");
    if (oomi_is16(k->precision, false))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: torchtune's recipes train in bf16 or fp32 (\"full fp16 training "
                         "is not supported\"), not %s: plan with --precision bf16 or fp32",
                         oom_precision_name(k->precision));
    if (!strncmp(ck, "every:", 6) || (!strncmp(ck, "nth:", 4) && strstr(ck, "+offload")))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: torchtune checkpoints every layer (offloading their activations "
                         "or not), one layer in N (the N-th) or op by op, not '%s': plan with "
                         "--checkpointing-variants torchtitan or full+offload",
                         ck);
    return OOM_OK;
}

static void tune_overrides(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_knobs *k = &r->best->knobs;
    const char *ck = oomi_plan_ck(r->best);
    bool selective = !strncmp(ck, "nth:", 4) || !strcmp(ck, "op-sac");

    oomi_sb_printf(sb, "batch_size=%ld\ngradient_accumulation_steps=%ld\n", k->batch,
                   k->grad_accum);
    if (OOMI_PLAN_SEQ_KNOWN(r, r->best))
        oomi_sb_printf(sb, "tokenizer.max_seq_len=%ld\n", k->seq_len);
    oomi_sb_printf(sb, "dataset.packed=%s\n", py(oomi_plan_packed(r)));
    oomi_sb_printf(sb, "enable_activation_checkpointing=%s\nenable_activation_offloading=%s\n",
                   py(k->checkpointing != OOM_CHECKPOINTING_NONE && !selective),
                   py(strstr(ck, "+offload") != NULL));
    if (selective)
        oomi_sb_printf(sb, "ac_mode=selective\nac_option=%s\n",
                       strcmp(ck, "op-sac") ? ck + 4 : "op");
    if (k->gpus > 1)
        oomi_sb_printf(sb, "fsdp_cpu_offload=%s\nfsdp_reshard_after_forward=%s\n",
                       py(k->offload != OOM_OFFLOAD_NONE), py(reshards(k)));
    oomi_sb_printf(sb, "dtype=%s\n", oomi_is16(k->precision, true) ? "bf16" : "fp32");
}

int oomi_plan_format_native(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    bool v03 = oomi_format_since(f, "0.3");
    int err;

    if (!strcmp(f->name, "torchtune")) {
        if ((err = tune_check(r, f)))
            return err;
        /* torchtune has no autocast: its bf16 keeps no fp32 copy, less memory than planned */
        if (r->best->knobs.precision == OOM_PRECISION_AMP_BF16)
            oomi_notice("torchtune trains in bf16 without an fp32 copy of the weights: the "
                        "amp-bf16 plan is written as dtype=bf16, which needs less memory");
        tune_overrides(sb, r);
        return OOM_OK;
    }
    if ((err = titan_check(r, f, v03)))
        return err;
    (v03 ? titan_python : titan_toml)(sb, r, f);
    return OOM_OK;
}
