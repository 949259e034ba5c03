/* test_run.c - oom_run's relaunch policy against the fake job, and calibration records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "oomless.h"
#include "unit/tmpdir.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_EVENTS 64
static oom_job_event events[MAX_EVENTS];
static int nevents;

static void record(const oom_job_event *ev, void *user)
{
    (void)user;
    if (nevents < MAX_EVENTS)
        events[nevents++] = *ev;
}

/* fake job: 1 GiB + 1 GiB per sample, capacity 4.5 GiB: batches up to 3 fit */
static const char *job_argv[] = {NULL,      "--batch-size",
                                 "{batch}", "--fixed",
                                 "1G",      "--per-sample",
                                 "1G",      "--capacity",
                                 "4.5G",    "--steps",
                                 "2",       "--step-time-ms",
                                 "1",       NULL};

static double run_grace; /* the kill grace run() passes (0: the default) */

static int run(oom_run_result *r, int batch, int accum, long target, int floor, int restarts)
{
    oom_job job = {OOM_JOB_VERSION, job_argv, NULL, -1, -1};
    oom_run_options o = OOM_RUN_OPTIONS_INIT;
    job_argv[0] = getenv("FAKE_JOB");
    o.kill_grace_s = run_grace;
    o.batch = batch;
    o.grad_accum = accum;
    o.target_effective = target;
    o.min_batch = floor;
    o.max_restarts = restarts;
    o.no_gpu = 1;
    o.on_event = record;
    nevents = 0;
    return oom_run(r, &job, &o);
}

static void test_restarts_keep_effective_batch(void **state)
{
    oom_run_result r = OOM_RUN_RESULT_INIT;
    (void)state;
    /* 12 x 1: 12 -> 6 (OOM) -> 4 (OOM) -> 3 fits, accumulation 4 */
    assert_int_equal(run(&r, 12, 1, 0, 0, 0), OOM_OK);
    assert_int_equal(r.exit_code, 0);
    assert_int_equal(r.batch, 3);
    assert_int_equal(r.grad_accum, 4);
    assert_int_equal(r.effective, 12);
    assert_int_equal(r.attempts, 4);
    assert_int_equal(r.restarts, 3);
    assert_int_equal(events[0].kind, OOM_EVENT_LAUNCH);
    assert_int_equal(events[1].kind, OOM_EVENT_OOM);
    assert_int_equal(events[2].kind, OOM_EVENT_RESTART);
    assert_int_equal(events[2].previous_batch, 12);
    assert_int_equal(events[2].batch, 6);
    assert_int_equal(events[2].grad_accum, 2);
    assert_int_equal(events[nevents - 1].kind, OOM_EVENT_EXIT);
}

static void test_floor_and_restart_bounds(void **state)
{
    oom_run_result r = OOM_RUN_RESULT_INIT;
    (void)state;
    assert_int_equal(run(&r, 8, 2, 0, 4, 0), OOM_ENOFIT); /* 8 -> 4 (OOM), floor 4 */
    assert_int_equal(r.attempts, 2);
    assert_int_equal(r.batch, 4);
    assert_int_equal(r.oom, 1);
    assert_non_null(strstr(oom_last_message(), "batch 4"));
    assert_int_equal(run(&r, 12, 1, 0, 0, 1), OOM_ENOFIT); /* one restart allowed */
    assert_int_equal(r.attempts, 2);
    assert_int_equal(r.restarts, 1);
    assert_int_equal(run(&r, 7, 1, 0, 0, -1), OOM_ENOFIT); /* -1: no restart at all */
    assert_int_equal(r.attempts, 1);
    assert_int_equal(run(&r, 5, 0, 10, 0, 0), OOM_OK); /* 5 x 2 -> 2 x 5 (4, 3 do not divide) */
    assert_int_equal(r.batch, 2);
    assert_int_equal(r.grad_accum, 5);
}

static volatile sig_atomic_t stop_flag;

