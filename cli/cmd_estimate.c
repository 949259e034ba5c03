/* cmd_estimate.c - `oomless estimate`: a workload's peak GPU memory, with a breakdown. */
#include "cli.h"
#include "core/core.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "estimate";

/* an option as given: its name (the table's) and value */
typedef struct given {
    const char *name, *value;
} given;

typedef struct args {
    bool json, list, help;
    const char *gpu, *vram, *margin, *config, *svg;
    const char *calibration, *calib_workload; /* with `-- CMD...`: a probe's measured line */
    char *command;                            /* the command's calibration key, or NULL */
    char *const *probed;                      /* ... and its argv (NULL-terminated) */
    given *given;                             /* the options in order, for the next command */
    size_t n_given;
} args;

static void usage(FILE *out)
{
    size_t n;
    const oom_option *const *o = oom_workload_options(&n);
    fprintf(out, "usage: oomless estimate --model NAME|PATH [OPTIONS]\n"
                 "       oomless estimate [--batch N] [--calibration FILE] [budget] -- CMD...\n"
                 "       oomless estimate --list-models\n\n"
                 "Predicts the peak GPU memory of one training step or inference pass, per GPU,\n"
                 "on the three counters: allocated (torch.cuda.max_memory_allocated), reserved\n"
                 "(max_memory_reserved) and device (nvidia-smi: reserved + CUDA context).\n\n"
                 "Workload:\n");
    cli_print_options(out, o, n, OOM_COMMAND_ESTIMATE);
    fprintf(out, "\nBudget (optional; shows whether the estimate fits, exit 1 when not) and\n"
                 "calibration (-- CMD... instead of --model: the peak the line 'oomless probe --\n"
                 "CMD...' measured predicts at --batch):\n");
    o = oom_plan_option_table(&n);
    cli_print_options(out, o, n, OOM_COMMAND_ESTIMATE);
    fprintf(out,
            "\nOutput:\n  %-28s %s\n  %-28s %s\n  %-28s %s\n\nExit codes: 0 ok (fits), 1 does "
            "not fit the budget, 2 bad option or value,\n3 environment.\n",
            "--json", "one JSON document on stdout (--svg FILE: a picture of the breakdown)",
            "--list-models", "the built-in presets", "--help", "this text");
}

static int set_workload(void *w, const char *key, const char *value)
{
    return oom_workload_set(w, key, value);
}

static int parse(int argc, char **argv, args *a, oom_workload *w)
{
    size_t n, j;
    const oom_option *const *o = oom_workload_options(&n);
    const struct {
        const char *name;
        const char **value;
    } own[] = {{"calibration-workload", &a->calib_workload},
               {"calibration", &a->calibration},
               {"gpu", &a->gpu},
               {"config", &a->config},
               {"svg", &a->svg},
               {"vram-safety-margin", &a->margin},
               {"vram", &a->vram}};
    int i, err;

    if ((err = cli_nccl_env(CMD, set_workload, w)) != EXIT_OK)
        return err;
    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        char name[64];
        if (!strcmp(arg, "-h")) {
            a->help = true;
            continue;
        }
        if (!strcmp(arg, "--")) { /* a probed command: estimate from its calibration record */
            int kerr;
            if (i + 1 >= argc)
                return cli_usage_error(CMD, "'--' must be followed by the probed command");
            if ((kerr =
                     oom_calibration_command_key(&a->command, (const char *const *)argv + i + 1)))
                return cli_fail(CMD, kerr);
            a->probed = argv + i + 1;
            break;
        }
        if (strncmp(arg, "--", 2) || !arg[2])
            return cli_usage_error(CMD, "unexpected argument '%s'", arg);
        v = cli_option_name(name, sizeof(name), arg + 2);
        if (!v && (!strcmp(name, "json") || !strcmp(name, "list-models") || !strcmp(name, "help") ||
                   !strcmp(name, "vram-auto"))) {
            a->json |= name[0] == 'j', a->list |= name[0] == 'l', a->help |= name[0] == 'h';
            if (name[0] == 'v') {
                a->vram = "auto";
                a->given[a->n_given++] = (given){"vram", "auto"};
            }
            continue;
        }
        for (j = 0; j < sizeof(own) / sizeof(own[0]) && strcmp(own[j].name, name); j++)
            ;
        if (j == sizeof(own) / sizeof(own[0])) {
            for (j = 0; j < n && strcmp(o[j]->name, name); j++)
                ;
            if (j == n)
                return cli_usage_error(CMD, "unknown option '%s'", arg);
            j += sizeof(own) / sizeof(own[0]);
        }
        if (!v && (i + 1 >= argc || !(v = argv[++i])))
            return cli_usage_error(CMD, "option '%s' needs a value", arg);
        a->given[a->n_given++] =
            (given){j < sizeof(own) / sizeof(own[0]) ? own[j].name
                                                     : o[j - sizeof(own) / sizeof(own[0])]->name,
                    v};
        if (j < sizeof(own) / sizeof(own[0]))
            *own[j].value = v;
        else if ((err = oom_workload_set(w, name, v)))
            return cli_fail(CMD, err);
    }
    return EXIT_OK;
}

