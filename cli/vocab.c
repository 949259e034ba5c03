/* vocab.c - the library's option and format tables as the tool shows them: the options of a
 * command in its --help, with their values and defaults, and the queries the man page and the
 * completion make (`oomless --list-options`, `oomless --list-values`). Nothing here names an
 * option's value: they all come from oom_workload_options(), oom_plan_option_table() and
 * oom_plan_formats(). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned bit;
} command_bits[] = {
    {"estimate", OOM_COMMAND_ESTIMATE}, {"plan", OOM_COMMAND_PLAN},   {"table", OOM_COMMAND_TABLE},
    {"probe", OOM_COMMAND_PROBE},       {"trace", OOM_COMMAND_TRACE}, {"gpus", OOM_COMMAND_GPUS},
    {"run", OOM_COMMAND_RUN},           {"watch", OOM_COMMAND_WATCH},
};
#define N_COMMANDS   (sizeof(command_bits) / sizeof(command_bits[0]))
#define ALL_COMMANDS (~0u)

unsigned cli_command_bit(const char *name)
{
    size_t i;
    for (i = 0; name && i < N_COMMANDS; i++)
        if (!strcmp(command_bits[i].name, name))
            return command_bits[i].bit;
    return 0;
}

/* the option's values that `command` takes, joined by `sep` into buf (the metavar when it has
 * none) */
static const char *synopsis(char *buf, size_t size, const oom_option *o, unsigned command,
                            const char *sep)
{
    size_t i, n = 0, len = 0;
    buf[0] = '\0';
    for (i = 0; o->version >= 2 && i < o->n_values; i++) {
        const oom_option_value *v = o->values[i];
        if (!(v->commands & command))
            continue;
        len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%s", n++ ? sep : "",
                                v->name);
    }
    if (!n)
        snprintf(buf, size, "%s", o->metavar);
    return buf;
}

/* the formats of `command`, joined by `sep` */
static const char *format_names(char *buf, size_t size, unsigned command, const char *sep);

const char *cli_format_names(char *buf, size_t size, unsigned command)
{
    return format_names(buf, size, command, ", ");
}

static const char *format_names(char *buf, size_t size, unsigned command, const char *sep)
{
    size_t i, n, k = 0, len = 0;
    const oom_plan_format_info *const *f = oom_plan_formats(&n);
    buf[0] = '\0';
    for (i = 0; i < n; i++)
        if (f[i]->commands & command)
            len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%s", k++ ? sep : "",
                                    f[i]->name);
    return buf;
}

/* --format-version, beside --format (plan only: table's formats follow no framework) */
static const char FORMAT_VERSION_HELP[] =
    "the version of the format's framework whose keys are written (default: the latest, the last "
    "listed with the format)";

static void print_row(FILE *out, const char *left, const char *help)
{
    if (strlen(left) > 28)
        fprintf(out, "  %s\n  %-28s %s\n", left, "", help);
    else
        fprintf(out, "  %-28s %s\n", left, help);
}

void cli_print_options(FILE *out, const oom_option *const *o, size_t n, unsigned command)
{
    size_t i;
    for (i = 0; i < n; i++) {
        char left[600], syn[512], values[512];
        char *help = NULL;
        bool list = o[i]->version >= 2 && o[i]->list;
        if (o[i]->version >= 2 && !(o[i]->commands & command))
            continue;
        snprintf(left, sizeof(left), "--%s %s", o[i]->name,
                 list ? o[i]->metavar : synopsis(syn, sizeof(syn), o[i], command, "|"));
        if (oom_option_help(&help, o[i]))
            continue;
        if (list) /* the values of a list, after its help */
            fprintf(out, "  %s\n  %-28s %s;\n  %-28s %s: %s\n", left, "", help, "", o[i]->metavar,
                    synopsis(values, sizeof(values), o[i], command, ", "));
        else
            print_row(out, left, help);
        oom_free(help);
    }
}

void cli_print_formats(FILE *out, unsigned command)
{
    size_t i, n;
    const oom_plan_format_info *const *f = oom_plan_formats(&n);
    char names[512];
    print_row(out, "--format FORMAT", format_names(names, sizeof(names), command, ", "));
    if (command & OOM_COMMAND_PLAN)
        print_row(out, "--format-version VERSION", FORMAT_VERSION_HELP);
    for (i = 0; i < n; i++) {
        char left[64];
        if (!(f[i]->commands & command))
            continue;
        snprintf(left, sizeof(left), "  %s", f[i]->name);
        if (f[i]->framework)
            fprintf(out, "  %-28s %s (%s%s%s)\n", left, f[i]->help, f[i]->framework,
                    f[i]->versions ? " " : "", f[i]->versions ? f[i]->versions : "");
        else
            fprintf(out, "  %-28s %s\n", left, f[i]->help);
    }
}

