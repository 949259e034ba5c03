/* plan_vocab.c - the options of plan and table beside the workload's (the budget, the search,
 * a measured line, calibration records): each one's values, default and help, written once here;
 * and the lookup of any option by name. */
#include "plan/plan.h"

#include <string.h>

#define PT     (OOM_COMMAND_PLAN | OOM_COMMAND_TABLE)
#define EPT    (OOM_COMMAND_ESTIMATE | PT)
#define BUDGET (EPT | OOM_COMMAND_PROBE | OOM_COMMAND_GPUS | OOM_COMMAND_RUN | OOM_COMMAND_WATCH)
/* every command with a budget but table, whose --gpus is its list of GPUs */
#define GPU (BUDGET & ~OOM_COMMAND_TABLE)

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

/* ---- the values of the lists, each with the bits it sets ------------------------------------- */

static const oom_option_value *const allow_values[] = {
    V(PT, "checkpointing", "selective or full checkpointing, and --checkpointing-variants"),
    V(PT, "precision", "another 16-bit or quantized precision of the same method"),
    V(PT, "optimizer", "8-bit AdamW in place of AdamW"),
    V(PT, "offload", "ZeRO's CPU offload of the optimizer and the parameters"),
    V(PT, "sharding", "ZeRO-1, 2 or 3 when there is more than one GPU"),
    V(PT, "loss", "a chunked loss: fused linear + cross-entropy"),
    V(PT, "attention", "a more memory-efficient attention kernel: sdpa, flash"),
    V(PT, "layout",
      "tensor, pipeline, expert and context parallelism over the GPUs, where data parallelism "
      "needs ZeRO-3 or offload"),
    V(PT, "all", "every knob above"),
    V(PT, "default", "checkpointing, sharding and layout"),
    V(PT, "none", "none: only the batch and the accumulation"),
};
static const unsigned allow_bits[] = {OOM_ALLOW_CHECKPOINTING,
                                      OOM_ALLOW_PRECISION,
                                      OOM_ALLOW_OPTIMIZER,
                                      OOM_ALLOW_OFFLOAD,
                                      OOM_ALLOW_SHARDING,
                                      OOM_ALLOW_LOSS,
                                      OOM_ALLOW_ATTENTION,
                                      OOM_ALLOW_LAYOUT,
                                      OOM_ALLOW_ALL,
                                      OOM_ALLOW_DEFAULT,
                                      0};
_Static_assert(OOMI_ARRAY_LEN(allow_bits) == OOMI_ARRAY_LEN(allow_values), "bits per value");

static const oom_option_value *const downscale_values[] = {
    V(PT, "batch", "the micro-batch"),
    V(PT, "batch-size", "the micro-batch, as batch"),
    V(PT, "seq", "the sequence length"),
    V(PT, "checkpointing", "the checkpointing, which may become more thorough"),
    V(PT, "yes", "all of them"),
    V(PT, "no", "none of them"),
    V(PT, "all", "all of them, as yes"),
    V(PT, "default", "the micro-batch"),
    V(PT, "none", "none of them, as no"),
};
static const unsigned downscale_bits[] = {
    OOM_DOWNSCALE_BATCH,         OOM_DOWNSCALE_BATCH,   OOM_DOWNSCALE_SEQ,
    OOM_DOWNSCALE_CHECKPOINTING, OOM_DOWNSCALE_ALL,     0,
    OOM_DOWNSCALE_ALL,           OOM_DOWNSCALE_DEFAULT, 0};
_Static_assert(OOMI_ARRAY_LEN(downscale_bits) == OOMI_ARRAY_LEN(downscale_values),
               "bits per value");

static const oom_option_value *const yes_no_values[] = {
    V(PT, "yes", "the nearest effective batch with a good micro-batch, up or down"),
    V(PT, "no", "exactly the effective batch asked for"),
};

static const oom_option_value *const workers_values[] = {
    F(PT, "N", "N copies of the job share each GPU, each with its own CUDA context"),
    V(PT, "auto", "report how many copies fit"),
};

static const oom_option_value *const gpu_values[] = {
    V(GPU, "auto", "the detected GPUs, the smallest when they differ; else the default profile"),
    F(GPU, "INDEX", "a visible GPU's index, when a GPU is detected"),
    F(GPU, "NAME", "a catalog profile such as a100-80gb: oomless gpus --catalog"),
};

static const oom_option_value *const vram_values[] = {
    V(BUDGET, "auto", "the GPU's memory less what the driver reserves for itself"),
    V(BUDGET, "free", "what is free on the detected GPU now"),
    F(BUDGET, "SIZE", "a size: 24, 16GiB; bare number = GiB; at most the detected GPU's"),
};

static const oom_option_value *const calibration_values[] = {
    F(EPT, "FILE", "a calibration file"),
    V(EPT, "off", "no calibration records"),
};

/* ---- the options ------------------------------------------------------------------------------
 */

#define OPT(name, metavar, help, dflt, cmds, vals, list)                                           \
    &(const oom_option)                                                                            \
    {                                                                                              \
        OOM_OPTION_VERSION, name, metavar, help, vals, OOMI_ARRAY_LEN(vals), dflt, cmds, list      \
    }
#define FREE(name, metavar, help, dflt, cmds)                                                      \
    &(const oom_option)                                                                            \
    {                                                                                              \
        OOM_OPTION_VERSION, name, metavar, help, NULL, 0, dflt, cmds, 0                            \
    }

