/*
 * watch_log.h - the CSV log of `oomless watch --log FILE` (watch_log.c). Each sample's rows go
 * out in one write(2) to a file opened with O_APPEND, and the log outlives what happens to the
 * file while watch runs:
 *   - a write that fails (full disk, file size limit, I/O error) drops that sample's rows and
 *     truncates back whatever part of them got written, so no half row is ever left for the
 *     next one to glue onto; it is said once, and every later sample tries again;
 *   - a file that was deleted or renamed away (logrotate's create mode) is reopened at its path
 *     (compared by device and inode, and by link count, before each sample);
 *   - a file that is empty (new, recreated, or truncated in place by logrotate's copytruncate)
 *     gets the header before its first row;
 *   - a file that ends inside a row (left by a crash) gets the next rows on a fresh line.
 * Nothing here prints: messages collect in `notes`, which the caller prints when it can (the
 * interactive view owns the terminal until it ends).
 */
#ifndef OOMLESS_WATCH_LOG_H
#define OOMLESS_WATCH_LOG_H

#include <sys/types.h>

struct watch_log {
    const char *path;
    int fd;      /* -1 while the file cannot be opened */
    int regular; /* a regular file: rotation, truncation and the empty-file header apply */
    dev_t dev;   /* of the open file */
    ino_t ino;
    int header_due;     /* a non-regular file (a pipe, /dev/...): the header goes first, once */
    int newline_due;    /* the file may end inside a row: the next write starts with '\n' */
    int failing;        /* the last sample could not be written (said once) */
    long long lost;     /* samples not written since the failure began */
    long long lost_all; /* samples not written in the whole run */
    char notes[1024];   /* lines for stderr, each "oomless watch: ...\n"; cleared by the caller */
};

/* Opens (creates) the log for appending, without waiting (a FIFO is not waited on for a
 * reader). Returns 0, or with the reason in `notes` -1 (a log that cannot even be opened at the
 * start is a mistake to report, not to wait out) or -2 (a log that cannot be used as given: a
 * FIFO nobody reads, or a file that starts with this log's header of another version, whose
 * columns the rows would not match; left untouched). A header that cannot be written yet is
 * not an error: it waits for the first sample. */
int watch_log_open(struct watch_log *l, const char *path);
/* Appends one sample's rows (oom_watch_to_csv()): reopens a deleted or renamed file first,
 * adds the header to an empty one. A failure is recorded (failing, lost, notes), never
 * returned: watching goes on without the log. */
void watch_log_append(struct watch_log *l, const char *rows);
/* Closes the file; returns 0, or -1 when close(2) reported a lost write (notes says so). */
int watch_log_close(struct watch_log *l);

#endif
