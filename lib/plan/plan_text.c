/* plan_text.c - the human report of a plan: the "Optimized Configuration" block, the
 * memory breakdown, budget utilisation, throughput, alternatives; or why nothing fits. */
#include "plan/plan.h"

#include <stdio.h>
#include <string.h>

#define LINE "============================================================\n"

static void kv(oomi_sb *sb, const char *k, const char *v)
{
    oomi_sb_printf(sb, "  %-30s: %s\n", k, v);
}

static void kvl(oomi_sb *sb, const char *k, long v)
{
    oomi_sb_printf(sb, "  %-30s: %ld\n", k, v);
}

static void seq_line(oomi_sb *sb, const oom_plan_result *r)
{
    if (OOMI_PLAN_SEQ_KNOWN(r, r->best))
        kvl(sb, "max_seq_len", r->best->knobs.seq_len);
    else
        kv(sb, "max_seq_len", "not known (give --seq)");
}

static void config_block(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_knobs *k = &r->best->knobs;
    char a[16], b[16], desc[160];
    oomi_sb_printf(sb, LINE "Optimized Configuration (%s%s%s on %s)\n" LINE, r->model,
                   r->measured ? "" : ", ", r->measured ? "" : oom_method_name(k->method),
                   r->gpu_name[0] ? r->gpu_name : "the given budget");
    if (r->inference) {
        kvl(sb, "batch_size (max samples)", k->batch);
        seq_line(sb, r);
        if (r->version >= 2 && r->tensor_parallel > 1) /* memory below is per GPU */
            kvl(sb, "tensor_parallel (GPUs)", r->tensor_parallel);
    } else {
        kvl(sb, "batch_size", k->batch);
        kvl(sb, "gradient_accumulation_steps", k->grad_accum);
        seq_line(sb, r);
        kvl(sb, "effective_batch_size", r->best->effective_batch);
        oomi_plan_packing_text(sb, r);
    }
    if (!r->measured) {
        kv(sb, "precision", oom_precision_name(k->precision));
        if (!r->inference) {
            kv(sb, "gradient_checkpointing", oomi_plan_ck(r->best));
            if (oomi_plan_ck_variant(r->best))
                oomi_sb_printf(sb, "  %-30s: %.2f of a forward (FLOPs; full: 1)\n", "recomputed",
                               r->best->recompute);
            kv(sb, "optimizer", oom_optimizer_name(k->optimizer));
            kv(sb, "sharding", oom_sharding_name(k->sharding));
            kv(sb, "cpu_offload", oom_offload_name(k->offload));
            kv(sb, "loss", oom_loss_name(k->loss));
        }
        kv(sb, "attention", oom_attention_name(k->attention));
        if (r->version >= 8 && r->stack >= 0 && r->stack < OOMI_STACKS) {
            const oom_option_value *v = oomi_stack_values[r->stack];
            oomi_sb_printf(sb, "  %-30s: %s (%s; %s)\n", "stack", v->name, v->versions,
                           v->traced ? "traced on the meta device" : "from its source, not traced");
        }
    }
    if (r->version >= 8 && r->pipeline_parallel > 0)
        oomi_plan_layout_text(sb, r); /* model-parallel training (plan_layout_out.c) */
    else if (k->gpus > 1)
        oomi_sb_printf(sb, "  %-30s: %ld (%ld node%s x %ld)\n", "gpus", k->gpus, r->nodes,
                       r->nodes > 1 ? "s" : "", r->gpus_per_node);
    oomi_snprintf(desc, sizeof(desc), "Auto-optimized for %s usable of %s VRAM",
                  OOMI_SZ(a, r->budget.usable_bytes), OOMI_SZ(b, r->budget.target_bytes));
    kv(sb, "description", desc);
    oomi_sb_puts(sb, LINE);
}

static void row(oomi_sb *sb, const char *label, uint64_t bytes, uint64_t total)
{
    char buf[16];
    oomi_sb_printf(sb, "  %-30s: %12s  %5.1f%%\n", label, OOMI_SZ(buf, bytes),
                   total ? 100.0 * (double)bytes / (double)total : 0.0);
}

uint64_t oomi_plan_user_margin(const oom_plan_result *r)
{
    return r->version >= 3 && r->fit_confidence > 0
               ? r->gpu_budget.safety_margin_bytes / (uint64_t)(r->workers > 1 ? r->workers : 1)
               : r->budget.safety_margin_bytes;
}

