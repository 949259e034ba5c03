/* options.c - the option parser of the commands that take workload and plan options (plan, table):
 * one parser, so that they accept and refuse the same things. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

const char *cli_option_name(char *name, size_t size, const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg), i;

    if (n >= size)
        n = size - 1;
    for (i = 0; i < n; i++)
        name[i] = arg[i] == '_' ? '-' : arg[i];
    name[n] = 0;
    return eq ? eq + 1 : NULL;
}

/* a workload option, a plan option or "batch" */
static bool plan_option(const char *name)
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
    return !strcmp(name, "batch");
}

/* `--` ends the options: the probed command whose calibration record the plan uses */
static int probed_command(const char *cmd, int argc, char **argv, int i, oom_plan_options *o)
{
    char *key = NULL;
    int err;
    if (i + 1 >= argc)
        return cli_usage_error(cmd, "'--' must be followed by the probed command");
    if ((err = oom_calibration_command_key(&key, (const char *const *)argv + i + 1)) ||
        (err = oom_plan_options_set(o, "calibration-command", key))) {
        oom_free(key);
        return cli_fail(cmd, err);
    }
    oom_free(key);
    return EXIT_OK;
}

/* the options that take no value */
static int flag(const char *cmd, const char *name, oom_plan_options *o, struct cli_plan_args *a,
                bool *taken)
{
    static const struct {
        const char *name, *key, *value;
    } flags[] = {{"allow-inexact", "allow-inexact", "yes"},
                 {"allow-downscale", "allow-downscale", "yes"},
                 {"no-allow-downscale", "allow-downscale", "no"},
                 {"vram-auto", "vram", "auto"}};
    size_t f;
    int err;

    *taken = true;
    if (!strcmp(name, "help")) {
        a->help = true;
        return EXIT_OK;
    }
    if (!strcmp(name, "json")) {
        a->format = "json";
        return EXIT_OK;
    }
    if (!strcmp(name, "list-models")) {
        a->list_models = true;
        return EXIT_OK;
    }
    for (f = 0; f < sizeof(flags) / sizeof(flags[0]); f++)
        if (!strcmp(name, flags[f].name)) {
            if ((err = oom_plan_options_set(o, flags[f].key, flags[f].value)))
                return cli_fail(cmd, err);
            return EXIT_OK;
        }
    *taken = false;
    return EXIT_OK;
}

int cli_list_models(const char *cmd, bool json)
{
    oom_preset **p = NULL;
    size_t n = 0, i;
    char *text = NULL;
    int err, rc;

    if (json) {
        if ((err = oom_model_presets_json(&text)))
            return cli_fail(cmd, err);
        rc = cli_print_json(text);
        oom_free(text);
        return rc;
    }
    if ((err = oom_model_presets(&p, &n)))
        return cli_fail(cmd, err);
    for (i = 0; i < n; i++)
        printf("%-16s %-12s %8.2f B params\n", p[i]->name, p[i]->family,
               (double)p[i]->params / 1e9);
    oom_model_presets_free(p, n);
    return EXIT_OK;
}

int cli_nccl_env(const char *cmd, int (*set)(void *obj, const char *key, const char *value),
                 void *obj)
{
    static const struct {
        const char *var, *key;
    } vars[] = {{"NCCL_BUFFSIZE", "nccl-buffsize"},
                {"NCCL_MAX_NCHANNELS", "nccl-channels"},
                {"NCCL_NVLS_ENABLE", "nccl-nvls"},
                {"CUBLAS_WORKSPACE_CONFIG", "cublas-workspace"}};
    size_t i;
    int err;
    for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i].var);
        if (!v || !*v)
            continue;
        /* NCCL_NVLS_ENABLE=0 turns NVLS off; another value leaves it to the hardware */
        if (i == 2)
            v = strcmp(v, "0") ? "auto" : "no";
        if ((err = set(obj, vars[i].key, v)))
            return cli_usage_error(cmd, "%s=%s: %s", vars[i].var, getenv(vars[i].var),
                                   oom_last_message());
    }
    return EXIT_OK;
}

static int set_plan_option(void *o, const char *key, const char *value)
{
    return oom_plan_options_set(o, key, value);
}

int cli_parse_plan_options(const char *cmd, int argc, char **argv, oom_plan_options *o,
                           struct cli_plan_args *a, const struct cli_plan_extra *extra,
                           size_t n_extra)
{
    int i, err, rc;
    size_t e;

    if ((rc = cli_nccl_env(cmd, set_plan_option, o)) != EXIT_OK)
        return rc;
    for (i = 1; i < argc; i++) {
        char name[64];
        const char *arg = argv[i], *v;
        bool taken;
        if (!strcmp(arg, "-h")) {
            a->help = true;
            continue;
        }
        if (!strcmp(arg, "--"))
            return probed_command(cmd, argc, argv, i, o);
        if (strncmp(arg, "--", 2) || !arg[2])
            return cli_usage_error(cmd, "unexpected argument '%s'", arg);
        v = cli_option_name(name, sizeof(name), arg + 2);
        if (!v && ((rc = flag(cmd, name, o, a, &taken)) != EXIT_OK || taken)) {
            if (rc != EXIT_OK)
                return rc;
            continue;
        }
        for (e = 0; e < n_extra && strcmp(extra[e].name, name); e++)
            ;
        if (e == n_extra && !plan_option(name))
            return cli_usage_error(cmd, "unknown option '%s' (see oomless %s --help)", arg, cmd);
        if (e < n_extra && extra[e].refuse)
            return cli_usage_error(cmd, "%s", extra[e].refuse);
        if (!v && (i + 1 >= argc || !(v = argv[++i])))
            return cli_usage_error(cmd, "option '%s' needs a value", arg);
        if (e < n_extra)
            *extra[e].value = v;
        else if ((err = oom_plan_options_set(o, name, v)))
            return cli_fail(cmd, err);
    }
    return EXIT_OK;
}
