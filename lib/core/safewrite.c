/* safewrite.c - atomic replacement of a file, as git's lockfile does it: a temporary file beside
 * the target (mkstemp, mode 0600), written, given the target's owner, group, extended
 * attributes (ACLs) and mode, fsync'ed, renamed over the target, then the directory fsync'ed.
 * A crash at any point leaves the old or the new file; only a crash between mkstemp and rename
 * can leave the temporary ".NAME.oomless-XXXXXX". */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
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
    if (oomi_sb_finish(&sb, &out))
        return NULL;
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

/* a list of names or a value: flistxattr/fgetxattr with the size asked first, again if it grew */
static int xattr_read(int fd, const char *name, char **out, size_t *len)
{
    ssize_t n, m;
    char *buf;

    *out = NULL;
    *len = 0;
    for (;;) {
        n = name ? fgetxattr(fd, name, NULL, 0) : flistxattr(fd, NULL, 0);
        if (n < 0)
            return errno;
        if (!(buf = oomi_malloc((size_t)n + 1)))
            return ENOMEM;
        m = name ? fgetxattr(fd, name, buf, (size_t)n) : flistxattr(fd, buf, (size_t)n);
        if (m >= 0) {
            *out = buf;
            *len = (size_t)m;
            return 0;
        }
        oomi_free(buf);
        if (errno != ERANGE)
            return errno;
    }
}

static bool in_list(const char *list, size_t len, const char *name)
{
    size_t i;

    for (i = 0; i < len; i += strlen(list + i) + 1)
        if (!strcmp(list + i, name))
            return true;
    return false;
}

static int xattr_fail(int e, const char *what, const char *name, const char *path)
{
    if (e == ENOMEM)
        return oomi_nomem();
    return oomi_fail(OOM_EREFUSED,
                     "cannot %s the extended attribute '%s' of '%s' on its replacement: %s; the "
                     "file is unchanged",
                     what, name, path, strerror(e));
}

/* one attribute of `from` onto `to`, unless `to` already has that value */
static int xattr_copy_one(int from, int to, const char *name, const char *path)
{
    char *val = NULL, *have = NULL;
    size_t len, hlen;
    int e;

    if ((e = xattr_read(from, name, &val, &len)))
        return e == ENODATA ? OOM_OK : xattr_fail(e, "read", name, path);
    e = xattr_read(to, name, &have, &hlen);
    if (e == ENOMEM) {
        oomi_free(val);
        return oomi_nomem();
    }
    if (e || hlen != len || memcmp(have, val, len))
        e = fsetxattr(to, name, val, len, 0) < 0 ? errno : 0;
    oomi_free(val);
    oomi_free(have);
    return e ? xattr_fail(e, "keep", name, path) : OOM_OK;
}

/* The extended attributes of `to` become those of `from`: POSIX ACLs (system.posix_acl_access),
 * user.*, and what else the caller may read and write. An attribute `to` has and `from` has not
 * (an ACL inherited from the directory's default ACL) is removed. */
static int copy_xattrs(int from, int to, const char *path)
{
    char *names = NULL, *mine = NULL;
    size_t len = 0, mlen = 0, i;
    int e, err = OOM_OK;

    if ((e = xattr_read(from, NULL, &names, &len)))
        return e == ENOTSUP ? OOM_OK : xattr_fail(e, "list", "*", path);
    for (i = 0; !err && i < len; i += strlen(names + i) + 1)
        err = xattr_copy_one(from, to, names + i, path);
    if (!err && (e = xattr_read(to, NULL, &mine, &mlen)) && e != ENOTSUP)
        err = xattr_fail(e, "list", "*", path);
    for (i = 0; !err && i < mlen; i += strlen(mine + i) + 1)
        if (!in_list(names, len, mine + i) && fremovexattr(to, mine + i) < 0 && errno != ENODATA)
            err = xattr_fail(errno, "drop", mine + i, path);
    oomi_free(names);
    oomi_free(mine);
    return err;
}