/* "fits with ~97% confidence", the bound, and the margin beside what the bound needs */
static void text_confidence(oomi_sb *sb, const oom_plan_result *r)
{
    char a[16], b[16], c[16];
    uint64_t peak = r->best->estimate.device_peak, m = oomi_plan_user_margin(r);
    uint64_t need = r->device_peak_bound > peak ? r->device_peak_bound - peak : 0;
    double level = r->fit_confidence > 0 ? r->fit_confidence : 0.95;

    oomi_sb_printf(sb, "  %-30s: fits with %s%.0f%% confidence (%.0f%% bound %s)\n", "confidence",
                   r->fit_probability_side < 0   ? "below "
                   : r->fit_probability_side > 0 ? "at least "
                                                 : "~",
                   100 * r->fit_probability, 100 * level, OOMI_SZ(a, r->device_peak_bound));
    if (r->fit_confidence > 0)
        oomi_sb_printf(sb,
                       "  %-30s: the %.0f%% bound within the target (usable above), not the "
                       "margin\n",
                       "planned to", 100 * level);
    if (m > need)
        oomi_sb_printf(sb, "  %-30s: %s is %s more than the %.0f%% bound needs (%s)\n", "margin",
                       OOMI_SZ(a, m), OOMI_SZ(b, m - need), 100 * level, OOMI_SZ(c, need));
    else
        oomi_sb_printf(sb, "  %-30s: %s is %s less than the %.0f%% bound needs (%s)\n", "margin",
                       OOMI_SZ(a, m), OOMI_SZ(b, need - m), 100 * level, OOMI_SZ(c, need));
}

static void memory_block(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_estimate *e = &r->best->estimate;
    char a[16], b[16], c[16];
    uint64_t u = r->budget.usable_bytes;
    oomi_sb_puts(sb, "Memory per GPU at the peak (");
    oomi_sb_puts(sb, oom_phase_name(e->peak_phase));
    oomi_sb_puts(sb, ")\n");
    if (r->measured) {
        row(sb, "fixed", e->weights, e->device_peak);
        row(sb, "per-sample", e->activations, e->device_peak);
    } else {
        row(sb, "weights", e->weights, e->device_peak);
        row(sb, "gradients", e->gradients, e->device_peak);
        row(sb, "optimizer states", e->optimizer, e->device_peak);
        row(sb, "activations", e->activations, e->device_peak);
        row(sb, "logits / loss", e->logits, e->device_peak);
        row(sb, "KV cache", e->kv_cache, e->device_peak);
        row(sb, "temporaries", e->temporaries, e->device_peak);
        row(sb, "allocator cache", e->reserved_peak - e->allocated_peak, e->device_peak);
        row(sb, "CUDA context / overhead", e->overhead, e->device_peak);
    }
    row(sb, "total (device peak)", e->device_peak, e->device_peak);
    oomi_sb_printf(sb, LINE "Budget\n  %-30s: %s (target %s - margin %s)\n", "usable",
                   OOMI_SZ(a, u), OOMI_SZ(b, r->budget.target_bytes),
                   OOMI_SZ(c, r->budget.safety_margin_bytes));
    oomi_sb_printf(sb, "  %-30s: %.1f%% of usable, %s to spare\n", "device peak",
                   u ? 100.0 * (double)e->device_peak / (double)u : 0.0,
                   OOMI_SZ(a, u - e->device_peak));
    oomi_plan_rollout_text(sb, r);
    if (r->version >= 3 && r->has_fit_probability)
        text_confidence(sb, r);
    if (r->workers > 1 || r->max_workers > 1 || (r->version >= 2 && r->workers_requested))
        oomi_sb_printf(sb, "  %-30s: %ld planned per GPU, %ld cop%s of this job fit%s one GPU\n",
                       "workers", r->workers, r->max_workers, r->max_workers == 1 ? "y" : "ies",
                       r->max_workers == 1 ? "s" : "");
    if (r->inference && r->kv_bytes_per_token > 0)
        oomi_sb_printf(sb, "  %-30s: %s (%.0f tokens at %.0f KiB/token)\n",
                       "KV cache budget (serving)", OOMI_SZ(a, r->kv_budget_bytes),
                       (double)r->kv_budget_bytes / r->kv_bytes_per_token,
                       r->kv_bytes_per_token / 1024.0);
}

