/*
 * nodes.c - what a command line says about a job spread over several nodes: the id its
 * supervisors share.
 *
 * torchrun takes its options before the script (the first argument ending in ".py", or the one
 * after -m / --module); each option may also come from the environment as PET_<NAME>
 * (torch/distributed/argparse_util.py, env), which is read when the option is absent.
 */
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
