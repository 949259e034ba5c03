/* file.c - reading whole files, the XDG base directories, and finding the data directory. */
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
#include <fcntl.h>
#include <stdint.h>
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

int oomi_read_fd(char **out, size_t *len, int fd, const char *path)
{
    struct stat st;
    size_t cap, n = 0;
    char *buf, *grown;
    ssize_t r;

    *out = NULL;
    if (len)
        *len = 0;
    if (fstat(fd, &st) < 0)
        return oomi_fail(OOM_EIO, "cannot read '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return oomi_fail(OOM_EIO, "cannot read '%s': %s", path, strerror(EISDIR));
    /* one allocation of the file's size (+1 to see the end, +1 for the NUL); doubling only for a
     * file that grows while it is read or has no size (a pipe) */
    cap = S_ISREG(st.st_mode) && st.st_size > 0 && (uintmax_t)st.st_size < SIZE_MAX / 2
              ? (size_t)st.st_size + 2
              : 8192;
    if (!(buf = oomi_malloc(cap)))
        return oomi_nomem();
    for (;;) {
        if (n + 1 == cap) {
            if (cap > SIZE_MAX / 2 || !(grown = oomi_realloc(buf, cap * 2))) {
                oomi_free(buf);
                return oomi_nomem();
            }
            buf = grown;
            cap *= 2;
        }
        r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            oomi_free(buf);
            return oomi_fail(OOM_EIO, "cannot read '%s': %s", path, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    *out = buf;
    return OOM_OK;
}

int oomi_read_file(char **out, size_t *len, const char *path)
{
    int fd, err;

    *out = NULL;
    if (len)
        *len = 0;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return oomi_fail(OOM_EIO, "cannot open '%s': %s", path, strerror(errno));
    err = oomi_read_fd(out, len, fd, path);
    close(fd);
    return err;
}

int oomi_xdg_base(char **out, size_t *home_len, const char *var, const char *fallback)
{
    const char *xdg = getenv(var), *home = getenv("HOME");

    *out = NULL;
    if (home_len)
        *home_len = 0;
    if (xdg && *xdg && *xdg != '/')
        oomi_notice("$%s '%s' is not an absolute path: ignored, as the XDG Base Directory "
                    "specification says%s%s/%s",
                    var, xdg, home && *home ? "; using " : "", home && *home ? home : "",
                    home && *home ? fallback : "");
    if (xdg && *xdg == '/') {
        *out = oomi_strdup(xdg);
    } else if (home && *home) {
        *out = oomi_asprintf("%s/%s", home, fallback);
        if (home_len)
            *home_len = strlen(home);
    } else {
        return OOM_OK;
    }
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
    oomi_snprintf(located_dir, sizeof(located_dir), "%s/share/oomless", path);
    {
        char probe[PATH_MAX + 8];
        oomi_snprintf(probe, sizeof(probe), "%s/gpus", located_dir);
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
