/*
 * watch_log.c - the CSV log of `oomless watch --log`: one write per sample, nothing half
 * written, and a file that may be filled up, deleted, rotated or truncated under it
 * (watch_log.h says how each is met).
 */
#include "watch_log.h"

#include "oomless.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void note(struct watch_log *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static size_t write_some(int fd, const char *buf, size_t len);

/* Adds "oomless watch: <message>\n" to the notes (dropped when they are full). */
static void note(struct watch_log *l, const char *fmt, ...)
{
    size_t n = strlen(l->notes), room = sizeof(l->notes) - n;
    char line[512];
    va_list ap;
    int len;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    len = snprintf(l->notes + n, room, "oomless watch: %s\n", line);
    if (len < 0 || (size_t)len >= room)
        l->notes[n] = '\0'; /* all of a line or none of it */
}

/* Opens the path and learns what it is. 0, or -1 with errno set. A regular file is opened for
 * reading too, to see how it ends (write-only when that is all it allows); anything else (a
 * pipe, a device) write-only, as a plain append would. Never waits: a FIFO without a reader
 * fails with ENXIO (O_NONBLOCK) instead of blocking in open() until one comes; the descriptor
 * is made blocking again once open, as the log's writes expect. */
static int open_file(struct watch_log *l)
{
    const int flags = O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK;
    struct stat st;
    char last = '\n';
    int fd = -1;

    if (stat(l->path, &st) != 0 || S_ISREG(st.st_mode))
        fd = open(l->path, O_RDWR | flags, 0666);
    if (fd < 0)
        fd = open(l->path, O_WRONLY | flags, 0666);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    l->fd = fd;
    l->regular = S_ISREG(st.st_mode);
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    /* a regular file ending inside a row (a writer that died mid-row): start on a fresh line */
    l->newline_due =
        l->regular && st.st_size > 0 && pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n';
    return 0;
}

/* 1 when the open file is no longer the one at the path: deleted (no links left) or replaced
 * (another device/inode there, or nothing). */
static int replaced(const struct watch_log *l)
{
    struct stat fs, ps;
    if (fstat(l->fd, &fs) == 0 && fs.st_nlink == 0)
        return 1;
    if (stat(l->path, &ps) != 0)
        return errno == ENOENT;
    return ps.st_dev != l->dev || ps.st_ino != l->ino;
}

static void failed(struct watch_log *l, int e)
{
    l->lost++;
    l->lost_all++;
    if (!l->failing)
        note(l, "cannot write '%s': %s; still watching, and trying again at each sample", l->path,
             strerror(e));
    l->failing = 1;
}

/* Writes all of buf; returns the bytes written (errno set when short). SIGPIPE is held back
 * meanwhile and a pending one taken: a FIFO or pipe whose reader went away is a write that
 * fails (EPIPE, said and retried as any failed write), not the end of watch. */
static size_t write_all(int fd, const char *buf, size_t len)
{
    const struct timespec now = {0, 0};
    sigset_t pipe, old;
    size_t done = 0;
    int e, held;

    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    held = sigprocmask(SIG_BLOCK, &pipe, &old) == 0;
    done = write_some(fd, buf, len);
    e = errno;
    if (held) {
        sigset_t pending;
        if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) &&
            !sigismember(&old, SIGPIPE))
            while (sigtimedwait(&pipe, NULL, &now) < 0 && errno == EINTR)
                ;
        sigprocmask(SIG_SETMASK, &old, NULL);
    }
    errno = e;
    return done;
}

static size_t write_some(int fd, const char *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = ENOSPC;
            break;
        }
        done += (size_t)n;
    }
    return done;
}

/* 1 when the open regular file starts with a header of this log other than ours (one written
 * before a column was added): rows appended under it would not line up with its columns.
 * `first` receives the file's first line, without its line break. */
static int other_header(const struct watch_log *l, char *first, size_t size)
{
    const char *ours = oom_watch_csv_header();
    size_t len;
    ssize_t n;

    if (!l->regular || (n = pread(l->fd, first, size - 1, 0)) <= 0)
        return 0;
    first[n] = '\0';
    first[len = strcspn(first, "\r\n")] = '\0';
    return !strncmp(first, "timestamp,kind,", 15) &&
           !(strncmp(first, ours, len) == 0 && ours[len] == '\n');
}

int watch_log_open(struct watch_log *l, const char *path)
{
    char first[512];

    memset(l, 0, sizeof(*l));
    l->path = path;
    l->fd = -1;
    if (open_file(l) != 0) {
        struct stat st;
        if (errno == ENXIO && stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) {
            note(l,
                 "'%s' is a FIFO that nobody reads: start its reader first (watch does not "
                 "wait for one)",
                 path);
            return -2;
        }
        note(l, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    if (other_header(l, first, sizeof(first))) {
        note(l,
             "'%s' holds a log with other columns (another version's header, \"%.60s%s\"): "
             "give --log a new file, or move that one away",
             path, first, strlen(first) > 60 ? "..." : "");
        close(l->fd);
        l->fd = -1;
        return -2;
    }
    l->header_due = !l->regular; /* a regular file gets it whenever it is empty */
    return 0;
}

void watch_log_append(struct watch_log *l, const char *rows)
{
    const char *header = oom_watch_csv_header();
    size_t hlen = strlen(header), rlen = strlen(rows), len = 0, done;
    off_t end = 0;
    char *buf;
    int e;

    if (l->fd >= 0 && l->regular && replaced(l)) {
        close(l->fd);
        l->fd = -1;
    }
    if (l->fd < 0 && open_file(l) != 0) {
        failed(l, errno);
        return;
    }
    if (l->regular && (end = lseek(l->fd, 0, SEEK_END)) < 0) {
        failed(l, errno);
        return;
    }
    if (!(buf = malloc(1 + hlen + rlen))) {
        failed(l, ENOMEM);
        return;
    }
    if (l->newline_due && (!l->regular || end != 0))
        buf[len++] = '\n';
    if (l->header_due || (l->regular && end == 0)) {
        memcpy(buf + len, header, hlen);
        len += hlen;
    }
    memcpy(buf + len, rows, rlen);
    len += rlen;
    done = write_all(l->fd, buf, len);
    e = errno;
    free(buf);
    if (done < len) {
        /* take back the part that got out, so that no half row is left; where that is not
         * possible (a pipe, a failing truncate), the next rows start on a fresh line */
        if (done > 0 && (!l->regular || ftruncate(l->fd, end) != 0))
            l->newline_due = 1;
        failed(l, e);
        return;
    }
    l->header_due = l->newline_due = 0;
    if (l->failing)
        note(l, "writing '%s' again (%lld sample%s could not be written)", l->path, l->lost,
             l->lost == 1 ? "" : "s");
    l->failing = 0;
    l->lost = 0;
}

int watch_log_close(struct watch_log *l)
{
    int rc = 0;
    if (l->fd >= 0 && close(l->fd) != 0) {
        note(l, "cannot write '%s': %s", l->path, strerror(errno));
        rc = -1;
    }
    l->fd = -1;
    return rc;
}
