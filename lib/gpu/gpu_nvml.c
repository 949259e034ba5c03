/*
 * gpu_nvml.c - the NVML backend, loaded with dlopen at run time (never linked).
 *
 * Only the NVML types used here are declared, with their sizes pinned. Symbols are resolved from
 * one table, newest version first; a missing required symbol names itself in the error, a missing
 * optional one only makes its field unknown.
 *
 * Versioned structs carry `sizeof(struct) | version << 24` in their first field
 * (nvml.h's NVML_STRUCT_VERSION; see NVIDIA/nvidia-settings#78 for what goes wrong without it).
 * The process list: the _v2 calls fill nvmlProcessInfo_v2_t (24 bytes); some drivers' _v3 calls
 * fill 24-byte entries and others 32-byte ones under the same name, so _v3 is used only when _v2
 * is missing, with the stride detected from the data.
 */
#include "gpu/gpu.h"
#include "gpu/backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvml_device *nvmlDevice_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_TEMPERATURE_GPU = 0,
};

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t is 24 bytes");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t is 40 bytes");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t is 16 bytes");
_Static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t is 24 bytes");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t is 68 bytes");

#define NVML_MEMORY_V2    ((unsigned)sizeof(nvmlMemory_v2_t) | (2u << 24))
#define NVML_UNKNOWN_USED ((unsigned long long)-1) /* NVML_VALUE_NOT_AVAILABLE */

/* Which layout a resolved symbol expects. */
enum variant { V1 = 1, V2 = 2, V3 = 3 };

struct nvml {
    void *lib;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*count)(unsigned *);
    nvmlReturn_t (*handle)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*memory_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*memory_v1)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*cc)(nvmlDevice_t, int *, int *);
    nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*temp)(nvmlDevice_t, int, unsigned *);
    nvmlReturn_t (*compute_procs)(nvmlDevice_t, unsigned *, void *);
    nvmlReturn_t (*graphics_procs)(nvmlDevice_t, unsigned *, void *);
    nvmlReturn_t (*driver_version)(char *, unsigned);
    nvmlReturn_t (*nvml_version)(char *, unsigned);
    nvmlReturn_t (*cuda_version)(int *);
    enum variant compute_variant, graphics_variant;
};

struct symbol {
    const char *names[3];  /* newest first */
    size_t offset;         /* of the function pointer in struct nvml */
    size_t variant_offset; /* of the variant field, or 0 */
    bool required;
};

