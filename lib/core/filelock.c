/* filelock.c - a file locked for editing, and the check that nobody changed it meanwhile.
 *
 * The lock is flock(2) on the file itself, held from before the file is read until after its
 * replacement is renamed over it: a second `oomless apply` on the same file waits, then reads
 * the first one's result. A lock on a file that was replaced while we waited for it protects
 * nothing (the path names a new file), so the path is checked again once the lock is held. The
 * kernel drops flock locks with the process: a run killed at any step leaves no stale lock (a
 * lock file beside the target, git's way, would need removing by hand after a crash).
 * Programs that do not lock (editors, sed -i) are caught by oomi_check_unchanged(). */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS    20
#define MAX_REOPEN 1000

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* flock failures that mean "this file system has no such locks" (EBADF: NFS emulates flock with
 * fcntl locks, whose exclusive kind needs a file open for writing): the identity check remains */
static bool no_locking(int e)
{
    return e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL || e == EBADF;
}

static int open_regular(int *fd, struct stat *st, const char *path)
{
    /* O_NONBLOCK: opening a FIFO put in the file's place must not hang */
    if ((*fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) < 0)
        return oomi_fail(OOM_EIO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(*fd, st) < 0) {
        int e = errno;
        close(*fd);
        *fd = -1;
        return oomi_fail(OOM_EIO, "cannot open '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(*fd);
        *fd = -1;
        return oomi_fail(OOM_EIO, "'%s' is not a regular file", path);
    }
    return OOM_OK;
}

int oomi_open_locked(int *out, struct stat *st, const char *path, long timeout_ms)
{
    struct stat now;
    long waited = 0;
    int fd = -1, err, reopen;

    *out = -1;
    for (reopen = 0; reopen < MAX_REOPEN; reopen++) {
        if ((err = open_regular(&fd, st, path)))
            return err;
        if (timeout_ms < 0) {
            *out = fd;
            return OOM_OK;
        }
        while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            if (errno == EINTR)
                continue;
            if (no_locking(errno))
                break;
            if (errno != EWOULDBLOCK) {
                err = oomi_fail(OOM_EIO, "cannot lock '%s': %s", path, strerror(errno));
                close(fd);
                return err;
            }
            if (waited >= timeout_ms) {
                close(fd);
                return oomi_fail(OOM_EREFUSED,
                                 "'%s' is locked by another program (another oomless apply?); "
                                 "waited %.1f s; the file is unchanged",
                                 path, (double)waited / 1000.0);
            }
            sleep_ms(POLL_MS);
            waited += POLL_MS;
        }
        /* the lock is on the file we opened: is it still the one the path names? */
        if (stat(path, &now) == 0 && fstat(fd, st) == 0 && same_file(&now, st)) {
            *out = fd;
            return OOM_OK;
        }
        close(fd);
        fd = -1;
    }
    return oomi_fail(OOM_EREFUSED,
                     "'%s' keeps being replaced by another program; the file is "
                     "unchanged",
                     path);
}

static bool same_time(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

int oomi_check_unchanged(int fd, const struct stat *then, const char *path)
{
    struct stat cur, now;
    bool gone = false;

    if (fstat(fd, &cur) < 0)
        return oomi_fail(OOM_EIO, "cannot check '%s': %s", path, strerror(errno));
    if (stat(path, &now) < 0) {
        if (errno != ENOENT)
            return oomi_fail(OOM_EIO, "cannot check '%s': %s", path, strerror(errno));
        gone = true;
    }
    if (gone || !same_file(&now, &cur))
        return oomi_fail(OOM_EREFUSED,
                         "'%s' was replaced or removed by another program while apply edited "
                         "it; nothing was written (run apply again)",
                         path);
    if (cur.st_size != then->st_size || !same_time(&cur.st_mtim, &then->st_mtim) ||
        !same_time(&cur.st_ctim, &then->st_ctim))
        return oomi_fail(OOM_EREFUSED,
                         "'%s' was changed by another program while apply edited it; nothing "
                         "was written (run apply again)",
                         path);
    return OOM_OK;
}
