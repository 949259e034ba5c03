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

bool oomi_plan_packed(const oom_plan_result *r)
{
    return r->version >= 7 && r->found && r->packing != OOMI_PACKING_NONE && !r->inference;
}

json_object *oomi_plan_packing_json(const oom_plan_result *r)
{
    const oom_knobs *k;
    json_object *o;
    if (!oomi_plan_packed(r) || !(o = json_object_new_object()))
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
    if (oomi_plan_packed(r))
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
static int format_trl_sft(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    const oom_knobs *k = &r->best->knobs;
    if (r->packing != OOMI_PACKING_PADDING_FREE)
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: TRL packs padding-free (one row, position ids restarting): plan "
                         "with --packing padding-free, or --format torchtune for block-mask");
    oomi_sb_printf(sb,
                   "# %s %s: SFTConfig: %ld packs of %ld tokens per micro-batch, flattened into "
                   "one row of %ld; %ld tokens per optimizer step\n"
                   "per_device_train_batch_size: %ld\ngradient_accumulation_steps: %ld\n"
                   "max_length: %ld\npacking: true\npacking_strategy: bfd\npadding_free: true\n"
                   "%s: %s\nbf16: %s\nfp16: %s\n",
                   f->framework, f->version, k->batch, k->seq_len, r->tokens_per_batch,
                   r->best->effective_batch * k->seq_len, k->batch, k->grad_accum, k->seq_len,
                   oomi_hf_ck_key(f), py(k->checkpointing != OOM_CHECKPOINTING_NONE),
                   py(oomi_is16(k->precision, true)), py(oomi_is16(k->precision, false)));
    return OOM_OK;
}

int oomi_plan_format_packing(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    if (!oomi_plan_packed(r))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: the trl format is for objective grpo with rollout vllm-colocate, "
                         "or for sft with --packing padding-free");
    return format_trl_sft(sb, r, f);
}

/* TRL's flags for a TrainingArguments script that builds an SFTConfig (--format args) */
void oomi_plan_packing_args(oomi_sb *sb, const oom_plan_result *r)
{
    if (oomi_plan_packed(r) && r->packing == OOMI_PACKING_PADDING_FREE)
        oomi_sb_printf(sb, " --packing --padding_free --max_length %ld", r->best->knobs.seq_len);
}
