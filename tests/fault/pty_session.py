#!/usr/bin/env python3
"""pty_session.py - oomless under a terminal, for tests/fault/test_job_control.sh.

A pseudo-terminal whose session leader is a minimal job-control shell: it starts oomless in a
process group of its own (in the foreground, or in the background with `--background`), waits
for it with WUNTRACED like a shell, reports "stopped SIG" / "exit CODE" to this script, and on
"fg" gives oomless's group the terminal back and continues it (SIGCONT), as `fg` does. This
script plays the user at the terminal: it reads what appears there and types.

    pty_session.py SCENARIO OOMLESS [ARGS...]

prints "ok" when the scenario went as it should, else the first thing that went wrong (and
what the terminal showed).
"""
import os
import re
import select
import signal
import sys
import time

TIMEOUT = 60.0  # generous: a sanitizer build on a loaded 2-core machine starts slowly


def mini_shell(argv, report_w, command_r, foreground):
    """The session leader on the terminal's side (runs in the pty.fork child, never returns)."""
    for sig in (signal.SIGTTOU, signal.SIGTTIN, signal.SIGTSTP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        if foreground:
            os.tcsetpgrp(0, os.getpid())  # SIGTTOU is ignored here, as in the parent
        for sig in (signal.SIGTTOU, signal.SIGTTIN, signal.SIGTSTP, signal.SIGINT,
                    signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        os.execv(argv[0], argv)
    try:  # also in the child, whichever runs first: EACCES once the child has exec'd oomless
        os.setpgid(pid, pid)
    except PermissionError:
        pass
    if foreground:
        os.tcsetpgrp(0, pid)
    commands = os.fdopen(command_r)
    while True:
        _, status = os.waitpid(pid, os.WUNTRACED)
        if os.WIFSTOPPED(status):
            os.tcsetpgrp(0, os.getpgrp())  # the terminal back to the shell
            os.write(report_w, b"stopped %d\n" % os.WSTOPSIG(status))
            if commands.readline().strip() == "fg":
                os.tcsetpgrp(0, pid)
                os.killpg(pid, signal.SIGCONT)
            continue
        os.write(report_w, b"exit %d\n" % os.waitstatus_to_exitcode(status))
        os._exit(0)


class Session:
    def __init__(self, argv, foreground=True):
        import pty
        report_r, report_w = os.pipe()
        command_r, command_w = os.pipe()
        pid, master = pty.fork()
        if pid == 0:
            os.close(report_r)
            os.close(command_w)
            try:
                mini_shell(argv, report_w, command_r, foreground)
            except BaseException as e:  # said, not lost with the terminal: the test shows it
                os.write(report_w, ("shell failed: %r\n" % e).encode())
            finally:
                os._exit(99)
        os.close(report_w)
        os.close(command_r)
        self.pid, self.master, self.report, self.command = pid, master, report_r, command_w
        self.screen = ""
        self.reports = ""

    def pump(self, seconds):
        """Reads the terminal and the shell's reports for `seconds` (or until both end)."""
        until = time.monotonic() + seconds
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return
            ready, _, _ = select.select([self.master, self.report], [], [], left)
            for fd in ready:
                try:
                    data = os.read(fd, 65536).decode(errors="replace")
                except OSError:
                    data = ""
                if fd == self.master:
                    self.screen += data
                else:
                    self.reports += data
            if not ready:
                return

    def wait_for(self, what, pattern, seconds=TIMEOUT):
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            # oomless's own notices may land in the middle of a line the job is writing (it
            # reports a continue as the job runs again): the job's text is read without them
            text = (re.sub(r"oomless (?:run|probe): [^\r\n]*\r?\n", "", self.screen)
                    if what == "screen" else self.reports)
            m = re.search(pattern, text)
            if m:
                return m
            self.pump(0.1)
        raise Failure("%s never showed %r; the terminal showed %r; the shell reported %r" %
                      (what, pattern, self.screen[-600:], self.reports))

    def type(self, text):
        os.write(self.master, text.encode())

    def shell(self, command):
        os.write(self.command, (command + "\n").encode())

    def close(self):
        try:
            os.killpg(os.getpgid(self.pid), signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass


class Failure(Exception):
    pass


def state(pid):
    """The process's state letter from /proc (T: stopped), '' when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


TICKER = ("import os, time\nprint('pid', os.getpid(), flush=True)\ni = 0\n"
          "while True:\n    print('tick', i, flush=True)\n    i += 1\n    time.sleep(0.05)\n")


def ticks(s):
    return len(re.findall(r"tick \d+", s.screen))


def scenario_input(oomless):
    """The job reads the terminal (input()): it gets the terminal and the typed line."""
    s = Session(oomless + ["run", "--batch-size", "1", "--", sys.executable, "-c",
                           "print('got', input('name? '))"])
    try:
        s.wait_for("screen", r"name\? ")
        s.type("hello\n")
        s.wait_for("screen", r"got hello")
        s.wait_for("reports", r"exit (\d+)")
        if "exit 0" not in s.reports:
            raise Failure("oomless did not exit 0: " + s.reports.strip())
    finally:
        s.close()


def scenario_ctrl_z(oomless):
    """Ctrl-Z stops the job and oomless together; fg continues both; Ctrl-C ends the job."""
    s = Session(oomless + ["run", "--batch-size", "1", "--", sys.executable, "-c", TICKER])
    try:
        job = int(s.wait_for("screen", r"pid (\d+)").group(1))
        s.wait_for("screen", r"tick 3")
        s.type("\x1a")
        s.wait_for("reports", r"stopped %d" % signal.SIGTSTP)
        s.pump(0.5)
        if state(job) != "T":
            raise Failure("oomless stopped but the job did not (state %r)" % state(job))
        before = ticks(s)
        s.pump(0.5)
        if ticks(s) != before:
            raise Failure("the job kept printing while stopped")
        s.shell("fg")
        until = time.monotonic() + TIMEOUT
        while ticks(s) <= before + 3 and time.monotonic() < until:
            s.pump(0.1)
        if ticks(s) <= before + 3 or state(job) == "T":
            raise Failure("fg did not continue the job (state %r)" % state(job))
        s.type("\x03")
        s.wait_for("reports", r"exit (-?\d+)")
        if "exit 130" not in s.reports:
            raise Failure("Ctrl-C: oomless did not exit 130: " + s.reports.strip())
    finally:
        s.close()


def scenario_background_input(oomless):
    """Started in the background, the job reads the terminal: both stop ("Stopped (tty
    input)"); fg gives the job the terminal and it reads the line."""
    s = Session(oomless + ["run", "--batch-size", "1", "--", sys.executable, "-c",
                           "print('got', input('name? '))"], foreground=False)
    try:
        s.wait_for("reports", r"stopped %d" % signal.SIGTTIN)
        s.shell("fg")
        s.wait_for("screen", r"name\? ")
        s.type("hello\n")
        s.wait_for("screen", r"got hello")
        s.wait_for("reports", r"exit (-?\d+)")
        if "exit 0" not in s.reports:
            raise Failure("oomless did not exit 0: " + s.reports.strip())
    finally:
        s.close()


def scenario_relay(oomless):
    """No terminal: SIGTSTP sent to oomless stops the job and then oomless; SIGCONT continues
    both. oomless runs in a process group of its own whose parent (this script) is in the same
    session, as under a shell: the group is not orphaned, so a stop takes effect."""
    import subprocess
    p = subprocess.Popen(oomless + ["run", "--batch-size", "1", "--", sys.executable, "-c",
                                    TICKER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         preexec_fn=os.setpgrp)
    try:
        os.set_blocking(p.stdout.fileno(), False)
        out = ""

        def read(seconds):
            nonlocal out
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                select.select([p.stdout], [], [], 0.05)
                try:
                    out += (p.stdout.read() or b"").decode()
                except (BlockingIOError, TypeError):
                    pass

        until = time.monotonic() + TIMEOUT
        while "tick 3" not in out and time.monotonic() < until:
            read(0.1)
        m = re.search(r"pid (\d+)", out)
        if not m:
            raise Failure("the job never started")
        job = int(m.group(1))
        os.kill(p.pid, signal.SIGTSTP)
        until = time.monotonic() + TIMEOUT
        while (state(p.pid) != "T" or state(job) != "T") and time.monotonic() < until:
            read(0.1)
        if state(job) != "T" or state(p.pid) != "T":
            raise Failure("SIGTSTP: oomless %r, job %r (both should be T)" %
                          (state(p.pid), state(job)))
        os.kill(p.pid, signal.SIGCONT)
        until = time.monotonic() + TIMEOUT
        while (state(p.pid) == "T" or state(job) == "T") and time.monotonic() < until:
            read(0.1)
        if state(job) == "T" or state(p.pid) == "T":
            raise Failure("SIGCONT: oomless %r, job %r (neither should be T)" %
                          (state(p.pid), state(job)))
        before = len(re.findall(r"tick", out))
        read(0.5)
        if len(re.findall(r"tick", out)) == before:
            raise Failure("SIGCONT: the job does not print again")
        os.kill(p.pid, signal.SIGTERM)
        if p.wait(TIMEOUT) != 128 + signal.SIGTERM:
            raise Failure("SIGTERM: oomless exited %d" % p.returncode)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


SCENARIOS = {"input": scenario_input, "ctrl-z": scenario_ctrl_z,
             "background-input": scenario_background_input, "relay": scenario_relay}


def main():
    name, oomless = sys.argv[1], sys.argv[2:]
    try:
        SCENARIOS[name](oomless)
    except Failure as e:
        print("%s: %s" % (name, e))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