/* The budget: --gpu through the catalog and GPU discovery, or --vram alone; none when not asked.
 * The library resolves it (the Python binding makes the same call). */
static int resolve_budget(const args *a, oom_workload *w, oom_budget *b, bool *have, char **what)
{
    oom_config *cfg = NULL;
    oom_target_request req = {OOM_TARGET_REQUEST_VERSION, a->gpu, a->vram, a->margin, NULL};
    int err, got = 0;

    if ((a->gpu || a->vram) && (err = oom_config_load(&cfg, a->config)))
        return cli_fail(CMD, err);
    req.config = cfg;
    err = oom_estimate_budget(b, &got, what, w, &req);
    oom_config_free(cfg);
    *have = got != 0;
    return err ? cli_fail(CMD, err) : EXIT_OK;
}

/* a word as the shell reads it back: bare when it is made of safe characters, else in single
 * quotes (a quote inside as '\'') */
static void shell_word(oomi_sb *sb, const char *s)
{
    const char *p;
    bool bare = *s != 0;
    for (p = s; *p && bare; p++)
        bare = oomi_isalnum((unsigned char)*p) || strchr("._-:,+=/@%", *p);
    if (bare) {
        oomi_sb_puts(sb, s);
        return;
    }
    oomi_sb_puts(sb, "'");
    for (p = s; *p; p++)
        oomi_sb_puts(sb, *p == '\'' ? "'\\''" : (char[]){*p, 0});
    oomi_sb_puts(sb, "'");
}

/* whether `plan` takes the option with this value (sharding fsdp2 is estimated, not planned) */
static bool plan_takes(const char *name, const char *value)
{
    const oom_option *o = oom_option_lookup(name);
    size_t i;
    if (!o || !(o->commands & OOM_COMMAND_PLAN))
        return false;
    for (i = 0; i < o->n_values; i++)
        if (!o->values[i]->form && !oomi_strcasecmp(o->values[i]->name, value))
            return (o->values[i]->commands & OOM_COMMAND_PLAN) != 0;
    return true;
}

/* The command that plans what did not fit: `oomless plan` with the options given (but --svg),
 * the micro-batch and accumulation of a training step handed to the planner as the effective
 * batch to keep (an inference batch is left to it: it finds the largest that fits), and the
 * probed command after `--`. NULL when plan cannot take the workload, or out of memory. */
static char *next_command(const args *a, const oom_knobs *k, long batch)
{
    oomi_sb sb = OOMI_SB_INIT;
    bool inference = k && k->method == OOM_METHOD_INFERENCE;
    size_t i;

    oomi_sb_puts(&sb, "oomless plan");
    for (i = 0; i < a->n_given; i++) {
        const char *n = a->given[i].name;
        if (!strcmp(n, "svg") || !strcmp(n, "batch") || !strcmp(n, "grad-accum"))
            continue;
        if (!plan_takes(n, a->given[i].value)) {
            oomi_sb_free(&sb);
            return NULL;
        }
        oomi_sb_printf(&sb, " --%s ", n);
        shell_word(&sb, a->given[i].value);
    }
    if (!inference)
        oomi_sb_printf(&sb, " --target-effective-batch %ld",
                       k ? k->batch * k->grad_accum * k->gpus : batch);
    for (i = 0; a->probed && a->probed[i]; i++) {
        oomi_sb_puts(&sb, i ? " " : " -- ");
        shell_word(&sb, a->probed[i]);
    }
    if (oomi_sb_ok(&sb)) {
        oomi_sb_free(&sb);
        return NULL;
    }
    return sb.buf;
}

