/* plan_packing.c - a training plan with sequence packing (workload option packing; docs/plan.md,
 * "Sequence packing"): the micro-batch is best->knobs.batch packs of seq tokens, so the planner's
 * search over the micro-batch is a search over the packed tokens per micro-batch in steps of one
 * pack, and the effective batch counts packs (tokens per optimizer step = effective batch x seq).
 * Its JSON, its text line and the settings in TRL's and torchtune's own keys. */
#include "plan/plan.h"

#include <json-c/json.h>
#include <string.h>

static const char *py(bool b)
{
    return b ? "true" : "false";
}

static bool packed(const oom_plan_result *r)
{
    return r->version >= 7 && r->found && r->packing != OOMI_PACKING_NONE && !r->inference;
}

json_object *oomi_plan_packing_json(const oom_plan_result *r)
{
    const oom_knobs *k;
    json_object *o;
    if (!packed(r) || !(o = json_object_new_object()))
        return NULL;
    k = &r->best->knobs;
    oomi_json_put(o, "mode",
                  json_object_new_string(OOMI_VALUE_NAME(oomi_packing_values, r->packing)));
    oomi_json_put(o, "tokens_per_batch", json_object_new_int64(r->tokens_per_batch));
    oomi_json_put(o, "packs_per_batch", json_object_new_int64(k->batch));
    oomi_json_put(o, "pack_tokens", json_object_new_int64(k->seq_len));
    oomi_json_put(o, "tokens_per_step",
                  json_object_new_int64(r->best->effective_batch * k->seq_len));
    return o;
}

void oomi_plan_packing_text(oomi_sb *sb, const oom_plan_result *r)
{
    if (packed(r))
        oomi_sb_printf(sb,
                       "  %-30s: %s, %ld tokens per micro-batch (%ld packs of %ld), %ld per "
                       "optimizer step\n",
                       "packing", OOMI_VALUE_NAME(oomi_packing_values, r->packing),
                       r->tokens_per_batch, r->best->knobs.batch, r->best->knobs.seq_len,
                       r->best->effective_batch * r->best->knobs.seq_len);
}

/* TRL's SFTConfig (trl/trainer/sft_config.py, trl 1.16): packing with the "bfd" strategy packs
 * documents into examples of max_length and turns padding_free on, which flattens the
 * per_device_train_batch_size examples into one row (SFTTrainer.__init__: self.padding_free =
 * args.padding_free or (args.packing and args.packing_strategy in {"bfd", "bfd_split"})) */
static int format_trl_sft(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_knobs *k = &r->best->knobs;
    if (r->packing != OOMI_PACKING_PADDING_FREE)
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: TRL packs padding-free (one row, position ids restarting): plan "
                         "with --packing padding-free, or --format torchtune for block-mask");
    oomi_sb_printf(sb,
                   "# SFTConfig: %ld packs of %ld tokens per micro-batch, flattened into one row "
                   "of %ld; %ld tokens per optimizer step\n"
                   "per_device_train_batch_size: %ld\ngradient_accumulation_steps: %ld\n"
                   "max_length: %ld\npacking: true\npacking_strategy: bfd\npadding_free: true\n"
                   "gradient_checkpointing: %s\nbf16: %s\nfp16: %s\n",
                   k->batch, k->seq_len, r->tokens_per_batch, r->best->effective_batch * k->seq_len,
                   k->batch, k->grad_accum, k->seq_len,
                   py(k->checkpointing != OOM_CHECKPOINTING_NONE),
                   py(oomi_is16(k->precision, true)), py(oomi_is16(k->precision, false)));
    return OOM_OK;
}

/* torchtune's recipe configs (recipes/configs, e.g. llama3_2/1B_full.yaml): batch_size and
 * gradient_accumulation_steps at the top, the dataset builder's packed flag (PackedDataset,
 * torchtune/datasets/_packed.py, packs to the tokenizer's max_seq_len), activation
 * checkpointing, dtype */
static int format_torchtune(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_knobs *k = &r->best->knobs;
    if (r->inference)
        return oomi_fail(OOM_EUNSUPPORTED, "plan: the torchtune format is for training plans");
    if (r->version >= 7 && r->packing == OOMI_PACKING_PADDING_FREE)
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: torchtune packs rows with a document mask: plan with --packing "
                         "block-mask, or --format trl for padding-free");
    if (packed(r))
        oomi_sb_printf(sb,
                       "# %ld packs of %ld tokens per micro-batch; %ld tokens per optimizer "
                       "step\n",
                       k->batch, k->seq_len, r->best->effective_batch * k->seq_len);
    oomi_sb_printf(sb,
                   "batch_size: %ld\ngradient_accumulation_steps: %ld\ndataset:\n  packed: %s\n"
                   "tokenizer:\n  max_seq_len: %ld\nenable_activation_checkpointing: %s\n"
                   "dtype: %s\n",
                   k->batch, k->grad_accum, packed(r) ? "True" : "False", k->seq_len,
                   k->checkpointing != OOM_CHECKPOINTING_NONE ? "True" : "False",
                   oomi_is16(k->precision, true)    ? "bf16"
                   : oomi_is16(k->precision, false) ? "fp16"
                                                    : "fp32");
    return OOM_OK;
}

int oomi_plan_format_packing(oomi_sb *sb, const oom_plan_result *r, const char *format)
{
    if (!strcmp(format, "torchtune"))
        return format_torchtune(sb, r);
    if (!packed(r))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: the trl format is for objective grpo with rollout vllm-colocate, "
                         "or for sft with --packing padding-free");
    return format_trl_sft(sb, r);
}

/* TRL's flags for a TrainingArguments script that builds an SFTConfig (--format args) */
void oomi_plan_packing_args(oomi_sb *sb, const oom_plan_result *r)
{
    if (packed(r) && r->packing == OOMI_PACKING_PADDING_FREE)
        oomi_sb_printf(sb, " --packing --padding_free --max_length %ld", r->best->knobs.seq_len);
}
