/*
 * tty.c - the caller's controlling terminal, for handing its foreground to a job and back the
 * way a shell does (POSIX job control): the foreground process group is the one the terminal
 * lets read (others get SIGTTIN) and the one its Ctrl-C / Ctrl-Z signal.
 */
#define _GNU_SOURCE /* O_CLOEXEC with older headers */
#include "job/job.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

int oomi_tty_open(void)
{
    /* /dev/tty is the controlling terminal whatever fds 0-2 are; ENXIO when there is none */
    return oomi_fd_above_std(open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC));
}

int oomi_tty_is_foreground(int tty, pid_t pgrp)
{
    return tty >= 0 && tcgetpgrp(tty) == pgrp;
}

int oomi_tty_set_foreground(int tty, pid_t pgrp)
{
    sigset_t ttou, old;
    int rc, e;

    /* from a background group tcsetpgrp() raises SIGTTOU (stopping the caller) unless it is
     * blocked or ignored: blocked here, for this thread, for the call */
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &ttou, &old);
    rc = tcsetpgrp(tty, pgrp);
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return rc;
}
