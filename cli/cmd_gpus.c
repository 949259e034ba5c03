/* cmd_gpus.c - `oomless gpus`: the GPUs found, their memory, and the budget after the margin. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: oomless gpus [--json] [--all] [--gpu ...] [--vram SIZE] [--vram-safety-margin M]\n"
    "       oomless gpus --catalog [--json]\n\n"
    "Lists the NVIDIA GPUs NVML reports (honouring CUDA_VISIBLE_DEVICES, with CUDA's indices),\n"
    "their memory, and the budget a job may use: target VRAM minus the safety margin.\n"
    "Without NVML it says so and shows the budget of the default profile.\n\n"
    "Options:\n"
    "  --json                        print one JSON document\n"
    "  --all                         list every GPU, ignoring CUDA_VISIBLE_DEVICES\n"
    "  --catalog                     list the known GPU profiles instead\n" CLI_BUDGET_HELP
    "  -h, --help                    this help\n";

static double mib(uint64_t b)
{
    return (double)b / (double)OOM_MiB;
}

static void print_catalog(const oom_catalog *c)
{
    size_t i;
    printf("%-16s %-38s %10s %8s %8s %5s\n", "ID", "NAME", "MEMORY", "GB/s", "BF16 TF", "CC");
    for (i = 0; i < oom_catalog_count(c); i++) {
        const oom_gpu_profile *p = oom_catalog_at(c, i);
        char cc[16] = "-", bf16[16] = "-", bw[16] = "-";
        if (p->cc_major)
            snprintf(cc, sizeof(cc), "%d.%d", p->cc_major, p->cc_minor);
        if (p->has_tflops)
            snprintf(bf16, sizeof(bf16), p->bf16_tflops > 0 ? "%.1f" : "none", p->bf16_tflops);
        if (p->has_bandwidth)
            snprintf(bw, sizeof(bw), "%.0f", p->bandwidth_gbs);
        printf("%-16s %-38.38s %6.0f MiB %8s %8s %5s%s\n", p->id, p->name, mib(p->memory_bytes), bw,
               bf16, cc, p->user_defined ? "  (config)" : "");
    }
}

static void print_list(const oom_gpu_list *list, const oom_target *t)
{
    size_t i;
    uint64_t total = 0;
    int reserved = 0;
    char a[16], b[16], c[16];

    if (!list) {
        printf("Detected GPUs: 0\n");
    } else {
        printf("Detected GPUs: %zu", list->count);
        if (list->driver_version[0])
            printf(" (NVML, driver %s", list->driver_version);
        if (list->driver_version[0] && list->cuda_driver_version)
            printf(", CUDA %d.%d", list->cuda_driver_version / 1000,
                   list->cuda_driver_version % 1000 / 10);
        printf("%s\n", list->driver_version[0] ? ")" : "");
    }
    for (i = 0; list && i < list->count; i++) {
        const oom_gpu_info *g = list->gpus[i];
        if (g->lost) {
            printf("  GPU %d: (lost: the device stopped answering)\n", g->index);
            continue;
        }
        total += g->total_bytes;
        reserved |= oom_gpu_reserved_bytes(g) != 0;
        printf("  GPU %d: %-28s %8.0f MiB total %8.0f MiB used %8.0f MiB free", g->index, g->name,
               mib(g->total_bytes), mib(g->used_bytes), mib(g->free_bytes));
        if (oom_gpu_reserved_bytes(g))
            printf(" %6.0f MiB reserved", mib(oom_gpu_reserved_bytes(g)));
        if (g->has_cc)
            printf("  cc %d.%d", g->cc_major, g->cc_minor);
        if (g->uuid[0])
            printf("  %s", g->uuid);
        printf("\n");
    }
    if (list && list->count > 1)
        printf("Total VRAM: %s across %zu GPUs%s\n", oom_format_size(a, sizeof(a), total),
               list->count, t && t->mixed ? " (mixed: plans use the smallest)" : "");
    if (!t)
        return;
    printf("\nTarget VRAM:   %s (%.0f MiB) per GPU, %s%s%s\n",
           oom_format_size(a, sizeof(a), t->budget.target_bytes), mib(t->budget.target_bytes),
           t->detected ? "detected " : "profile ", t->detected ? t->profile.name : t->profile.id,
           reserved && t->detected && t->budget.target_bytes == t->profile.memory_bytes
               ? " (its total less what the driver reserves)"
               : "");
    printf("Safety margin: %s (%.0f MiB)\n",
           oom_format_size(b, sizeof(b), t->budget.safety_margin_bytes),
           mib(t->budget.safety_margin_bytes));
    if (t->others_bytes)
        printf("In use now:    %s (%.0f MiB) by other processes%s%s%s\n",
               oom_format_size(a, sizeof(a), t->others_bytes), mib(t->others_bytes),
               t->others ? ": " : "", t->others ? t->others : "",
               t->budget.usable_bytes + t->budget.safety_margin_bytes < t->budget.target_bytes
                   ? " (the budget leaves it out)"
                   : "");
    printf("Usable VRAM:   %s (%.0f MiB)\n", oom_format_size(c, sizeof(c), t->budget.usable_bytes),
           mib(t->budget.usable_bytes));
}

int cmd_gpus(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                             {"all", no_argument, NULL, 'a'},
                                             {"catalog", no_argument, NULL, 'c'},
                                             {"help", no_argument, NULL, 'h'},
                                             CLI_BUDGET_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    struct cli_budget budget = {0};
    struct cli_target t = {0};
    oom_gpu_session *s = NULL;
    oom_gpu_list *list = NULL;
    int json = 0, all = 0, catalog = 0, opt, rc, err;
    char *doc = NULL;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (cli_budget_option(&budget, opt, optarg))
            continue;
        switch (opt) {
        case 'j':
            json = 1;
            break;
        case 'a':
            all = 1;
            break;
        case 'c':
            catalog = 1;
            break;
        case 'h':
            cli_usage(stdout, usage_text, OOM_COMMAND_GPUS);
            return EXIT_OK;
        default:
            return cli_usage_error("gpus", "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage_error("gpus", "unexpected argument '%s'", argv[optind]);

    if (catalog) {
        oom_config *cfg = NULL;
        oom_catalog *c = NULL;
        if ((err = oom_config_load(&cfg, budget.config)) || (err = oom_catalog_load(&c, cfg))) {
            oom_config_free(cfg);
            return cli_fail("gpus", err);
        }
        if (json) {
            if ((err = oom_catalog_to_json(&doc, c)))
                rc = cli_fail("gpus", err);
            else
                rc = cli_print_json(doc);
        } else {
            print_catalog(c);
            rc = EXIT_OK;
        }
        oom_free(doc);
        oom_catalog_free(c);
        oom_config_free(cfg);
        return rc;
    }

    if (json) { /* the library makes the document, so the Python package prints the same */
        oom_config *cfg = NULL;
        oom_target_request req = {OOM_TARGET_REQUEST_VERSION, budget.gpu, budget.vram,
                                  budget.margin, NULL};
        if ((err = oom_config_load(&cfg, budget.config)))
            return cli_fail("gpus", err);
        req.config = cfg;
        err = oom_gpus_report(&doc, &req, all ? OOM_SAMPLE_ALL_GPUS : 0);
        oom_config_free(cfg);
        rc = err ? cli_fail("gpus", err) : cli_print_json(doc);
        oom_free(doc);
        return rc;
    }
    if ((err = oom_gpu_open(&s)) == OOM_OK)
        err = oom_gpu_sample(&list, s, all ? OOM_SAMPLE_ALL_GPUS : 0);
    if (err && err != OOM_ENODEV) {
        oom_gpu_close(s);
        return cli_fail("gpus", err);
    }
    if ((rc = cli_budget_resolve(&t, "gpus", &budget)) != EXIT_OK)
        goto done;
    print_list(list, &t.target);
done:
    cli_budget_done(&t);
    oom_gpu_list_free(list);
    oom_gpu_close(s);
    return rc;
}
