/*
 * guard.c - the guardian: a small process between oomless and its job, so that the job's whole
 * tree dies with oomless, whatever kills oomless (the kernel's OOM killer, a scheduler's final
 * SIGKILL, `docker stop`).
 *
 * Why: oomless is a child subreaper and the job's leader has PR_SET_PDEATHSIG, but both end with
 * oomless. Once oomless is gone, only the leader gets the parent-death signal (it is not
 * inherited by the leader's children); the rest of the tree (a launcher script's
 * `python train.py`, torchrun's workers, anything that left the job's process group) is
 * re-parented to init and lives on, holding its GPU memory. The guardian outlives oomless: it is
 * the leader's parent and a child subreaper, so every process of the job's tree stays its
 * descendant whatever happens in between; when oomless is gone (its end of the life pipe
 * closes, or the guardian's parent-death signal comes) it SIGKILLs the job's process group and
 * every child it has, round after round (the children of a killed one are re-parented to it),
 * until it has none left, then exits. oomless also closes the life pipe at the end of every
 * launch: what the job left behind goes the same way.
 *
 * The guardian tells oomless what only a parent sees: the leader's pid, its stops and
 * continuations (job control) and its exit status (exactly as waitpid gives it), over the report
 * pipe. It keeps the leader's zombie until it ends, so that the leader's pid, which is the job's
 * process group id, cannot be taken by another process while the group is signalled.
 *
 * It is a fork of oomless that never execs (oomless may be a library in a program with threads):
 * from fork to _exit it makes only async-signal-safe calls (system calls; no allocation, no
 * stdio, no opendir: /proc is read with getdents64). It closes every descriptor it inherited
 * but its two pipes, blocks every signal (none stops or ends it but SIGKILL; SIGCHLD and its
 * parent-death signal wake it, inside ppoll), and names itself "oomless-guard" (ps, top).
 */
#define _GNU_SOURCE /* ppoll */
#include "job/job.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GUARD_DEATH_SIG SIGUSR2 /* the guardian's parent-death signal (blocked but in ppoll) */
#define KILL_ROUNDS     500     /* rounds of the final kill, ~20 ms apart: about 10 s */

/* ---- in the job's leader, between the guardian's fork and exec --------------------------------
 */

/* Async-signal-safe calls only. Every pipe end is above 2 and close-on-exec: exec closes all of
 * them but the two placed on 1 and 2 (dup2 clears the flag). */
static _Noreturn void child_exec(const oomi_guard_args *a, pid_t parent)
{
    /* SIGXFSZ too: oomless ignores it (an append past `ulimit -f` then fails instead of killing
     * it); the job gets the default, as Python's subprocess gives its children */
    static const int sigs[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGPIPE, SIGCHLD, SIGTTIN,
                               SIGTTOU, SIGTSTP, SIGCONT, SIGUSR1, SIGUSR2, SIGALRM, SIGXFSZ};
    struct sigaction sa;
    sigset_t none, ttou;
    size_t i;
    int e, null;

    setpgid(0, 0);
    if (a->tty >= 0) { /* the terminal's foreground: ours now, before the job can read it */
        sigemptyset(&ttou);
        sigaddset(&ttou, SIGTTOU);
        sigprocmask(SIG_BLOCK, &ttou, NULL); /* a background tcsetpgrp() would raise it */
        tcsetpgrp(a->tty, getpid());
    }
    /* the guardian gone (only SIGKILL ends it early): the leader too; a guardian already gone
     * before this point is caught by the getppid() check */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == 0 && getppid() != parent)
        _exit(128 + SIGKILL);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (i = 0; i < OOMI_ARRAY_LEN(sigs); i++)
        sigaction(sigs[i], &sa, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (fcntl(0, F_GETFD) < 0) { /* the job gets an empty stdin, not a closed one */
        if ((null = open("/dev/null", O_RDONLY)) < 0 || (null != 0 && dup2(null, 0) < 0))
            goto fail;
        if (null != 0)
            close(null);
    }
    if (dup2(a->out_w, 1) < 0 || dup2(a->err_w, 2) < 0)
        goto fail;
    execve(a->path, a->argv, a->envp);
fail:
    e = errno;
    while (write(a->rep_w, &e, sizeof(e)) < 0 && errno == EINTR)
        ;
    _exit(127);
}

