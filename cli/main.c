/* main.c - `oomless COMMAND ...`: finds the sub-command in a table and runs it. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct cli_command commands[] = {
    {"gpus", "list GPUs, their memory and the budget after the safety margin", cmd_gpus},
    {"estimate", "predict a workload's peak GPU memory, with a breakdown", cmd_estimate},
    {"plan", "find the fastest batch/accumulation/precision/... that fits", cmd_plan},
    {"table", "recommended settings per GPU, for one or more workloads", cmd_table},
    {"probe", "run your job at a few batch sizes and measure its real peak", cmd_probe},
    {"run", "run your job; on OOM relaunch it smaller with the same effective batch", cmd_run},
    {"watch", "live GPU and per-process memory, with warning bands", cmd_watch},
    {"apply", "write a plan into YAML/JSON config files, changing only those values", cmd_apply},
    {"trace", "run the real model code on the meta device and count what it allocates", cmd_trace},
};

static void usage(FILE *out)
{
    size_t i;
    fprintf(out, "usage: oomless COMMAND [OPTIONS]\n"
                 "       oomless --version | --help\n\n"
                 "Fits deep-learning training and inference jobs to the GPU memory available.\n\n"
                 "Commands:\n");
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'oomless COMMAND --help' for a command's options.\n"
                 "Exit codes: 0 ok, 1 does not fit / job failed / edit refused, 2 usage error,\n"
                 "            3 environment (no NVML, I/O, library version); 'run' passes the\n"
                 "            job's status on.\n");
}

/* Started with a standard descriptor closed (`2>&-`, `>&-`, `<&-`), the next file oomless opens
 * would become that descriptor: the events JSONL would receive stderr text, the watch CSV the
 * snapshots. /dev/null takes each closed one first (open returns the lowest free descriptor). */
static int open_std_fds(void)
{
    int fd, got;
    for (fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        if ((got = open("/dev/null", O_RDWR)) != fd) /* the lowest free one: fd */
            return -1;
    }
    return 0;
}

/* The library loaded must be of the major version this program was compiled for: another major
 * may have changed any struct or function (the header's ABI promise holds within a major). */
static int check_library_version(void)
{
    unsigned lib = oom_version_number();
    if (lib / 10000 == OOMLESS_VERSION_MAJOR)
        return 0;
    fprintf(stderr,
            "oomless: the oomless library loaded is version %u.%u.%u, but this program was built "
            "for major version %d (%d.%d.%d): install a liboomless of major version %d\n",
            lib / 10000, lib / 100 % 100, lib % 100, OOMLESS_VERSION_MAJOR, OOMLESS_VERSION_MAJOR,
            OOMLESS_VERSION_MINOR, OOMLESS_VERSION_PATCH, OOMLESS_VERSION_MAJOR);
    return -1;
}

int main(int argc, char **argv)
{
    size_t i;

    if (open_std_fds() != 0)
        return EXIT_ENV; /* no /dev/null: nowhere to say so either */
    if (check_library_version() != 0)
        return EXIT_ENV;
    setlocale(LC_CTYPE, "");
    cli_init_notices();
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    /* the tables of the library, for the man page and the completion */
    if (!strcmp(argv[1], "--list-commands")) {
        for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
            printf("%s\t%s\n", commands[i].name, commands[i].summary);
        return EXIT_OK;
    }
    if (!strcmp(argv[1], "--list-options") || !strcmp(argv[1], "--list-values"))
        return cli_list(argc - 1, argv + 1);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("oomless %s (library %s)\n", OOMLESS_VERSION, oom_version());
        return EXIT_OK;
    }
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name))
            continue;
        return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "oomless: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
