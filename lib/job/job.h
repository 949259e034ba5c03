/*
 * job/job.h - running and supervising jobs: child processes (proc.c), one launch (launch.c),
 * OOM message patterns (oommatch.c), probe (probe_fit.c, probe_search.c, probe.c), run
 * (supervise.c) and one supervisor per job (nested.c). Uses calib, gpu, core.
 */
#ifndef OOMLESS_JOB_JOB_H
#define OOMLESS_JOB_JOB_H

#include "calib/calib.h"
#include "core/core.h"
#include "gpu/gpu.h"

#include <sys/types.h>

/* A running job: its leader in its own process group (pgid == pid), stdout/stderr read through
 * pipes, under a guardian (guard.c) that is the leader's parent and kills the job's whole tree
 * when oomless is gone or the launch ends. */
typedef struct oomi_proc {
    pid_t pid;          /* the leader (the job's process group) */
    pid_t guardian;     /* oomless's child, the leader's parent; -1 once reaped */
    int out_fd, err_fd; /* read ends, -1 once closed */
    int report_fd;      /* the guardian's reports (read end, non-blocking), -1 once it ended */
    int life_fd;        /* held while the launch lasts: closing it ends the guardian */
} oomi_proc;

/* The guardian's reports, 8 bytes each (written whole): the leader's pid, a stop (value: the
 * signal), a continuation, its end (value: the wait status, as waitpid gives it), a failed
 * fork (value: errno). */
enum { OOMI_GUARD_PID = 1, OOMI_GUARD_STOP, OOMI_GUARD_CONT, OOMI_GUARD_EXIT, OOMI_GUARD_FAIL };
typedef struct oomi_guard_msg {
    int kind, value;
} oomi_guard_msg;
/* What the guardian starts the job with; every descriptor above 2 and close-on-exec. */
typedef struct oomi_guard_args {
    int out_w, err_w, rep_w; /* the job's stdout, stderr, and where its exec failure goes */
    int life_r, status_w;    /* the life pipe (read end), the reports (write end) */
    pid_t parent;            /* oomless */
    int tty;                 /* >= 0: the leader takes this terminal's foreground */
    const char *path;
    char *const *argv, *const *envp;
} oomi_guard_args;
/* The guardian's life, in the child of oomless's fork (guard.c): async-signal-safe calls only,
 * never returns. */
_Noreturn void oomi_guard_run(const oomi_guard_args *a);

/* Finds argv0 in $PATH (or takes it as is when it holds a '/'). OOM_ENOTFOUND / OOM_EJOB with
 * *err_no set to ENOENT / EACCES when no executable is found. */
int oomi_proc_resolve(char **path, int *err_no, const char *argv0);
/* Starts the guardian, which forks + execs the job in a new process group, with argv/envp built
 * by the caller. Only async-signal-safe calls run between fork and exec (and in the guardian).
 * When exec fails the leader _exits(127) and *exec_errno receives its errno (0 on success).
 * Makes the caller a child subreaper (Linux): what the guardian cannot kill (it was SIGKILLed
 * itself) comes to oomli_proc_kill_all(). tty >= 0: the new group becomes that terminal's
 * foreground group (set in the leader and in the caller, whichever runs first, like a shell). */
int oomi_proc_spawn(oomi_proc *p, int *exec_errno, const char *path, char *const argv[],
                    char *const envp[], int tty);
/* The guardian's next report without waiting: 1 with *kind and *value, 0 when none is there,
 * -1 when the guardian is gone (it was killed: the leader died with it, its status unknown). */
int oomi_proc_report(oomi_proc *p, int *kind, int *value);
/* Ends the launch's guardian: it SIGKILLs what is left of the job (its group, every descendant)
 * and exits; waits for it. 1 when it left nothing behind, 0 when some of the job may be left
 * (oomi_proc_kill_all() then). */
