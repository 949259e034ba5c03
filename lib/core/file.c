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
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

size_t oomi_bom_len(const char *text, size_t len)
{
    return len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? 3 : 0;
}

const char *oomi_file_kind(unsigned int mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

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

/* "70.1 MiB", or "1500 bytes" below a MiB: sizes in the refusal of a file past the cap */
static void cap_text(char *buf, size_t size, uint64_t bytes)
{
    if (bytes >= OOM_MiB && bytes % OOM_MiB == 0)
        oomi_snprintf(buf, size, "%llu MiB", (unsigned long long)(bytes / OOM_MiB));
    else if (bytes >= OOM_MiB)
        oomi_snprintf(buf, size, "%.1f MiB", (double)bytes / (double)OOM_MiB);
    else
        oomi_snprintf(buf, size, "%llu bytes", (unsigned long long)bytes);
}

static int too_large(const char *path, uint64_t size, size_t max)
{
    char have[32], cap[32];
    cap_text(cap, sizeof(cap), max);
    if (size == OOM_UNKNOWN)
        return oomi_fail(OOM_EINVAL, "%s: more than the %s this reads", path, cap);
    cap_text(have, sizeof(have), size);
    return oomi_fail(OOM_EINVAL, "%s: %s is larger than the %s this reads", path, have, cap);
}

int oomi_read_fd(char **out, size_t *len, int fd, const char *path, size_t max)
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
    if (max > SIZE_MAX / 4)
        max = SIZE_MAX / 4;
    if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > max)
        return too_large(path, (uint64_t)st.st_size, max);
    /* one allocation of the file's size (+1 to see the end, +1 for the NUL); doubling only for a
     * file that grows while it is read or has no size (a pipe), up to max + 2 */
    cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 2 : 8192;
    if (cap > max + 2)
        cap = max + 2;
    if (!(buf = oomi_malloc(cap)))
        return oomi_nomem();
    for (;;) {
        if (n + 1 == cap) {
            size_t next = cap * 2 < max + 2 ? cap * 2 : max + 2;
            if (n > max) {
                oomi_free(buf);
                return too_large(path, OOM_UNKNOWN, max);
            }
            if (!(grown = oomi_realloc(buf, next))) {
                oomi_free(buf);
                return oomi_nomem();
            }
            buf = grown;
            cap = next;
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
    if (n > max) {
        oomi_free(buf);
        return too_large(path, OOM_UNKNOWN, max);
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    *out = buf;
    return OOM_OK;
}

int oomi_read_file(char **out, size_t *len, const char *path, size_t max)
{
    int fd, err;

    *out = NULL;
    if (len)
        *len = 0;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return oomi_fail(OOM_EIO, "cannot open '%s': %s", path, strerror(errno));
    err = oomi_read_fd(out, len, fd, path, max);
    close(fd);
    return err;
}

long oomi_read_prefix(const char *path, char *buf, size_t size)
{
    size_t total = 0;
    ssize_t n = 0;
    int fd, e;

    if (!size || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    while (total + 1 < size &&
           ((n = read(fd, buf + total, size - 1 - total)) > 0 || (n < 0 && errno == EINTR)))
        total += n > 0 ? (size_t)n : 0;
    e = errno;
    close(fd);
    buf[total] = '\0';
    if (n < 0 && !total) {
        errno = e;
        return -1;
    }
    return (long)total;
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
 * tree moved elsewhere, or installed with `cmake --install --prefix`, still finds its data.
 * For the main program glibc's dladdr() names the file by its argv[0], a bare "oomless" when it
 * was run through $PATH (or a launcher chose that name): the program's file is then
 * /proc/self/exe. A library's name is the path it was loaded from. */
static void locate_beside_binary(void)
{
    Dl_info info;
    char path[PATH_MAX], *slash;

    if (!dladdr((void *)oomi_data_dir, &info) || !info.dli_fname ||
        !realpath(strchr(info.dli_fname, '/') ? info.dli_fname : "/proc/self/exe", path))
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
