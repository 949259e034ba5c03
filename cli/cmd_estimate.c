/* cmd_estimate.c - `oomless estimate`: a workload's peak GPU memory, with a breakdown. */
#include "cli.h"
#include "core/core.h"
#include "estimate/estimate.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "estimate";

typedef struct args {
    bool json, list, help;
    const char *gpu, *vram, *margin, *config, *svg;
    const char *calibration, *calib_workload; /* with `-- CMD...`: a probe's measured line */
    char *command;                            /* the command's calibration key, or NULL */
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

static int list_models(bool json)
{
    oom_preset **p = NULL;
    size_t n = 0, i;
    char *text = NULL;
    int err, rc;
    if (json) {
        if ((err = oom_model_presets_json(&text)))
            return cli_fail(CMD, err);
        rc = cli_print_json(text);
        oom_free(text);
        return rc;
    }
    if ((err = oom_model_presets(&p, &n)))
        return cli_fail(CMD, err);
    for (i = 0; i < n; i++) {
        printf("%-16s %-12s %8.2f B params\n", p[i]->name, p[i]->family,
               (double)p[i]->params / 1e9);
    }
    oom_model_presets_free(p, n);
    return EXIT_OK;
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
            break;
        }
        if (strncmp(arg, "--", 2) || !arg[2])
            return cli_usage_error(CMD, "unexpected argument '%s'", arg);
        v = cli_option_name(name, sizeof(name), arg + 2);
        if (!v && (!strcmp(name, "json") || !strcmp(name, "list-models") || !strcmp(name, "help") ||
                   !strcmp(name, "vram-auto"))) {
            a->json |= name[0] == 'j', a->list |= name[0] == 'l', a->help |= name[0] == 'h';
            if (name[0] == 'v')
                a->vram = "auto";
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

static void row(const char *label, uint64_t bytes, uint64_t total)
{
    char buf[32];
    printf("  %-30s: %12s  %5.1f%%\n", label, oom_format_size(buf, sizeof(buf), bytes),
           total ? 100.0 * (double)bytes / (double)total : 0.0);
}

/* the parts of the overhead outside PyTorch's allocator, under its row; `notices` lists the
 * defaults the user can change, after the table */
static void print_overhead(const oom_workload *w, const oom_estimate *e, bool notices)
{
    oomi_overhead o;
    char label[48], s1[32], s2[32];
    size_t i;
    if (oomi_overhead_of(&o, w))
        return;
    for (i = 0; i < o.n && !notices; i++) {
        const char *name = !strcmp(o.part[i].name, "nccl")           ? "NCCL buffers"
                           : !strcmp(o.part[i].name, "cuda_context") ? "CUDA context + kernels"
                                                                     : "given (--overhead)";
        snprintf(label, sizeof(label), "  %s", name);
        row(label, (uint64_t)(o.part[i].bytes + 0.5), e->device_peak);
    }
    if (notices) {
        const oomi_coef *c;
        bool dflt;
        if (!oomi_coef_get(&c)) {
            double ws = oomi_cublas_workspace(w, c, &dflt);
            printf("  %-30s: %s in the temporaries (%s)\n", "cuBLAS workspace",
                   oom_format_size(s1, sizeof(s1), (uint64_t)ws),
                   dflt ? "default; set --cublas-workspace or CUBLAS_WORKSPACE_CONFIG"
                        : "--cublas-workspace");
        }
    }
    if (!notices || o.ranks < 2)
        return;
    printf("  %-30s: %ld GPUs, %ld communicator%s x %ld channels x %s, NVLS %s (%s ring + %s "
           "NVLS each)\n",
           "NCCL", o.ranks, o.comms, o.comms > 1 ? "s" : "", o.channels,
           oom_format_size(s1, sizeof(s1), (uint64_t)o.buffsize), o.nvls ? "on" : "off",
           oom_format_size(label, sizeof(label), (uint64_t)(o.ring + 0.5)),
           oom_format_size(s2, sizeof(s2), (uint64_t)(o.nvls_bytes + 0.5)));
    for (i = 0; i < o.n; i++)
        if (!strcmp(o.part[i].name, "nccl") && o.part[i].change)
            printf("  %-30s: NCCL's defaults assumed; set %s\n", "notice", o.part[i].change);
}

/* The estimate's JSON document (estimate --json), read by the lines below that print what the
 * library puts only there; NULL when it cannot be made (oom_last_message() says why). */
static json_object *estimate_doc(const oom_workload *w, const oom_estimate *e)
{
    char *json = NULL;
    json_object *root = NULL;
    if (!oom_estimate_to_json(&json, w, e) && !(root = json_tokener_parse(json)))
        oomi_fail(OOM_EPARSE, "estimate: its JSON does not parse");
    oom_free(json);
    return root;
}

/* the device peak's 95 % bound and its class, as estimate --json gives them */
static void print_bound(json_object *root, const oom_estimate *e)
{
    char s1[32];
    json_object *c;
    int64_t bound = 0, cases = 0;

    if (!root ||
        oomi_json_int(&bound, NULL, oomi_json_get(root, "memory"), "device_peak_upper95", 0,
                      INT64_MAX, "estimate: ") ||
        oomi_json_int(&cases, NULL, c = oomi_json_get(root, "confidence"), "cases", 0, INT64_MAX,
                      "estimate: ")) {
        fprintf(stderr, "oomless estimate: no 95%% bound: %s\n", oom_last_message());
    } else {
        printf("  %-30s: %s (+%.1f%%; class %s, %s, %lld cases)\n", "device peak, 95% bound",
               oom_format_size(s1, sizeof(s1), (uint64_t)bound),
               e->device_peak ? 100.0 * ((double)bound / (double)e->device_peak - 1) : 0.0,
               json_object_get_string(oomi_json_get(c, "class")),
               json_object_get_string(oomi_json_get(c, "basis")), (long long)cases);
    }
}

/* the stack line, from the estimate's JSON ("stack": name, version, traced) */
static void print_stack(json_object *root)
{
    json_object *o = oomi_json_get(root, "stack");
    if (o)
        printf("  %-30s: %s (%s; %s)\n", "stack", json_object_get_string(oomi_json_get(o, "name")),
               json_object_get_string(oomi_json_get(o, "version")),
               json_object_get_boolean(oomi_json_get(o, "traced")) ? "traced on the meta device"
                                                                   : "from its source, not traced");
}

/* the packing line, from the estimate's JSON (workload.packing); none without packing */
static void print_packing(json_object *root)
{
    json_object *o;
    if ((o = oomi_json_get(oomi_json_get(root, "workload"), "packing")))
        printf("  %-30s: %s, %lld tokens: %lld x %lld, documents up to %lld (%s)\n", "packing",
               json_object_get_string(oomi_json_get(o, "mode")),
               (long long)json_object_get_int64(oomi_json_get(o, "tokens_per_batch")),
               (long long)json_object_get_int64(oomi_json_get(o, "rows")),
               (long long)json_object_get_int64(oomi_json_get(o, "row_tokens")),
               (long long)json_object_get_int64(oomi_json_get(o, "longest_document")),
               json_object_get_string(oomi_json_get(o, "attention_path")));
}

/* the objective's line, from the estimate's JSON (workload.objective); none for sft */
static void print_objective(json_object *root)
{
    json_object *o;
    if ((o = oomi_json_get(oomi_json_get(root, "workload"), "objective"))) {
        printf("  %-30s: %s (batch counts %s: %lld sequences per forward; reference %s%s)\n",
               "objective", json_object_get_string(oomi_json_get(o, "name")),
               json_object_get_string(oomi_json_get(o, "batch_counts")),
               (long long)json_object_get_int64(oomi_json_get(o, "sequences_per_forward")),
               json_object_get_string(oomi_json_get(o, "reference")),
               json_object_get_boolean(oomi_json_get(o, "precompute_ref")) ? ", precomputed" : "");
        if (oomi_json_get(o, "generation_batch"))
            printf("  %-30s: %lld completions (%lld per prompt), prompt %lld + completion %lld "
                   "tokens\n",
                   "generation batch",
                   (long long)json_object_get_int64(oomi_json_get(o, "generation_batch")),
                   (long long)json_object_get_int64(oomi_json_get(o, "num_generations")),
                   (long long)json_object_get_int64(oomi_json_get(o, "prompt_len")),
                   (long long)json_object_get_int64(oomi_json_get(o, "completion_len")));
    }
}

static uint64_t json_size(json_object *o, const char *key)
{
    return (uint64_t)json_object_get_int64(oomi_json_get(o, key));
}

/* a 4-bit base's parts, the adapters' dtype and a paged optimizer's states, from the estimate's
 * JSON ("qlora"); nothing where there are none */
static void print_qlora(json_object *root)
{
    char s1[32], s2[32], s3[32], s4[32];
    json_object *q;
    if (!(q = oomi_json_get(root, "qlora")))
        return;
    if (oomi_json_get(q, "nf4_bytes"))
        printf("  %-30s: NF4 %s + absmax %s%s, unquantized %s; dequantized linear %s\n",
               "4-bit base", oom_format_size(s1, sizeof(s1), json_size(q, "nf4_bytes")),
               oom_format_size(s2, sizeof(s2),
                               json_size(q, "absmax_bytes") + json_size(q, "absmax2_bytes")),
               json_object_get_boolean(oomi_json_get(q, "double_quant")) ? " (double quant)" : "",
               oom_format_size(s3, sizeof(s3), json_size(q, "unquantized_bytes")),
               oom_format_size(s4, sizeof(s4), json_size(q, "dequantized_transient_bytes")));
    if (oomi_json_get(q, "adapter_dtype"))
        printf("  %-30s: %s, %s\n", "LoRA adapters",
               json_object_get_string(oomi_json_get(q, "adapter_dtype")),
               oom_format_size(s1, sizeof(s1), json_size(q, "adapter_bytes")));
    if (json_size(q, "paged_optimizer_bytes"))
        printf("  %-30s: %s in CUDA unified memory, outside the peaks (nvidia-smi shows them "
               "while the GPU has room)\n",
               "paged optimizer states",
               oom_format_size(s1, sizeof(s1), json_size(q, "paged_optimizer_bytes")));
}

/* sharding fsdp2's line: the sharded parameters' dtype and reshard_after_forward */
static void print_fsdp2(const oom_workload *w)
{
    char *dt = NULL, *ra = NULL, *sh = NULL;
    if (!oom_workload_get(&sh, w, "sharding") && !strcmp(sh, "fsdp2") &&
        !oom_workload_get(&dt, w, "fsdp-param-dtype") &&
        !oom_workload_get(&ra, w, "reshard-after-forward"))
        printf("  %-30s: parameters sharded in %s, reshard after forward %s\n", "FSDP2", dt, ra);
    oom_free(sh), oom_free(dt), oom_free(ra);
}

static void print_human(const oom_workload *w, const oom_estimate *e, const oom_budget *b,
                        const char *gpu)
{
    oom_knobs k = OOM_KNOBS_INIT;
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    char *tp = NULL, *ck = NULL, *sh = NULL;
    char s1[32], s2[32], n1[32], n2[32];
    const char *line = "============================================================";
    json_object *doc = estimate_doc(w, e);

    oom_workload_get_knobs(&k, w);
    oom_workload_model(&mi, w);
    printf("%s\nMemory estimate: %s (%s, %.2f B params)\n%s\n", line, mi.name, mi.family,
           (double)e->params_total / 1e9, line);
    printf("  %-30s: %s\n  %-30s: %s\n  %-30s: %s\n", "method", oom_method_name(k.method),
           "precision", oom_precision_name(k.precision), "optimizer",
           k.method == OOM_METHOD_INFERENCE ? "-" : oom_optimizer_name(k.optimizer));
    printf("  %-30s: %ld x %ld tokens, grad-accum %ld\n", "micro-batch x seq", k.batch, k.seq_len,
           k.grad_accum);
    if (oom_workload_get(&ck, w, "checkpointing"))
        ck = NULL;
    printf("  %-30s: %s, attention %s, loss %s\n", "checkpointing",
           ck ? ck : oom_checkpointing_name(k.checkpointing), oom_attention_name(k.attention),
           oom_loss_name(k.loss));
    oom_free(ck);
    if (oom_workload_get(&sh, w, "sharding"))
        sh = NULL;
    printf("  %-30s: %ld (sharding %s, offload %s)\n", "GPUs", k.gpus,
           sh ? sh : oom_sharding_name(k.sharding), oom_offload_name(k.offload));
    oom_free(sh);
    print_stack(doc);
    print_fsdp2(w);
    print_objective(doc);
    print_packing(doc);
    if (!oom_workload_get(&tp, w, "tensor-parallel") && strcmp(tp, "1"))
        printf("  %-30s: %s GPUs per model copy (figures per GPU)\n", "tensor parallel", tp);
    oom_free(tp);
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
    print_overhead(w, e, false);
    row("total (device peak)", e->device_peak, e->device_peak);
    printf("%s\n", line);
    printf("  %-30s: %s\n", "allocated peak (max_allocated)",
           oom_format_size(s1, sizeof(s1), e->allocated_peak));
    printf("  %-30s: %s\n", "reserved peak (max_reserved)",
           oom_format_size(s1, sizeof(s1), e->reserved_peak));
    printf("  %-30s: %s\n", "device peak (nvidia-smi)",
           oom_format_size(s1, sizeof(s1), e->device_peak));
    print_bound(doc, e);
    print_overhead(w, e, true);
    printf("  %-30s: %s\n", "peak phase", oom_phase_name(e->peak_phase));
    print_qlora(doc);
    if (b) {
        bool fits = e->device_peak <= b->usable_bytes;
        uint64_t d = fits ? b->usable_bytes - e->device_peak : e->device_peak - b->usable_bytes;
        printf("%s\n  %-30s: %s (%s)\n", line, "target VRAM",
               oom_format_size(s1, sizeof(s1), b->target_bytes), gpu);
        printf("  %-30s: %s\n  %-30s: %s\n", "safety margin",
               oom_format_size(s1, sizeof(s1), b->safety_margin_bytes), "usable VRAM",
               oom_format_size(s2, sizeof(s2), b->usable_bytes));
        printf("  %-30s: %s (%s %s)\n", "fits", fits ? "yes" : "NO",
               oom_format_size(s1, sizeof(s1), d), fits ? "to spare" : "over");
    }
    printf("%s\n", line);
    json_object_put(doc);
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

static void print_calibrated(const char *doc)
{
    json_object *root = json_tokener_parse(doc), *c, *b;
    char s1[32], s2[32], s3[32];
    const char *line = "============================================================";
    uint64_t peak, usable;

    if (!root)
        return;
    c = oomi_json_get(root, "calibration");
    b = oomi_json_get(root, "budget");
    peak = (uint64_t)json_object_get_int64(
        oomi_json_get(oomi_json_get(root, "memory"), "device_peak"));
    usable = (uint64_t)json_object_get_int64(oomi_json_get(b, "usable_bytes"));
    printf("%s\nCalibrated estimate (measured by oomless probe on %s)\n%s\n", line,
           json_object_get_string(oomi_json_get(c, "gpu")), line);
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
    printf("  %-30s: %s\n  %-30s: %s (%s %s)\n%s\n", "usable VRAM",
           oom_format_size(s2, sizeof(s2), usable), "fits", peak <= usable ? "yes" : "NO",
           oom_format_size(s3, sizeof(s3), peak <= usable ? usable - peak : peak - usable),
           peak <= usable ? "to spare" : "over", line);
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
        print_calibrated(doc);
        rc = EXIT_OK;
    }
    oom_free(doc);
    return rc == EXIT_OK && !fits ? EXIT_NOFIT : rc;
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
    if ((rc = parse(argc, argv, &a, w)) != EXIT_OK)
        goto done;
    if (a.help) {
        usage(stdout);
        goto done;
    }
    if (a.list) {
        rc = list_models(a.json);
        goto done;
    }
    if (a.command) {
        rc = calibrated(&a, w);
        goto done;
    }
    if ((rc = resolve_budget(&a, w, &b, &have_budget, &gpu)) != EXIT_OK)
        goto done;
    if ((err = oom_estimate_run(&e, w))) {
        rc = cli_fail(CMD, err);
        goto done;
    }
    if (a.svg && (rc = write_svg(a.svg, w, &e, have_budget ? &b : NULL)) != EXIT_OK)
        goto done;
    if (a.json) {
        if ((err = oom_estimate_to_json_budget(&json, w, &e, have_budget ? &b : NULL)))
            rc = cli_fail(CMD, err);
        else
            rc = cli_print_json(json);
    } else {
        print_human(w, &e, have_budget ? &b : NULL, gpu ? gpu : "");
    }
    if (rc == EXIT_OK && have_budget && e.device_peak > b.usable_bytes)
        rc = EXIT_NOFIT;
done:
    oom_free(gpu);
    oom_free(json);
    oom_free(a.command);
    oom_workload_free(w);
    return rc;
}
