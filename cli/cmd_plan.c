/* cmd_plan.c - `oomless plan`: the fastest configuration that fits, by search over the estimator.
 * A thin layer over oom_plan_options_* (the Python package calls the same through oom_plan_json).
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char *const CMD = "plan";

typedef struct plan_args {
    bool help;
    const char *format, *svg;
} plan_args;

static void usage(FILE *out)
{
    size_t n;
    const oom_option *const *o;
    fprintf(out,
            "usage: oomless plan --model NAME|PATH [OPTIONS]\n"
            "       oomless plan --fixed-bytes SIZE --bytes-per-sample SIZE [OPTIONS]\n"
            "       oomless plan [OPTIONS] -- CMD...   (the line 'oomless probe -- CMD...' "
            "measured)\n\n"
            "Searches micro-batch, accumulation, checkpointing, precision, optimizer, offload\n"
            "and ZeRO stage for the fastest configuration whose device peak fits the budget.\n"
            "Values you give (--batch-size, --grad-accum, --seq, --checkpointing,\n"
            "$OOMLESS_BATCH_SIZE) are never raised. See docs/plan.md.\n\nWorkload:\n");
    o = oom_workload_options(&n);
    cli_print_options(out, o, n);
    fprintf(out, "\nPlan and budget:\n");
    o = oom_plan_option_table(&n);
    cli_print_options(out, o, n);
    fprintf(
        out,
        "\nOutput:\n"
        "  --format FORMAT              text (default), json, env, args, deepspeed, torchrun;\n"
        "                               vllm (inference: vLLM settings and KV-cache capacity);\n"
        "                               accelerate (FSDP2 config YAML), torchtitan (TOML)\n"
        "  --json                       the same as --format json\n"
        "  --svg FILE                   a picture: memory against the budget, peak vs batch\n"
        "  --allow-inexact, --allow-downscale, --no-allow-downscale   flags\n"
        "  --help                       this text\n\n"
        "Exit codes: 0 a plan fits; 1 nothing fits; 2 bad option or value; 3 environment.\n");
}

/* --name VALUE or --name=VALUE; *v NULL when missing */
static bool take(int argc, char **argv, int *i, const char *name, const char **v)
{
    const char *a = argv[*i] + 2;
    size_t n = strlen(name);
    if (strncmp(a, name, n) || (a[n] && a[n] != '='))
        return false;
    *v = a[n] == '=' ? a + n + 1 : *i + 1 < argc ? argv[++*i] : NULL;
    return true;
}

static bool known(const char *name)
{
    size_t n, j;
    const oom_option *const *o = oom_workload_options(&n);
    for (j = 0; j < n; j++)
        if (!strcmp(o[j]->name, name))
            return true;
    o = oom_plan_option_table(&n);
    for (j = 0; j < n; j++)
        if (!strcmp(o[j]->name, name))
            return true;
    return false;
}

static int parse(int argc, char **argv, plan_args *a, oom_plan_options *o)
{
    static const char *const flags[] = {"allow-inexact", "allow-downscale"};
    int i, err;
    size_t f;
    for (i = 1; i < argc; i++) {
        char name[64];
        const char *arg = argv[i], *v = NULL, *eq;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            a->help = true;
            continue;
        }
        if (!strcmp(arg, "--json")) {
            a->format = "json";
            continue;
        }
        if (!strcmp(arg, "--")) { /* a probed command: plan on its calibration record */
            char *key = NULL;
            if (i + 1 >= argc)
                return cli_usage_error(CMD, "'--' must be followed by the probed command");
            if ((err = oom_calibration_command_key(&key, (const char *const *)argv + i + 1)) ||
                (err = oom_plan_options_set(o, "calibration-command", key))) {
                oom_free(key);
                return cli_fail(CMD, err);
            }
            oom_free(key);
            break;
        }
        if (!strcmp(arg, "--no-allow-downscale")) {
            if ((err = oom_plan_options_set(o, "allow-downscale", "no")))
                return cli_fail(CMD, err);
            continue;
        }
        for (f = 0; f < 2 && strcmp(arg + 2 * (arg[0] == '-' && arg[1] == '-'), flags[f]); f++)
            ;
        if (f < 2 && !strncmp(arg, "--", 2)) {
            if ((err = oom_plan_options_set(o, flags[f], "yes")))
                return cli_fail(CMD, err);
            continue;
        }
        if (strncmp(arg, "--", 2))
            return cli_usage_error(CMD, "unexpected argument '%s'", arg);
        if (take(argc, argv, &i, "format", &v) || take(argc, argv, &i, "svg", &v)) {
            if (!v)
                return cli_usage_error(CMD, "option '%s' needs a value", arg);
            *(arg[2] == 'f' ? &a->format : &a->svg) = v;
            continue;
        }
        eq = strchr(arg, '=');
        snprintf(name, sizeof(name), "%.*s", (int)(eq ? eq - arg - 2 : (long)strlen(arg + 2)),
                 arg + 2);
        if (!known(name) && strcmp(name, "batch"))
            return cli_usage_error(CMD, "unknown option '%s' (see oomless plan --help)", arg);
        take(argc, argv, &i, name, &v);
        if (!v)
            return cli_usage_error(CMD, "option '%s' needs a value", arg);
        if ((err = oom_plan_options_set(o, name, v)))
            return cli_fail(CMD, err);
    }
    return EXIT_OK;
}