static void row(const char *label, uint64_t bytes, uint64_t total)
{
    char buf[32];
    printf("  %-30s: %12s  %5.1f%%\n", label, oom_format_size(buf, sizeof(buf), bytes),
           total ? 100.0 * (double)bytes / (double)total : 0.0);
}

/* the parts of the overhead outside PyTorch's allocator, under its row */
static void print_overhead_parts(const oom_estimate_report *r)
{
    uint64_t peak = r->estimate.device_peak;
    if (r->overhead_given) {
        row("  given (--overhead)", r->estimate.overhead, peak);
        return;
    }
    row("  CUDA context + kernels", r->cuda_context_bytes, peak);
    if (r->nccl_gpus > 1)
        row("  NCCL buffers", r->nccl_bytes, peak);
}

/* the cuBLAS workspace and NCCL's settings, with the defaults the user can change */
static void print_overhead_notes(const oom_estimate_report *r)
{
    char s1[32], s2[32], s3[32];
    printf("  %-30s: %s in the temporaries (%s)\n", "cuBLAS workspace",
           oom_format_size(s1, sizeof(s1), r->cublas_workspace_bytes),
           r->cublas_workspace_default
               ? "default; set --cublas-workspace or CUBLAS_WORKSPACE_CONFIG"
               : "--cublas-workspace");
    if (r->overhead_given || r->nccl_gpus < 2)
        return;
    printf("  %-30s: %ld GPUs, %ld communicator%s x %ld channels x %s, NVLS %s (%s ring + %s "
           "NVLS each)\n",
           "NCCL", r->nccl_gpus, r->nccl_communicators, r->nccl_communicators > 1 ? "s" : "",
           r->nccl_channels, oom_format_size(s1, sizeof(s1), r->nccl_buffsize),
           r->nccl_nvls ? "on" : "off", oom_format_size(s2, sizeof(s2), r->nccl_ring_bytes),
           oom_format_size(s3, sizeof(s3), r->nccl_nvls_bytes));
    if (r->nccl_defaults)
        printf("  %-30s: NCCL's defaults assumed; set %s\n", "notice", r->nccl_defaults);
}

/* the device peak's 95 % bound and the class of measured errors it comes from */
static void print_bound(const oom_estimate_report *r)
{
    char s1[32];
    uint64_t peak = r->estimate.device_peak;
    printf("  %-30s: %s (+%.1f%%; class %s, %s, %ld cases)\n", "device peak, 95% bound",
           oom_format_size(s1, sizeof(s1), r->device_peak_upper95),
           peak ? 100.0 * ((double)r->device_peak_upper95 / (double)peak - 1) : 0.0,
           r->confidence_class, r->confidence_basis, r->confidence_cases);
    if (!r->confidence_spread) /* a report of version 1 */
        return;
    if (!strcmp(r->confidence_spread, "stack"))
        printf("  %-30s: %+.1f%%, over the %s stack's own %ld sources\n", "bias across setups",
               100 * r->confidence_spread_bias, r->stack, r->confidence_spread_sources);
    else if (!strcmp(r->confidence_spread, "cross-stack"))
        printf("  %-30s: %+.1f%%, the cross-stack spread over %ld sources (the %s stack has %ld "
               "of its own, too few)\n",
               "bias across setups", 100 * r->confidence_spread_bias, r->confidence_spread_sources,
               r->stack, r->confidence_stack_sources);
}

/* the stack whose code the estimate models, with the versions it models */
static void print_stack(const oom_estimate_report *r)
{
    printf("  %-30s: %s (%s; %s)\n", "stack", r->stack, r->stack_versions,
           r->stack_traced ? "traced on the meta device" : "from its source, not traced");
}