int oomi_proc_release(oomi_proc *p);
/* What belongs to a job: its process group; the guardian's children (the leader, and orphans
 * reparented to it); the pids in `known` (seen in its tree earlier) and the processes started
 * since `since` (clock ticks since boot, as /proc/PID/stat field 22; 0: unknown) when they are
 * now our children (orphans that had left the group, reparented to us, the subreaper, once the
 * guardian was killed); and every descendant of those. A pid that died and was reused by an
 * unrelated process is never counted: it is not our child, or it started before the job. */
typedef struct oomi_tree {
    pid_t pgid;
    unsigned long long since;
    const pid_t *known;
    size_t nknown;
    pid_t guardian; /* > 0: every child of this process is the job's (not the guardian) */
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
/* 1 when the process is stopped now (/proc/PID/stat state T or t). */
int oomi_proc_stopped(pid_t pid);
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
/* bytes waiting in the job's pipe from which they are passed on by tee(2), not copied (output.c) */
#define OOMI_TEE_MIN (64 * 1024)
typedef struct oomi_outq {
    int to, to_file, own, tee; /* tee: `to` is a pipe that tee(2) may fill from the job's */
    char buf[OOMI_OUTQ_MAX];
    size_t head, len; /* queued: len bytes from buf[head], round the end (a ring) */
} oomi_outq;
void oomi_outq_init(oomi_outq *q, int to);
void oomi_outq_dispose(oomi_outq *q);
size_t oomi_outq_room(const oomi_outq *q);
char *oomi_outq_space(oomi_outq *q, size_t *space);
void oomi_outq_commit(oomi_outq *q, size_t n);
/* Passes what pipe `from` holds on to the destination without copying it (while nothing is
 * queued, and the destination is a pipe with room), then reads the same bytes, for the scans,
 * into *bytes (the queue's buffer: valid until the next call on q). Returns their count; 0 when
 * it could not: read into the queue then, as usual. */
size_t oomi_outq_tee(oomi_outq *q, int from, const char **bytes);
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
    /* once the job has ended: how long its queued output may wait for a destination that
     * takes nothing (a stalled pager) before the rest is dropped and said; 0: as long as it
     * takes (a stop signal or the timeout still cut it to 1 s) */
    double output_wait_s;
    oom_gpu_session *gpu; /* NULL: no sampling */
    const oom_patterns *patterns;
    const volatile sig_atomic_t *stop;
    const oom_job_relay *relay; /* NULL: none */
    int foreground;             /* give the job the caller's terminal while it runs */
    const char *events_path;    /* run --events: exported as OOMLESS_RECOVERY_EVENTS, or NULL */
    oom_job_event_fn on_event;
    void *user;
    /* looked at about every 0.1 s while the job runs (NULL: never); nonzero ends the launch
     * (SIGTERM to its group, SIGKILL after the grace): the other nodes' supervisors decided to
     * relaunch the job, or one of them left it (sync.c) */
    int (*peer_check)(void *peer_user);
    void *peer_user;
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
    int peer_stop;         /* ended because peer_check said so */
    int rdzv_error;        /* torchrun's rendezvous failed (OOMI_RDZV_*, from its output), 0 */
} oomi_launch;

/* OOM_EINVAL naming `who` ("probe", "run") and the value when kill_grace_s is not a number of
 * seconds from 0 to OOM_MAX_KILL_GRACE; OOM_OK otherwise. */
int oomi_check_kill_grace(double kill_grace_s, const char *who);

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

/* ---- one supervisor per job (nested.c) -------------------------------------------------- */

/* "OOMLESS_SUPERVISOR=pid=<this process>,depth=<its depth + 1>" (allocated), for the
 * environment of a supervised launch. */
char *oomi_supervisor_env(void);
/* 1 when $OOMLESS_SUPERVISOR names an oomless that started this process (*pid, and *depth
 * unless depth is NULL); 0 when it is unset, malformed or names no ancestor (tell: say so in a
 * notice). */
int oomi_supervised(long *pid, int *depth, int tell);

