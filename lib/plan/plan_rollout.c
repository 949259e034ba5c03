/* plan_rollout.c - GRPO with a vLLM engine on the trainer's GPU: the split of the GPU between the
 * trainer and the engine (gpu_memory_utilization, the KV cache the engine finds, the trainer's
 * micro-batch) and the plan in TRL's and verl's keys. docs/plan.md, "RL with a colocated rollout
 * engine", has the model and a worked case. */
#include "plan/plan.h"

#include <json-c/json.h>
#include <math.h>
#include <string.h>

/* TRL starts its colocated engine with max_num_batched_tokens=4096 (trl/generation/
 * vllm_generation.py, VLLMGeneration: "vLLM v1 memory profiler is misled by the high default");
 * the profile run's forward is over that many tokens */
#define ROLLOUT_BATCHED_TOKENS 4096

/* the engine loads the policy's checkpoint: in its 16-bit dtype, or 4-bit for QLoRA (TRL passes
 * quantization="bitsandbytes" when the model has Linear4bit layers); LoRA adapters are merged
 * into the weights TRL sends it, so it holds the base model */
static oom_precision engine_precision(const oom_workload *w)
{
    if (w->k.method == OOM_METHOD_QLORA)
        return OOM_PRECISION_4BIT;
    return oomi_is16(w->k.precision, false) ? OOM_PRECISION_FP16 : OOM_PRECISION_BF16;
}

/* the engine's estimate at batch 1 and seq tokens */
static int engine_estimate(oom_estimate *e, oomi_rollout_engine *ro, long seq)
{
    oom_knobs k = ro->engine->k;
    int err;
    *e = (oom_estimate)OOM_ESTIMATE_INIT;
    k.seq_len = seq;
    if ((err = oom_workload_set_knobs(ro->engine, &k)))
        return err;
    return oom_estimate_run(e, ro->engine);
}

int oomi_rollout_setup(oomi_rollout_engine *ro, const oom_workload *w, uint64_t total)
{
    oom_workload *g;
    oom_knobs k;
    oom_estimate e;
    int err;

    memset(ro, 0, sizeof(*ro));
    if (!w || w->objective.rollout == OOMI_ROLLOUT_NONE)
        return OOM_OK;
    if (!total)
        return oomi_fail(OOM_EINVAL, "rollout vllm-colocate: the GPU's memory is not known (its "
                                     "gpu_memory_utilization is a share of it)");
    ro->on = true;
    ro->sleep = w->objective.sleep_level;
    ro->total = total;
    ro->generations = w->objective.num_generations;
    ro->completion = w->objective.completion_len;
    ro->reference = oomi_reference_of(w) != OOMI_REFERENCE_NONE;
    ro->keep_grads = w->runtime.keep_grads;
    if ((err = oom_workload_clone(&ro->engine, w)))
        return err;
    g = ro->engine;
    g->objective.kind = OOMI_OBJECTIVE_SFT;
    g->objective.reference = OOMI_REFERENCE_AUTO;
    g->objective.ref_precision = OOM_PRECISION_AUTO;
    g->objective.precompute_ref = g->objective.grpo_set = g->objective.sleep_set = false;
    g->objective.completion_set = false, g->objective.completion_len = 0;
    g->objective.rollout = OOMI_ROLLOUT_NONE;
    g->objective.sleep_level = 0;
    g->lora.rank_set = g->lora.targets_set = g->lora.dropout_set = false;
    g->serve.tokens = g->serve.seqs = 0;
    k = w->k;
    k.method = OOM_METHOD_INFERENCE;
    k.precision = engine_precision(w);
    k.batch = k.grad_accum = k.gpus = 1;
    k.checkpointing = OOM_CHECKPOINTING_NONE;
    k.sharding = OOM_SHARDING_NONE;
    k.offload = OOM_OFFLOAD_NONE;
    k.attention = OOM_ATTENTION_FLASH;
    if ((err = oom_workload_set_knobs(g, &k)) || (err = engine_estimate(&e, ro, k.seq_len)))
        return err;
    ro->weights = e.weights + oomi_serve_rope(g->model, k.precision);
    ro->kv_seq = k.seq_len;
    ro->kv_per_token = (double)e.kv_cache / (double)k.seq_len;
    return oomi_serve_forward(g, k, ROLLOUT_BATCHED_TOKENS, &ro->fwd, &ro->out);
}

