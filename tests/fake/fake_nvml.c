/*
 * fake_nvml.c - a stand-in libnvidia-ml.so.1 for tests, so the real dlopen path runs in CI.
 *
 * Driven by a text file named in $FAKE_NVML_SPEC, read at nvmlInit:
 *   driver 550.54.15                 driver version string
 *   cuda 12040                       CUDA driver version
 *   init_error 9                     nvmlInit fails with this NVML code
 *   gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-... total=BYTES used=BYTES [reserved=BYTES]
 *       [cc=8.0] [util=N] [temp=N] [lost_after=N]
 *                                    one line per GPU; reserved: what the driver keeps, in
 *                                    neither used nor free (used + free + reserved = total, as
 *                                    nvmlMemory_v2_t); lost_after: memory queries that succeed
 *                                    before the device reports NVML_ERROR_GPU_IS_LOST
 *   proc gpu=0 pid=N used=BYTES      a static process on a GPU
 *   procdir /path                    live processes: each file /path/<pid> holds "GPU BYTES";
 *                                    counted while the pid is alive (kill(pid, 0) succeeds)
 * A GPU's used memory is its `used` plus its processes', at most total - reserved.
 * nvmlInit/nvmlShutdown are reference counted like NVML's; the spec is read by the first init.
 *
 * Variants built from this file: -DFAKE_MINIMAL (only the required v1 symbols),
 * -DFAKE_NO_NAME (nvmlDeviceGetName missing), -DFAKE_PROCS_V3_32 (only a _v3 process call with
 * 32-byte entries, as newer drivers fill it), -DFAKE_MEM_V1 (everything but
 * nvmlDeviceGetMemoryInfo_v2: the reserve shows only as total - used - free).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define EXPORT __attribute__((visibility("default")))

enum {
    OK = 0,
    ERR_UNINIT = 1,
    ERR_ARG = 2,
    ERR_NOTSUP = 3,
    ERR_SIZE = 7,
    ERR_LOST = 15,
    ERR_VERSION = 25
};

struct gpu {
    char name[96], uuid[96];
    unsigned long long total, used, reserved;
    int cc_major, cc_minor, util, temp;
    long lost_after; /* -1: never */
    long mem_calls;
};

struct proc {
    int gpu;
    unsigned pid;
    unsigned long long used;
};

static struct gpu gpus[16];
static unsigned ngpus;
static struct proc procs[64];
static unsigned nprocs;
static char driver[64] = "550.54.15";
static int cuda_version = 12040;
static int init_error;
static char procdir[512];
static int initialized;

typedef struct nvml_device *nvmlDevice_t;

static int dev_index(nvmlDevice_t d)
{
    long i = (long)(size_t)d - 1;
    return i >= 0 && i < (long)ngpus ? (int)i : -1;
}

static const char *value_of(const char *line, const char *key, char *buf, size_t size)
{
    char pat[64];
    const char *p;
    size_t n = 0;
    snprintf(pat, sizeof(pat), " %s=", key);
    if (!(p = strstr(line, pat)))
        return NULL;
    p += strlen(pat);
    if (*p == '"') {
        p++;
        while (*p && *p != '"' && n + 1 < size)
            buf[n++] = *p++;
    } else {
        while (*p && *p != ' ' && *p != '\n' && n + 1 < size)
            buf[n++] = *p++;
    }
    buf[n] = '\0';
    return buf;
}

