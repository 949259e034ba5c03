/*
 * jsonl.c - the files oomless appends records to, one JSON object a line (the calibration store,
 * run's events): opened as regular files only, and appended to a whole line at a time.
 *
 * A line is appended all or nothing: one write() of the whole line on an O_APPEND descriptor,
 * under flock() so that two oomless processes do not interleave; when the disk fills (or the
 * file-size limit is reached) part way, the file is cut back to its old size, so no half line is
 * left for the next record to be glued to. A file that does not end in '\n' (a half line left
 * by an older version, or the NUL bytes a crash can leave) gets one first, so the new record
 * starts a line of its own. A write past the file-size limit (`ulimit -f`) raises SIGXFSZ,
 * whose default action would kill the host program between the write and the cut: it is blocked
 * for the append, and the one the append raised is taken back, so that the append fails with
 * EFBIG whatever the host does with that signal.
 */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int oomi_open_regular(int *out, const char *path, int flags, const char *what)
{
    struct stat st;
    int fd, e;

    *out = -1;
    /* O_NONBLOCK: opening a FIFO would otherwise wait for its other end */
    fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        e = errno;
        if ((flags & O_NOFOLLOW) && e == ELOOP && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            return oomi_fail(OOM_EIO,
                             "%s '%s' is a symbolic link: refused (oomless does not write through "
                             "links; give the real file's path)",
                             what, path);
        if (e == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return oomi_fail(OOM_EIO, "%s '%s' is %s, not a regular file", what, path,
                             oomi_file_kind(st.st_mode));
        return oomi_fail(e == ENOENT ? OOM_ENOTFOUND : OOM_EIO, "cannot open %s '%s': %s", what,
                         path, strerror(e));
    }
    if (fstat(fd, &st) != 0) {
        e = errno;
        close(fd);
        return oomi_fail(OOM_EIO, "cannot stat %s '%s': %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return oomi_fail(OOM_EIO, "%s '%s' is %s, not a regular file", what, path,
                         oomi_file_kind(st.st_mode));
    }
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        e = errno;
        close(fd);
        return oomi_fail(OOM_EIO, "cannot use %s '%s': %s", what, path, strerror(e));
    }
    *out = fd;
    return OOM_OK;
}

int oomi_read_regular(char **out, size_t *len, const char *path, const char *what, size_t max)
{
    int fd, err;

    *out = NULL;
    if (len)
        *len = 0;
    if ((err = oomi_open_regular(&fd, path, O_RDONLY, what)))
        return err;
    err = oomi_read_fd(out, len, fd, path, max);
    close(fd);
    return err;
}

/* write() until all of buf[0..n) is written; 0, or the errno that stopped it */
static int write_all(int fd, const char *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        /* a short write (disk full, file-size limit): the next write says why */
        done += (size_t)w;
    }
    return 0;
}

/* Whether the non-empty file of `size` bytes ends in '\n'; -1 (errno set) when unreadable. A
 * descriptor opened write-only (a file without read permission) cannot tell: taken as yes. */
static int ends_in_newline(int fd, off_t size)
{
    char last;
    ssize_t r = pread(fd, &last, 1, size - 1);
    if (r < 0)
        return errno == EBADF ? 1 : -1;
    return r == 1 && last == '\n';
}

static int append_regular(int fd, const struct stat *st, const char *line, size_t len)
{
    char *buf = NULL;
    int e = 0, nl = 1;

    if (st->st_size > 0 && (nl = ends_in_newline(fd, st->st_size)) < 0)
        return errno;
    if (!nl) {
        if (!(buf = oomi_malloc(len + 1)))
            return ENOMEM;
        buf[0] = '\n';
        memcpy(buf + 1, line, len);
    }
    e = buf ? write_all(fd, buf, len + 1) : write_all(fd, line, len);
    if (!e && fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        e = errno; /* EINVAL/EROFS: a file system without fsync; the data is written */
    if (e) {
        /* back to the old size; should even that fail, readers skip the partial line and the
         * next append starts a fresh one */
        int cut = ftruncate(fd, st->st_size);
        (void)cut;
    }
    oomi_free(buf);
    return e;
}

/* SIGXFSZ held back from this thread while an append runs (blocked: a write past the limit
 * then fails with EFBIG, its signal pending). The kernel raises it for the whole process: in a
 * program of several threads, another that does not block it may still take it (the CLI has
 * one thread and ignores it; Python ignores it from the start). */
struct xfsz_guard {
    sigset_t old;
    int blocked, was_pending; /* blocked here (not by the caller); pending before the append */
};

static void xfsz_hold(struct xfsz_guard *g)
{
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGXFSZ);
    g->blocked = pthread_sigmask(SIG_BLOCK, &set, &g->old) == 0 && !sigismember(&g->old, SIGXFSZ);
    g->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ);
}

/* Takes back the SIGXFSZ the append raised (when it was not pending before: another's is left
 * alone), then restores the caller's mask. */
static void xfsz_release(struct xfsz_guard *g, int e)
{
    sigset_t set, pending;
    if (!g->blocked)
        return;
    sigemptyset(&set);
    sigaddset(&set, SIGXFSZ);
    if (e == EFBIG && !g->was_pending && sigpending(&pending) == 0 &&
        sigismember(&pending, SIGXFSZ)) {
        struct timespec none = {0, 0};
        while (sigtimedwait(&set, NULL, &none) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

int oomi_append_line(int fd, const char *line, size_t len)
{
    struct xfsz_guard guard;
    struct stat st;
    int e, locked;

    if (!len || line[len - 1] != '\n')
        return EINVAL;
    xfsz_hold(&guard);
    /* advisory, between oomless processes; a file system without locks still gets the append */
    locked = flock(fd, LOCK_EX) == 0;
    if (fstat(fd, &st) != 0)
        e = errno;
    else if (S_ISREG(st.st_mode))
        e = append_regular(fd, &st, line, len);
    else
        e = write_all(fd, line, len); /* a FIFO or a terminal: a stream, nothing to cut back */
    if (locked)
        flock(fd, LOCK_UN);
    xfsz_release(&guard, e);
    return e;
}