void oomi_rollout_free(oomi_rollout_engine *ro)
{
    oom_workload_free(ro->engine);
    ro->engine = NULL;
}

/* vLLM's two decimals of gpu_memory_utilization, down (what is left) or up (what is needed) */
static double hundredths(double bytes, uint64_t total, bool up)
{
    double x = 100.0 * bytes / (double)total;
    return (up ? ceil(x - 1e-9) : floor(x + 1e-9)) / 100.0;
}

/* The phases alternate: the engine generates while the trainer holds its weights, optimizer
 * states and context (TRL frees the gradients with zero_grad(set_to_none=True) and empties its
 * cache before waking the engine); then the trainer trains while the engine keeps its whole
 * reservation (no sleep mode) or, asleep, only what sleep does not release (its non-torch
 * memory: sleep frees the weights and the KV cache, which vLLM allocates in its own pool). */
int oomi_rollout_split_of(oomi_rollout_split *out, oomi_rollout_engine *ro, const oom_knobs *k,
                          const oom_estimate *e, uint64_t usable)
{
    double nt = (double)llround(OOMI_VLLM_NON_TORCH_1), block, need, room, fixed;
    long rows, blocks_per_seq;
    oom_estimate kv;
    int err;

    memset(out, 0, sizeof(*out));
    if (k->seq_len != ro->kv_seq) {
        if ((err = engine_estimate(&kv, ro, k->seq_len)))
            return err;
        ro->kv_seq = k->seq_len;
        ro->kv_per_token = (double)kv.kv_cache / (double)k->seq_len;
    }
    /* TRL: max_num_seqs = per_device_train_batch_size x steps_per_generation (which defaults to
     * gradient_accumulation_steps), all sent in one generate call */
    out->seqs = k->batch * k->grad_accum;
    rows = out->seqs < ROLLOUT_BATCHED_TOKENS ? out->seqs : ROLLOUT_BATCHED_TOKENS;
    {
        double with_sampler = ro->out + oomi_serve_sampler(ro->engine->model, rows);
        out->profile = (uint64_t)llround(ro->fwd > with_sampler ? ro->fwd : with_sampler);
    }
    /* every sequence held at once, each in whole blocks of its prompt and completion (vLLM
     * shares a prompt's blocks among its completions with prefix caching: this is an upper
     * bound) */
    block = (double)llround(OOMI_VLLM_BLOCK_TOKENS * ro->kv_per_token);
    blocks_per_seq = (k->seq_len + OOMI_VLLM_BLOCK_TOKENS - 1) / OOMI_VLLM_BLOCK_TOKENS;
    need = (double)out->seqs * (double)blocks_per_seq * block;
    out->kv_needed = (uint64_t)need;
    fixed = (double)ro->weights + (double)out->profile + nt;
    out->min_utilisation = hundredths(fixed + need, ro->total, true);
    out->resident = e->weights + e->optimizer + (ro->keep_grads ? e->gradients : 0) + e->overhead;
    out->sleeping = ro->sleep ? (uint64_t)nt : 0;
    room = ro->sleep ? (double)usable - (double)out->resident
                     : (double)usable - (double)e->device_peak;
    out->utilisation = room > 0 ? hundredths(room, ro->total, false) : 0;
    out->requested = (uint64_t)((double)ro->total * out->utilisation);
    out->fits = out->utilisation > 0 && out->utilisation >= out->min_utilisation &&
                e->device_peak + out->sleeping <= usable;
    if ((double)out->requested > fixed) {
        out->kv = (uint64_t)((double)out->requested - fixed);
        out->kv_tokens =
            block > 0 ? (long)floor((double)out->kv / block) * OOMI_VLLM_BLOCK_TOKENS : 0;
    }
    out->rollout_peak = out->resident + out->requested;
    out->training_peak = e->device_peak + (ro->sleep ? out->sleeping : out->requested);
    return OOM_OK;
}