/* ---- probe: the fits of measured peaks (probe_fit.c) and how the search reads them
 * (probe_search.c) ------------------------------------------------------------------------ */

typedef struct oomi_pt {
    double b, peak;
} oomi_pt;

oom_probe_fit oomi_line_through(oomi_pt p, oomi_pt q);
oom_probe_fit oomi_parabola_through(oomi_pt p, oomi_pt q, oomi_pt r);

/* A weighted least-squares line (terms 2) or parabola (terms 3) through measured peaks, each
 * weighted by 1/peak^2 (noise taken as a fraction of the peak): peak = c0 + c1 x + c2 x^2 with
 * x = batch / scale. inv is (X'WX)^-1: a prediction's standard error is the noise (a fraction)
 * times oomi_lsq_spread(). */
typedef struct oomi_lsq {
    int ok, terms;
    double scale, c[3], inv[3][3];
    double rms;   /* root mean square relative residual over (points - terms); 0: none left */
    double worst; /* largest |relative residual| */
} oomi_lsq;

/* 0 (f->ok 0) with fewer points than terms, a peak <= 0 or a singular system. */
int oomi_lsq_fit(oomi_lsq *f, const oomi_pt *p, size_t k, int terms);
double oomi_lsq_peak(const oomi_lsq *f, double b);
double oomi_lsq_spread(const oomi_lsq *f, double b);
oom_probe_fit oomi_lsq_to_fit(const oomi_lsq *f);
/* The largest b in [from, to] whose predicted peak plus k_sigma standard errors (noise x
 * spread) is at most aim (the bound taken as growing with b); from - 1 when none. */
int oomi_lsq_max_batch(const oomi_lsq *f, double noise, double k_sigma, double aim, int from,
                       int to);

#define OOMI_PROBE_POINTS 64 /* measured trials the search reads (the first 64) */

/* The measured successful trials (ran, peak known) sorted by batch, the latest trial winning
 * for a repeated batch; trial `skip` left out (SIZE_MAX: none). Returns how many. */
size_t oomi_probe_points(oomi_pt *pts, const oom_probe_trial *const *t, size_t n, size_t skip);

typedef enum {
    OOMI_PEAKS_REGULAR, /* on a line or parabola: followed, exactly once a point checks it */
    OOMI_PEAKS_NOISY,   /* scattered around one: a fit through all, an allowance kept */
    OOMI_PEAKS_STEPPED  /* a batch peaked well above a larger one: bisected */
} oomi_peaks_kind;

typedef struct oomi_peaks {
    oomi_peaks_kind kind;
    double allowance;  /* the fraction of the budget kept free (0: peaks shown exact) */
    double scatter;    /* twice the fit's rms relative residual (noisy); 0: not measured */
    oom_probe_fit fit; /* the fit the search reports */
    oomi_lsq lsq;      /* noisy: the least-squares fit */
} oomi_peaks;

/* How the search reads these peaks at tolerance tol (0: the default). */
void oomi_probe_read_peaks(oomi_peaks *v, const oomi_pt *pts, size_t k, double tol,
                           uint64_t usable);

/* ---- one job over several nodes (nodes.c) ------------------------------------------------
 * What the command line and the environment say about the job: whether this supervisor is one
 * of several (each node's `oomless run` around its own torchrun agent, or one task of a Slurm
 * step), whether the training script steps through oomless' in-loop integrations, and the id
 * the supervisors of one job share. */
/* 1 when `argv` (with $PET_NNODES, $SLURM_STEP_NUM_TASKS) starts one part of a job whose other
 * parts run under other supervisors, with what says so in `what` ("torchrun --nnodes 2"); 0
 * when one supervisor sees the whole job (a single node, or `srun` / `mpirun` in the command). */
int oomi_multinode(const char *const *argv, char *what, size_t n_what);
/* 1 when the job's Python script (the first argument ending in ".py", read up to 4 MiB) imports
 * oomless.torch, oomless.hf or oomless.lightning. */