/* the objective's lines; none for sft */
static void print_objective(const oom_estimate_report *r)
{
    if (!r->objective)
        return;
    printf("  %-30s: %s (batch counts %s: %ld sequences per forward; reference %s%s)\n",
           "objective", r->objective, r->batch_counts, r->sequences_per_forward, r->reference,
           strcmp(r->reference, "none") && r->precompute_ref ? ", precomputed" : "");
    if (r->rollout) /* grpo */
        printf("  %-30s: %ld completions (%ld per prompt), prompt %ld + completion %ld tokens\n",
               "generation batch", r->generation_batch, r->num_generations, r->prompt_len,
               r->completion_len);
}

/* the packing line; none without packing */
static void print_packing(const oom_estimate_report *r)
{
    if (r->packing)
        printf("  %-30s: %s, %ld tokens: %ld x %ld, documents up to %ld (%s)\n", "packing",
               r->packing, r->tokens_per_batch, r->pack_rows, r->pack_row_tokens,
               r->longest_document, r->attention_path);
}

/* a 4-bit base's parts, the adapters' dtype and a paged optimizer's states; nothing where there
 * are none */
static void print_qlora(const oom_estimate_report *r)
{
    char s1[32], s2[32], s3[32], s4[32];
    if (!r->has_qlora)
        return;
    if (r->quantized)
        printf("  %-30s: NF4 %s + absmax %s%s, unquantized %s; dequantized linear %s\n",
               "4-bit base", oom_format_size(s1, sizeof(s1), r->nf4_bytes),
               oom_format_size(s2, sizeof(s2), r->absmax_bytes + r->absmax2_bytes),
               r->double_quant ? " (double quant)" : "",
               oom_format_size(s3, sizeof(s3), r->unquantized_bytes),
               oom_format_size(s4, sizeof(s4), r->dequantized_bytes));
    if (r->quantizer)
        printf("  %-30s: quantizer %s, bitsandbytes %s%s%s%s\n", "4-bit code", r->quantizer,
               r->bitsandbytes, strcmp(r->bitsandbytes, "0.43") ? " or later" : " or earlier",
               r->kept_inputs_bytes ? "; its 4-bit linears keep their inputs: " : "",
               r->kept_inputs_bytes ? oom_format_size(s1, sizeof(s1), r->kept_inputs_bytes) : "");
    if (r->adapter_dtype)
        printf("  %-30s: %s, %s\n", "LoRA adapters", r->adapter_dtype,
               oom_format_size(s1, sizeof(s1), r->adapter_bytes));
    if (r->paged_optimizer_bytes)
        printf("  %-30s: %s in CUDA unified memory, outside the peaks (nvidia-smi shows them "
               "while the GPU has room)\n",
               "paged optimizer states", oom_format_size(s1, sizeof(s1), r->paged_optimizer_bytes));
}

/* whether the peak fits the usable memory, first; and where it does not, the command that plans
 * what does */
static void print_verdict(uint64_t peak, uint64_t usable, const char *next)
{
    char s1[32], s2[32];
    bool fits = peak <= usable;
    if (fits)
        printf("  %-30s: yes (%s of the usable %s to spare)\n", "fits",
               oom_format_size(s1, sizeof(s1), usable - peak),
               oom_format_size(s2, sizeof(s2), usable));
    else
        printf("  %-30s: NO (%s over the usable %s)\n", "fits",
               oom_format_size(s1, sizeof(s1), peak - usable),
               oom_format_size(s2, sizeof(s2), usable));
    if (!fits && next)
        printf("  %-30s: %s\n", "next", next);
}

/* model-parallel training: the layout, and each pipeline rank's allocated peak (the figures
 * below are the rank that peaks highest) */
