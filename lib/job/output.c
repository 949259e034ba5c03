/*
 * output.c - a job's output on its way to oomless's own descriptors, and the events file's
 * lines, written without ever blocking the supervision loop: a reader that stalls (a full pipe,
 * a pager nobody scrolls, a FIFO) must not keep a signal from being forwarded or a timeout from
 * firing. Bytes wait in a bounded queue; they are written only as far as the destination takes
 * them now. A pipe, FIFO or terminal is opened again, non-blocking (a file description of our
 * own: the caller's stays as it is), and takes the whole queue in one write, or what fits; where
 * that cannot be done (no /proc, a socket), chunks of at most PIPE_BUF go, each after poll() says
 * the destination is writable (which a pipe then takes whole). While the queue is full the job's
 * pipe is not read, so the job itself waits, as it would writing to the stalled reader directly.
 *
 * From the job's pipe to a pipe, while nothing is queued and at least OOMI_TEE_MIN bytes wait,
 * the bytes are not copied at all: tee(2) gives the destination the pipe's own pages, and only
 * then are they read, for the scans. The copy into the destination (its pages allocated and
 * charged, one write per 32 KiB) was half of what relaying a fast job's output cost. A pipe
 * counts buffers, not bytes (16 pages by default), and each tee() makes buffers of its own: a
 * chatty job's lines passed on one by one filled a pipe with a few KiB, where copied they merge
 * into its last page. Below the threshold, or where tee() cannot (the destination full, or not
 * a pipe), the bytes are read into the queue as before, which keeps their order.
 */
#define _GNU_SOURCE /* tee(), SPLICE_F_NONBLOCK, F_[GS]ETPIPE_SZ */
#include "job/job.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* fd (a pipe, FIFO or character device) opened again with O_NONBLOCK, or -1: through
 * /proc/self/fd, which opens the object itself, checked to be the same */
static int reopen_nonblocking(int fd, const struct stat *st)
{
    char path[64];
    struct stat again;
    int nb;
    oomi_snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    nb = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (nb < 0)
        return -1;
    if (fstat(nb, &again) || again.st_dev != st->st_dev || again.st_ino != st->st_ino ||
        again.st_rdev != st->st_rdev) {
        close(nb);
        return -1;
    }
    return nb;
}

void oomi_outq_init(oomi_outq *q, int to)
{
    struct stat st;
    q->to = to;
    q->own = -1;
    q->head = q->len = 0;
    q->to_file = q->tee = 0;
    if (to < 0 || fstat(to, &st))
        return;
    /* a regular file never blocks a write: no poll, no chunking */
    q->to_file = S_ISREG(st.st_mode);
    if ((S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) &&
        (q->own = reopen_nonblocking(to, &st)) >= 0)
        q->to = q->own;
    q->tee = S_ISFIFO(st.st_mode) && q->own >= 0;
    /* A destination pipe as large as the queue: Linux's default 64 KiB is full whenever its
     * reader falls a little behind (then the bytes are copied into the queue after all). Only
     * ever grown; a refusal (over the user's pipe quota) leaves it as it was. */
    if (q->tee && fcntl(q->to, F_GETPIPE_SZ) < (int)OOMI_OUTQ_MAX)
        (void)fcntl(q->to, F_SETPIPE_SZ, OOMI_OUTQ_MAX);
}

size_t oomi_outq_tee(oomi_outq *q, int from, const char **bytes)
{
    ssize_t n, got;
    size_t have = 0;
    int waiting;
    if (!q->tee || q->to < 0 || q->len > 0 || ioctl(from, FIONREAD, &waiting) < 0 ||
        waiting < OOMI_TEE_MIN)
        return 0;
    n = tee(from, q->to, sizeof(q->buf), SPLICE_F_NONBLOCK);
    if (n <= 0) {
        /* EAGAIN: the pipe is empty or the destination full; 0: the pipe's end; either way a
         * read says which. Anything else (the reader gone, a kernel without tee for this
         * pair): the queue's way from now on, whose write finds out what to do. */
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            q->tee = 0;
        return 0;
    }
    /* the same bytes, still in the job's pipe (oomless its only reader), read for the scans
     * into the queue's buffer, empty and not committed to */
    while (have < (size_t)n) {
        got = read(from, q->buf + have, (size_t)n - have);
        if (got > 0)
            have += (size_t)got;
        else if (got < 0 && errno == EINTR)
            continue;
        else
            break;
    }
    *bytes = q->buf;
    return have;
}

void oomi_outq_dispose(oomi_outq *q)
{
    if (q->own >= 0)
        close(q->own);
    q->own = -1;
}

size_t oomi_outq_room(const oomi_outq *q)
{
    return q->to < 0 ? sizeof(q->buf) : sizeof(q->buf) - q->len;
}

/* The queue is a ring: the bytes from head, wrapping round the end; new bytes go after them, as
 * far as the end or the head, whichever comes first (nothing is ever moved). */
char *oomi_outq_space(oomi_outq *q, size_t *space)
{
    size_t tail;
    if (q->to < 0) { /* dropped: the bytes are read (for the scans) and forgotten */
        *space = sizeof(q->buf);
        return q->buf;
    }
    if (q->len == 0)
        q->head = 0;
    tail = (q->head + q->len) % sizeof(q->buf);
    *space = q->len == sizeof(q->buf) ? 0
             : tail >= q->head        ? sizeof(q->buf) - tail
                                      : q->head - tail;
    return q->buf + tail;
}

void oomi_outq_commit(oomi_outq *q, size_t n)
{
    if (q->to >= 0)
        q->len += n;
}

static int writable_now(int fd)
{
    struct pollfd pf = {fd, POLLOUT, 0};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL));
}

size_t oomi_outq_flush(oomi_outq *q)
{
    size_t total = 0;
    while (q->len > 0) {
        bool whole = q->to_file || q->own >= 0;
        size_t upto = sizeof(q->buf) - q->head < q->len ? sizeof(q->buf) - q->head : q->len;
        size_t chunk = whole || upto < PIPE_BUF ? upto : PIPE_BUF;
        ssize_t n;
        if (!whole && !writable_now(q->to))
            break;
        n = write(q->to, q->buf + q->head, chunk);
        if (n > 0) {
            q->head = (q->head + (size_t)n) % sizeof(q->buf);
            q->len -= (size_t)n;
            total += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        q->to = -1; /* the reader is gone, the disk full, the descriptor bad: drop from now on */
        q->len = 0;
    }
    if (q->len == 0)
        q->head = 0;
    return total;
}

int oomi_write_bounded(int fd, const char *b, size_t n, double max_wait_s)
{
    double until = oomi_now_mono() + max_wait_s;
    while (n > 0) {
        struct pollfd pf = {fd, POLLOUT, 0};
        double left = until - oomi_now_mono();
        ssize_t w = write(fd, b, n);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
            return errno;
        if (left <= 0)
            return EAGAIN;
        poll(&pf, 1, left > 0.1 ? 100 : (int)(left * 1000.0) + 1);
    }
    return 0;
}
