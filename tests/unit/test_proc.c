/* test_proc.c - one supervised launch: placeholders, environment, exit codes, OOM, exec failure,
 * timeout with SIGKILL escalation, signal forwarding; which processes are the job's, and GPU
 * sampling that never reads the whole process table. Uses the fake job ($FAKE_JOB) and the
 * fake NVML ($FAKE_NVML_LIB). */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "job/job.h"
#include "unit/tmpdir.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static oom_patterns *patterns;
static const char *fakejob;

/* Every opendir() of this program, the library's included, comes here first: the test counts
 * the reads of the whole process table (opendir("/proc")). */
static int proc_table_reads;
DIR *opendir(const char *name)
{
    static DIR *(*real)(const char *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "opendir");
    if (!strcmp(name, "/proc"))
        proc_table_reads++;
    return real ? real(name) : NULL;
}

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
    char path[512];
    int fd = mkstemp(test_tmp_path(path, sizeof(path), "oomless-test-proc.XXXXXX"));
    oom_job job = {OOM_JOB_VERSION, argv, env, 0, -1};
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
    oom_job job = {OOM_JOB_VERSION, argv, NULL, -1, -1};
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
    oom_job job = {OOM_JOB_VERSION, argv, NULL, -1, -1};
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
    oom_job job = {OOM_JOB_VERSION, missing, NULL, -1, -1};
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
    oom_job job = {OOM_JOB_VERSION, argv, NULL, -1, -1};
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
    oom_job job = {OOM_JOB_VERSION, argv, NULL, -1, -1};
    oomi_launch l;
    (void)state;
    prepare(&l, &job, 1);
    l.stop = &stop;
    assert_int_equal(oomi_launch_run(&l), OOM_OK);
    assert_int_equal(l.stop_signal, SIGINT);
    assert_int_equal(l.exit_code, 128 + SIGINT);
}

/* ---- which processes are the job's ------------------------------------------------------- */

struct born {
    char who; /* 'g': stays in the group; 's': left it (setsid) */
    pid_t pid;
};

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0)
        ;
}

/* a leader in its own group with two children: one in the group, one that left it */
static pid_t spawn_family(pid_t *grouped, pid_t *left)
{
    struct born b;
    int p[2], i;
    pid_t leader;

    assert_int_equal(pipe(p), 0);
    leader = fork();
    if (leader == 0) {
        setpgid(0, 0);
        for (i = 0; i < 2; i++)
            if (fork() == 0) {
                b.who = i ? 's' : 'g';
                if (i)
                    setsid();
                b.pid = getpid();
                if (write(p[1], &b, sizeof(b)) != (ssize_t)sizeof(b))
                    _exit(1);
                pause_ms(60000);
                _exit(0);
            }
        pause_ms(60000);
        _exit(0);
    }
    setpgid(leader, leader);
    close(p[1]);
    for (i = 0; i < 2; i++) {
        assert_int_equal(read(p[0], &b, sizeof(b)), sizeof(b));
        *(b.who == 's' ? left : grouped) = b.pid;
    }
    close(p[0]);
    return leader;
}

static int listed(const pid_t *pids, size_t n, pid_t pid)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (pids[i] == pid)
            return 1;
    return 0;
}

static void test_tree_walk(void **state)
{
    pid_t older, leader, grouped = 0, left = 0, pids[1024];
    oomi_tree t;
    size_t n;
    (void)state;

    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0); /* as oomi_proc_spawn does */
    older = fork(); /* our child, but started before the job: not the job's */
    if (older == 0) {
        pause_ms(60000);
        _exit(0);
    }
    pause_ms(50); /* a start time a few clock ticks before the leader's */
    leader = spawn_family(&grouped, &left);
    t = (oomi_tree){leader, oomi_proc_start_time(leader), NULL, 0, 0};
    assert_true(t.since > 0);
    assert_true(oomi_proc_in_tree(leader, &t));
    assert_true(oomi_proc_in_tree(grouped, &t));
    assert_true(oomi_proc_in_tree(left, &t)); /* a descendant, out of the group */
    assert_false(oomi_proc_in_tree(older, &t));
    assert_false(oomi_proc_in_tree(getpid(), &t));
    assert_false(oomi_proc_in_tree(getppid(), &t));
    assert_false(oomi_proc_in_tree(1, &t));
    assert_false(oomi_proc_in_tree(0, &t));
    /* the same set as the scan of the whole table */
    n = oomi_proc_tree(pids, 1024, &t);
    assert_int_equal(n, 3);
    assert_true(listed(pids, n, leader) && listed(pids, n, grouped) && listed(pids, n, left));
    /* the leader dies: its children are reparented to us and still count */
    kill(leader, SIGKILL);
    waitpid(leader, NULL, 0);
    assert_true(oomi_proc_in_tree(left, &t));
    assert_true(oomi_proc_in_tree(grouped, &t));
    assert_false(oomi_proc_in_tree(older, &t));
    n = oomi_proc_tree(pids, 1024, &t);
    assert_int_equal(n, 2);
    kill(grouped, SIGKILL);
    kill(left, SIGKILL);
    kill(older, SIGKILL);
    waitpid(grouped, NULL, 0);
    waitpid(left, NULL, 0);
    waitpid(older, NULL, 0);
}

