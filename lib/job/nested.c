/*
 * nested.c - one supervisor per job. Every supervised launch (run, probe) carries
 * OOMLESS_SUPERVISOR=pid=PID,depth=N: the oomless that launched it and how many supervisors are
 * above it. A `run` started under one (`oomless run -- ... oomless run -- job`) then launches its
 * job once and leaves the relaunch to the outer one: two levels that both relaunch multiply
 * their launches (5 relaunches each: up to 36 launches of a job that never fits).
 */
#include "job/job.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUPERVISOR_VAR "OOMLESS_SUPERVISOR"
#define MAX_DEPTH      64  /* deeper than anyone nests: a value above it is damaged */
#define MAX_ANCESTORS  512 /* parents followed at most (a loop in /proc cannot hold us) */

/* "pid=PID,depth=N" -> 1, or 0 when it is not that */
static int parse(const char *v, long *pid, int *depth)
{
    char *end;
    long p, d;
    if (strncmp(v, "pid=", 4))
        return 0;
    p = strtol(v + 4, &end, 10);
    if (end == v + 4 || p < 1 || strncmp(end, ",depth=", 7))
        return 0;
    v = end + 7;
    d = strtol(v, &end, 10);
    if (end == v || *end || d < 1 || d > MAX_DEPTH)
        return 0;
    *pid = p;
    *depth = (int)d;
    return 1;
}

/* The parent of `pid` from /proc/PID/stat (the field after the command, whose name may hold
 * spaces and parentheses: read after the last ')'); 0 when it cannot be read. */
static long parent_of(long pid)
{
    char path[64], buf[1024], *p;
    ssize_t n;
    long ppid = 0;
    int fd;
    oomi_snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if ((p = strrchr(buf, ')')) && p[1] == ' ' && p[2] && p[3] == ' ')
        ppid = strtol(p + 4, NULL, 10);
    return ppid;
}

/* Whether `pid` started this process (a parent, a grandparent...): a value left in an
 * environment after its oomless ended, or copied into another, names no ancestor. */
static int is_ancestor(long pid)
{
    long p = (long)getppid();
    int i;
    for (i = 0; i < MAX_ANCESTORS && p > 0; i++) {
        if (p == pid)
            return 1;
        if (p == 1)
            break;
        p = parent_of(p);
    }
    return 0;
}

int oomi_supervised(long *pid, int *depth, int tell)
{
    const char *v = getenv(SUPERVISOR_VAR);
    long p = 0;
    int d = 0, ok = 0;
    if (v && *v && !parse(v, &p, &d)) {
        if (tell)
            oomi_notice("$" SUPERVISOR_VAR " '%s' is not pid=PID,depth=N: ignored", v);
    } else if (v && *v && !is_ancestor(p)) {
        if (tell)
            oomi_notice("$" SUPERVISOR_VAR " names pid %ld, which did not start this process "
                        "(a value left from an oomless that ended): ignored",
                        p);
    } else {
        ok = v && *v;
    }
    *pid = ok ? p : 0;
    if (depth)
        *depth = ok ? d : 0;
    return ok;
}

char *oomi_supervisor_env(void)
{
    long pid;
    int depth;
    oomi_supervised(&pid, &depth, 0);
    return oomi_asprintf(SUPERVISOR_VAR "=pid=%ld,depth=%d", (long)getpid(),
                         depth < MAX_DEPTH ? depth + 1 : MAX_DEPTH);
}