#define FN(f) offsetof(struct nvml, f)
static const struct symbol symbols[] = {
    {{"nvmlInit_v2", "nvmlInit"}, FN(init), 0, true},
    {{"nvmlShutdown"}, FN(shutdown), 0, true},
    {{"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, FN(count), 0, true},
    {{"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}, FN(handle), 0, true},
    {{"nvmlDeviceGetName"}, FN(name), 0, true},
    {{"nvmlErrorString"}, FN(error_string), 0, false},
    {{"nvmlDeviceGetMemoryInfo_v2"}, FN(memory_v2), 0, false},
    {{"nvmlDeviceGetMemoryInfo"}, FN(memory_v1), 0, false},
    {{"nvmlDeviceGetUUID"}, FN(uuid), 0, false},
    {{"nvmlDeviceGetPciInfo_v3"}, FN(pci), 0, false},
    {{"nvmlDeviceGetCudaComputeCapability"}, FN(cc), 0, false},
    {{"nvmlDeviceGetUtilizationRates"}, FN(util), 0, false},
    {{"nvmlDeviceGetTemperature"}, FN(temp), 0, false},
    {{"nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses_v3",
      "nvmlDeviceGetComputeRunningProcesses"},
     FN(compute_procs),
     FN(compute_variant),
     false},
    {{"nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v3",
      "nvmlDeviceGetGraphicsRunningProcesses"},
     FN(graphics_procs),
     FN(graphics_variant),
     false},
    {{"nvmlSystemGetDriverVersion"}, FN(driver_version), 0, false},
    {{"nvmlSystemGetNVMLVersion"}, FN(nvml_version), 0, false},
    {{"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"},
     FN(cuda_version),
     0,
     false},
};
#undef FN

static const char *nvml_error(const struct nvml *n, nvmlReturn_t r)
{
    const char *s = n->error_string ? n->error_string(r) : NULL;
    return s ? s : "unknown NVML error";
}

static enum variant variant_of(const char *name)
{
    size_t len = strlen(name);
    if (len > 3 && !strcmp(name + len - 3, "_v3"))
        return V3;
    if (len > 3 && !strcmp(name + len - 3, "_v2"))
        return V2;
    return V1;
}

static int resolve(struct nvml *n, const char *path)
{
    size_t i, j;
    for (i = 0; i < OOMI_ARRAY_LEN(symbols); i++) {
        const struct symbol *s = &symbols[i];
        void *fn = NULL;
        for (j = 0; j < OOMI_ARRAY_LEN(s->names) && s->names[j] && !fn; j++) {
            fn = dlsym(n->lib, s->names[j]);
            if (fn && s->variant_offset)
                *(enum variant *)((char *)n + s->variant_offset) = variant_of(s->names[j]);
        }
        if (!fn && s->required)
            return oomi_fail(OOM_ENODEV, "NVML symbol %s missing in %s", s->names[0], path);
        memcpy((char *)n + s->offset, &fn, sizeof(fn));
    }
    if (!n->memory_v2 && !n->memory_v1)
        return oomi_fail(OOM_ENODEV,
                         "NVML symbol nvmlDeviceGetMemoryInfo_v2 missing in %s (and "
                         "nvmlDeviceGetMemoryInfo too)",
                         path);
    return OOM_OK;
}

static int nvml_open(void **state)
{
    const char *env = getenv("OOMLESS_NVML_LIBRARY");
    const char *names[] = {"libnvidia-ml.so.1", "libnvidia-ml.so"};
    const char *path = NULL;
    char first_error[256] = "";
    struct nvml *n;
    nvmlReturn_t r;
    size_t i;
    int err;

    if (!(n = oomi_calloc(1, sizeof(*n))))
        return oomi_nomem();
    for (i = 0; i < (env && *env ? 1 : OOMI_ARRAY_LEN(names)) && !n->lib; i++) {
        path = env && *env ? env : names[i];
        n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!n->lib && !first_error[0])
            oomi_snprintf(first_error, sizeof(first_error), "%s", dlerror());
    }
    if (!n->lib) {
        oomi_free(n);
        return oomi_fail(OOM_ENODEV, "NVML not available: %s", first_error);
    }
    if ((err = resolve(n, path)))
        goto fail;
    if ((r = n->init()) != NVML_SUCCESS) {
        err = oomi_fail(OOM_ENODEV, "NVML init failed: %s (error %d)", nvml_error(n, r), r);
        goto fail;
    }
    *state = n;
    return OOM_OK;
fail:
    dlclose(n->lib);
    oomi_free(n);
    return err;
}

static void nvml_close(void *state)
{
    struct nvml *n = state;
    if (!n)
        return;
    n->shutdown();
    dlclose(n->lib);
    oomi_free(n);
}

static int nvml_count(void *state, unsigned *count)
{
    struct nvml *n = state;
    nvmlReturn_t r = n->count(count);
    if (r != NVML_SUCCESS)
        return oomi_fail(OOM_ENODEV, "NVML device count failed: %s", nvml_error(n, r));
    return OOM_OK;
}

static int nvml_uuid(void *state, unsigned index, char *uuid, size_t size)
{
    struct nvml *n = state;
    nvmlDevice_t dev;
    uuid[0] = '\0';
    if (n->handle(index, &dev) != NVML_SUCCESS || !n->uuid)
        return OOM_OK;
    if (n->uuid(dev, uuid, (unsigned)size) != NVML_SUCCESS)
        uuid[0] = '\0';
    uuid[size - 1] = '\0';
    return OOM_OK;
}

/* The 24- or 32-byte _v3 stride: read as 24, a 32-byte list shows pid 0 in entry 1 (its
 * usedGpuCcProtectedMemory), which no process has. */
static size_t v3_stride(const unsigned char *buf, unsigned count)
{
    unsigned i, pid;
    for (i = 1; i < count; i++) {
        memcpy(&pid, buf + (size_t)i * 24, sizeof(pid));
        if (pid == 0)
            return 32;
    }
    return 24;
}

static int read_procs(struct nvml *n, nvmlDevice_t dev, oom_gpu_info *info, bool graphics)
{
    nvmlReturn_t (*fn)(nvmlDevice_t, unsigned *, void *) =
        graphics ? n->graphics_procs : n->compute_procs;
    enum variant v = graphics ? n->graphics_variant : n->compute_variant;
    unsigned count = 0, i;
    unsigned char *buf = NULL;
    size_t stride = v == V1 ? 16 : v == V2 ? 24 : 32;
    oom_gpu_process **procs;
    nvmlReturn_t r;
    int tries;

    if (!fn)
        return OOM_OK;
    for (tries = 0; tries < 4; tries++) {
        unsigned cap = count + 8;
        oomi_free(buf);
        if (!(buf = oomi_calloc(cap, 32)))
            return oomi_nomem();
        count = cap;
        r = fn(dev, &count, buf);
        if (r != NVML_ERROR_INSUFFICIENT_SIZE)
            break;
    }
    if (r != NVML_SUCCESS || count == 0) {
        oomi_free(buf);
        return OOM_OK; /* no list: processes stay unknown/empty, not an error */
    }
    if (v == V3)
        stride = v3_stride(buf, count);
    procs = oomi_reallocarray(info->processes, info->process_count + count, sizeof(*procs));
    if (!procs) {
        oomi_free(buf);
        return oomi_nomem();
    }
    info->processes = procs;
    for (i = 0; i < count; i++) {
        oom_gpu_process *p = oomi_calloc(1, sizeof(*p));
        unsigned long long used;
        if (!p) {
            oomi_free(buf);
            return oomi_nomem();
        }
        procs[info->process_count++] = p;
        memcpy(&p->pid, buf + i * stride, sizeof(unsigned));
        memcpy(&used, buf + i * stride + 8, sizeof(used));
        p->version = OOM_GPU_PROCESS_VERSION;
        p->used_bytes = used == NVML_UNKNOWN_USED ? OOM_UNKNOWN : used;
        p->is_graphics = graphics;
    }
    oomi_free(buf);
    return OOM_OK;
}

static bool read_memory(struct nvml *n, nvmlDevice_t dev, oom_gpu_info *info)
{
    if (n->memory_v2) {
        nvmlMemory_v2_t m = {.version = NVML_MEMORY_V2};
        if (n->memory_v2(dev, &m) == NVML_SUCCESS) {
            info->total_bytes = m.total;
            info->used_bytes = m.used;
            info->free_bytes = m.free;
            return true;
        }
    }
    if (n->memory_v1) {
        nvmlMemory_t m;
        if (n->memory_v1(dev, &m) == NVML_SUCCESS) {
            info->total_bytes = m.total;
            info->used_bytes = m.used;
            info->free_bytes = m.free;
            return true;
        }
    }
    return false;
}

static int nvml_read(void *state, unsigned index, oom_gpu_info *info, unsigned flags)
{
    struct nvml *n = state;
    nvmlDevice_t dev;
    nvmlUtilization_t u;
    nvmlPciInfo_t pci;
    unsigned t;
    int err;

    info->nvml_index = (int)index;
    if (n->handle(index, &dev) != NVML_SUCCESS ||
        n->name(dev, info->name, sizeof(info->name)) != NVML_SUCCESS ||
        !read_memory(n, dev, info)) {
        info->lost = 1;
        return OOM_OK;
    }
    info->name[sizeof(info->name) - 1] = '\0';
    if (n->uuid && n->uuid(dev, info->uuid, sizeof(info->uuid)) != NVML_SUCCESS)
        info->uuid[0] = '\0';
    info->uuid[sizeof(info->uuid) - 1] = '\0';
    if (n->pci && n->pci(dev, &pci) == NVML_SUCCESS)
        oomi_snprintf(info->pci_bus_id, sizeof(info->pci_bus_id), "%.31s", pci.busId);
    if (n->cc && n->cc(dev, &info->cc_major, &info->cc_minor) == NVML_SUCCESS)
        info->has_cc = 1;
    if (n->util && n->util(dev, &u) == NVML_SUCCESS) {
        info->has_utilization = 1;
        info->utilization_gpu = u.gpu;
        info->utilization_mem = u.memory;
    }
    if (n->temp && n->temp(dev, NVML_TEMPERATURE_GPU, &t) == NVML_SUCCESS) {
        info->has_temperature = 1;
        info->temperature_c = t;
    }
    if (flags & OOM_SAMPLE_PROCESSES) {
        if ((err = read_procs(n, dev, info, false)) || (err = read_procs(n, dev, info, true)))
            return err;
    }
    return OOM_OK;
}

static void nvml_versions(void *state, oom_gpu_list *list)
{
    struct nvml *n = state;
    int v;
    if (n->driver_version &&
        n->driver_version(list->driver_version, sizeof(list->driver_version)) != NVML_SUCCESS)
        list->driver_version[0] = '\0';
    if (n->nvml_version &&
        n->nvml_version(list->nvml_version, sizeof(list->nvml_version)) != NVML_SUCCESS)
        list->nvml_version[0] = '\0';
    if (n->cuda_version && n->cuda_version(&v) == NVML_SUCCESS)
        list->cuda_driver_version = v;
    list->driver_version[sizeof(list->driver_version) - 1] = '\0';
    list->nvml_version[sizeof(list->nvml_version) - 1] = '\0';
}

const struct oomi_gpu_backend oomi_nvml_backend = {
    "nvml", nvml_open, nvml_close, nvml_count, nvml_uuid, nvml_read, nvml_versions,
};

const struct oomi_gpu_backend *const oomi_gpu_default_backend = &oomi_nvml_backend;
