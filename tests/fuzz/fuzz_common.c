/* fuzz_common.c - helpers shared by the fuzz targets (see fuzz.h). */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

char *fuzz_cstring(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

const char *fuzz_memfile(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    size_t off = 0;
    ssize_t n;

    if (fd < 0) {
        if ((fd = memfd_create("oomless-fuzz", MFD_CLOEXEC)) < 0)
            return NULL;
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0)
        return NULL;
    while (off < size) {
        if ((n = pwrite(fd, data + off, size - off, (off_t)off)) <= 0)
            return NULL;
        off += (size_t)n;
    }
    return path;
}

void fuzz_setup_env(void)
{
    setenv("OOMLESS_DATA_DIR", OOMLESS_FUZZ_DATADIR, 1);
    setenv("OOMLESS_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    setenv("XDG_CONFIG_HOME", "/nonexistent", 1);
    unsetenv("OOMLESS_GPU");
    unsetenv("GPU_PROFILE");
    unsetenv("CUDA_VISIBLE_DEVICES");
}
