/*
 * nodes.c - what a command line says about a job spread over several nodes: whether this
 * supervisor sees only one part of it (one node's torchrun agent, one task of a Slurm step),
 * whether its training script recovers inside the loop (oomless.torch, oomless.hf,
 * oomless.lightning), the id its supervisors share, and torchrun's rendezvous failures in its
 * output.
 *
 * torchrun takes its options before the script (the first argument ending in ".py", or the one
 * after -m / --module); each option may also come from the environment as PET_<NAME>
 * (torch/distributed/argparse_util.py, env), which is read when the option is absent.
 */
#define _GNU_SOURCE /* memmem */
#include "job/job.h"

#include <stdlib.h>
#include <string.h>

/* argv[i]'s last path component */
static const char *base_name(const char *arg)
{
    const char *slash = strrchr(arg, '/');
    return slash ? slash + 1 : arg;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* The index of the first argument after torchrun (torchrun, python -m torch.distributed.run or
 * torch.distributed.launch); 0 when the command is not torchrun or runs it under srun/mpirun
 * (one supervisor then sees every node's output). */
static size_t torchrun_at(const char *const *argv)
{
    size_t i;
    for (i = 0; argv[i]; i++) {
        const char *b = base_name(argv[i]);
        if (!strcmp(b, "srun") || !strcmp(b, "mpirun") || !strcmp(b, "mpiexec"))
            return 0;
        if (!strcmp(b, "torchrun"))
            return i + 1;
        if (!strcmp(argv[i], "-m") && argv[i + 1] &&
            (!strcmp(argv[i + 1], "torch.distributed.run") ||
             !strcmp(argv[i + 1], "torch.distributed.launch")))
            return i + 2;
    }
    return 0;
}

/* Whether torchrun's option `name` ("rdzv-id": --rdzv-id V, --rdzv-id=V, --rdzv_id V) is given
 * before the script, with its value in *value (NULL for a flag at the end); else, with `pet`,
 * whether $PET_<NAME> ("PET_RDZV_ID") is set. */
static int find_option(const char **value, const char *const *argv, size_t from, const char *name,
                       int pet)
{
    char under[48], var[56];
    size_t i, k, n = strlen(name);
    *value = NULL;
    if (n >= sizeof(under))
        return 0;
    for (k = 0; k <= n; k++)
        under[k] = name[k] == '-' ? '_' : name[k];
    for (i = from; argv[i]; i++) {
        const char *a = argv[i];
        if (ends_with(a, ".py") || !strcmp(a, "-m") || !strcmp(a, "--module") || !strcmp(a, "--"))
            break;
        if (a[0] != '-' || a[1] != '-' || (strncmp(a + 2, name, n) && strncmp(a + 2, under, n)))
            continue;
        if (a[2 + n] == '=') {
            *value = a + 3 + n;
            return 1;
        }
        if (a[2 + n] == '\0') {
            *value = argv[i + 1];
            return 1;
        }
    }
    if (!pet)
        return 0;
    oomi_snprintf(var, sizeof(var), "PET_%s", under);
    for (k = 4; var[k]; k++)
        var[k] = (char)oomi_toupper((unsigned char)var[k]);
    *value = getenv(var);
    return *value != NULL;
}

static const char *torchrun_option(const char *const *argv, size_t from, const char *name)
{
    const char *v;
    return find_option(&v, argv, from, name, 1) ? v : NULL;
}

/* The most nodes of torchrun's --nnodes ("2", or "MIN:MAX"); 1 when absent or unreadable. */
static long max_nodes(const char *v)
{
    const char *colon;
    long long n;
    if (!v)
        return 1;
    colon = strchr(v, ':');
    if (oomi_parse_long(&n, colon ? colon + 1 : v, 1, 1000000, "--nnodes")) {
        oomi_clear_error();
        return 1;
    }
    return (long)n;
}

int oomi_multinode(const char *const *argv, char *what, size_t n_what)
{
    const char *tasks = getenv("SLURM_STEP_NUM_TASKS"), *nn;
    size_t at = torchrun_at(argv), i;
    long long n = 0;

    if (at && !find_option(&nn, argv, at, "standalone", 1) &&
        max_nodes(nn = torchrun_option(argv, at, "nnodes")) > 1) {
        oomi_snprintf(what, n_what, "torchrun --nnodes %s", nn);
        return 1;
    }
    for (i = 0; argv[i]; i++) /* accelerate launch --num_machines N: one launcher per machine */
        if (!strcmp(base_name(argv[i]), "accelerate") && argv[i + 1] &&
            !strcmp(argv[i + 1], "launch")) {
            if (find_option(&nn, argv, i + 2, "num-machines", 0) && nn && !strchr(nn, ':') &&
                max_nodes(nn) > 1) {
                oomi_snprintf(what, n_what, "accelerate launch --num_machines %s", nn);
                return 1;
            }
        }
    /* srun starts one `oomless run` per task (SLURM_STEP_NUM_TASKS is set for a step's tasks,
     * not in the batch script), unless this command itself is srun or mpirun */
    for (i = 0; argv[i]; i++) {
        const char *b = base_name(argv[i]);
        if (!strcmp(b, "srun") || !strcmp(b, "mpirun") || !strcmp(b, "mpiexec"))
            return 0;
    }
    if (tasks && getenv("SLURM_PROCID") && !oomi_parse_long(&n, tasks, 1, 100000000, "") && n > 1) {
        oomi_snprintf(what, n_what, "task %s of the %lld tasks of a Slurm step",
                      getenv("SLURM_PROCID"), n);
        return 1;
    }
    oomi_clear_error();
    return 0;
}

/* Whether the line at `p` (up to `end`) imports one of oomless' in-loop integrations:
 * "import oomless.torch", "from oomless.hf import ...", "from oomless import lightning". */
static int imports_integration(const char *p, const char *end)
{
    static const char *const names[] = {"torch", "hf", "lightning"};
    static const char from[] = "from oomless import ";
    char line[256];
    size_t n, k;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    n = (size_t)(end - p) < sizeof(line) - 1 ? (size_t)(end - p) : sizeof(line) - 1;
    memcpy(line, p, n);
    line[n] = '\0';
    if (strncmp(line, "import ", 7) && strncmp(line, "from ", 5))
        return 0;
    for (k = 0; k < OOMI_ARRAY_LEN(names); k++) {
        char dotted[32];
        oomi_snprintf(dotted, sizeof(dotted), "oomless.%s", names[k]);
        if (strstr(line, dotted) ||
            (!strncmp(line, from, sizeof(from) - 1) && strstr(line + sizeof(from) - 1, names[k])))
            return 1;
    }
    return 0;
}

int oomi_uses_integration(const char *const *argv)
{
    char *text = NULL, *p, *nl;
    size_t i, len = 0;
    int found = 0;
    for (i = 0; argv[i] && !ends_with(argv[i], ".py"); i++)
        ;
    if (!argv[i] || oomi_read_regular(&text, &len, argv[i], "training script", 4u << 20)) {
        oomi_clear_error();
        return 0;
    }
    for (p = text; !found && p < text + len; p = nl + 1) {
        if (!(nl = memchr(p, '\n', len - (size_t)(p - text))))
            nl = text + len;
        found = imports_integration(p, nl);
    }
    oomi_free(text);
    return found;
}

char *oomi_job_id(const char *const *argv)
{
    size_t at = torchrun_at(argv);
    const char *id = at ? torchrun_option(argv, at, "rdzv-id") : NULL;
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    if (id && *id && strcmp(id, "none"))
        return oomi_strdup(id);
    if (job && *job)
        return step && *step ? oomi_asprintf("slurm-%s.%s", job, step)
                             : oomi_asprintf("slurm-%s", job);
    id = at ? torchrun_option(argv, at, "rdzv-endpoint") : NULL;
    return id && *id ? oomi_asprintf("rdzv-%s", id) : NULL;
}

/* torch/distributed/elastic/rendezvous/api.py: the exception names torchrun's traceback ends
 * with when its agent could not gather the other nodes. `text` may hold several whole lines (a
 * name never spans two): the last one found wins. memmem, not a loop per byte: the job's whole
 * output passes through here (bench/speed). */
void oomi_rdzv_scan(oomi_launch *l, const char *text, size_t n)
{
    static const char stem[] = "Rendezvous";
    static const struct {
        const char *rest; /* after the stem */
        int kind;
    } errors[] = {{"TimeoutError", OOMI_RDZV_TIMEOUT}, {"ClosedError", OOMI_RDZV_CLOSED}};
    const char *at = text, *end = text + n;
    size_t k;
    while ((at = memmem(at, (size_t)(end - at), stem, sizeof(stem) - 1))) {
        at += sizeof(stem) - 1;
        for (k = 0; k < OOMI_ARRAY_LEN(errors); k++) {
            size_t len = strlen(errors[k].rest);
            if ((size_t)(end - at) >= len && !memcmp(at, errors[k].rest, len))
                l->rdzv_error = errors[k].kind;
        }
    }
}
