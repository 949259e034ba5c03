/*
 * cmd_trace.c - `oomless trace ...`: runs the tracer (the Python module oomless.trace, which needs
 * torch) with $OOMLESS_PYTHON or python3, the oomless package on PYTHONPATH, and passes its
 * arguments and exit status through.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *out)
{
    size_t n;
    const oom_option *const *o = oom_workload_options(&n);
    fputs("usage: oomless trace --model NAME|PATH [WORKLOAD OPTIONS] [--json]\n"
          "       oomless trace --module pkg.mod:build_fn [--step pkg.mod:step_fn] "
          "[--input-shape S]\n\n"
          "Runs the real model code on PyTorch's meta device (no GPU, no weights) for whole "
          "training\nsteps and reports the allocated peak with its breakdown, as "
          "torch.cuda.max_memory_allocated\nwould show it. Takes these of estimate's workload "
          "options, with the values it can trace,\nand --steps N:\n",
          out);
    cli_print_options(out, o, n, OOM_COMMAND_TRACE);
    fputs("\nNeeds Python with torch (and transformers, peft for Hugging Face models): "
          "$OOMLESS_PYTHON,\nelse python3. PyTorch's CPU build is enough (no GPU is used): "
          "pip install torch==2.13.0\n--index-url https://download.pytorch.org/whl/cpu "
          "('pip install torch' fetches the CUDA build).\n'python -m oomless.trace --help' "
          "lists every option.\n\n"
          "Exit codes: 0 ok, 2 bad option or value, an untraceable workload, or a missing "
          "package,\n3 no Python found, or the calibration record could not be saved "
          "(--calibrate).\n",
          out);
}

static int is_dir(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The folder holding the oomless Python package: $OOMLESS_PYTHONPATH, the installed copy next to
 * this binary (<prefix>/bin/oomless -> <prefix>/lib/oomless/python), or the source tree's. */
static const char *package_dir(char *buf, size_t size)
{
    const char *env = getenv("OOMLESS_PYTHONPATH");
    char self[4096];
    ssize_t n;

    if (env && *env)
        return env;
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        char *slash;
        self[n] = '\0';
        if ((slash = strrchr(self, '/')))
            *slash = '\0';
        if ((slash = strrchr(self, '/')))
            *slash = '\0';
        snprintf(buf, size, "%s/%s/oomless/python", self, OOMLESS_INSTALL_LIBDIR_NAME);
        if (is_dir(buf))
            return buf;
    }
    return OOMLESS_SOURCE_PYDIR;
}

int cmd_trace(int argc, char **argv)
{
    char dirbuf[4200], *path = NULL;
    const char *python = getenv("OOMLESS_PYTHON"), *old = getenv("PYTHONPATH"), *pkg;
    char **args;
    int i;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return EXIT_OK;
        }
        if (!strcmp(argv[i], "--"))
            break;
    }
    if (!python || !*python)
        python = "python3";
    pkg = package_dir(dirbuf, sizeof(dirbuf));
    if (old && *old) {
        size_t len = strlen(pkg) + strlen(old) + 2;
        if (!(path = malloc(len)))
            return cli_usage_error("trace", "out of memory");
        snprintf(path, len, "%s:%s", pkg, old);
    }
    if (setenv("PYTHONPATH", path ? path : pkg, 1)) {
        free(path);
        fprintf(stderr, "oomless trace: cannot set PYTHONPATH: %s\n", strerror(errno));
        return EXIT_ENV;
    }
    free(path);
    if (!(args = calloc((size_t)argc + 3, sizeof(*args)))) {
        fprintf(stderr, "oomless trace: out of memory\n");
        return EXIT_ENV;
    }
    args[0] = (char *)python;
    args[1] = "-m";
    args[2] = "oomless.trace";
    for (i = 1; i < argc; i++)
        args[i + 2] = argv[i];
    fflush(stdout);
    execvp(python, args);
    fprintf(stderr,
            "oomless trace: cannot run '%s': %s (set OOMLESS_PYTHON to a Python with torch, e.g. "
            "build/venv/bin/python after 'make venv')\n",
            python, strerror(errno));
    free(args);
    return EXIT_ENV;
}
