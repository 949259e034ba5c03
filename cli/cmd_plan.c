/* cmd_plan.c - `oomless plan`: the fastest configuration that fits, by search over the estimator.
 * A thin layer over oom_plan_options_* (the Python package calls the same through oom_plan_json).
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char *const CMD = "plan";

typedef struct plan_args {
    struct cli_plan_args common; /* help, format */
    const char *svg, *format_version;
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
            "Searches micro-batch, accumulation, checkpointing, precision, optimizer, offload,\n"
            "ZeRO stage, loss and attention for the fastest configuration whose device peak\n"
            "fits the budget.\n"
            "Values you give (--batch-size, --grad-accum, --seq, --checkpointing,\n"
            "$OOMLESS_BATCH_SIZE) are never raised. See docs/plan.md.\n\nWorkload:\n");
    o = oom_workload_options(&n);
    cli_print_options(out, o, n, OOM_COMMAND_PLAN);
    fprintf(out, "\nPlan and budget:\n");
    o = oom_plan_option_table(&n);
    cli_print_options(out, o, n, OOM_COMMAND_PLAN);
    fprintf(out, "\nOutput:\n");
    cli_print_formats(out, OOM_COMMAND_PLAN);
    fprintf(out,
            "  --json                       the same as --format json\n"
            "  --list-models                the built-in model presets (with --json: as JSON)\n"
            "  --svg FILE                   a picture: memory against the budget, peak vs batch\n"
            "  --allow-inexact, --allow-downscale, --no-allow-downscale   flags\n"
            "  --help                       this text\n\n"
            "Exit codes: 0 a plan fits; 1 nothing fits; 2 bad option or value; 3 environment.\n");
}

/* --name VALUE or --name=VALUE; *v NULL when missing */
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
    const char *written = NULL;
    size_t i, n;
    int err;
    bool machine = strcmp(a->common.format, "text") && strcmp(a->common.format, "json");

    if (r->target_fallback)
        cli_notice("no GPU found (%s); planning for profile '%s'. Use --gpu NAME to choose "
                   "another.",
                   r->target_reason, r->gpu_id);
    for (i = 0; i < r->n_notices; i++)
        if (strcmp(a->common.format, "text") || !strncmp(r->notices[i], "DOWNSCALED", 10))
            cli_notice("%s", r->notices[i]);
    if (!r->found && machine) {
        if ((err = oom_plan_format(&text, r, "text")))
            return cli_fail(CMD, err);
        fputs(text, stderr);
        oom_free(text);
        return EXIT_NOFIT;
    }
    if ((err = oom_plan_format_version(&text, &written, r, a->common.format, a->format_version)))
        return cli_fail(CMD, err);
    if (written) { /* which keys were written, also where the text has no room for a comment */
        const oom_plan_format_info *const *f = oom_plan_formats(&n);
        for (i = 0; i < n && strcmp(f[i]->name, a->common.format); i++)
            ;
        if (i < n)
            cli_notice("--format %s: the keys of %s %s (--format-version picks one of %s)",
                       a->common.format, f[i]->framework, written, f[i]->versions);
    }
    if (!strcmp(a->common.format, "json") || !strcmp(a->common.format, "deepspeed"))
        cli_print_json(text);
    else
        fputs(text, stdout);
    oom_free(text);
    return r->found ? EXIT_OK : EXIT_NOFIT;
}

/* a format of plan (the library's table) */
static bool known_format(const char *f)
{
    size_t i, n;
    const oom_plan_format_info *const *t = oom_plan_formats(&n);
    for (i = 0; i < n; i++)
        if ((t[i]->commands & OOM_COMMAND_PLAN) && !strcmp(f, t[i]->name))
            return true;
    return false;
}

int cmd_plan(int argc, char **argv)
{
    oom_plan_options *o = NULL;
    oom_plan_result *r = NULL;
    plan_args a = {{false, "text", false}, NULL, NULL};
    const struct cli_plan_extra extra[] = {{"format", &a.common.format, NULL},
                                           {"svg", &a.svg, NULL},
                                           {"format-version", &a.format_version, NULL}};
    int err, rc;

    if ((err = oom_plan_options_create(&o)))
        return cli_fail(CMD, err);
    if ((rc = cli_parse_plan_options(CMD, argc, argv, o, &a.common, extra, 3)) != EXIT_OK ||
        a.common.help) {
        if (a.common.help)
            usage(stdout);
        goto done;
    }
    if (a.common.list_models) {
        rc = cli_list_models(CMD, !strcmp(a.common.format, "json"));
        goto done;
    }
    if (!known_format(a.common.format)) {
        char names[512];
        rc = cli_usage_error(CMD, "unknown --format '%s' (%s)", a.common.format,
                             cli_format_names(names, sizeof(names), OOM_COMMAND_PLAN));
        goto done;
    }
    /* a version the format does not know is said before the search */
    if ((err = oom_plan_format_pick(NULL, a.common.format, a.format_version))) {
        rc = cli_fail(CMD, err);
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
