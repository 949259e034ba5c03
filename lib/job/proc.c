/*
 * proc.c - child processes, after git's run-command.c and tini: the path is resolved and argv/envp
 * are built before fork; between fork and exec only async-signal-safe calls run; exec failure
 * comes back over a close-on-exec pipe; the child leads its own process group and is signalled
 * as a group; what is left of the group (and of descendants that left it) is killed and reaped.
 */
#define _GNU_SOURCE /* pipe2 */
#include "job/job.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

/* In the child: a copy of one of our pipe ends above 2, so that placing the job's descriptors
 * on 0-2 below never overwrites or closes another of them (they land on 0-2 when the caller
 * runs with its standard descriptors closed). Close-on-exec, like the pipes themselves. */
static int above_std(int fd)
{
    return fd <= 2 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : fd;
}

/* In the child: whether fd 0 is missing or one of our pipe ends (all close-on-exec, so the job
 * would start with stdin closed). */
static int stdin_unusable(const int outp[2], const int errp[2], const int rep[2])
{
    return fcntl(0, F_GETFD) < 0 || outp[0] == 0 || outp[1] == 0 || errp[0] == 0 || errp[1] == 0 ||
           rep[0] == 0 || rep[1] == 0;
}

/* In the child, between fork and exec: async-signal-safe calls only. Every pipe end is
 * close-on-exec: exec closes all of them but the two placed on 1 and 2 (dup2 clears the flag). */
static void child_exec(const int outp[2], const int errp[2], const int rep[2], pid_t parent,
                       int tty, const char *path, char *const argv[], char *const envp[])
{
    /* SIGXFSZ too: oomless ignores it (an append past `ulimit -f` then fails instead of killing
     * it); the job gets the default, as Python's subprocess gives its children */
    static const int sigs[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGPIPE, SIGCHLD, SIGTTIN,
                               SIGTTOU, SIGTSTP, SIGCONT, SIGUSR1, SIGUSR2, SIGALRM, SIGXFSZ};
    struct sigaction sa;
    sigset_t none, ttou;
    size_t i;
    int e, report = above_std(rep[1]), out, err, null;

    if (report < 0)
        report = rep[1];
    setpgid(0, 0);
    if (tty >= 0) { /* the terminal's foreground: ours now, before the job can read it */
        sigemptyset(&ttou);
        sigaddset(&ttou, SIGTTOU);
        sigprocmask(SIG_BLOCK, &ttou, NULL); /* a background tcsetpgrp() would raise it */
        tcsetpgrp(tty, getpid());
    }
    /* never orphaned: if oomless itself dies (even by SIGKILL), the job is killed too; a parent
     * already gone before this point is caught by the getppid() check */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == 0 && getppid() != parent)
        _exit(128 + SIGKILL);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (i = 0; i < OOMI_ARRAY_LEN(sigs); i++)
        sigaction(sigs[i], &sa, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if ((out = above_std(outp[1])) < 0 || (err = above_std(errp[1])) < 0)
        goto fail;
    if (stdin_unusable(outp, errp, rep)) { /* the job gets an empty stdin, not a closed one */
        if ((null = open("/dev/null", O_RDONLY)) < 0 || (null != 0 && dup2(null, 0) < 0))
            goto fail;
        if (null != 0)
            close(null);
    }
    if (dup2(out, 1) < 0 || dup2(err, 2) < 0)
        goto fail;
    execve(path, argv, envp);
fail:
    e = errno;
    while (write(report, &e, sizeof(e)) < 0 && errno == EINTR)
        ;
    _exit(127);
}

static void close_pair(int p[2])
{
    if (p[0] >= 0)
        close(p[0]);
    if (p[1] >= 0)
        close(p[1]);
}

int oomi_proc_spawn(oomi_proc *p, int *exec_errno, const char *path, char *const argv[],
                    char *const envp[], int tty)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, rep[2] = {-1, -1}, e = 0, status;
    ssize_t n;
    pid_t pid, self = getpid();

    p->pid = -1;
    p->out_fd = p->err_fd = -1;
    *exec_errno = 0;
    become_subreaper();
    if (pipe2(outp, O_CLOEXEC) || pipe2(errp, O_CLOEXEC) || pipe2(rep, O_CLOEXEC)) {
        e = errno;
        close_pair(outp);
        close_pair(errp);
        close_pair(rep);
        return oomi_fail(OOM_EIO, "cannot create pipes for '%s': %s", path, strerror(e));
    }
    pid = fork();
    if (pid == 0)
        child_exec(outp, errp, rep, self, tty, path, argv, envp);
    e = errno;
    close(outp[1]);
    close(errp[1]);
    close(rep[1]);
    if (pid < 0) {
        close(outp[0]);
        close(errp[0]);
        close(rep[0]);
        return oomi_fail(OOM_EIO, "cannot fork for '%s': %s", path, strerror(e));
    }
    setpgid(pid, pid); /* also in the child: whichever runs first */
    if (tty >= 0)
        oomi_tty_set_foreground(tty, pid);
    do
        n = read(rep[0], &e, sizeof(e));
    while (n < 0 && errno == EINTR);
    close(rep[0]);
    if (n == (ssize_t)sizeof(e)) {
        *exec_errno = e ? e : EIO;
        if (oomi_tty_is_foreground(tty, pid)) /* the terminal back from the group that failed */
            oomi_tty_set_foreground(tty, getpgrp());
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        close(outp[0]);
        close(errp[0]);
        return oomi_fail(OOM_EJOB, "cannot run '%s': %s", path, strerror(*exec_errno));
    }
    /* the read ends stay open while the job runs: not on 0-2, where the job's output is copied
     * when the caller runs with those closed */
    if ((outp[0] = oomi_fd_above_std(outp[0])) < 0 || (errp[0] = oomi_fd_above_std(errp[0])) < 0) {
        e = errno;
        if (outp[0] >= 0)
            close(outp[0]);
        if (errp[0] >= 0)
            close(errp[0]);
        kill(-pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (oomi_tty_is_foreground(tty, pid))
            oomi_tty_set_foreground(tty, getpgrp());
        return oomi_fail(OOM_EIO, "cannot keep the pipes of '%s': %s", path, strerror(e));
    }
    fcntl(outp[0], F_SETFL, O_NONBLOCK);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);
    p->pid = pid;
    p->out_fd = outp[0];
    p->err_fd = errp[0];
    return OOM_OK;
}

/* ---- the process table (/proc) ------------------------------------------------------------- */

#define TREE_DEPTH_MAX 1024 /* parent links followed by oomi_proc_in_tree() */

struct pinfo {
    pid_t pid, ppid, pgid;
    unsigned long long start;
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
    return 0;
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
    if (p->pgid == t->pgid)
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