void oomi_rollout_fill(oom_plan_result *res, const oomi_rollout_engine *ro,
                       const oomi_rollout_split *sp)
{
    if (res->version < 6 || !ro->on)
        return;
    res->rollout_sleep_level = ro->sleep;
    res->rollout_gpu_memory_utilization = sp->utilisation;
    res->rollout_weights_bytes = ro->weights;
    res->rollout_profile_bytes = sp->profile;
    res->rollout_kv_bytes = sp->kv;
    res->rollout_kv_tokens = sp->kv_tokens;
    res->rollout_max_num_seqs = sp->seqs;
    res->rollout_resident_bytes = sp->resident;
    res->rollout_sleeping_bytes = sp->sleeping;
    res->rollout_num_generations = ro->generations;
    res->rollout_completion_len = ro->completion ? ro->completion : ro->kv_seq / 2;
    res->rollout_reference = ro->reference;
}

static bool has_rollout(const oom_plan_result *r)
{
    return r->version >= 6 && r->found && r->rollout_max_num_seqs > 0;
}

/* the peaks of the two phases and the engine's non-torch memory, from the result */
static void phases(const oom_plan_result *r, uint64_t *requested, uint64_t *training,
                   uint64_t *rollout)
{
    *requested = (uint64_t)((double)r->gpu_budget.target_bytes * r->rollout_gpu_memory_utilization);
    *training = r->best->estimate.device_peak +
                (r->rollout_sleep_level ? r->rollout_sleeping_bytes : *requested);
    *rollout = r->rollout_resident_bytes + *requested;
}

json_object *oomi_plan_rollout_json(const oom_plan_result *r)
{
    json_object *o;
    uint64_t requested, training, rollout;
    long seq;
    if (!has_rollout(r) || !(o = json_object_new_object()))
        return NULL;
    seq = r->best->knobs.seq_len;
    phases(r, &requested, &training, &rollout);
    oomi_json_put(o, "engine", json_object_new_string("vllm-colocate"));
    oomi_json_put(o, "sleep_mode", json_object_new_int(r->rollout_sleep_level));
    oomi_json_put(o, "gpu_memory_utilization",
                  json_object_new_double(r->rollout_gpu_memory_utilization));
    oomi_json_put(o, "requested_bytes", oomi_json_size(requested));
    oomi_json_put(o, "weights_bytes", oomi_json_size(r->rollout_weights_bytes));
    oomi_json_put(o, "peak_activation_bytes", oomi_json_size(r->rollout_profile_bytes));
    oomi_json_put(o, "non_torch_bytes", oomi_json_size((uint64_t)llround(OOMI_VLLM_NON_TORCH_1)));
    oomi_json_put(o, "kv_cache_bytes", oomi_json_size(r->rollout_kv_bytes));
    oomi_json_put(o, "kv_tokens", json_object_new_int64(r->rollout_kv_tokens));
    oomi_json_put(o, "kv_sequences", json_object_new_int64(seq ? r->rollout_kv_tokens / seq : 0));
    oomi_json_put(o, "max_num_seqs", json_object_new_int64(r->rollout_max_num_seqs));
    oomi_json_put(o, "max_num_batched_tokens", json_object_new_int(ROLLOUT_BATCHED_TOKENS));
    oomi_json_put(o, "max_model_len", json_object_new_int64(seq));
    oomi_json_put(o, "trainer_resident_bytes", oomi_json_size(r->rollout_resident_bytes));
    oomi_json_put(o, "engine_asleep_bytes", oomi_json_size(r->rollout_sleeping_bytes));
    oomi_json_put(o, "training_peak_bytes", oomi_json_size(training));
    oomi_json_put(o, "rollout_peak_bytes", oomi_json_size(rollout));
    oomi_json_put(o, "cpu_weights_bytes",
                  oomi_json_size(r->rollout_sleep_level == 1 ? r->rollout_weights_bytes : 0));
    return o;
}