int oomi_uses_integration(const char *const *argv);
/* The job's id for the sync folder (allocated): torchrun's --rdzv-id (or $PET_RDZV_ID) unless
 * "none", else "slurm-JOB[.STEP]" from $SLURM_JOB_ID / $SLURM_STEP_ID, else "rdzv-HOST:PORT"
 * from torchrun's --rdzv-endpoint; NULL (no error recorded) when there is none. */
char *oomi_job_id(const char *const *argv);
/* torchrun's rendezvous failures, from whole lines of the job's output (the last wins) */
enum { OOMI_RDZV_TIMEOUT = 1, OOMI_RDZV_CLOSED = 2 };
void oomi_rdzv_scan(oomi_launch *l, const char *line, size_t n);

/* ---- the supervisors of one job agreeing through a shared folder (sync.c) --------------------
 * Every node's `oomless run --sync-dir DIR` appends JSON Lines to DIR/oomless-sync-<id>.jsonl
 * (oomi_append_line: one whole line under flock): "launch" when it starts an attempt, "oom" with
 * the micro-batch it chose when its job ran out of memory, "end" when its job ended otherwise,
 * "exit" when it leaves. For each attempt the first "oom" record written after that attempt
 * began is the decision every node relaunches at. */
typedef struct oomi_sync oomi_sync;
/* What the records say about the current attempt. */
typedef struct oomi_sync_look {
    int decided;      /* a node's "oom" record for this attempt */
    char by[160];     /* its node */
    int batch, accum; /* what it chose; batch 0: it gave up (no smaller batch fits) */
    int failed_batch; /* the batch it ran out of memory at */
    int ended;        /* every node of this attempt has ended it */
    int pending;      /* how many have not */
    char lost[160];   /* a node that left the job with a failure while this attempt ran, "" */
    int lost_status;  /* its exit status */
} oomi_sync_look;
/* Opens DIR's record of the job (`id`, else oomi_job_id(argv)); OOM_EINVAL when no id is found,
 * OOM_EIO when DIR or the file cannot be used. wait_s: the longest wait for the other nodes. */
int oomi_sync_open(oomi_sync **out, const char *dir, const char *id, const char *const *argv,
                   double wait_s);
void oomi_sync_free(oomi_sync *s);
const char *oomi_sync_path(const oomi_sync *s);
const char *oomi_sync_job(const oomi_sync *s);
/* This supervisor's name in the records ("HOST:PID" by default). */
const char *oomi_sync_node(const oomi_sync *s);
void oomi_sync_set_node(oomi_sync *s, const char *node);
/* Appends the records: an attempt's start (the attempts before it are then behind); its end by
 * out of memory (batch 0: no smaller batch; this node gives up); its end otherwise; the exit. */
int oomi_sync_launch(oomi_sync *s, int attempt, int batch, int accum);
int oomi_sync_oom(oomi_sync *s, int failed_batch, int batch, int accum, long step);
int oomi_sync_end(oomi_sync *s, int exit_code);
int oomi_sync_exit(oomi_sync *s, int exit_code);
/* Reads the records again (only when the file changed) and says what they hold about the
 * current attempt. */
int oomi_sync_look_now(oomi_sync *s, oomi_sync_look *out);
/* Waits (in steps of 50 ms, at most the wait given to oomi_sync_open) until `done` holds for
 * the records: OOM_OK with *timed_out 0, or 1 when the wait ran out; OOM_EINTERRUPTED when
 * *stop fired. */
typedef int (*oomi_sync_until)(const oomi_sync_look *look);
int oomi_sync_wait(oomi_sync *s, oomi_sync_look *look, oomi_sync_until done, int *timed_out,
                   const volatile sig_atomic_t *stop);
/* The attempt that follows the current one's decision: its records come after that decision. */
void oomi_sync_next(oomi_sync *s);

#endif
