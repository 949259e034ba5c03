/*
 * cli.h - what the sub-command files share. Only the CLI prints or exits; the library returns
 * codes and messages, and cli_fail() turns them into a message on stderr and an exit code.
 *
 * Exit codes (documented in the README and the man page):
 *   0 success; 1 does not fit / job failed / edit refused; 2 usage (bad option, value, name or
 *   file); 3 environment (no NVML, I/O, out of memory). `run` passes the job's own status on.
 */
#ifndef OOMLESS_CLI_H
#define OOMLESS_CLI_H

#include "oomless.h"

#include <stdbool.h>
#include <stdio.h>

enum { EXIT_OK = 0, EXIT_NOFIT = 1, EXIT_USAGE = 2, EXIT_ENV = 3 };

/* one sub-command: its name, one line of summary, its entry point */
struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

/* The exit code for a library error code. */
int cli_exit_code(int oom_err);
/* Prints "oomless CMD: <library message>" to stderr and returns the exit code for `err`. */
int cli_fail(const char *cmd, int err);
/* Prints "oomless CMD: <message>" to stderr and returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints a notice (one line) to stderr: "oomless: <message>". Never to stdout. */
void cli_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Writes a JSON document (a library-made string) to stdout with a final newline. */
int cli_print_json(const char *json);

/* Sub-commands, one file each (cli/cmd_<name>.c). Weak so that a tree without one still links;
 * main() says so instead of crashing. */
int cmd_gpus(int argc, char **argv);
int cmd_estimate(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_table(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_apply(int argc, char **argv);

#endif