/* pointers, so that oom_option can grow behind its version */
static const oom_option *const plan_options[] = {
    FREE("target-effective-batch", "N",
         "samples per optimizer step over all GPUs (default: batch x grad-accum x GPUs when the "
         "batch is given, else 32, or one per GPU past 32)",
         NULL, PT),
    FREE("batch-size", "N", "fix the micro-batch per GPU (never raised; same as --batch)", NULL,
         PT),
    FREE("seq-range", "MIN:MAX", "the planner picks the longest sequence in the range that fits",
         NULL, PT),
    FREE("max-batch-size", "N", "cap on any micro-batch", NULL, PT),
    FREE("max-auto-batch-size", "N", "cap on a micro-batch the planner chooses", NULL, PT),
    OPT("allow", "LIST", "knobs the planner may change", "checkpointing,sharding,layout", PT,
        allow_values, 1),
    OPT("checkpointing-variants", "LIST",
        "variants of full checkpointing the planner may pick where it searches checkpointing",
        "none", PT, oomi_ckvar_values, 1),
    OPT("allow-inexact", "WHEN",
        "the effective batch may round up or down to the nearest one with a good micro-batch", "no",
        PT, yes_no_values, 0),
    OPT("allow-downscale", "LIST", "fixed values that may be lowered when they do not fit", "batch",
        PT, downscale_values, 1),
    FREE("nodes", "M", "nodes (data parallel; with --gpus-per-node)", NULL, PT),
    FREE("gpus-per-node", "K", "GPUs per node", NULL, PT),
    OPT("workers", "N", "copies of the job on each GPU", "1", PT, workers_values, 0),
    OPT("gpu", "GPU", "GPU to plan for; environment OOMLESS_GPU, then GPU_PROFILE", "auto", GPU,
        gpu_values, 0),
    OPT("vram", "SIZE", "target VRAM per GPU; --vram-auto is --vram auto", "auto", BUDGET,
        vram_values, 0),
    FREE("vram-safety-margin", "SIZE|PCT",
         "memory kept free (bare number = MiB; 10% of the target; the config's "
         "defaults.safety_margin replaces the default)",
         "1GiB", BUDGET),
    FREE("fit-confidence", "P",
         "plan so that the job fits with confidence P (0.5 to 0.99), from the estimator's "
         "measured error, instead of the safety margin",
         NULL, PT),
    FREE("config", "FILE", "user config file (default $XDG_CONFIG_HOME/oomless/config.yaml)", NULL,
         BUDGET),
    FREE("fixed-bytes", "SIZE", "measured line: bytes independent of the batch (bare number = MiB)",
         NULL, PT),
    FREE("bytes-per-sample", "SIZE", "measured line: bytes per sample (bare number = MiB)", NULL,
         PT),
    FREE("bytes-per-token", "SIZE", "measured line: bytes per sample per token of --seq", NULL, PT),
    FREE("sample-multiplier", "X", "measured line: tensors per sample", "1", PT),
    FREE("n-positives", "N", "measured line: positives per anchor (multiplier 1 + pos + neg)", NULL,
         PT),
    FREE("n-negatives", "N", "measured line: negatives per anchor", NULL, PT),
    FREE("flops-per-sample", "X", "measured line: training FLOPs per sample (for throughput)", NULL,
         PT),
    FREE("workload", "FILE", "a YAML mapping of these options (and the workload's)", NULL, PT),
    OPT("calibration", "FILE",
        "calibration records of 'oomless probe' (default "
        "$XDG_CACHE_HOME/oomless/calibration.jsonl)",
        NULL, EPT, calibration_values, 0),
    FREE("calibration-command", "JSON",
         "plan on the line probe measured for this command (the CLI fills it from '-- CMD...')",
         NULL, PT),
    FREE("calibration-workload", "TEXT", "the record's workload key, as probe's --workload", NULL,
         EPT),
};

const oom_option *const *oom_plan_option_table(size_t *count)
{
    if (count)
        *count = OOMI_ARRAY_LEN(plan_options);
    return plan_options;
}

const oom_option *oom_option_lookup(const char *name)
{
    char k[40];
    size_t i;
    const oom_option *o;
    if (!name || strlen(name) >= sizeof(k))
        return NULL;
    for (i = 0; name[i]; i++)
        k[i] = name[i] == '_' ? '-' : name[i];
    k[i] = 0;
    if ((o = oomi_workload_option(k)))
        return o;
    for (i = 0; i < OOMI_ARRAY_LEN(plan_options); i++)
        if (!strcmp(plan_options[i]->name, k))
            return plan_options[i];
    return NULL;
}

/* "a,b,c" of values of `key` (allow, allow-downscale) into the bits each sets */
int oomi_plan_list_bits(unsigned *out, const char *key, const char *v)
{
    bool allow = !strcmp(key, "allow");
    const oom_option *o = oom_option_lookup(key);
    const unsigned *bits = allow ? allow_bits : downscale_bits;
    char item[32];
    const char *p = v;
    unsigned acc = 0, i;
    while (*p) {
        size_t len = strcspn(p, ",");
        oomi_snprintf(item, sizeof(item), "%.*s", (int)(len < 31 ? len : 31), p);
        if (oomi_option_parse(&i, o, item))
            return oomi_fail(OOM_EINVAL, "option '%s': unknown value '%s' in '%s'", key, item, v);
        acc |= bits[i];
        p += len + (p[len] == ',');
    }
    *out = acc;
    return OOM_OK;
}
