/* test_proc.c - one supervised launch: placeholders, environment, exit codes, OOM, exec failure,
 * timeout with SIGKILL escalation, signal forwarding. Uses the fake job ($FAKE_JOB). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "job/job.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static oom_patterns *patterns;
static const char *fakejob;

static int setup(void **state)
{
    (void)state;
    fakejob = getenv("FAKE_JOB");
    return fakejob && oom_patterns_load(&patterns, NULL) == OOM_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    oom_patterns_free(patterns);
    return 0;
}

static void prepare(oomi_launch *l, const oom_job *job, int batch)
{
    memset(l, 0, sizeof(*l));
    l->job = job;
    l->batch = batch;
    l->accum = 1;
    l->attempt = 1;
    l->sample_interval_s = 0.05;
    l->kill_grace_s = 10;
    l->patterns = patterns;
}

/* Runs argv with stdout captured into a temporary file; returns its text (static buffer). */
static const char *capture(const char *const *argv, const char *const *env, int batch, int seq)
{
    static char buf[65536];
    char path[] = "/tmp/oomless-test-proc.XXXXXX";
    int fd = mkstemp(path);
    oom_job job = {argv, env, 0, -1};
    oomi_launch l;
    ssize_t n;

    assert_true(fd >= 0);
    job.stdout_fd = fd;
    prepare(&l, &job, batch);
    l.seq = seq;
    l.accum = 4;
    assert_int_equal(oomi_launch_run(&l), OOM_OK);
    assert_int_equal(l.exit_code, 0);
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    unlink(path);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void test_expand(void **state)
{
    char *s;
    (void)state;
    s = oomi_expand_arg("--bs={batch}/{accum}/{effective}/{attempt}/{seq}/{other}", 8, 4, 0, 2);
    assert_string_equal(s, "--bs=8/4/32/2/{seq}/{other}");
    oomi_free(s);
    s = oomi_expand_arg("{seq}{batch", 8, 4, 512, 2);
    assert_string_equal(s, "512{batch");
    oomi_free(s);
}

static void test_argv_not_resplit(void **state)
{
    const char *argv[] = {"printf", "[%s]\n", "a {batch} b; echo $HOME `id`", "{accum}", NULL};
    (void)state;
    assert_string_equal(capture(argv, NULL, 8, 0), "[a 8 b; echo $HOME `id`]\n[4]\n");
}

static void test_environment(void **state)
{
    const char *argv[] = {"env", NULL};
    const char *env[] = {"EXTRA_ONE=1", "OOMLESS_SEQ_LEN=999", NULL};
    const char *out;
    (void)state;
    setenv("OOMLESS_BATCH_SIZE", "1234", 1); /* an inherited value is replaced */
    out = capture(argv, env, 16, 2048);
    unsetenv("OOMLESS_BATCH_SIZE");
    assert_non_null(strstr(out, "OOMLESS_BATCH_SIZE=16\n"));
    assert_null(strstr(out, "OOMLESS_BATCH_SIZE=1234"));
    assert_non_null(strstr(out, "OOMLESS_GRAD_ACCUM=4\n"));
    assert_non_null(strstr(out, "OOMLESS_EFFECTIVE_BATCH=64\n"));
    assert_non_null(strstr(out, "OOMLESS_SEQ_LEN=2048\n"));
    assert_null(strstr(out, "OOMLESS_SEQ_LEN=999"));
    assert_non_null(strstr(out, "OOMLESS_ATTEMPT=1\n"));
    assert_non_null(strstr(out, "EXTRA_ONE=1\n"));
}

static void test_exit_and_step(void **state)
{
    const char *argv[] = {fakejob, "--batch-size", "{batch}", "--steps", "4", "--step-time-ms",
                          "1",     "--exit",       "3",       NULL};
    oom_job job = {argv, NULL, -1, -1};
    oomi_launch l;
    (void)state;
    prepare(&l, &job, 2);
    assert_int_equal(oomi_launch_run(&l), OOM_OK);
    assert_int_equal(l.exit_code, 3);
    assert_int_equal(l.oom, 0);
    assert_int_equal(l.step, 4);
    assert_true(l.pid > 0);
    assert_true(l.peak_bytes == OOM_UNKNOWN); /* no GPU session */
}

static void test_oom(void **state)
{
    const char *argv[] = {fakejob,        "--batch-size", "{batch}",    "--fixed", "1G",
                          "--per-sample", "1G",           "--capacity", "4G",      NULL};
    oom_job job = {argv, NULL, -1, -1};
    oomi_launch l;
    (void)state;
    prepare(&l, &job, 3);
    assert_int_equal(oomi_launch_run(&l), OOM_OK);
    assert_int_equal(l.exit_code, 0);
    assert_int_equal(l.oom, 0); /* 1G + 3G = 4G fits */
    prepare(&l, &job, 4);
    assert_int_equal(oomi_launch_run(&l), OOM_OK);
    assert_int_equal(l.exit_code, 1);
    assert_int_equal(l.oom, 1);
}

static void test_exec_failure(void **state)
{
    const char *missing[] = {"/nonexistent/train", NULL};
    const char *nopath[] = {"oomless-no-such-command-xyz", NULL};
    const char *noexec[] = {"/etc/hostname", NULL};
    oom_job job = {missing, NULL, -1, -1};
    oomi_launch l;
    (void)state;
    prepare(&l, &job, 1);
    assert_int_equal(oomi_launch_run(&l), OOM_EJOB);
    assert_int_equal(l.exit_code, 127);
    assert_int_equal(l.exec_failed, 1);
    assert_non_null(strstr(l.message, "/nonexistent/train"));
    job.argv = nopath;
    prepare(&l, &job, 1);
    assert_int_equal(oomi_launch_run(&l), OOM_EJOB);
    assert_int_equal(l.exit_code, 127);
    assert_non_null(strstr(l.message, "not found"));
    job.argv = noexec;
    prepare(&l, &job, 1);
    assert_int_equal(oomi_launch_run(&l), OOM_EJOB);
    assert_int_equal(l.exit_code, 126);
}

static void test_timeout_escalates(void **state)
{
    const char *argv[] = {fakejob, "--steps", "100000", "--ignore-sigterm", NULL};
    oom_job job = {argv, NULL, -1, -1};
    oomi_launch l;
    (void)state;
    prepare(&l, &job, 1);
    l.timeout_s = 0.3;
    l.kill_grace_s = 0.3;
    assert_int_equal(oomi_launch_run(&l), OOM_OK);
    assert_int_equal(l.timed_out, 1);
    assert_int_equal(l.exit_code, 128 + SIGKILL);
    assert_int_equal(l.oom, 0);
    assert_int_equal(kill((pid_t)l.pid, 0), -1); /* gone and reaped */
}

static void test_stop_forwarded(void **state)
{
    static volatile sig_atomic_t stop = SIGINT;
    const char *argv[] = {fakejob, "--steps", "100000", NULL};
    oom_job job = {argv, NULL, -1, -1};
    oomi_launch l;
    (void)state;
    prepare(&l, &job, 1);
    l.stop = &stop;
    assert_int_equal(oomi_launch_run(&l), OOM_OK);
    assert_int_equal(l.stop_signal, SIGINT);
    assert_int_equal(l.exit_code, 128 + SIGINT);
}

/* A caller whose standard descriptors are closed: the pipes to the job then land on fds 0-2,
 * and the child must still give the job its stdout/stderr pipes (not close one while placing
 * the other) and an open stdin. Runs in a forked process, which reports through its status. */
static void test_closed_std_fds(void **state)
{
    const char *argv[] = {"sh", "-c", "cat >/dev/null && echo out && echo err >&2", NULL};
    char opath[] = "/tmp/oomless-test-proc-out.XXXXXX",
         epath[] = "/tmp/oomless-test-proc-err.XXXXXX";
    char buf[64];
    int ofd = mkstemp(opath), efd = mkstemp(epath), status = 0;
    pid_t pid;
    ssize_t n;

    (void)state;
    assert_true(ofd > 2 && efd > 2);
    pid = fork();
    if (pid == 0) {
        oom_job job = {argv, NULL, ofd, efd};
        oomi_launch l;
        close(0);
        close(1);
        close(2);
        prepare(&l, &job, 1);
        _exit(oomi_launch_run(&l) != OOM_OK ? 100 : l.exit_code);
    }
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    n = pread(ofd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    assert_string_equal(buf, "out\n");
    n = pread(efd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    assert_string_equal(buf, "err\n");
    close(ofd);
    close(efd);
    unlink(opath);
    unlink(epath);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_argv_not_resplit),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_exit_and_step),
        cmocka_unit_test(test_oom),
        cmocka_unit_test(test_exec_failure),
        cmocka_unit_test(test_timeout_escalates),
        cmocka_unit_test(test_stop_forwarded),
        cmocka_unit_test(test_closed_std_fds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