static void print_layout(const oom_estimate_report *r)
{
    size_t i;
    char s1[32];
    printf("  %-30s: tp %ld%s x pp %ld", "layout", r->tensor_parallel,
           r->sequence_parallel ? " (sequence parallel)" : "", r->pipeline_parallel);
    if (r->virtual_stages > 1)
        printf(" (interleaved:%ld)", r->virtual_stages);
    printf(" x cp %ld x dp %ld = %ld GPUs", r->context_parallel, r->data_parallel,
           r->tensor_parallel * r->pipeline_parallel * r->context_parallel * r->data_parallel);
    if (r->expert_parallel > 1 || r->expert_tensor_parallel > 1)
        printf("; experts over ep %ld x etp %ld", r->expert_parallel, r->expert_tensor_parallel);
    printf(", engine %s\n", r->engine);
    for (i = 0; i < r->n_ranks; i++) {
        const oom_estimate_rank *k = &r->ranks[i];
        char label[48];
        snprintf(label, sizeof label, "pipeline rank %zu%s", i,
                 i == r->limiting_rank ? " (below)" : "");
        printf("  %-30s: %s allocated, %ld layers, %ld in flight, peak in %s\n", label,
               oom_format_size(s1, sizeof(s1), k->allocated_peak), k->layers, k->in_flight,
               oom_phase_name(k->peak_phase));
    }
}

static void print_human(const oom_estimate_report *r, const char *gpu, const char *next)
{
    const oom_estimate *e = &r->estimate;
    const oom_knobs *k = &r->knobs;
    char s1[32], s2[32], n1[32], n2[32];
    const char *line = "============================================================";

    printf("%s\nMemory estimate: %s (%s, %.2f B params)\n", line, r->model, r->family,
           (double)e->params_total / 1e9);
    if (r->has_budget)
        print_verdict(e->device_peak, r->budget.usable_bytes, next);
    printf("%s\n", line);
    printf("  %-30s: %s\n  %-30s: %s\n  %-30s: %s\n", "method", oom_method_name(k->method),
           "precision", oom_precision_name(k->precision), "optimizer",
           k->method == OOM_METHOD_INFERENCE ? "-" : oom_optimizer_name(k->optimizer));
    if (k->method == OOM_METHOD_INFERENCE && r->completion_len > 0)
        printf("  %-30s: %ld x %ld tokens: a prompt of %ld, %ld generated\n", "micro-batch x seq",
               k->batch, k->seq_len, r->prompt_len, r->completion_len);
    else
        printf("  %-30s: %ld x %ld tokens, grad-accum %ld\n", "micro-batch x seq", k->batch,
               k->seq_len, k->grad_accum);
    printf("  %-30s: %s, attention %s, loss %s\n", "checkpointing", r->checkpointing,
           oom_attention_name(k->attention), oom_loss_name(k->loss));
    printf("  %-30s: %ld (sharding %s, offload %s)\n", r->n_ranks ? "data-parallel copies" : "GPUs",
           k->gpus, r->sharding, oom_offload_name(k->offload));
    print_stack(r);
    if (r->fsdp_param_dtype)
        printf("  %-30s: parameters sharded in %s, reshard after forward %s\n", "FSDP2",
               r->fsdp_param_dtype, r->reshard_after_forward);
    print_objective(r);
    print_packing(r);
    if (r->n_ranks)
        print_layout(r);
    else if (r->tensor_parallel > 1)
        printf("  %-30s: %ld GPUs per model copy (figures per GPU)\n", "tensor parallel",
               r->tensor_parallel);
    printf("  %-30s: %s of %s\n%s\n", "trainable parameters",
           cli_format_count(n1, sizeof(n1), (double)e->params_trainable),
           cli_format_count(n2, sizeof(n2), (double)e->params_total), line);
    row("weights", e->weights, e->device_peak);
    row("gradients", e->gradients, e->device_peak);
    row("optimizer states", e->optimizer, e->device_peak);
    row("activations", e->activations, e->device_peak);
    row("logits / loss", e->logits, e->device_peak);
    row("KV cache", e->kv_cache, e->device_peak);
    row("temporaries", e->temporaries, e->device_peak);
    row("allocator cache", e->reserved_peak - e->allocated_peak, e->device_peak);
    row("CUDA context / overhead", e->overhead, e->device_peak);
    print_overhead_parts(r);
    row("total (device peak)", e->device_peak, e->device_peak);
    printf("%s\n", line);
    printf("  %-30s: %s\n", "allocated peak (max_allocated)",
           oom_format_size(s1, sizeof(s1), e->allocated_peak));
    printf("  %-30s: %s\n", "reserved peak (max_reserved)",
           oom_format_size(s1, sizeof(s1), e->reserved_peak));
    printf("  %-30s: %s\n", "device peak (nvidia-smi)",
           oom_format_size(s1, sizeof(s1), e->device_peak));
    print_bound(r);
    print_overhead_notes(r);
    printf("  %-30s: %s\n", "peak phase", oom_phase_name(e->peak_phase));
    if (r->load_how)
        printf("  %-30s: %s (%s beside the weights: %s)\n", "loading peak",
               oom_format_size(s1, sizeof(s1), r->load_peak),
               oom_format_size(s2, sizeof(s2), r->load_transient), r->load_how);
    print_qlora(r);
    if (r->has_budget) {
        const oom_budget *b = &r->budget;
        printf("%s\n  %-30s: %s (%s)\n", line, "target VRAM",
               oom_format_size(s1, sizeof(s1), b->target_bytes), gpu);
        printf("  %-30s: %s\n  %-30s: %s\n", "safety margin",
               oom_format_size(s1, sizeof(s1), b->safety_margin_bytes), "usable VRAM",
               oom_format_size(s2, sizeof(s2), b->usable_bytes));
    }
    printf("%s\n", line);
}

