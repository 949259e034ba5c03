/* safewrite.c - atomic replacement of a file, as git's lockfile does it: a temporary file beside
 * the target (mkstemp, mode 0600), written and fsync'ed, given the target's mode, renamed over
 * the target, then the directory fsync'ed. A crash at any point leaves the old or the new file;
 * only a crash between mkstemp and rename can leave the temporary ".NAME.oomless-XXXXXX". */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void step(oomi_step_fn fn, const char *name, const char *file, void *user)
{
    if (fn)
        fn(name, file, user);
}

/* "dir/" of a path ("" for a bare name), and the base name */
static char *dir_part(const char *path, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    return oomi_strndup(path, slash ? (size_t)(slash - path) + 1 : 0);
}

/* "/abs/a/../b" -> "/abs/b" without looking at the file system */
static char *lexical_abs(const char *path)
{
    char cwd[PATH_MAX], *out, *p;
    oomi_sb sb = OOMI_SB_INIT;
    const char *s = path;

    if (*path != '/') {
        if (!getcwd(cwd, sizeof(cwd)))
            return NULL;
        oomi_sb_puts(&sb, cwd);
    }
    while (*s) {
        size_t n;
        while (*s == '/')
            s++;
        n = strcspn(s, "/");
        if (n == 2 && !strncmp(s, "..", 2)) {
            while (sb.len && sb.buf[sb.len - 1] != '/')
                sb.len--;
            if (sb.len)
                sb.len--;
        } else if (n && !(n == 1 && *s == '.')) {
            oomi_sb_putc(&sb, '/');
            oomi_sb_add(&sb, s, n);
        }
        s += n;
    }
    if (oomi_sb_ok(&sb)) {
        oomi_sb_free(&sb);
        return NULL;
    }
    out = oomi_sb_steal(&sb);
    if (out && !*out && (p = oomi_strdup("/")) != NULL) {
        oomi_free(out);
        out = p;
    }
    return out;
}

static bool under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return !strncmp(path, dir, n) && (path[n] == '/' || (n == 1 && dir[0] == '/'));
}

int oomi_resolve_target(char **real, const char *path, bool follow)
{
    char rp[PATH_MAX], cwd[PATH_MAX], *lex;
    bool outside, via_link;

    *real = NULL;
    if (!realpath(path, rp))
        return oomi_fail(OOM_EIO, "cannot open '%s': %s", path, strerror(errno));
    if (!realpath(".", cwd))
        return oomi_fail(OOM_EIO, "cannot resolve the current directory: %s", strerror(errno));
    if (!(lex = lexical_abs(path)))
        return oomi_nomem();
    via_link = strcmp(lex, rp) != 0;
    outside = !under(rp, cwd);
    oomi_free(lex);
    if (via_link && outside && !follow)
        return oomi_fail(OOM_EREFUSED,
                         "'%s' is a symbolic link to '%s', outside the current directory "
                         "(use --follow-symlinks to edit it)",
                         path, rp);
    *real = oomi_strdup(via_link ? rp : path);
    return *real ? OOM_OK : oomi_nomem();
}

static int write_all(int fd, const char *data, size_t len)
{
    while (len) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        data += w;
        len -= (size_t)w;
    }
    return 0;
}

int oomi_write_temp(char **tmp, const char *path, unsigned mode, const char *data, size_t len,
                    oomi_step_fn fn, void *user)
{
    const char *base;
    char *dir = dir_part(path, &base), *name;
    int fd, e = 0;
    const char *what = "write";

    *tmp = NULL;
    name = dir ? oomi_asprintf("%s.%s.oomless-XXXXXX", dir, base) : NULL;
    oomi_free(dir);
    if (!name)
        return oomi_nomem();
    if ((fd = mkstemp(name)) < 0) {
        int err = oomi_fail(OOM_EIO, "cannot create a temporary file beside '%s': %s", path,
                            strerror(errno));
        oomi_free(name);
        return err;
    }
    step(fn, "temp-created", path, user);
    if ((e = write_all(fd, data, len)) == 0)
        step(fn, "temp-written", path, user);
    if (!e && (what = "fsync", fsync(fd) < 0))
        e = errno;
    if (!e && (what = "chmod", fchmod(fd, (mode_t)(mode & 07777)) < 0))
        e = errno;
    if (close(fd) < 0 && !e) {
        what = "close";
        e = errno;
    }
    if (e) {
        unlink(name);
        oomi_free(name);
        return oomi_fail(OOM_EIO, "cannot %s the temporary file for '%s': %s (it is unchanged)",
                         what, path, strerror(e));
    }
    step(fn, "temp-synced", path, user);
    *tmp = name;
    return OOM_OK;
}

int oomi_commit_temp(const char *tmp, const char *path, oomi_step_fn fn, void *user)
{
    /* nothing is allocated here: after the first rename of a run, running out of memory would
     * leave some files new and report a failure */
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) + 1 : 0;
    int fd, err = OOM_OK;

    if (n >= sizeof(dir)) {
        unlink(tmp);
        return oomi_fail(OOM_EIO, "cannot rename to '%s': the path is too long", path);
    }
    memcpy(dir, path, n);
    dir[n] = '\0';
    step(fn, "before-rename", path, user);
    if (rename(tmp, path) < 0) {
        err = oomi_fail(OOM_EIO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        unlink(tmp);
        return err;
    }
    step(fn, "renamed", path, user);
    fd = open(*dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) < 0)
        err = oomi_fail(OOM_EIO, "cannot sync the directory of '%s': %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (!err)
        step(fn, "dir-synced", path, user);
    return err;
}