static void stop_on_end(const oom_job_event *ev, void *user)
{
    (void)user;
    if (ev->kind == OOM_EVENT_OOM || ev->kind == OOM_EVENT_EXIT)
        stop_flag = SIGTERM; /* as a handler would, between two launches */
}

static void test_signal_between_launches(void **state)
{
    oom_job job = {OOM_JOB_VERSION, job_argv, NULL, -1, -1};
    oom_run_options o = OOM_RUN_OPTIONS_INIT;
    oom_probe_options po = OOM_PROBE_OPTIONS_INIT;
    oom_probe_result *pr = NULL;
    oom_run_result r = OOM_RUN_RESULT_INIT;
    (void)state;
    job_argv[0] = getenv("FAKE_JOB");
    o.batch = 12;
    o.no_gpu = 1;
    o.on_event = stop_on_end;
    o.stop = &stop_flag;
    stop_flag = 0;
    assert_int_equal(oom_run(&r, &job, &o), OOM_EINTERRUPTED);
    assert_int_equal(r.attempts, 1); /* no relaunch after the signal */
    assert_int_equal(r.stop_signal, SIGTERM);
    po.no_gpu = 1;
    po.on_event = stop_on_end;
    po.stop = &stop_flag;
    stop_flag = 0;
    assert_int_equal(oom_probe(&pr, &job, &po), OOM_EINTERRUPTED);
    assert_non_null(pr);
    assert_int_equal(pr->launches, 1);
    assert_int_equal(pr->stop_signal, SIGTERM);
    oom_probe_result_free(pr);
}

static void test_bad_options(void **state)
{
    oom_run_result r = OOM_RUN_RESULT_INIT;
    (void)state;
    assert_int_equal(run(&r, 0, 1, 0, 0, 0), OOM_EINVAL);
    assert_int_equal(run(&r, 4, 3, 8, 0, 0), OOM_EINVAL); /* 4 x 3 != 8 */
    assert_non_null(strstr(oom_last_message(), "8"));
    assert_int_equal(run(&r, 2, 1, 0, 3, 0), OOM_EINVAL); /* below the floor */
}

/* a kill grace beyond OOM_MAX_KILL_GRACE (1e308: never killed) is refused before any launch */
static void test_kill_grace_bound(void **state)
{
    oom_probe_options po = OOM_PROBE_OPTIONS_INIT;
    oom_probe_result *pr = NULL;
    oom_run_result r = OOM_RUN_RESULT_INIT;
    (void)state;
    run_grace = 1e308;
    assert_int_equal(run(&r, 1, 1, 0, 0, 0), OOM_EINVAL);
    assert_string_equal(oom_last_message(),
                        "run: kill grace 1e+308 s is not from 0 to 3600 seconds");
    assert_int_equal(nevents, 0); /* nothing launched */
    run_grace = -1;
    assert_int_equal(run(&r, 1, 1, 0, 0, 0), OOM_EINVAL);
    po.no_gpu = 1;
    po.kill_grace_s = OOM_MAX_KILL_GRACE + 1;
    assert_int_equal(oom_probe(&pr, &(oom_job){OOM_JOB_VERSION, job_argv, NULL, -1, -1}, &po),
                     OOM_EINVAL);
    assert_null(pr);
    assert_non_null(strstr(oom_last_message(), "probe: kill grace 3601 s"));
    run_grace = OOM_MAX_KILL_GRACE;
    assert_int_equal(run(&r, 1, 1, 0, 0, 0), OOM_OK);
    run_grace = 0;
}