/* GPU sampling every 50 ms looks up only the PIDs NVML lists: the whole process table is read
 * only to kill what is left at the end, not once per sample */
static void test_sampling_reads_no_process_table(void **state)
{
    const char *lib = getenv("FAKE_NVML_LIB");
    char dir[512], procdir[600], spec[600], text[1024], file[640];
    const char *argv[] = {
        fakejob,   "--batch-size", "{batch}",      "--steps", "20",        "--step-time-ms", "50",
        "--fixed", "1G",           "--per-sample", "1M",      "--procdir", procdir,          NULL};
    oom_job job = {OOM_JOB_VERSION, argv, NULL, -1, -1};
    oom_gpu_session *gpu = NULL;
    oomi_launch l;
    FILE *f;
    (void)state;

    if (!lib)
        skip();
    assert_non_null(mkdtemp(test_tmp_path(dir, sizeof(dir), "oomless-test-sample.XXXXXX")));
    snprintf(procdir, sizeof(procdir), "%s/procs", dir);
    snprintf(spec, sizeof(spec), "%s/spec", dir);
    assert_int_equal(mkdir(procdir, 0700), 0);
    /* our parent holds 1 GiB on the GPU too: a live process that is not the job's */
    snprintf(text, sizeof(text),
             "gpu name=\"Fake\" total=8589934592 used=0\n"
             "proc gpu=0 pid=%d used=1073741824\nprocdir %s\n",
             (int)getppid(), procdir);
    assert_non_null(f = fopen(spec, "w"));
    fputs(text, f);
    fclose(f);
    setenv("OOMLESS_NVML_LIBRARY", lib, 1);
    setenv("FAKE_NVML_SPEC", spec, 1);
    assert_int_equal(oom_gpu_open(&gpu), OOM_OK);
    prepare(&l, &job, 4);
    l.gpu = gpu;
    { /* the count sees the library's reads: one scan of the table is one */
        pid_t none[4];
        oomi_tree t = {getpid(), 0, NULL, 0, 0};
        proc_table_reads = 0;
        oomi_proc_tree(none, 4, &t);
        assert_int_equal(proc_table_reads, 1);
    }
    proc_table_reads = 0;
    assert_int_equal(oomi_launch_run(&l), OOM_OK);
    assert_int_equal(l.exit_code, 0);
    assert_int_equal(l.peak_bytes, 1073741824ull + 4 * 1048576ull); /* the job's memory alone */
    /* ~20 samples over the job's second; before, each read the whole table */
    if (proc_table_reads > 3)
        fail_msg("%d reads of the whole process table", proc_table_reads);
    oom_gpu_close(gpu);
    snprintf(file, sizeof(file), "%s/%ld", procdir, l.pid);
    unlink(file);
    rmdir(procdir);
    unlink(spec);
    rmdir(dir);
}

/* A caller whose standard descriptors are closed: the pipes to the job then land on fds 0-2,
 * and the child must still give the job its stdout/stderr pipes (not close one while placing
 * the other) and an open stdin. Runs in a forked process, which reports through its status. */
static void test_closed_std_fds(void **state)
{
    const char *argv[] = {"sh", "-c", "cat >/dev/null && echo out && echo err >&2", NULL};
    char opath[256], epath[256], buf[64];
    int ofd = mkstemp(test_tmp_path(opath, sizeof(opath), "oomless-test-proc-out.XXXXXX"));
    int efd = mkstemp(test_tmp_path(epath, sizeof(epath), "oomless-test-proc-err.XXXXXX"));
    int status = 0;
    pid_t pid;
    ssize_t n;

    (void)state;
    assert_true(ofd > 2 && efd > 2);
    pid = fork();
    if (pid == 0) {
        oom_job job = {OOM_JOB_VERSION, argv, NULL, ofd, efd};
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
        cmocka_unit_test(test_tree_walk),
        cmocka_unit_test(test_sampling_reads_no_process_table),
        cmocka_unit_test(test_closed_std_fds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
