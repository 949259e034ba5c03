/* budget.c - the --gpu/--vram/--vram-safety-margin/--config options every planning command has. */
#include "cli.h"

#include <string.h>

int cli_budget_option(struct cli_budget *b, int opt, const char *arg)
{
    switch (opt) {
    case OPT_GPU:
        b->gpu = arg;
        return 1;
    case OPT_VRAM:
        b->vram = arg;
        return 1;
    case OPT_VRAM_AUTO:
        b->vram = "auto";
        return 1;
    case OPT_MARGIN:
        b->margin = arg;
        return 1;
    case OPT_CONFIG:
        b->config = arg;
        return 1;
    default:
        return 0;
    }
}

int cli_budget_resolve(struct cli_target *t, const char *cmd, const struct cli_budget *b)
{
    oom_target_request req;
    int err;
    char size[16];

    memset(t, 0, sizeof(*t));
    t->target.version = OOM_TARGET_VERSION;
    if ((err = oom_config_load(&t->config, b->config)) ||
        (err = oom_catalog_load(&t->catalog, t->config))) {
        cli_budget_done(t);
        return cli_fail(cmd, err);
    }
    req = (oom_target_request){OOM_TARGET_REQUEST_VERSION, b->gpu, b->vram, b->margin, t->config};
    if ((err = oom_target_resolve(&t->target, &req, t->catalog))) {
        cli_budget_done(t);
        return cli_fail(cmd, err);
    }
    t->resolved = 1;
    if (t->target.fallback)
        cli_notice("no GPU found (%s); planning for profile '%s' (%s). Use --gpu NAME to choose "
                   "another.",
                   t->target.reason ? t->target.reason : "no reason given", t->target.profile.id,
                   oom_format_size(size, sizeof(size), t->target.profile.memory_bytes));
    return EXIT_OK;
}

void cli_budget_done(struct cli_target *t)
{
    if (t->resolved)
        oom_target_dispose(&t->target);
    oom_catalog_free(t->catalog);
    oom_config_free(t->config);
    memset(t, 0, sizeof(*t));
}

int cli_parse_job_options(const char *cmd, int argc, char **argv, const struct option *longopts,
                          const char *usage, struct cli_budget *budget,
                          int (*take)(void *ctx, int opt, const char *arg), void *ctx)
{
    int opt, rc;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        if (cli_budget_option(budget, opt, optarg))
            continue;
        if (opt == 'h') {
            cli_usage(stdout, usage, cli_command_bit(cmd));
            return -1;
        }
        if (opt == '?')
            return cli_usage_error(cmd, "unknown option or missing value");
        if ((rc = take(ctx, opt, optarg)) != EXIT_OK)
            return rc;
    }
    if (optind >= argc)
        return cli_usage_error(cmd, "no command given: oomless %s [OPTIONS] -- CMD...", cmd);
    return EXIT_OK;
}
