/*
 * proc.c - child processes, after git's run-command.c and tini: the path is resolved and argv/envp
 * are built before fork; between fork and exec only async-signal-safe calls run; exec failure
 * comes back over a close-on-exec pipe; the job's leader leads its own process group and is
 * signalled as a group. Between oomless and the job runs a guardian (guard.c), the leader's
 * parent: it reports the leader's stops and end, and kills the job's whole tree when the launch
 * ends or oomless dies. What reaches oomless itself (the guardian killed) is killed and reaped
 * here.
 */
#define _GNU_SOURCE /* pipe2 */
#include "job/job.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

double oomi_now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double oomi_now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int oomi_proc_exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 255;
}

static int is_exec_file(const char *path, int *err_no)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        *err_no = errno;
        return 0;
    }
    if (S_ISDIR(st.st_mode) || access(path, X_OK) != 0) {
        *err_no = EACCES;
        return 0;
    }
    return 1;
}

int oomi_proc_resolve(char **out, int *err_no, const char *argv0)
{
    const char *path = getenv("PATH"), *p, *end;
    int seen_eacces = 0, e = 0;
    char *cand;

    *out = NULL;
    *err_no = 0;
    if (!argv0 || !*argv0)
        return oomi_fail(OOM_EINVAL, "no command given");
    if (strchr(argv0, '/')) {
        if (!is_exec_file(argv0, err_no))
            return oomi_fail(OOM_EJOB, "cannot run '%s': %s", argv0, strerror(*err_no));
        return (*out = oomi_strdup(argv0)) ? OOM_OK : oomi_nomem();
    }
    for (p = path && *path ? path : "/usr/local/bin:/usr/bin:/bin"; p; p = *end ? end + 1 : NULL) {
        size_t n;
        end = strchr(p, ':');
        if (!end)
            end = p + strlen(p);
        n = (size_t)(end - p);
        if (!(cand = n ? oomi_asprintf("%.*s/%s", (int)n, p, argv0) : oomi_asprintf("%s", argv0)))
            return oomi_nomem();
        if (is_exec_file(cand, &e)) {
            *out = cand;
            return OOM_OK;
        }
        seen_eacces |= e == EACCES;
        oomi_free(cand);
    }
    *err_no = seen_eacces ? EACCES : ENOENT;
    return oomi_fail(OOM_EJOB, "cannot run '%s': %s", argv0,
                     seen_eacces ? "permission denied" : "command not found in $PATH");
}

static void become_subreaper(void)
{
#ifdef __linux__
    static int done;
    if (!done)
        done = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
#endif
}

static void close_pair(int p[2])
{
    if (p[0] >= 0)
        close(p[0]);
    if (p[1] >= 0)
        close(p[1]);
    p[0] = p[1] = -1;
}

/* A close-on-exec pipe with both ends above 2 (the caller may run with 0-2 closed: an end there
 * would become the job's stdin, or be overwritten by its stdout). 0, or -1 with errno. */
static int pipe_above_std(int p[2])
{
    if (pipe2(p, O_CLOEXEC) != 0) {
        p[0] = p[1] = -1;
        return -1;
    }
    p[0] = oomi_fd_above_std(p[0]);
    p[1] = oomi_fd_above_std(p[1]);
    if (p[0] >= 0 && p[1] >= 0)
        return 0;
    close_pair(p);
    return -1;
}

/* Waits for the guardian's report of `kind` (the others before it are not expected at this
 * point): its value, or -1 (errno set) when the guardian ended without it. */
static int wait_report(oomi_proc *p, int kind, int *value)
{
    oomi_guard_msg m;
    ssize_t n;
    do {
        do
            n = read(p->report_fd, &m, sizeof(m));
        while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof(m)) {
            errno = n == 0 ? ECHILD : errno;
            return -1;
        }
    } while (m.kind != kind && m.kind != OOMI_GUARD_FAIL);
    *value = m.value;
    return m.kind == kind ? 0 : -1;
}

int oomi_proc_report(oomi_proc *p, int *kind, int *value)
{
    oomi_guard_msg m;
    ssize_t n;
    if (p->report_fd < 0)
        return -1;
    do
        n = read(p->report_fd, &m, sizeof(m));
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n != (ssize_t)sizeof(m)) { /* the guardian is gone */
        close(p->report_fd);
        p->report_fd = -1;
        return -1;
    }
    *kind = m.kind;
    *value = m.value;
    return 1;
}