static void describe(char *buf, size_t n, const oom_plan_choice *c, bool measured)
{
    const oom_knobs *k = &c->knobs;
    char kernels[64];
    oomi_snprintf(
        kernels, sizeof(kernels), "%s%s%s%s",
        k->loss == OOM_LOSS_CHUNKED && k->method != OOM_METHOD_INFERENCE ? ", chunked loss" : "",
        k->attention != OOM_ATTENTION_SDPA ? ", " : "",
        k->attention != OOM_ATTENTION_SDPA ? oom_attention_name(k->attention) : "",
        k->attention != OOM_ATTENTION_SDPA ? " attention" : "");
    if (measured)
        oomi_snprintf(buf, n, "batch %ld x %ld", k->batch, k->grad_accum);
    else if (k->method == OOM_METHOD_INFERENCE)
        oomi_snprintf(buf, n, "batch %ld, seq %ld, %s%s", k->batch, k->seq_len,
                      oom_precision_name(k->precision), kernels);
    else
        oomi_snprintf(buf, n, "batch %ld x %ld, seq %ld, ckpt %s, %s, %s%s%s%s%s%s", k->batch,
                      k->grad_accum, k->seq_len, oomi_plan_ck(c), oom_precision_name(k->precision),
                      oom_optimizer_name(k->optimizer), k->sharding ? ", " : "",
                      k->sharding ? oom_sharding_name(k->sharding) : "",
                      k->offload ? ", offload " : "",
                      k->offload ? oom_offload_name(k->offload) : "", kernels);
}

static void throughput_block(oomi_sb *sb, const oom_plan_result *r)
{
    const oom_plan_choice *c = r->best;
    char d[200], a[16];
    size_t i, n = 0;
    int pass;
    oomi_sb_puts(sb, LINE "Estimated throughput\n");
    if (c->has_throughput && !OOMI_PLAN_SEQ_KNOWN(r, c))
        oomi_sb_printf(sb, "  %.2f samples/s (all GPUs); %.2f s per optimizer step\n",
                       c->samples_per_s, c->step_s);
    else if (c->has_throughput)
        oomi_sb_printf(sb,
                       "  %.0f tokens/s, %.2f samples/s (all GPUs); %.2f s per %s; MFU %.0f%% of "
                       "%.0f TFLOP/s %s\n",
                       c->tokens_per_s, c->samples_per_s, c->step_s,
                       r->inference ? "batch" : "optimizer step", 100 * c->utilisation,
                       r->peak_tflops, oom_precision_name(c->knobs.precision));
    else
        oomi_sb_puts(sb, "  unknown (give --flops-per-sample); ranked by micro-batch size\n");
    /* those that fit first, then the faster ones that do not, under a heading of their own */
    for (pass = 0; pass < 2; pass++) {
        bool heading = false;
        for (i = 0; i < r->n_alternatives; i++) {
            const oom_plan_choice *alt = r->alternatives[i];
            if (alt->fits != (pass == 0))
                continue;
            if (!heading)
                oomi_sb_puts(sb, pass ? LINE "Faster, but they do not fit\n"
                                      : LINE "Next best alternatives\n");
            heading = true;
            describe(d, sizeof(d), alt, r->measured);
            oomi_sb_printf(sb, "  %zu. %s (peak %s)\n     %s\n", ++n, d,
                           OOMI_SZ(a, alt->estimate.device_peak), alt->why);
        }
    }
}

static void nofit_block(oomi_sb *sb, const oom_plan_result *r)
{
    char d[200], a[16], b[16];
    size_t i;
    oomi_sb_printf(sb, LINE "Nothing fits: %s on %s (usable %s)\n" LINE, r->model,
                   r->gpu_name[0] ? r->gpu_name : "the given budget",
                   OOMI_SZ(a, r->budget.usable_bytes));
    describe(d, sizeof(d), r->smallest, r->measured);
    if (r->version >= 6 && r->rollout_max_num_seqs > 0 &&
        r->smallest->estimate.device_peak <= r->budget.usable_bytes)
        oomi_sb_printf(sb,
                       "  smallest configuration tried: %s\n  its device peak: %s, but not "
                       "beside the colocated engine, which needs %.2f of the GPU\n",
                       d, OOMI_SZ(a, r->smallest->estimate.device_peak),
                       r->rollout_gpu_memory_utilization);
    else
        oomi_sb_printf(sb, "  smallest configuration tried: %s\n  its device peak: %s (%s over)\n",
                       d, OOMI_SZ(a, r->smallest->estimate.device_peak),
                       OOMI_SZ(b, r->smallest->estimate.device_peak - r->budget.usable_bytes));
    if (r->n_suggestions)
        oomi_sb_puts(sb, "What would make it fit:\n");
    for (i = 0; i < r->n_suggestions; i++)
        oomi_sb_printf(sb, "  - %s\n", r->suggestions[i]);
    oomi_sb_puts(sb, LINE);
}

int oomi_plan_text(char **out, const oom_plan_result *r)
{
    oomi_sb sb = OOMI_SB_INIT;
    size_t i;

    if (!r->found) {
        nofit_block(&sb, r);
    } else {
        config_block(&sb, r);
        memory_block(&sb, r);
        throughput_block(&sb, r);
        oomi_sb_puts(&sb, LINE);
    }
    for (i = 0; i < r->n_notices; i++)
        oomi_sb_printf(&sb, "note: %s\n", r->notices[i]);
    return oomi_sb_finish(&sb, out);
}
