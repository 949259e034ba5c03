/*
 * job/job.h - running and supervising jobs: child processes (proc.c), one launch (launch.c),
 * OOM message patterns (oommatch.c), probe (probe.c) and run (supervise.c). Uses calib, gpu, core.
 */
#ifndef OOMLESS_JOB_JOB_H
#define OOMLESS_JOB_JOB_H

#include "calib/calib.h"
#include "core/core.h"
#include "gpu/gpu.h"

#include <sys/types.h>

/* A running child: its own process group (pgid == pid), stdout/stderr read through pipes. */
typedef struct oomi_proc {
    pid_t pid;
    int out_fd, err_fd; /* read ends, -1 once closed */
} oomi_proc;

/* Finds argv0 in $PATH (or takes it as is when it holds a '/'). OOM_ENOTFOUND / OOM_EJOB with
 * *err_no set to ENOENT / EACCES when no executable is found. */
int oomi_proc_resolve(char **path, int *err_no, const char *argv0);
/* fork + execve in a new process group, with argv/envp built by the caller. Only
 * async-signal-safe calls run between fork and exec. When exec fails the child _exits(127) and
 * *exec_errno receives its errno (0 on success). Makes the caller a child subreaper (Linux).
 * tty >= 0: the new group becomes that terminal's foreground group (set in the child and in the
 * parent, whichever runs first, like a shell). */
int oomi_proc_spawn(oomi_proc *p, int *exec_errno, const char *path, char *const argv[],
                    char *const envp[], int tty);
/* What belongs to a job: its process group; the pids in `known` (seen in its tree earlier) and
 * the processes started since `since` (clock ticks since boot, as /proc/PID/stat field 22; 0:
 * unknown) when they are now our children (orphans that had left the group, reparented to us,
 * the subreaper); and every descendant of those. A pid that died and was reused by an unrelated
 * process is never counted: it is not our child, or it started before the job. */
typedef struct oomi_tree {
    pid_t pgid;
    unsigned long long since;
    const pid_t *known;
    size_t nknown;
} oomi_tree;
/* Fills pids with the job's live processes; returns the count (at most max). Reads the whole
 * process table (every /proc/PID/stat): for killing what is left of a job, not for sampling. */
size_t oomi_proc_tree(pid_t *pids, size_t max, const oomi_tree *t);
/* 1 when `pid` is one of the job's processes (as oomi_proc_tree() counts them), found by
 * following its parent links up: a few /proc reads, whatever the number of processes. */
int oomi_proc_in_tree(pid_t pid, const oomi_tree *t);
/* SIGKILLs the job's processes, reaps those that are our children, and repeats until none is
 * left (bounded: about 10 s). */
void oomi_proc_kill_all(const oomi_tree *t);
/* The controlling terminal (tty.c): the caller's, opened close-on-exec, -1 when it has none. */
int oomi_tty_open(void);
/* 1 when `pgrp` is the terminal's foreground process group. */
int oomi_tty_is_foreground(int tty, pid_t pgrp);
/* Makes `pgrp` the terminal's foreground group, with SIGTTOU blocked meanwhile (so that a
 * caller in the background may too). 0, or -1 with errno. */
int oomi_tty_set_foreground(int tty, pid_t pgrp);
/* The start time of a process (clock ticks since boot), 0 when unknown. */
unsigned long long oomi_proc_start_time(pid_t pid);
/* Exit code as a shell reports it: status, or 128+N for signal N. */
int oomi_proc_exit_code(int wait_status);
double oomi_now_mono(void);
double oomi_now_unix(void);

/* Reading a job's output as it comes for the error that ended it (oommatch.c): each stream
 * (0 stdout, 1 stderr) line by line, a long line in windows of OOMI_SCAN_WINDOW bytes that
 * overlap by OOMI_SCAN_OVERLAP (a pattern longer than that may be missed across a window edge).
 * The verdict is 1 when the last error line seen (all streams, in arrival order) is an OOM
 * pattern; a Python traceback's exception line counts, not its frames. On stdout, which also
 * carries data, a pattern counts only on a line shaped as an error report (an exception or fatal
 * line and the message after it, a log record at an error level). */
#define OOMI_SCAN_WINDOW  4096
#define OOMI_SCAN_OVERLAP 512
struct oomi_scanline {
    char text[OOMI_SCAN_WINDOW];
    size_t len;
    int continued; /* this window is not the start of its line */
    int in_frames; /* inside a traceback's frames (after "Traceback ...", before its message) */
    int before;    /* the last error before this traceback began */
    int message;   /* after an exception or fatal line, until a blank line: its message */
    int shaped;    /* this line reports an error as a framework prints one (oommatch.c) */
    char tag[32];  /* this line's "[rank3]:" tag without brackets ("rank3"), or "" */
};
typedef struct oomi_oomscan {
    const oom_patterns *patterns;
    struct oomi_scanline s[2];
    int last;            /* the last error seen: none, OOM, another */
    char oom_rank[32];   /* the rank of the last OOM line ("1" from "[rank1]:"), or "" */
    char oom_line[1024]; /* the last OOM line, without its tag (PyTorch's is ~600 bytes) */
} oomi_oomscan;
void oomi_oomscan_init(oomi_oomscan *sc, const oom_patterns *patterns);
void oomi_oomscan_feed(oomi_oomscan *sc, int stream, const char *b, size_t n);
/* A whole line s[0..n) (its newline left out), read as oomi_oomscan_feed() would: 1, or 0 when
 * the stream holds part of a line or the line is longer than a window (then feed it). */