int oomi_proc_release(oomi_proc *p)
{
    int status = 0;
    pid_t got = 0;
    if (p->life_fd >= 0)
        close(p->life_fd); /* the guardian kills what is left, then exits */
    p->life_fd = -1;
    if (p->guardian > 0)
        while ((got = waitpid(p->guardian, &status, 0)) < 0 && errno == EINTR)
            ;
    if (p->report_fd >= 0)
        close(p->report_fd);
    p->report_fd = -1;
    p->guardian = -1;
    return got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The guardian, forked with every signal blocked (so that none of the caller's handlers runs in
 * it, and none ends it before it blocks them itself): its pid, or -1 with errno. */
static pid_t fork_guardian(const oomi_guard_args *a)
{
    sigset_t all, old;
    pid_t pid;
    int e;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if ((pid = fork()) == 0)
        oomi_guard_run(a);
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return pid;
}

int oomi_proc_spawn(oomi_proc *p, int *exec_errno, const char *path, char *const argv[],
                    char *const envp[], int tty)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, rep[2] = {-1, -1}, life[2] = {-1, -1},
        stat[2] = {-1, -1}, e = 0, leader = -1;
    oomi_guard_args a;
    ssize_t n;

    p->pid = p->guardian = -1;
    p->out_fd = p->err_fd = p->report_fd = p->life_fd = -1;
    *exec_errno = 0;
    become_subreaper();
    if (pipe_above_std(outp) || pipe_above_std(errp) || pipe_above_std(rep) ||
        pipe_above_std(life) || pipe_above_std(stat)) {
        e = errno;
        close_pair(outp);
        close_pair(errp);
        close_pair(rep);
        close_pair(life);
        close_pair(stat);
        return oomi_fail(OOM_EIO, "cannot create pipes for '%s': %s", path, strerror(e));
    }
    a = (oomi_guard_args){outp[1],  errp[1], rep[1], life[0], stat[1],
                          getpid(), tty,     path,   argv,    envp};
    p->guardian = fork_guardian(&a);
    e = errno;
    close(outp[1]);
    close(errp[1]);
    close(rep[1]);
    close(life[0]);
    close(stat[1]);
    p->report_fd = stat[0];
    p->life_fd = life[1];
    if (p->guardian < 0) {
        close(outp[0]);
        close(errp[0]);
        close(rep[0]);
        oomi_proc_release(p);
        return oomi_fail(OOM_EIO, "cannot fork for '%s': %s", path, strerror(e));
    }
    if (wait_report(p, OOMI_GUARD_PID, &leader) != 0) {
        e = leader > 0 ? leader : errno;
        close(outp[0]);
        close(errp[0]);
        close(rep[0]);
        oomi_proc_release(p);
        return oomi_fail(OOM_EIO, "cannot fork for '%s': %s", path, strerror(e));
    }
    p->pid = (pid_t)leader;
    if (tty >= 0)
        oomi_tty_set_foreground(tty, p->pid); /* also in the leader: whichever runs first */
    do
        n = read(rep[0], &e, sizeof(e));
    while (n < 0 && errno == EINTR);
    close(rep[0]);
    fcntl(p->report_fd, F_SETFL, O_NONBLOCK);
    if (n == (ssize_t)sizeof(e)) {
        *exec_errno = e ? e : EIO;
        if (oomi_tty_is_foreground(tty, p->pid)) /* the terminal back from the group that failed */
            oomi_tty_set_foreground(tty, getpgrp());
        close(outp[0]);
        close(errp[0]);
        oomi_proc_release(p);
        p->pid = -1;
        return oomi_fail(OOM_EJOB, "cannot run '%s': %s", path, strerror(*exec_errno));
    }
    fcntl(outp[0], F_SETFL, O_NONBLOCK);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);
    p->out_fd = outp[0];
    p->err_fd = errp[0];
    return OOM_OK;
}

/* ---- the process table (/proc) ------------------------------------------------------------- */

#define TREE_DEPTH_MAX 1024 /* parent links followed by oomi_proc_in_tree() */

struct pinfo {
    pid_t pid, ppid, pgid;
    unsigned long long start;
    char state;
};

/* Reads "pid (comm) state ppid pgrp ... starttime" (fields 1-5 and 22) from /proc/PID/stat;
 * comm may hold spaces and ')'. */