void oomi_plan_rollout_text(oomi_sb *sb, const oom_plan_result *r)
{
    uint64_t requested, training, rollout;
    long seq = r->best->knobs.seq_len;
    char a[16], b[16], c[16], d[16];
    if (!has_rollout(r))
        return;
    phases(r, &requested, &training, &rollout);
    oomi_sb_printf(sb,
                   "  %-30s: %.2f of the GPU (%s), sleep mode %d; KV cache %s = %ld sequences of "
                   "%ld\n  %-30s: %s training, %s generating\n",
                   "colocated vLLM engine", r->rollout_gpu_memory_utilization,
                   OOMI_SZ(a, requested), r->rollout_sleep_level, OOMI_SZ(b, r->rollout_kv_bytes),
                   seq ? r->rollout_kv_tokens / seq : 0, seq, "peaks with the engine",
                   OOMI_SZ(c, training), OOMI_SZ(d, rollout));
}

static const char *py(bool b)
{
    return b ? "true" : "false";
}

/* the comment both formats start with: the engine's share and what it holds */
static void rollout_comment(oomi_sb *sb, const oom_plan_result *r)
{
    uint64_t requested, training, rollout;
    long seq = r->best->knobs.seq_len;
    char a[16], b[16], c[16], d[16], f[16], g[16], h[16];
    phases(r, &requested, &training, &rollout);
    oomi_sb_printf(sb,
                   "# vLLM per GPU: %.2f x %s = %s requested - (%s weights + %s peak activation + "
                   "%s non-torch) = %s KV cache\n# KV cache: %ld tokens = %ld sequences of %ld at "
                   "once; the generation batch is %ld\n",
                   r->rollout_gpu_memory_utilization, OOMI_SZ(a, r->gpu_budget.target_bytes),
                   OOMI_SZ(b, requested), OOMI_SZ(c, r->rollout_weights_bytes),
                   OOMI_SZ(d, r->rollout_profile_bytes),
                   OOMI_SZ(f, (uint64_t)llround(OOMI_VLLM_NON_TORCH_1)),
                   OOMI_SZ(g, r->rollout_kv_bytes), r->rollout_kv_tokens,
                   seq ? r->rollout_kv_tokens / seq : 0, seq, r->rollout_max_num_seqs);
    oomi_sb_printf(sb,
                   "# training: %s trainer peak + %s engine (%s); generating: %s trainer + %s "
                   "engine; usable %s\n",
                   OOMI_SZ(a, r->best->estimate.device_peak),
                   OOMI_SZ(b, r->rollout_sleep_level ? r->rollout_sleeping_bytes : requested),
                   r->rollout_sleep_level ? "asleep" : "awake",
                   OOMI_SZ(c, r->rollout_resident_bytes), OOMI_SZ(d, requested),
                   OOMI_SZ(h, r->gpu_budget.usable_bytes));
}

/* GRPOConfig keys (trl/trainer/grpo_config.py, TRL 1.16) as a YAML file TRL's scripts read with
 * --config. TRL's sleep mode is level 2 (vllm_generation.py: llm.sleep(level=2)). */
static void format_trl(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    const oom_knobs *k = &r->best->knobs;
    const char *ck = oomi_hf_ck_key(f);
    char pre[64];
    oomi_sb_printf(sb,
                   "# %s %s: GRPOConfig: micro-batch %ld completions x gradient accumulation %ld "
                   "x %ld GPUs = %ld completions (%ld prompts x %ld) per optimizer step\n",
                   f->framework, f->version, k->batch, k->grad_accum, k->gpus,
                   r->best->effective_batch, r->best->effective_batch / r->rollout_num_generations,
                   r->rollout_num_generations);
    rollout_comment(sb, r);
    if (r->rollout_sleep_level == 1)
        oomi_sb_puts(sb, "# TRL sleeps at level 2 (the weights are discarded, then synced): the "
                         "GPU memory is the same as level 1's\n");
    if (r->rollout_reference)
        oomi_sb_puts(sb, "# planned with a reference model: set beta > 0 (beta 0.0 loads none)\n");
    oomi_sb_printf(sb,
                   "use_vllm: true\nvllm_mode: colocate\nvllm_gpu_memory_utilization: %.2f\n"
                   "vllm_enable_sleep_mode: %s\nvllm_tensor_parallel_size: 1\n"
                   "vllm_max_model_length: %ld\nper_device_train_batch_size: %ld\n"
                   "gradient_accumulation_steps: %ld\nsteps_per_generation: %ld\n"
                   "num_generations: %ld\nmax_completion_length: %ld\n"
                   "%s: %s\nbf16: %s\nfp16: %s\n",
                   r->rollout_gpu_memory_utilization, py(r->rollout_sleep_level > 0), k->seq_len,
                   k->batch, k->grad_accum, k->grad_accum, r->rollout_num_generations,
                   r->rollout_completion_len, ck, py(k->checkpointing != OOM_CHECKPOINTING_NONE),
                   py(oomi_is16(k->precision, true)), py(oomi_is16(k->precision, false)));
    if (oomi_plan_ck_variant(r->best)) /* every:N, +offload (oomi_plan_ck_check) */
        oomi_snprintf(pre, sizeof(pre), "%s_kwargs: ", ck),
            oomi_plan_hf_ck_kwargs(sb, r->best, pre, "\n");
}

