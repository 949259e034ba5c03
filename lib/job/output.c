/*
 * output.c - a job's output on its way to oomless's own descriptors, and the events file's
 * lines, written without ever blocking the supervision loop: a reader that stalls (a full pipe,
 * a pager nobody scrolls, a FIFO) must not keep a signal from being forwarded or a timeout from
 * firing. Bytes wait in a bounded queue; they are written only as far as poll() says the
 * destination takes them, in chunks of at most PIPE_BUF (which a pipe reported writable always
 * takes whole). While the queue is full the job's pipe is not read, so the job itself waits,
 * as it would writing to the stalled reader directly.
 */
#include "job/job.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void oomi_outq_init(oomi_outq *q, int to)
{
    struct stat st;
    q->to = to;
    q->head = q->len = 0;
    /* a regular file never blocks a write: no poll, no chunking */
    q->to_file = to >= 0 && fstat(to, &st) == 0 && S_ISREG(st.st_mode);
}

size_t oomi_outq_room(const oomi_outq *q)
{
    return q->to < 0 ? sizeof(q->buf) : sizeof(q->buf) - q->len;
}

char *oomi_outq_space(oomi_outq *q, size_t *space)
{
    if (q->to < 0) { /* dropped: the bytes are read (for the scans) and forgotten */
        *space = sizeof(q->buf);
        return q->buf;
    }
    if (q->head + q->len == sizeof(q->buf) && q->head > 0) {
        memmove(q->buf, q->buf + q->head, q->len);
        q->head = 0;
    }
    *space = sizeof(q->buf) - q->head - q->len;
    return q->buf + q->head + q->len;
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
        size_t chunk = q->to_file || q->len < PIPE_BUF ? q->len : PIPE_BUF;
        ssize_t n;
        if (!q->to_file && !writable_now(q->to))
            break;
        n = write(q->to, q->buf + q->head, chunk);
        if (n > 0) {
            q->head += (size_t)n;
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
