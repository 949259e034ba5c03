/* file.c - reading whole files, and finding the data directory. */
#define _GNU_SOURCE /* dladdr */
#include "core/core.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int oomi_fd_above_std(int fd)
{
    int high, e;
    if (fd < 0 || fd > 2)
        return fd;
    high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    e = errno;
    close(fd);
    errno = e;
    return high;
}

int oomi_read_file(char **out, size_t *len, const char *path)
{
    FILE *f;
    oomi_sb sb = OOMI_SB_INIT;
    char chunk[8192];
    size_t n;
    int err = OOM_OK;

    *out = NULL;
    if (len)
        *len = 0;
    f = fopen(path, "rb");
    if (!f)
        return oomi_fail(OOM_EIO, "cannot open '%s': %s", path, strerror(errno));
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        oomi_sb_add(&sb, chunk, n);
    if (ferror(f))
        err = oomi_fail(OOM_EIO, "cannot read '%s': %s", path, strerror(errno));
    fclose(f);
    if (!err)
        err = oomi_sb_ok(&sb);
    if (err) {
        oomi_sb_free(&sb);
        return err;
    }
    if (len)
        *len = sb.len;
    *out = oomi_sb_steal(&sb);
    return *out ? OOM_OK : oomi_nomem();
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static char located_dir[PATH_MAX];
static pthread_once_t located_once = PTHREAD_ONCE_INIT;

/* <prefix>/share/oomless next to the library (or the binary it is linked into): an installed
 * tree moved elsewhere, or installed with `cmake --install --prefix`, still finds its data. */
static void locate_beside_binary(void)
{
    Dl_info info;
    char path[PATH_MAX], *slash;

    if (!dladdr((void *)oomi_data_dir, &info) || !info.dli_fname || !realpath(info.dli_fname, path))
        return;
    if (!(slash = strrchr(path, '/')))
        return;
    *slash = '\0';
    if (!(slash = strrchr(path, '/')))
        return;
    *slash = '\0';
    if (strlen(path) + sizeof("/share/oomless/gpus") > sizeof(located_dir))
        return;
    snprintf(located_dir, sizeof(located_dir), "%s/share/oomless", path);
    {
        char probe[PATH_MAX + 8];
        snprintf(probe, sizeof(probe), "%s/gpus", located_dir);
        if (!is_dir(probe))
            located_dir[0] = '\0';
    }
}

const char *oomi_data_dir(void)
{
    const char *env = getenv("OOMLESS_DATA_DIR");
    if (env && *env)
        return env;
    pthread_once(&located_once, locate_beside_binary);
    if (located_dir[0])
        return located_dir;
    if (is_dir(OOMLESS_INSTALL_DATADIR "/gpus"))
        return OOMLESS_INSTALL_DATADIR;
    return OOMLESS_SOURCE_DATADIR;
}

char *oomi_data_path(const char *relative)
{
    return oomi_asprintf("%s/%s", oomi_data_dir(), relative);
}