/* verl's Hydra overrides (verl/trainer/config/ppo_trainer.yaml: data, actor_rollout_ref.actor,
 * .rollout, .ref, .model). verl counts train_batch_size and ppo_mini_batch_size in prompts (the
 * actor multiplies the mini-batch by rollout.n), the micro-batches in sequences per GPU; one
 * mini-batch per rollout is TRL's one optimizer step per generation batch. free_cache_engine
 * puts the engine to sleep at level 1 between rollouts (verl/workers/rollout/vllm_rollout). */
static void format_verl(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    const oom_knobs *k = &r->best->knobs;
    long prompts = r->best->effective_batch / r->rollout_num_generations;
    oomi_sb_printf(sb,
                   "# %s %s: %ld prompts x rollout.n %ld = %ld sequences per optimizer step over "
                   "%ld GPUs, micro-batch %ld per GPU\n",
                   f->framework, f->version, prompts, r->rollout_num_generations,
                   r->best->effective_batch, k->gpus, k->batch);
    rollout_comment(sb, r);
    if (r->rollout_sleep_level == 2)
        oomi_sb_puts(sb, "# verl sleeps at level 1 (the weights go to CPU memory): the GPU "
                         "memory is the same as level 2's\n");
    oomi_sb_printf(sb,
                   "data.train_batch_size=%ld\ndata.max_prompt_length=%ld\n"
                   "data.max_response_length=%ld\n"
                   "actor_rollout_ref.model.enable_gradient_checkpointing=%s\n"
                   "actor_rollout_ref.actor.ppo_mini_batch_size=%ld\n"
                   "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=%ld\n"
                   "actor_rollout_ref.rollout.name=vllm\n"
                   "actor_rollout_ref.rollout.n=%ld\n"
                   "actor_rollout_ref.rollout.tensor_model_parallel_size=1\n"
                   "actor_rollout_ref.rollout.gpu_memory_utilization=%.2f\n"
                   "actor_rollout_ref.rollout.free_cache_engine=%s\n"
                   "actor_rollout_ref.rollout.max_num_seqs=%ld\n"
                   "actor_rollout_ref.rollout.max_num_batched_tokens=%d\n"
                   "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=%ld\n",
                   prompts, k->seq_len - r->rollout_completion_len, r->rollout_completion_len,
                   k->checkpointing != OOM_CHECKPOINTING_NONE ? "True" : "False", prompts, k->batch,
                   r->rollout_num_generations, r->rollout_gpu_memory_utilization,
                   r->rollout_sleep_level ? "True" : "False", r->rollout_max_num_seqs,
                   ROLLOUT_BATCHED_TOKENS, k->batch);
    if (r->rollout_reference)
        oomi_sb_printf(sb,
                       "actor_rollout_ref.actor.use_kl_loss=True\n"
                       "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=%ld\n",
                       k->batch);
}

int oomi_plan_format_rl(oomi_sb *sb, const oom_plan_result *r, const oomi_format *f)
{
    if (!has_rollout(r))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "plan: the %s format is for objective grpo with rollout vllm-colocate",
                         f->name);
    (strcmp(f->name, "trl") ? format_verl : format_trl)(sb, r, f);
    return OOM_OK;
}