int oomi_oomscan_line(oomi_oomscan *sc, int stream, const char *s, size_t n);
/* Reads the unterminated last lines, then: 1 when the job's last error was an OOM. */
int oomi_oomscan_verdict(oomi_oomscan *sc);

/* A job's stream read line by line (joblines.c): each piece read goes to the OOM scan and, by
 * lines (a longer one in parts of OOMI_LINE_MAX bytes), sets l->step from "step N" and
 * l->recovery_batch, l->oom_rank from an "OOMLESS_RECOVERY {json}" line (the last wins); err: the
 * job's stderr. _end: the stream has ended (its unterminated last line). */
#define OOMI_LINE_MAX 4096 /* an OOMLESS_RECOVERY line (a JSON document) fits whole */
typedef struct oomi_lines {
    char line[OOMI_LINE_MAX];
    size_t len;
} oomi_lines;
struct oomi_launch;
void oomi_lines_take(oomi_lines *ls, oomi_oomscan *scan, int err, struct oomi_launch *l,
                     const char *b, size_t n);
void oomi_lines_end(oomi_lines *ls, struct oomi_launch *l);

/* Output that never blocks the supervision loop (output.c): the bytes a job wrote, queued until
 * their destination takes them. Read into oomi_outq_space(), then oomi_outq_commit(); a queue
 * without room means the job's pipe is left unread. `to` -1: dropped (space is still given);
 * else what is written to and polled: the destination itself, or `own`, the same pipe, FIFO or
 * terminal opened again non-blocking (closed by oomi_outq_dispose). */
#define OOMI_OUTQ_MAX (256 * 1024)
typedef struct oomi_outq {
    int to, to_file, own;
    char buf[OOMI_OUTQ_MAX];
    size_t head, len; /* queued: len bytes from buf[head], round the end (a ring) */
} oomi_outq;
void oomi_outq_init(oomi_outq *q, int to);
void oomi_outq_dispose(oomi_outq *q);
size_t oomi_outq_room(const oomi_outq *q);
char *oomi_outq_space(oomi_outq *q, size_t *space);
void oomi_outq_commit(oomi_outq *q, size_t n);
/* Writes what the destination takes now, without blocking; returns the bytes written. A
 * destination that fails (its reader gone, a full disk) is dropped from then on. */
size_t oomi_outq_flush(oomi_outq *q);
/* Writes all of b to a non-blocking fd, waiting at most max_wait_s for it to take more: 0, or
 * the errno (EAGAIN when the wait ran out). */
int oomi_write_bounded(int fd, const char *b, size_t n, double max_wait_s);

/* One launch of a job, supervised until it ends. */
typedef struct oomi_launch {
    /* in */
    const oom_job *job;
    int batch, accum, seq, attempt;
    double timeout_s, sample_interval_s, kill_grace_s;
    oom_gpu_session *gpu; /* NULL: no sampling */
    const oom_patterns *patterns;
    const volatile sig_atomic_t *stop;
    const oom_job_relay *relay; /* NULL: none */
    int foreground;             /* give the job the caller's terminal while it runs */
    const char *events_path;    /* run --events: exported as OOMLESS_RECOVERY_EVENTS, or NULL */
    oom_job_event_fn on_event;
    void *user;
    /* out */
    long pid;
    int exit_code;
    int oom, timed_out, exec_failed, stop_signal;
    int tty_wait; /* the stop signal (SIGTTIN/SIGTTOU) of a job ended because it waited for
                     terminal input it could not get; 0 */
    uint64_t peak_bytes;
    uint64_t others_peak_bytes; /* the most other processes held on the job's GPU (0: none seen) */
    size_t others_gpu;          /* that GPU's position in the sample */
    uint64_t capacity_bytes;    /* total memory of the GPU where the peak was seen; 0: not known */
    double duration_s;
    long step;
    int recovery_batch;    /* the micro-batch an OOMLESS_RECOVERY line agreed on, 0 when none */
    char oom_rank[64];     /* OOM: the failed rank(s), "" when not known */
    char oom_reason[1024]; /* OOM: the line that said so */
    char message[256];     /* exec failure text */
} oomi_launch;

/* Runs one launch. OOM_OK when it ran (whatever its status), OOM_EJOB when it could not be
 * started (exit_code 127/126, message says why), OOM_ENOMEM. */
int oomi_launch_run(oomi_launch *l);
/* Substitutes the placeholders of one argv element (allocated). */
char *oomi_expand_arg(const char *tmpl, int batch, int accum, int seq, int attempt);
/* The event for a launch (kind, time, pid, attempt, batch, accum, peak, exit, step filled;
 * signal: l->stop_signal). */
void oomi_launch_event(const oomi_launch *l, oom_job_event_kind kind);
/* The message for a launch ended by oomi_launch.tty_wait (an OOM_EJOB failure). */
int oomi_fail_tty_wait(const oomi_launch *l);

#endif