void cli_usage(FILE *out, const char *text, unsigned command)
{
    static const char marker[] = "@budget\n";
    const char *at = strstr(text, marker);
    size_t n;
    const oom_option *const *o = oom_plan_option_table(&n);
    if (!at) {
        fputs(text, out);
        return;
    }
    fwrite(text, 1, (size_t)(at - text), out);
    cli_print_options(out, o, n, command);
    fputs(at + strlen(marker), out);
}

/* the commands that take `mask`, as "estimate,plan" */
static const char *command_list(char *buf, size_t size, unsigned mask)
{
    size_t i, k = 0, len = 0;
    buf[0] = '\0';
    for (i = 0; i < N_COMMANDS; i++)
        if (mask & command_bits[i].bit)
            len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%s", k++ ? "," : "",
                                    command_bits[i].name);
    return buf;
}

/* NAME, SYNOPSIS, COMMANDS, HELP, tab-separated, one option a line */
static void list_options(unsigned command)
{
    const oom_option *const *t[2];
    size_t n[2], i, j;
    char syn[512], cmds[128];
    t[0] = oom_workload_options(&n[0]);
    t[1] = oom_plan_option_table(&n[1]);
    for (j = 0; j < 2; j++)
        for (i = 0; i < n[j]; i++) {
            const oom_option *o = t[j][i];
            char *help = NULL;
            if (!(o->commands & command) || oom_option_help(&help, o))
                continue;
            printf("%s\t%s\t%s\t%s\n", o->name,
                   synopsis(syn, sizeof(syn), o, command, o->list ? "," : "|"),
                   command_list(cmds, sizeof(cmds), o->commands), help);
            oom_free(help);
        }
    if (command & (OOM_COMMAND_PLAN | OOM_COMMAND_TABLE)) /* the output formats */
        printf("format\t%s\t%s\tthe output format (default text)\n",
               format_names(syn, sizeof(syn), command, "|"),
               command_list(cmds, sizeof(cmds), command & (OOM_COMMAND_PLAN | OOM_COMMAND_TABLE)));
    if (command & OOM_COMMAND_PLAN)
        printf("format-version\tVERSION\tplan\t%s\n", FORMAT_VERSION_HELP);
}

/* VALUE, COMMANDS, HELP, tab-separated, one value a line */
static int list_values(const char *name, unsigned command)
{
    const oom_option *o;
    size_t i, n;
    char cmds[128];
    if (!strcmp(name, "format")) {
        const oom_plan_format_info *const *f = oom_plan_formats(&n);
        for (i = 0; i < n; i++)
            if (f[i]->commands & command)
                printf("%s\t%s\t%s%s%s%s%s%s\n", f[i]->name,
                       command_list(cmds, sizeof(cmds), f[i]->commands), f[i]->help,
                       f[i]->framework ? " (" : "", f[i]->framework ? f[i]->framework : "",
                       f[i]->versions ? " " : "", f[i]->versions ? f[i]->versions : "",
                       f[i]->framework ? ")" : "");
        return EXIT_OK;
    }
    if (!(o = oom_option_lookup(name)))
        return cli_usage_error("--list-values", "unknown option '%s'", name);
    for (i = 0; i < o->n_values; i++)
        if (o->values[i]->commands & command)
            printf("%s\t%s\t%s\n", o->values[i]->name,
                   command_list(cmds, sizeof(cmds), o->values[i]->commands), o->values[i]->help);
    return EXIT_OK;
}

int cli_list(int argc, char **argv)
{
    const char *cmd = NULL;
    unsigned command = ALL_COMMANDS;
    bool values = !strcmp(argv[0], "--list-values");
    if (values && argc < 2)
        return cli_usage_error("--list-values", "usage: oomless --list-values OPTION [COMMAND]");
    cmd = argc > 1 + values ? argv[1 + values] : NULL;
    if (cmd && !(command = cli_command_bit(cmd)))
        return cli_usage_error(argv[0], "unknown command '%s'", cmd);
    if (values)
        return list_values(argv[1], command);
    list_options(command);
    return EXIT_OK;
}