static void load_spec(void)
{
    const char *path = getenv("FAKE_NVML_SPEC");
    char line[1024], buf[128];
    FILE *f;

    ngpus = nprocs = 0;
    init_error = 0;
    procdir[0] = '\0';
    if (!path || !(f = fopen(path, "r")))
        return;
    while (fgets(line, sizeof(line), f)) {
        char *l = line;
        if (!strncmp(l, "driver ", 7))
            sscanf(l + 7, "%63s", driver);
        else if (!strncmp(l, "cuda ", 5))
            cuda_version = atoi(l + 5);
        else if (!strncmp(l, "init_error ", 11))
            init_error = atoi(l + 11);
        else if (!strncmp(l, "procdir ", 8))
            sscanf(l + 8, "%511s", procdir);
        else if (!strncmp(l, "gpu ", 4) && ngpus < 16) {
            struct gpu *g = &gpus[ngpus++];
            memset(g, 0, sizeof(*g));
            g->lost_after = -1;
            g->util = g->temp = -1;
            l[3] = ' ';
            if (value_of(l + 3, "name", g->name, sizeof(g->name)) == NULL)
                snprintf(g->name, sizeof(g->name), "Fake GPU");
            value_of(l + 3, "uuid", g->uuid, sizeof(g->uuid));
            if (value_of(l + 3, "total", buf, sizeof(buf)))
                g->total = strtoull(buf, NULL, 10);
            if (value_of(l + 3, "used", buf, sizeof(buf)))
                g->used = strtoull(buf, NULL, 10);
            if (value_of(l + 3, "reserved", buf, sizeof(buf)))
                g->reserved = strtoull(buf, NULL, 10);
            if (g->reserved > g->total)
                g->reserved = g->total;
            if (value_of(l + 3, "cc", buf, sizeof(buf)))
                sscanf(buf, "%d.%d", &g->cc_major, &g->cc_minor);
            if (value_of(l + 3, "util", buf, sizeof(buf)))
                g->util = atoi(buf);
            if (value_of(l + 3, "temp", buf, sizeof(buf)))
                g->temp = atoi(buf);
            if (value_of(l + 3, "lost_after", buf, sizeof(buf)))
                g->lost_after = atol(buf);
        } else if (!strncmp(l, "proc ", 5) && nprocs < 64) {
            struct proc *p = &procs[nprocs++];
            l[4] = ' ';
            p->gpu = value_of(l + 4, "gpu", buf, sizeof(buf)) ? atoi(buf) : 0;
            p->pid = value_of(l + 4, "pid", buf, sizeof(buf)) ? (unsigned)atoi(buf) : 1;
            p->used = value_of(l + 4, "used", buf, sizeof(buf)) ? strtoull(buf, NULL, 10) : 0;
        }
    }
    fclose(f);
}

/* Static processes plus live ones from procdir, for one GPU. */
static unsigned collect(int gpu, unsigned *pids, unsigned long long *used, unsigned max)
{
    unsigned n = 0, i;
    DIR *d;
    struct dirent *e;

    for (i = 0; i < nprocs; i++)
        if (procs[i].gpu == gpu && n < max) {
            pids[n] = procs[i].pid;
            used[n++] = procs[i].used;
        }
    if (!procdir[0] || !(d = opendir(procdir)))
        return n;
    while ((e = readdir(d)) && n < max) {
        char path[1024];
        FILE *f;
        int g;
        unsigned long long b;
        long pid = strtol(e->d_name, NULL, 10);
        if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            continue;
        snprintf(path, sizeof(path), "%s/%s", procdir, e->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        if (fscanf(f, "%d %llu", &g, &b) == 2 && g == gpu) {
            pids[n] = (unsigned)pid;
            used[n++] = b;
        }
        fclose(f);
    }
    closedir(d);
    return n;
}

static unsigned long long gpu_used(int gpu)
{
    unsigned pids[128], n, i;
    unsigned long long used[128], sum = gpus[gpu].used;
    n = collect(gpu, pids, used, 128);
    for (i = 0; i < n; i++)
        sum += used[i];
    return sum > gpus[gpu].total - gpus[gpu].reserved ? gpus[gpu].total - gpus[gpu].reserved : sum;
}

/* ---- the NVML entry points ------------------------------------------------------------ */

EXPORT int nvmlInit(void);
EXPORT int nvmlInit(void)
{
    if (initialized) { /* reference counted, as NVML's own: a second session shares the first */
        initialized++;
        return OK;
    }
    load_spec();
    if (init_error)
        return init_error;
    initialized = 1;
    return OK;
}

EXPORT int nvmlShutdown(void);
EXPORT int nvmlShutdown(void)
{
    if (initialized)
        initialized--;
    return OK;
}

EXPORT int nvmlDeviceGetCount(unsigned *count);
EXPORT int nvmlDeviceGetCount(unsigned *count)
{
    if (!initialized)
        return ERR_UNINIT;
    *count = ngpus;
    return OK;
}

EXPORT int nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d);
EXPORT int nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d)
{
    if (!initialized)
        return ERR_UNINIT;
    if (i >= ngpus)
        return ERR_ARG;
    *d = (nvmlDevice_t)(size_t)(i + 1);
    return OK;
}

struct mem_v1 {
    unsigned long long total, free, used;
};
struct mem_v2 {
    unsigned version;
    unsigned long long total, reserved, free, used;
};

static int memory(nvmlDevice_t d, unsigned long long *total, unsigned long long *used,
                  unsigned long long *reserved)
{
    int i = dev_index(d);
    if (i < 0)
        return ERR_ARG;
    if (gpus[i].lost_after >= 0 && gpus[i].mem_calls++ >= gpus[i].lost_after)
        return ERR_LOST;
    *total = gpus[i].total;
    *used = gpu_used(i);
    *reserved = gpus[i].reserved;
    return OK;
}

EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, struct mem_v1 *m);
EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, struct mem_v1 *m)
{
    unsigned long long reserved = 0;
    int r = memory(d, &m->total, &m->used, &reserved);
    m->free = r ? 0 : m->total - reserved - m->used;
    return r;
}

