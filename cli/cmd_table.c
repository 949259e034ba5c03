/* cmd_table.c - `oomless table`: the per-GPU tables that training guides publish, computed
 * (one plan per GPU). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char *const CMD = "table";
#define DEFAULT_GPUS "rtx-3090,rtx-4090,a100-40gb,a100-80gb,h100-sxm"
#define MAX_GPUS     64

static void usage(FILE *out)
{
    fprintf(out,
            "usage: oomless table --model NAME|PATH [WORKLOAD/PLAN OPTIONS] [--gpus LIST]\n"
            "       oomless table [PLAN OPTIONS] [--gpus LIST] -- CMD...\n"
            "       oomless table --workloads FILE [--gpus LIST]\n\n"
            "Plans the workload on each GPU profile and prints one row per GPU: usable memory,\n"
            "batch size, accumulation, sequence length, checkpointing, device peak, share of the\n"
            "budget used and estimated tokens/s.\n\n"
            "  --gpus LIST, --gpu-list LIST  catalog ids, comma-separated (default\n"
            "                                %s).\n"
            "                                In `table`, --gpus is this list; for data-parallel\n"
            "                                GPUs per row use --nodes/--gpus-per-node.\n"
            "  --workloads FILE              YAML: workloads: {NAME: {option: value, ...}}\n"
            "  --json                        the same as --format json\n"
            "  --list-models                 the built-in model presets (with --json: as JSON)\n",
            DEFAULT_GPUS);
    cli_print_formats(out, OOM_COMMAND_TABLE);
    fprintf(out, "  every option of `oomless plan` (see oomless plan --help) except --gpu,\n"
                 "  read by the same parser ('_' may stand for '-'); -- CMD... tabulates the line\n"
                 "  'oomless probe -- CMD...' measured\n\n"
                 "Exit codes: 0 table printed (rows may say 'no fit'); 2 bad option; 3 "
                 "environment.\n");
}

/* splits a comma list in place into at most MAX_GPUS names */
static size_t split(char *list, const char **out)
{
    size_t n = 0;
    char *p = list, *save = NULL;
    for (p = strtok_r(list, ",", &save); p && n < MAX_GPUS; p = strtok_r(NULL, ",", &save))
        out[n++] = p;
    return n;
}

int cmd_table(int argc, char **argv)
{
    oom_plan_options *o = NULL, **opts = NULL;
    char **names = NULL, *list = NULL, *text = NULL;
    const char *gpus[MAX_GPUS], *one_name = "workload";
    size_t n = 0, ng;
    struct cli_plan_args a = {false, "text", false};
    const char *gpu_list = DEFAULT_GPUS, *file = NULL;
    const struct cli_plan_extra extra[] = {
        {"gpus", &gpu_list, NULL},
        {"gpu-list", &gpu_list, NULL},
        {"workloads", &file, NULL},
        {"format", &a.format, NULL},
        {"gpu", NULL, "use --gpus LIST in table (one row per GPU)"}};
    int err, rc;

    if ((err = oom_plan_options_create(&o)))
        return cli_fail(CMD, err);
    if ((rc = cli_parse_plan_options(CMD, argc, argv, o, &a, extra, 5)) != EXIT_OK || a.help) {
        if (a.help)
            usage(stdout);
        goto done;
    }
    if (a.list_models) {
        rc = cli_list_models(CMD, !strcmp(a.format, "json"));
        goto done;
    }
    if (!(list = strdup(gpu_list)) || !(ng = split(list, gpus))) {
        rc = cli_usage_error(CMD, "--gpus '%s' names no GPU", gpu_list);
        goto done;
    }
    if (file && (err = oom_table_workloads_load(&opts, &names, &n, file))) {
        rc = cli_fail(CMD, err);
        goto done;
    }
    err = file ? oom_table(&text, (const oom_plan_options *const *)opts, (const char *const *)names,
                           n, gpus, ng, a.format)
               : oom_table(&text, (const oom_plan_options *const *)&o, &one_name, 1, gpus, ng,
                           a.format);
    if (err) {
        rc = cli_fail(CMD, err);
        goto done;
    }
    fputs(text, stdout);
done:
    oom_free(text);
    free(list);
    oom_table_workloads_free(opts, names, n);
    oom_plan_options_free(o);
    return rc;
}
