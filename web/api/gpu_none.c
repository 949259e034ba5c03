/*
 * gpu_none.c - the GPU backend of the WebAssembly build: there is no GPU to see from a browser
 * page, so opening it fails with OOM_ENODEV and planning falls back to the named or default
 * profile, exactly as the native library does on a machine without NVML. Linked in place of
 * lib/gpu/gpu_nvml.c (web/CMakeLists.txt).
 */
#include "gpu/backend.h"

static int none_open(void **state)
{
    *state = NULL;
    return oomi_fail(OOM_ENODEV, "no GPU backend in the WebAssembly build");
}

static void none_close(void *state)
{
    (void)state;
}

static int none_count(void *state, unsigned *count)
{
    (void)state;
    *count = 0;
    return OOM_OK;
}

static int none_uuid(void *state, unsigned index, char *uuid, size_t size)
{
    (void)state;
    (void)index;
    if (size)
        uuid[0] = '\0';
    return OOM_OK;
}

static int none_read(void *state, unsigned index, oom_gpu_info *info, unsigned flags)
{
    (void)state;
    (void)info;
    (void)flags;
    return oomi_fail(OOM_ENODEV, "no GPU %u: no GPU backend in the WebAssembly build", index);
}

static void none_versions(void *state, oom_gpu_list *list)
{
    (void)state;
    (void)list;
}

static const struct oomi_gpu_backend none_backend = {
    "none", none_open, none_close, none_count, none_uuid, none_read, none_versions,
};

const struct oomi_gpu_backend *const oomi_gpu_default_backend = &none_backend;