static void test_calibration_roundtrip(void **state)
{
    char dir[512], path[600], *key = NULL, *other = NULL;
    const char *argv[] = {"python", "train.py", "--bs", "{batch}", NULL};
    const char *argv2[] = {"python", "train.py", "--bs={batch}", NULL};
    oom_calibration rec = OOM_CALIBRATION_INIT, *got = NULL;
    (void)state;
    assert_non_null(mkdtemp(test_tmp_path(dir, sizeof(dir), "oomless-calib.XXXXXX")));
    snprintf(path, sizeof(path), "%s/sub/calibration.jsonl", dir);
    assert_int_equal(oom_calibration_command_key(&key, argv), OOM_OK);
    assert_string_equal(key, "[\"python\",\"train.py\",\"--bs\",\"{batch}\"]");
    assert_int_equal(oom_calibration_command_key(&other, argv2), OOM_OK);
    rec.gpu = "NVIDIA H100 80GB HBM3";
    rec.command = key;
    rec.workload = "seq=2048";
    rec.fit = (oom_probe_fit){OOM_PROBE_FIT_VERSION, 1, 0, 1e9, 2e7, 0};
    rec.recommended_batch = 100;
    rec.max_batch = 101;
    rec.usable_bytes = 3000000000ULL;
    assert_int_equal(oom_calibration_lookup(&got, path, rec.gpu, key, "seq=2048"), OOM_ENOTFOUND);
    assert_int_equal(oom_calibration_save(path, &rec), OOM_OK);
    rec.recommended_batch = 90; /* a newer record for the same key wins */
    assert_int_equal(oom_calibration_save(path, &rec), OOM_OK);
    assert_int_equal(oom_calibration_lookup(&got, path, rec.gpu, key, "seq=2048"), OOM_OK);
    assert_int_equal(got->recommended_batch, 90);
    assert_int_equal(got->max_batch, 101);
    assert_true(got->fit.valid && got->fit.per_sample_bytes == 2e7);
    assert_int_equal(oom_probe_fit_max_batch(&got->fit, 3000000000ULL, 1 << 20), 100);
    oom_calibration_free(got);
    got = NULL;
    assert_int_equal(oom_calibration_lookup(&got, path, rec.gpu, other, "seq=2048"), OOM_ENOTFOUND);
    assert_int_equal(oom_calibration_lookup(&got, path, rec.gpu, key, "seq=4096"), OOM_ENOTFOUND);
    assert_int_equal(oom_calibration_lookup(&got, path, "RTX 4090", key, "seq=2048"),
                     OOM_ENOTFOUND);
    assert_null(got);
    oom_free(key);
    oom_free(other);
    unlink(path);
    snprintf(path, sizeof(path), "%s/sub", dir);
    rmdir(path);
    rmdir(dir);
}

/* A caller with stderr closed: the events file must not become fd 2, where the job's stderr is
 * copied (stderr_fd 0 means 2). Runs in a forked process. */
static void test_events_above_std_fds(void **state)
{
    const char *argv[] = {"sh", "-c", "echo job-stderr-text >&2", NULL};
    char path[256], buf[4096];
    int fd = mkstemp(test_tmp_path(path, sizeof(path), "oomless-test-run-events.XXXXXX"));
    int status = 0;
    pid_t pid;
    ssize_t n;

    (void)state;
    assert_true(fd >= 0);
    close(fd);
    pid = fork();
    if (pid == 0) {
        oom_job job = {OOM_JOB_VERSION, argv, NULL, 0, 0};
        oom_run_options o = OOM_RUN_OPTIONS_INIT;
        oom_run_result r = OOM_RUN_RESULT_INIT;
        o.batch = 1;
        o.no_gpu = 1;
        o.events_path = path;
        close(2);
        _exit(oom_run(&r, &job, &o) == OOM_OK && r.exit_code == 0 ? 0 : 1);
    }
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    fd = open(path, O_RDONLY);
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    unlink(path);
    buf[n > 0 ? n : 0] = '\0';
    assert_non_null(strstr(buf, "\"event\":\"launch\""));
    assert_null(strstr(buf, "job-stderr-text"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restarts_keep_effective_batch),
        cmocka_unit_test(test_floor_and_restart_bounds),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_kill_grace_bound),
        cmocka_unit_test(test_signal_between_launches),
        cmocka_unit_test(test_calibration_roundtrip),
        cmocka_unit_test(test_events_above_std_fds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
