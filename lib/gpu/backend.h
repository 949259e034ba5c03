/*
 * gpu/backend.h - the table of functions a GPU vendor backend provides. The core (discover.c)
 * never knows which vendor it talks to; NVML (gpu_nvml.c) is the one backend today.
 */
#ifndef OOMLESS_GPU_BACKEND_H
#define OOMLESS_GPU_BACKEND_H

#include "gpu/gpu.h"

struct oomi_gpu_backend {
    const char *name;
    /* loads and initialises; OOM_ENODEV with the reason */
    int (*open)(void **state);
    void (*close)(void *state);
    int (*device_count)(void *state, unsigned *count);
    /* the UUID only (for CUDA_VISIBLE_DEVICES); "" when unknown */
    int (*device_uuid)(void *state, unsigned index, char *uuid, size_t size);
    /* fills what it can; a device that stopped answering sets info->lost and returns OOM_OK */
    int (*device_read)(void *state, unsigned index, oom_gpu_info *info, unsigned flags);
    /* driver/NVML/CUDA versions, each optional */
    void (*versions)(void *state, oom_gpu_list *list);
};

extern const struct oomi_gpu_backend oomi_nvml_backend;

/* The backend oom_gpu_open() uses: NVML (gpu_nvml.c). A build without GPU access (the WebAssembly
 * build, web/) leaves gpu_nvml.c out and links a backend whose open() fails with OOM_ENODEV. */
extern const struct oomi_gpu_backend *const oomi_gpu_default_backend;

#endif