EXPORT int nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned len);
#ifndef FAKE_NO_NAME
EXPORT int nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned len)
{
    int i = dev_index(d);
    if (i < 0)
        return ERR_ARG;
    if (gpus[i].lost_after >= 0 && gpus[i].mem_calls > gpus[i].lost_after)
        return ERR_LOST;
    snprintf(name, len, "%s", gpus[i].name);
    return OK;
}
#endif

#ifndef FAKE_MINIMAL
EXPORT int nvmlInit_v2(void);
EXPORT int nvmlInit_v2(void)
{
    return nvmlInit();
}

EXPORT int nvmlDeviceGetCount_v2(unsigned *count);
EXPORT int nvmlDeviceGetCount_v2(unsigned *count)
{
    return nvmlDeviceGetCount(count);
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d);
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    return nvmlDeviceGetHandleByIndex(i, d);
}

#ifndef FAKE_MEM_V1
EXPORT int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, struct mem_v2 *m);
EXPORT int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, struct mem_v2 *m)
{
    int r;
    if (m->version != ((unsigned)sizeof(struct mem_v2) | (2u << 24)))
        return ERR_VERSION;
    r = memory(d, &m->total, &m->used, &m->reserved);
    m->free = r ? 0 : m->total - m->reserved - m->used;
    return r;
}
#endif

EXPORT const char *nvmlErrorString(int r);
EXPORT const char *nvmlErrorString(int r)
{
    switch (r) {
    case 9:
        return "Driver Not Loaded";
    case 15:
        return "GPU is lost";
    case 25:
        return "Argument version mismatch";
    default:
        return "Unknown Error";
    }
}

EXPORT int nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len);
EXPORT int nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len)
{
    int i = dev_index(d);
    if (i < 0)
        return ERR_ARG;
    if (!gpus[i].uuid[0])
        return ERR_NOTSUP;
    snprintf(uuid, len, "%s", gpus[i].uuid);
    return OK;
}

EXPORT int nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *maj, int *min);
EXPORT int nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *maj, int *min)
{
    int i = dev_index(d);
    if (i < 0)
        return ERR_ARG;
    if (!gpus[i].cc_major)
        return ERR_NOTSUP;
    *maj = gpus[i].cc_major;
    *min = gpus[i].cc_minor;
    return OK;
}

struct util {
    unsigned gpu, memory;
};
EXPORT int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, struct util *u);
EXPORT int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, struct util *u)
{
    int i = dev_index(d);
    if (i < 0)
        return ERR_ARG;
    if (gpus[i].util < 0)
        return ERR_NOTSUP;
    u->gpu = (unsigned)gpus[i].util;
    u->memory = (unsigned)gpus[i].util / 2;
    return OK;
}

EXPORT int nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *t);
EXPORT int nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *t)
{
    int i = dev_index(d);
    if (i < 0 || sensor != 0)
        return ERR_ARG;
    if (gpus[i].temp < 0)
        return ERR_NOTSUP;
    *t = (unsigned)gpus[i].temp;
    return OK;
}

EXPORT int nvmlSystemGetDriverVersion(char *v, unsigned len);
EXPORT int nvmlSystemGetDriverVersion(char *v, unsigned len)
{
    snprintf(v, len, "%s", driver);
    return OK;
}

EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *v);
EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    *v = cuda_version;
    return OK;
}

/* Process lists: entries of `stride` bytes, pid at 0, used memory at 8, rest zero. */
static int fill_procs(nvmlDevice_t d, unsigned *count, void *buf, size_t stride)
{
    int i = dev_index(d);
    unsigned pids[128], n, k;
    unsigned long long used[128];
    if (i < 0)
        return ERR_ARG;
    n = collect(i, pids, used, 128);
    if (*count < n) {
        *count = n;
        return ERR_SIZE;
    }
    memset(buf, 0, (size_t)*count * stride);
    for (k = 0; k < n; k++) {
        memcpy((char *)buf + k * stride, &pids[k], sizeof(unsigned));
        memcpy((char *)buf + k * stride + 8, &used[k], sizeof(unsigned long long));
    }
    *count = n;
    return OK;
}

#ifdef FAKE_PROCS_V3_32
EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count, void *buf);
EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count, void *buf)
{
    return fill_procs(d, count, buf, 32);
}
#else
EXPORT int nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned *count, void *buf);
EXPORT int nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned *count, void *buf)
{
    return fill_procs(d, count, buf, 24);
}
#endif

EXPORT int nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned *count, void *buf);
EXPORT int nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned *count, void *buf)
{
    (void)d;
    (void)buf;
    *count = 0;
    return OK;
}
#endif /* FAKE_MINIMAL */