/* ---- the guardian --------------------------------------------------------------------------- */

static volatile sig_atomic_t woken;

static void wake(int sig)
{
    (void)sig;
    woken = 1;
}

static void report(int fd, int kind, int value)
{
    oomi_guard_msg m = {kind, value};
    /* 8 bytes: written whole (less than PIPE_BUF); EPIPE once oomless is gone */
    while (write(fd, &m, sizeof(m)) < 0 && errno == EINTR)
        ;
}

struct dirent64_ {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* A whole decimal number (no sign): its value, or -1. */
static long number(const char *s)
{
    long v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > 100000000L)
            return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

/* Calls fn(n, user) for each entry of the folder `dir` whose name is a number; the folder is
 * read again from the start until a pass calls fn for nothing new (`again` returns 1 when fn
 * acted, which may change the folder: closing a descriptor changes /proc/self/fd). -1 when the
 * folder cannot be read. */
static int each_number(const char *dir, int (*fn)(long n, void *user), void *user)
{
    static char buf[8192] __attribute__((aligned(8)));
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), acted = 1, passes;
    long got, off;

    if (fd < 0)
        return -1;
    for (passes = 0; acted && passes < 16; passes++) {
        acted = 0;
        lseek(fd, 0, SEEK_SET);
        while ((got = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0)
            for (off = 0; off < got; off += ((struct dirent64_ *)(buf + off))->reclen) {
                long n = number(((struct dirent64_ *)(buf + off))->name);
                if (n >= 0 && n != fd)
                    acted |= fn(n, user);
            }
    }
    close(fd);
    return 0;
}

struct keep {
    int a, b;
};

static int close_one(long fd, void *user)
{
    const struct keep *k = user;
    if (fd == k->a || fd == k->b)
        return 0;
    close((int)fd);
    return 1;
}

/* Closes every descriptor but two (oomless's, the job's: none of them is the guardian's to
 * hold, and a pipe it held would never see its end). */
static void close_others(int a, int b)
{
    struct keep k = {a, b};
    int fd;
    if (each_number("/proc/self/fd", close_one, &k) == 0)
        return;
    for (fd = 0; fd < 4096; fd++) /* no /proc: the first 4096 */
        if (fd != a && fd != b)
            close(fd);
}

/* "pid (comm) S ppid pgrp ...": state, parent and group of a process from /proc/PID/stat (comm
 * may hold spaces and ')'). 0, or -1 when it cannot be read. */
static int stat_of(long pid, char *state, long *ppid, long *pgrp)
{
    char path[40] = "/proc/", digits[24], buf[512], *p = NULL;
    size_t n = 0, at = 6, i;
    ssize_t got;
    long *fields[2] = {ppid, pgrp};
    int fd, f;

    do
        digits[n++] = (char)('0' + pid % 10);
    while ((pid /= 10) > 0);
    while (n > 0)
        path[at++] = digits[--n];
    memcpy(path + at, "/stat", 6);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    got = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (got <= 0)
        return -1;
    for (i = 0; i < (size_t)got; i++)
        if (buf[i] == ')')
            p = buf + i;
    if (!p || p + 4 > buf + got || p[1] != ' ')
        return -1;
    buf[got] = '\0';
    *state = p[2];
    p += 3;
    for (f = 0; f < 2; f++) {
        while (*p == ' ')
            p++;
        for (*fields[f] = 0; *p >= '0' && *p <= '9'; p++)
            *fields[f] = *fields[f] * 10 + (*p - '0');
    }
    return 0;
}

struct sweep {
    pid_t self, leader;
    int live; /* children still alive */
};

/* One process of the table: a child of the guardian, or a member of the job's group, is
 * SIGKILLed; a dead child other than the leader is reaped. */
static int sweep_one(long pid, void *user)
{
    struct sweep *s = user;
    long ppid, pgrp;
    char state;

    if (stat_of(pid, &state, &ppid, &pgrp) != 0 || (ppid != s->self && pgrp != s->leader))
        return 0;
    if (state == 'Z' || state == 'X') {
        if (ppid == s->self && pid != s->leader)
            waitpid((pid_t)pid, NULL, WNOHANG);
        return 0;
    }
    kill((pid_t)pid, SIGKILL);
    s->live += ppid == s->self;
    return 0;
}

/* SIGKILLs the job's group and every child the guardian has, again as the children of those
 * that die are re-parented to it, until none is left. 0, or 1 when some outlived the rounds. */
static int kill_all(pid_t self, pid_t leader)
{
    struct timespec pause = {0, 20 * 1000 * 1000};
    struct sweep s = {self, leader, 0};
    int round;

    for (round = 0; round < KILL_ROUNDS; round++) {
        kill(-leader, SIGKILL);
        s.live = 0;
        if (each_number("/proc", sweep_one, &s) != 0)
            return 1; /* no /proc: only the group could be killed */
        if (s.live == 0)
            return 0;
        nanosleep(&pause, NULL);
    }
    return 1;
}

/* The leader's stops and continuations (consumed), then its end (seen, its zombie kept): 1
 * once it has ended. */
static int watch_leader(int status_w, pid_t leader)
{
    siginfo_t si;

    for (;;) {
        memset(&si, 0, sizeof(si));
        if (waitid(P_PID, (id_t)leader, &si, WSTOPPED | WCONTINUED | WNOHANG) < 0 || si.si_pid == 0)
            break;
        if (si.si_code == CLD_CONTINUED)
            report(status_w, OOMI_GUARD_CONT, SIGCONT);
        else
            report(status_w, OOMI_GUARD_STOP, si.si_status);
    }
    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)leader, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
        return 0;
    /* the wait status as waitpid() would give it */
    report(status_w, OOMI_GUARD_EXIT,
           si.si_code == CLD_EXITED   ? (si.si_status & 0xff) << 8
           : si.si_code == CLD_DUMPED ? (si.si_status & 0x7f) | 0x80
                                      : si.si_status & 0x7f);
    return 1;
}