static int write_svg(const char *path, const oom_workload *w, const oom_estimate *e,
                     const oom_budget *b)
{
    char *svg = NULL;
    FILE *f = NULL;
    int err = oom_estimate_svg(&svg, w, e, b), rc = EXIT_OK;
    if (err)
        return cli_fail(CMD, err);
    if (!(f = fopen(path, "w")) || fputs(svg, f) < 0)
        rc = EXIT_ENV;
    if (f && fclose(f))
        rc = EXIT_ENV;
    if (rc)
        fprintf(stderr, "oomless %s: cannot write '%s'\n", CMD, path);
    oom_free(svg);
    return rc;
}

static void print_calibrated(const char *doc, const char *next)
{
    json_object *root = json_tokener_parse(doc), *c, *b;
    char s1[32], s2[32];
    const char *line = "============================================================";
    uint64_t peak, usable;

    if (!root)
        return;
    c = oomi_json_get(root, "calibration");
    b = oomi_json_get(root, "budget");
    peak = (uint64_t)json_object_get_int64(
        oomi_json_get(oomi_json_get(root, "memory"), "device_peak"));
    usable = (uint64_t)json_object_get_int64(oomi_json_get(b, "usable_bytes"));
    printf("%s\nCalibrated estimate (measured by oomless probe on %s)\n", line,
           json_object_get_string(oomi_json_get(c, "gpu")));
    print_verdict(peak, usable, next);
    printf("%s\n", line);
    printf("  %-30s: %s + %s x batch%s\n", "measured line",
           oom_format_size(s1, sizeof(s1),
                           (uint64_t)json_object_get_double(oomi_json_get(c, "fixed_bytes"))),
           oom_format_size(s2, sizeof(s2),
                           (uint64_t)json_object_get_double(oomi_json_get(c, "per_sample_bytes"))),
           json_object_get_double(oomi_json_get(c, "per_sample2_bytes")) > 0 ? " (+ quadratic term)"
                                                                             : "");
    printf("  %-30s: %ld%s\n", "batch", (long)json_object_get_int64(oomi_json_get(root, "batch")),
           json_object_get_boolean(oomi_json_get(root, "extrapolated"))
               ? " (beyond the largest batch probed: extrapolated)"
               : "");
    printf("  %-30s: %s\n", "device peak (nvidia-smi)", oom_format_size(s1, sizeof(s1), peak));
    printf("  %-30s: %s\n%s\n", "usable VRAM", oom_format_size(s2, sizeof(s2), usable), line);
    json_object_put(root);
}