/* owner and group of `like` onto fd: refused, not silently changed, when not permitted */
static int copy_owner(int fd, const struct stat *like, const char *path)
{
    struct stat st;

    if (fstat(fd, &st) < 0)
        return oomi_fail(OOM_EIO, "cannot stat the temporary file for '%s': %s", path,
                         strerror(errno));
    if (st.st_uid == like->st_uid && st.st_gid == like->st_gid)
        return OOM_OK;
    if (fchown(fd, st.st_uid == like->st_uid ? (uid_t)-1 : like->st_uid,
               st.st_gid == like->st_gid ? (gid_t)-1 : like->st_gid) == 0)
        return OOM_OK;
    if (errno != EPERM)
        return oomi_fail(OOM_EIO, "cannot give the temporary file for '%s' its owner: %s", path,
                         strerror(errno));
    if (st.st_uid != like->st_uid)
        return oomi_fail(OOM_EREFUSED,
                         "'%s' belongs to user %lu, and a replacement written by user %lu cannot "
                         "be given that owner (run apply as that user or as root); the file is "
                         "unchanged",
                         path, (unsigned long)like->st_uid, (unsigned long)st.st_uid);
    return oomi_fail(OOM_EREFUSED,
                     "'%s' has group %lu, and user %lu cannot give its replacement that group "
                     "(not a member); the file is unchanged",
                     path, (unsigned long)like->st_gid, (unsigned long)st.st_uid);
}

/* owner, group, extended attributes, then the mode (last: chown may clear set-id bits) */
static int copy_meta(int fd, int like, const char *path)
{
    struct stat st;
    int err;

    if (like < 0) /* a new file: readable by all, as a plain creat() under umask 022 makes it */
        return fchmod(fd, 0644) < 0
                   ? oomi_fail(OOM_EIO, "cannot chmod the temporary file for '%s': %s", path,
                               strerror(errno))
                   : OOM_OK;
    if (fstat(like, &st) < 0)
        return oomi_fail(OOM_EIO, "cannot stat '%s': %s", path, strerror(errno));
    if ((err = copy_owner(fd, &st, path)) || (err = copy_xattrs(like, fd, path)))
        return err;
    if (fchmod(fd, st.st_mode & 07777) < 0)
        return oomi_fail(OOM_EIO, "cannot chmod the temporary file for '%s': %s", path,
                         strerror(errno));
    return OOM_OK;
}

int oomi_write_temp(char **tmp, const char *path, int like, const char *data, size_t len,
                    oomi_step_fn fn, void *user)
{
    const char *base;
    char *dir = dir_part(path, &base), *name;
    int fd, e = 0, err = OOM_OK;
    const char *what = "write";

    *tmp = NULL;
    name = dir ? oomi_asprintf("%s.%s.oomless-XXXXXX", dir, base) : NULL;
    oomi_free(dir);
    if (!name)
        return oomi_nomem();
    if ((fd = mkstemp(name)) < 0) {
        err = oomi_fail(OOM_EIO, "cannot create a temporary file beside '%s': %s", path,
                        strerror(errno));
        oomi_free(name);
        return err;
    }
    step(fn, "temp-created", path, user);
    if ((e = write_all(fd, data, len)) == 0)
        step(fn, "temp-written", path, user);
    if (!e)
        err = copy_meta(fd, like, path);
    if (!e && !err && (what = "fsync", fsync(fd) < 0))
        e = errno;
    if (close(fd) < 0 && !e && !err) {
        what = "close";
        e = errno;
    }
    if (e && !err)
        err = oomi_fail(OOM_EIO, "cannot %s the temporary file for '%s': %s (it is unchanged)",
                        what, path, strerror(e));
    if (err) {
        unlink(name);
        oomi_free(name);
        return err;
    }
    step(fn, "temp-synced", path, user);
    *tmp = name;
    return OOM_OK;
}

int oomi_rename_temp(const char *tmp, const char *path, oomi_step_fn fn, void *user)
{
    step(fn, "before-rename", path, user);
    if (rename(tmp, path) < 0)
        return oomi_fail(OOM_EIO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    step(fn, "renamed", path, user);
    return OOM_OK;
}

int oomi_sync_dir(const char *path)
{
    /* nothing is allocated here (see oomi_rename_temp) */
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) + 1 : 0;
    int fd, err = OOM_OK;

    if (n >= sizeof(dir))
        return oomi_fail(OOM_EIO, "cannot sync the directory of '%s': the path is too long", path);
    memcpy(dir, path, n);
    dir[n] = '\0';
    fd = open(*dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) < 0)
        err = oomi_fail(OOM_EIO, "cannot sync the directory of '%s': %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    return err;
}