/* Reaps the orphans that ended (children other than the leader), while the leader lives. */
static void reap_orphans(pid_t leader)
{
    siginfo_t si;
    for (;;) {
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0 ||
            si.si_pid == leader)
            return;
        waitpid(si.si_pid, NULL, WNOHANG);
    }
}

void oomi_guard_run(const oomi_guard_args *a)
{
    pid_t self = getpid(), leader;
    struct pollfd pf = {a->life_r, POLLIN, 0};
    struct sigaction sa;
    sigset_t waiting;
    int ended = 0, e;
    ssize_t n;
    char c;

    /* every signal is blocked (oomless blocked them around the fork) and stays so */
    prctl(PR_SET_NAME, "oomless-guard", 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = wake;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL); /* never SIG_IGN: the leader's status must be waitable */
    sigaction(GUARD_DEATH_SIG, &sa, NULL);
    if (prctl(PR_SET_PDEATHSIG, GUARD_DEATH_SIG, 0, 0, 0) != 0 || getppid() != a->parent)
        _exit(1); /* oomless is already gone: no job */
    if ((leader = fork()) == 0)
        child_exec(a, self);
    if (leader < 0) {
        e = errno;
        report(a->status_w, OOMI_GUARD_FAIL, e);
        _exit(1);
    }
    setpgid(leader, leader); /* also in the leader: whichever runs first */
    close_others(a->life_r, a->status_w);
    report(a->status_w, OOMI_GUARD_PID, (int)leader);
    sigfillset(&waiting);
    sigdelset(&waiting, SIGCHLD);
    sigdelset(&waiting, GUARD_DEATH_SIG);
    for (;;) {
        woken = 0;
        if (!ended && (ended = watch_leader(a->status_w, leader)) == 0)
            reap_orphans(leader);
        if (getppid() != a->parent)
            break; /* oomless is gone */
        /* SIGCHLD or the parent-death signal, caught only here, end the wait early */
        if (ppoll(&pf, 1, NULL, &waiting) > 0 &&
            ((n = read(a->life_r, &c, 1)) == 0 || (n < 0 && errno != EINTR)))
            break; /* the life pipe ended: oomless closed it, or is gone */
    }
    e = kill_all(self, leader);
    while (waitpid(-1, NULL, WNOHANG) > 0) /* the leader's zombie and the last orphans' */
        ;
    _exit(e);
}