static int write_svg(const char *path, const oom_plan_result *r)
{
    char *svg = NULL;
    FILE *f;
    int err = oom_plan_svg(&svg, r);
    if (err)
        return cli_fail(CMD, err);
    if (!(f = fopen(path, "w")) || fputs(svg, f) < 0 || fclose(f)) {
        if (f)
            fclose(f);
        oom_free(svg);
        fprintf(stderr, "oomless %s: cannot write '%s'\n", CMD, path);
        return EXIT_ENV;
    }
    oom_free(svg);
    return EXIT_OK;
}

static int report(const plan_args *a, const oom_plan_result *r)
{
    char *text = NULL;
    size_t i;
    int err;
    bool machine = strcmp(a->format, "text") && strcmp(a->format, "json");

    if (r->target_fallback)
        cli_notice("no GPU found (%s); planning for profile '%s'. Use --gpu NAME to choose "
                   "another.",
                   r->target_reason, r->gpu_id);
    for (i = 0; i < r->n_notices; i++)
        if (strcmp(a->format, "text") || !strncmp(r->notices[i], "DOWNSCALED", 10))
            cli_notice("%s", r->notices[i]);
    if (!r->found && machine) {
        if ((err = oom_plan_format(&text, r, "text")))
            return cli_fail(CMD, err);
        fputs(text, stderr);
        oom_free(text);
        return EXIT_NOFIT;
    }
    if ((err = oom_plan_format(&text, r, a->format)))
        return cli_fail(CMD, err);
    if (!strcmp(a->format, "json") || !strcmp(a->format, "deepspeed"))
        cli_print_json(text);
    else
        fputs(text, stdout);
    oom_free(text);
    return r->found ? EXIT_OK : EXIT_NOFIT;
}

#define FORMATS "text, json, env, args, deepspeed, torchrun, vllm, accelerate, torchtitan"

static bool known_format(const char *f)
{
    static const char *const names[] = {"text",     "json", "env",        "args",      "deepspeed",
                                        "torchrun", "vllm", "accelerate", "torchtitan"};
    size_t i;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(f, names[i]))
            return true;
    return false;
}

int cmd_plan(int argc, char **argv)
{
    oom_plan_options *o = NULL;
    oom_plan_result *r = NULL;
    plan_args a = {false, "text", NULL};
    int err, rc;

    if ((err = oom_plan_options_create(&o)))
        return cli_fail(CMD, err);
    if ((rc = parse(argc, argv, &a, o)) != EXIT_OK || a.help) {
        if (a.help)
            usage(stdout);
        goto done;
    }
    if (!known_format(a.format)) {
        rc = cli_usage_error(CMD, "unknown --format '%s' (%s)", a.format, FORMATS);
        goto done;
    }
    err = oom_plan_options_run(&r, o);
    if (err && err != OOM_ENOFIT) {
        rc = cli_fail(CMD, err);
        goto done;
    }
    if (err)
        fprintf(stderr, "oomless %s: %s\n", CMD, oom_last_message());
    if (a.svg && r->found && (rc = write_svg(a.svg, r)) != EXIT_OK)
        goto done;
    rc = report(&a, r);
done:
    oom_plan_free(r);
    oom_plan_options_free(o);
    return rc;
}
