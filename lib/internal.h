/*
 * internal.h - what the library's files share and nobody outside sees.
 * Internal names start with oomi_ (public ones with oom_); the version script exports only oom_*.
 */
#ifndef OOMLESS_INTERNAL_H
#define OOMLESS_INTERNAL_H

#include "oomless.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define OOMI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define OOMI_PRINTF(f, a)
/* ---- YAML into json-c (yamlload.c) --------------------------------------------------------
 * Plain scalars follow the YAML 1.2 core schema (null, bool, int, float, string); quoted ones are
 * strings. OOM_EPARSE "name:line:col: problem" on bad YAML. An empty document gives NULL. */
struct json_object;
int oomi_yaml_load(struct json_object **out, const char *text, size_t len, const char *name);
int oomi_yaml_load_file(struct json_object **out, const char *path);

#endif

#define OOMI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors (error.c) ---------------------------------------------------------------------
 * oomi_fail() records code + message for oom_last_message() and returns the code, so that
 *     return oomi_fail(OOM_EINVAL, "size '%s' is not a number", text);
 * is the whole error path. oomi_fail_keep() returns the code of a failure already recorded by a
 * callee, optionally prefixing context ("model 'x.json': ").
 */
int oomi_fail(int code, const char *fmt, ...) OOMI_PRINTF(2, 3);
int oomi_failv(int code, const char *fmt, va_list ap);
int oomi_fail_prefix(int code, const char *fmt, ...) OOMI_PRINTF(2, 3);
int oomi_nomem(void);
void oomi_clear_error(void);

/* ---- memory (alloc.c): every allocation of the library goes through these --------------- */
void *oomi_malloc(size_t n);
void *oomi_calloc(size_t count, size_t size);
void *oomi_realloc(void *p, size_t n);
/* realloc of an array with overflow check; NULL (with p untouched) on failure */
void *oomi_reallocarray(void *p, size_t count, size_t size);
char *oomi_strdup(const char *s);
char *oomi_strndup(const char *s, size_t n);
void oomi_free(void *p);
char *oomi_asprintf(const char *fmt, ...) OOMI_PRINTF(1, 2);

/* ---- growable string (strbuf.c) -----------------------------------------------------------
 * A failed append latches `failed`; check once with oomi_sb_ok() at the end. */
typedef struct oomi_sb {
    char *buf;
    size_t len, cap;
    bool failed;
} oomi_sb;

#define OOMI_SB_INIT                                                                               \
    {                                                                                              \
        NULL, 0, 0, false                                                                          \
    }
void oomi_sb_add(oomi_sb *sb, const char *s, size_t n);
void oomi_sb_puts(oomi_sb *sb, const char *s);
void oomi_sb_putc(oomi_sb *sb, char c);
void oomi_sb_printf(oomi_sb *sb, const char *fmt, ...) OOMI_PRINTF(2, 3);
/* OOM_OK, or OOM_ENOMEM (recorded) if any append failed */
int oomi_sb_ok(oomi_sb *sb);
/* hands the buffer over (never NULL on success: "" for an empty buffer) and resets sb */
char *oomi_sb_steal(oomi_sb *sb);
void oomi_sb_free(oomi_sb *sb);

/* ---- files and data (file.c) -------------------------------------------------------------- */
/* Reads a whole file (NUL-terminated, *len without the NUL). OOM_EIO names the path + errno. */
int oomi_read_file(char **out, size_t *len, const char *path);
/* The data directory: $OOMLESS_DATA_DIR, else the installed one, else the source tree's. */
const char *oomi_data_dir(void);
/* "<data dir>/<relative>", allocated */
char *oomi_data_path(const char *relative);

/* ---- small helpers (util.c) ---------------------------------------------------------------- */
/* Case-insensitive compare treating '-', '_' and ' ' as equal ("a100_80gb" == "A100-80GB"). */
int oomi_name_cmp(const char *a, const char *b);
/* Levenshtein distance over the same normalisation, for "did you mean" lists. */
size_t oomi_name_distance(const char *a, const char *b);
/* Strict integer parse of a whole string into [min, max]; OOM_EINVAL naming `what`. */
int oomi_parse_long(long long *out, const char *text, long long min, long long max,
                    const char *what);
/* Strict floating parse of a whole string (finite); OOM_EINVAL naming `what`. */
int oomi_parse_double(double *out, const char *text, const char *what);

/* ---- YAML into json-c (yamlload.c) --------------------------------------------------------
 * Plain scalars follow the YAML 1.2 core schema (null, bool, int, float, string); quoted ones are
 * strings. OOM_EPARSE "name:line:col: problem" on bad YAML. An empty document gives NULL. */
struct json_object;
int oomi_yaml_load(struct json_object **out, const char *text, size_t len, const char *name);
int oomi_yaml_load_file(struct json_object **out, const char *path);

/* ==== supervise: child processes (proc.c), one launch (launch.c), OOM patterns ==============
 * Appended by the probe/run work; see the supervise section of oomless.h. */
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
 * *exec_errno receives its errno (0 on success). Makes the caller a child subreaper (Linux). */
int oomi_proc_spawn(oomi_proc *p, int *exec_errno, const char *path, char *const argv[],
                    char *const envp[]);
/* Fills pids with the job's processes: its process group, plus every descendant of `root` or of
 * a pid in `known` (processes that left the group). Returns the count (at most max). */
size_t oomi_proc_tree(pid_t *pids, size_t max, pid_t pgid, const pid_t *known, size_t nknown);
/* SIGKILLs the group and the given descendants, reaps those that are our children, and repeats
 * until none is left (bounded). */
void oomi_proc_kill_all(pid_t pgid, const pid_t *known, size_t nknown);
/* Exit code as a shell reports it: status, or 128+N for signal N. */
int oomi_proc_exit_code(int wait_status);
double oomi_now_mono(void);
double oomi_now_unix(void);

/* One launch of a job, supervised until it ends. */
typedef struct oomi_launch {
    /* in */
    const oom_job *job;
    int batch, accum, seq, attempt;
    double timeout_s, sample_interval_s, kill_grace_s;
    oom_gpu_session *gpu; /* NULL: no sampling */
    const oom_patterns *patterns;
    const volatile sig_atomic_t *stop;
    oom_job_event_fn on_event;
    void *user;
    /* out */
    long pid;
    int exit_code;
    int oom, timed_out, exec_failed, stop_signal;
    uint64_t peak_bytes;
    double duration_s;
    long step;
    char message[256]; /* exec failure text */
} oomi_launch;

/* Runs one launch. OOM_OK when it ran (whatever its status), OOM_EJOB when it could not be
 * started (exit_code 127/126, message says why), OOM_ENOMEM. */
int oomi_launch_run(oomi_launch *l);
/* Substitutes the placeholders of one argv element (allocated). */
char *oomi_expand_arg(const char *tmpl, int batch, int accum, int seq, int attempt);
/* The event for a launch (kind, time, pid, attempt, batch, accum, peak, exit, step filled). */
void oomi_launch_event(const oomi_launch *l, oom_job_event_kind kind);
/* Pretty-prints root into *out (allocated) and releases root. (probe.c) */
int oomi_json_finish(char **out, struct json_object *root);

#endif