/* `oomless estimate [--batch N] -- CMD...`: the line oomless probe measured for the command. */
static int calibrated(const args *a, const oom_workload *w)
{
    oom_config *cfg = NULL;
    oom_target_request req = {OOM_TARGET_REQUEST_VERSION, a->gpu, a->vram, a->margin, NULL};
    oom_knobs k = OOM_KNOBS_INIT;
    char *doc = NULL;
    int err, fits = 0, rc;

    if (a->calibration && !strcmp(a->calibration, "off"))
        return cli_usage_error(CMD, "'-- CMD' needs calibration records; --calibration is off");
    if ((err = oom_config_load(&cfg, a->config)))
        return cli_fail(CMD, err);
    req.config = cfg;
    oom_workload_get_knobs(&k, w);
    err = oom_calibration_estimate_json(&doc, &fits, a->calibration, a->command, a->calib_workload,
                                        k.batch, &req);
    oom_config_free(cfg);
    if (err)
        return cli_fail(CMD, err);
    if (a->json)
        rc = cli_print_json(doc);
    else {
        char *next = fits ? NULL : next_command(a, NULL, k.batch);
        print_calibrated(doc, next);
        oom_free(next);
        rc = EXIT_OK;
    }
    oom_free(doc);
    return rc == EXIT_OK && !fits ? EXIT_NOFIT : rc;
}

/* the estimate as text (and --svg), from its report */
static int estimate_text(const args *a, const oom_workload *w, const oom_budget *b, const char *gpu)
{
    oom_estimate_report r = OOM_ESTIMATE_REPORT_INIT;
    int err, rc = EXIT_OK;

    if ((err = oom_estimate_report_run(&r, w, b)))
        return cli_fail(CMD, err);
    if (a->svg)
        rc = write_svg(a->svg, w, &r.estimate, b);
    if (rc == EXIT_OK) {
        char *next = r.has_budget && !r.fits ? next_command(a, &r.knobs, 0) : NULL;
        print_human(&r, gpu, next);
        oom_free(next);
        rc = r.has_budget && !r.fits ? EXIT_NOFIT : EXIT_OK;
    }
    oom_estimate_report_dispose(&r);
    return rc;
}

int cmd_estimate(int argc, char **argv)
{
    oom_workload *w = NULL;
    oom_estimate e = OOM_ESTIMATE_INIT;
    oom_budget b = OOM_BUDGET_INIT;
    args a = {0};
    bool have_budget = false;
    char *gpu = NULL, *json = NULL;
    int err, rc;

    if ((err = oom_workload_create(&w)))
        return cli_fail(CMD, err);
    if (!(a.given = calloc((size_t)argc, sizeof(*a.given)))) {
        rc = cli_fail(CMD, OOM_ENOMEM);
        goto done;
    }
    if ((rc = parse(argc, argv, &a, w)) != EXIT_OK)
        goto done;
    if (a.help) {
        usage(stdout);
        goto done;
    }
    if (a.list) {
        rc = cli_list_models(CMD, a.json);
        goto done;
    }
    if (a.command) {
        rc = calibrated(&a, w);
        goto done;
    }
    if ((rc = resolve_budget(&a, w, &b, &have_budget, &gpu)) != EXIT_OK)
        goto done;
    if (!a.json) {
        rc = estimate_text(&a, w, have_budget ? &b : NULL, gpu ? gpu : "");
        goto done;
    }
    if ((err = oom_estimate_run(&e, w))) {
        rc = cli_fail(CMD, err);
        goto done;
    }
    if (a.svg && (rc = write_svg(a.svg, w, &e, have_budget ? &b : NULL)) != EXIT_OK)
        goto done;
    if ((err = oom_estimate_to_json_budget(&json, w, &e, have_budget ? &b : NULL)))
        rc = cli_fail(CMD, err);
    else
        rc = cli_print_json(json);
    if (rc == EXIT_OK && have_budget && e.device_peak > b.usable_bytes)
        rc = EXIT_NOFIT;
done:
    oom_free(gpu);
    oom_free(json);
    oom_free(a.command);
    free(a.given);
    oom_workload_free(w);
    return rc;
}
