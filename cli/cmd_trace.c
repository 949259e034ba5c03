/*
 * cmd_trace.c - `oomless trace ...`: runs the tracer (the Python module oomless.trace, which needs
 * torch) with $OOMLESS_PYTHON or python3, the oomless package on PYTHONPATH, and passes its
 * arguments and exit status through.
 *
 * Python would put the current folder first on sys.path (`python -m` does), and a json.py,
 * argparse.py or torch.py there (a downloaded model folder: `cd model && oomless trace --model
 * .`) would be imported and run instead of the real module. The tracer runs in safe-path mode:
 * a launcher (`python -c`, which works on every Python 3) drops that first entry before it
 * imports anything, as -P / PYTHONSAFEPATH=1 do on Python 3.11+, and the folders on sys.path are
 * the package's own, the user's $PYTHONPATH without its empty entries (each means the current
 * folder), and the interpreter's.
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
          "$OOMLESS_PYTHON,\nelse python3. 'python -m oomless.trace --help' lists every option. "
          "Python runs without\nthe current folder on sys.path (a json.py or torch.py there is "
          "never imported; a --module\nis looked for there last). A config of more than 1024 "
          "layers is refused: the tracer\nbuilds every layer ('oomless estimate' plans it).\n\n"
          "Exit codes: 0 ok, 2 bad option or value, an untraceable workload, or a missing "
          "package,\n3 no Python found, or the calibration record could not be saved "
          "(--calibrate).\n",
          out);
}

/* python -c LAUNCHER ARGS...: sys.argv is ['-c', ARGS...] and sys.path[0] the current folder ''
 * (Python 3.8-3.10; 3.11+ too unless safe-path mode is already on, when it is not there). Only
 * `sys` (built in, never read from a file) is imported before that entry is gone; runpy then
 * runs oomless.trace as `python -m` would, with sys.argv[0] its file. */
static const char launcher[] =
    "import sys\n"
    "if not getattr(sys.flags, 'safe_path', False) and sys.path[:1] == ['']:\n"
    "    del sys.path[0]\n"
    "import runpy\n"
    "runpy.run_module('oomless.trace', run_name='__main__', alter_sys=True)\n";

/* "pkg:A:B" from the package folder and the user's PYTHONPATH "A::B:" (allocated): its empty
 * entries, which Python reads as the current folder, left out. NULL when out of memory. */
static char *python_path(const char *pkg, const char *old)
{
    size_t len = strlen(pkg) + (old ? strlen(old) : 0) + 2, n = strlen(pkg);
    char *path = malloc(len);
    const char *p, *end;

    if (!path)
        return NULL;
    memcpy(path, pkg, n + 1);
    for (p = old; p && *p; p = *end ? end + 1 : end) {
        if (!(end = strchr(p, ':')))
            end = p + strlen(p);
        if (end > p) {
            path[n++] = ':';
            memcpy(path + n, p, (size_t)(end - p));
            n += (size_t)(end - p);
            path[n] = '\0';
        }
    }
    return path;
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
    char dirbuf[4200], *path;
    const char *python = getenv("OOMLESS_PYTHON"), *pkg;
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
    if (!(path = python_path(pkg, getenv("PYTHONPATH")))) {
        fprintf(stderr, "oomless trace: out of memory\n");
        return EXIT_ENV;
    }
    if (setenv("PYTHONPATH", path, 1)) {
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
    args[1] = "-c";
    args[2] = (char *)launcher;
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