static int read_stat(struct pinfo *pi, pid_t pid)
{
    char path[64], buf[512], *rp;
    char state;
    long ppid, pgid;

    oomi_snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if (oomi_read_prefix(path, buf, sizeof(buf)) <= 0)
        return -1;
    if (!(rp = strrchr(buf, ')')) ||
        sscanf(rp + 1,
               /* state ppid pgrp, 16 fields skipped (session ... itrealvalue), starttime */
               " %c %ld %ld %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
               &state, &ppid, &pgid, &pi->start) != 4)
        return -1;
    if (state == 'Z' || state == 'X')
        return -1; /* dead: nothing to sample or kill, only to reap */
    pi->pid = pid;
    pi->ppid = (pid_t)ppid;
    pi->pgid = (pid_t)pgid;
    pi->state = state;
    return 0;
}

int oomi_proc_stopped(pid_t pid)
{
    struct pinfo pi;
    return read_stat(&pi, pid) == 0 && (pi.state == 'T' || pi.state == 't');
}

/* Every live process (allocated array, *n entries); NULL when /proc cannot be read. */
static struct pinfo *scan_procs(size_t *n)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    struct pinfo *all = NULL, *grown;
    size_t cap = 0;

    *n = 0;
    if (!d)
        return NULL;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            if (!(grown = oomi_reallocarray(all, cap, sizeof(*all))))
                break;
            all = grown;
        }
        if (read_stat(&all[*n], (pid_t)pid) == 0)
            (*n)++;
    }
    closedir(d);
    return all;
}

static int contains(const pid_t *v, size_t n, pid_t x)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (v[i] == x)
            return 1;
    return 0;
}

unsigned long long oomi_proc_start_time(pid_t pid)
{
    struct pinfo pi;
    return read_stat(&pi, pid) == 0 ? pi.start : 0;
}

static int belongs(const struct pinfo *p, const oomi_tree *t, pid_t self)
{
    if (t->guardian > 0 && p->pid == t->guardian)
        return 0;
    if (p->pgid == t->pgid || (t->guardian > 0 && p->ppid == t->guardian))
        return 1;
    return p->ppid == self && (contains(t->known, t->nknown, p->pid) ||
                               (t->since && p->start >= t->since && p->pid != self));
}

size_t oomi_proc_tree(pid_t *pids, size_t max, const oomi_tree *t)
{
    size_t n = 0, i, count, before;
    pid_t self = getpid();
    struct pinfo *all = scan_procs(&count);

    if (!all)
        return 0;
    for (i = 0; i < count && n < max; i++)
        if (belongs(&all[i], t, self))
            pids[n++] = all[i].pid;
    do { /* add descendants until nothing changes */
        before = n;
        for (i = 0; i < count && n < max; i++)
            if (!contains(pids, n, all[i].pid) && contains(pids, n, all[i].ppid))
                pids[n++] = all[i].pid;
    } while (n != before && n < max);
    oomi_free(all);
    return n;
}

int oomi_proc_in_tree(pid_t pid, const oomi_tree *t)
{
    pid_t self = getpid();
    struct pinfo pi;
    int depth;

    /* up the parent links: a process belongs when it or an ancestor does (the same set that
     * oomi_proc_tree() builds downward from the whole table); bounded against a table that
     * changes under the walk */
    for (depth = 0; depth < TREE_DEPTH_MAX && pid > 1 && pid != self; depth++) {
        if (pid == t->pgid)
            return 1; /* the leader, a zombie too */
        if (read_stat(&pi, pid) != 0)
            return 0;
        if (belongs(&pi, t, self))
            return 1;
        pid = pi.ppid;
    }
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Reaps our children among pids (zombies included: /proc hides them from the tree). */
static void reap(const pid_t *pids, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        while (waitpid(pids[i], NULL, WNOHANG) < 0 && errno == EINTR)
            ;
}

void oomi_proc_kill_all(const oomi_tree *t)
{
    pid_t pids[1024];
    size_t n, i, round;

    for (round = 0; round < 200; round++) { /* bounded: ~10 s */
        kill(-t->pgid, SIGKILL);
        n = oomi_proc_tree(pids, OOMI_ARRAY_LEN(pids), t);
        for (i = 0; i < n; i++)
            kill(pids[i], SIGKILL);
        reap(t->known, t->nknown);
        reap(pids, n);
        while (waitpid(-t->pgid, NULL, WNOHANG) > 0) /* the group's orphans, reparented to us */
            ;
        if (n == 0 && kill(-t->pgid, 0) < 0)
            break;
        sleep_ms(50);
    }
}
