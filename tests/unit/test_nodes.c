/* test_nodes.c - one job over several nodes (lib/job/nodes.c, lib/job/sync.c): what a command
 * line says (one part of a multi-node job, the job's id, the in-loop integrations), and the
 * records the nodes' supervisors agree through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "job/job.h"
#include "unit/tmpdir.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[512];

static int make_dir(void **state)
{
    (void)state;
    return mkdtemp(test_tmp_path(dir, sizeof(dir), "oomless-nodes-XXXXXX")) ? 0 : -1;
}

static int remove_dir(void **state)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1024];
    (void)state;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    return rmdir(dir);
}

static oomi_sync *open_as(const char *job, const char *node)
{
    oomi_sync *s = NULL;
    assert_int_equal(oomi_sync_open(&s, dir, job, NULL, 0.2), OOM_OK);
    oomi_sync_set_node(s, node);
    return s;
}

/* Two supervisors of job `job`, nodes "a" and "b". */
static void open_two(oomi_sync **a, oomi_sync **b, const char *job)
{
    *a = open_as(job, "a");
    *b = open_as(job, "b");
}

/* Appends a line as another (older) run would have written it, `age` seconds ago. */
static void raw(const oomi_sync *s, const char *node, int attempt, const char *event, double age,
                const char *extra)
{
    FILE *f = fopen(oomi_sync_path(s), "a");
    assert_non_null(f);
    fprintf(f, "{\"time\":%.3f,\"job\":\"%s\",\"node\":\"%s\",\"attempt\":%d,\"event\":\"%s\"%s}\n",
            oomi_now_unix() - age, oomi_sync_job(s), node, attempt, event, extra);
    fclose(f);
}

static int all_ended(const oomi_sync_look *k)
{
    return k->ended;
}

static oomi_sync_look look(oomi_sync *s)
{
    oomi_sync_look k;
    assert_int_equal(oomi_sync_look_now(s, &k), OOM_OK);
    return k;
}

static void test_first_oom_after_own_launch_decides(void **state)
{
    oomi_sync *a, *b;
    oomi_sync_look k;
    (void)state;
    open_two(&a, &b, "job 1/x");
    assert_non_null(strstr(oomi_sync_path(a), "/oomless-sync-job_1_x.jsonl"));
    /* an earlier run of the same id, its supervisor killed: its decision is not this run's */
    raw(a, "old", 1, "launch", 3600, "");
    raw(a, "old", 1, "oom", 3500, ",\"failed_batch\":4,\"batch\":1,\"grad_accum\":8");
    { /* another job id sharing the file name, and a damaged line */
        FILE *f = fopen(oomi_sync_path(a), "a");
        fprintf(f,
                "{\"time\":%.3f,\"job\":\"job 1:x\",\"node\":\"x\",\"attempt\":1,"
                "\"event\":\"launch\"}\nnot json\n",
                oomi_now_unix());
        fclose(f);
    }
    assert_int_equal(oomi_sync_launch(a, 1, 4, 2), OOM_OK);
    assert_int_equal(oomi_sync_launch(b, 1, 4, 2), OOM_OK);
    k = look(a);
    assert_false(k.decided);
    assert_int_equal(k.pending, 2); /* a and b; "old" launched an hour ago */
    assert_false(k.ended);
    assert_int_equal(oomi_sync_end(a, 1), OOM_OK); /* a's job died of the peer's death */
    k = look(a);
    assert_false(k.decided);
    assert_int_equal(k.pending, 1);
    { /* the other job's decision is not this one's */
        FILE *f = fopen(oomi_sync_path(a), "a");
        fputs("{\"time\":1,\"job\":\"job 1:x\",\"node\":\"x\",\"attempt\":1,\"event\":\"oom\","
              "\"batch\":1,\"grad_accum\":8}\n",
              f);
        fclose(f);
    }
    assert_int_equal(oomi_sync_oom(b, 4, 2, 4, 2), OOM_OK);
    assert_int_equal(oomi_sync_oom(a, 4, 3, 3, 2), OOM_OK); /* later: not the decision */
    k = look(a);
    assert_true(k.decided);
    assert_string_equal(k.by, "b");
    assert_int_equal(k.batch, 2);
    assert_int_equal(k.accum, 4);
    assert_int_equal(k.failed_batch, 4);
    assert_true(k.ended);
    assert_string_equal(k.lost, "");
    /* the next attempt: only what follows b's decision counts */
    oomi_sync_next(a);
    oomi_sync_next(b);
    assert_int_equal(oomi_sync_launch(a, 2, 2, 4), OOM_OK);
    k = look(a);
    assert_false(k.decided);
    assert_int_equal(k.pending, 1);
    assert_int_equal(oomi_sync_launch(b, 2, 2, 4), OOM_OK);
    assert_int_equal(look(a).pending, 2);
    /* b gives up: it left the job, which cannot go on without it */
    assert_int_equal(oomi_sync_exit(b, 1), OOM_OK);
    k = look(a);
    assert_string_equal(k.lost, "b");
    assert_int_equal(k.lost_status, 1);
    assert_int_equal(k.pending, 1); /* a itself */
    oomi_sync_free(a);
    oomi_sync_free(b);
}

static void test_nodes_of_the_first_attempt(void **state)
{
    oomi_sync *a, *b;
    oomi_sync_look k;
    int timed_out = 0;
    (void)state;
    open_two(&a, &b, "j2");
    raw(a, "gone", 1, "launch", 100, ""); /* left before a came: not a node of this run */
    raw(a, "gone", 1, "exit", 50, ",\"exit_code\":1");
    assert_int_equal(oomi_sync_launch(a, 1, 8, 1), OOM_OK);
    assert_int_equal(oomi_sync_launch(b, 1, 8, 1), OOM_OK);
    assert_int_equal(oomi_sync_end(b, 1), OOM_OK);
    assert_int_equal(oomi_sync_end(a, 1), OOM_OK);
    /* every node ended the attempt, none out of memory: nothing to wait for */
    k = look(a);
    assert_true(k.ended);
    assert_false(k.decided);
    assert_string_equal(k.lost, "");
    /* a successful exit is not a loss */
    assert_int_equal(oomi_sync_exit(b, 0), OOM_OK);
    assert_string_equal(look(a).lost, "");
    oomi_sync_free(a);
    oomi_sync_free(b);
    /* a node killed before it said anything, within the join window: waited for, boundedly */
    a = open_as("j3", "a");
    raw(a, "ghost", 1, "launch", 100, "");
    assert_int_equal(oomi_sync_launch(a, 1, 8, 1), OOM_OK);
    assert_int_equal(oomi_sync_end(a, 1), OOM_OK);
    assert_int_equal(oomi_sync_wait(a, &k, all_ended, &timed_out, NULL), OOM_OK);
    assert_int_equal(timed_out, 1);
    assert_int_equal(k.pending, 1);
    oomi_sync_free(a);
}

static void test_give_up_and_stop(void **state)
{
    static volatile sig_atomic_t stop = 15;
    oomi_sync *a, *b;
    oomi_sync_look k;
    int timed_out = 0;
    (void)state;
    open_two(&a, &b, "j4");
    assert_int_equal(oomi_sync_launch(a, 1, 1, 8), OOM_OK);
    assert_int_equal(oomi_sync_launch(b, 1, 1, 8), OOM_OK);
    assert_int_equal(oomi_sync_wait(a, &k, all_ended, &timed_out, &stop), OOM_EINTERRUPTED);
    assert_int_equal(oomi_sync_oom(b, 1, 0, 0, -1), OOM_OK); /* no smaller batch: gave up */
    k = look(a);
    assert_true(k.decided);
    assert_int_equal(k.batch, 0);
    assert_int_equal(k.failed_batch, 1);
    oomi_sync_free(a);
    oomi_sync_free(b);
}

static void test_open_errors(void **state)
{
    static const char *const plain[] = {"python3", "train.py", NULL};
    char missing[600];
    oomi_sync *s = NULL;
    (void)state;
    snprintf(missing, sizeof(missing), "%s/nope", dir);
    assert_int_equal(oomi_sync_open(&s, missing, "j", NULL, 1), OOM_EIO);
    assert_non_null(strstr(oom_last_message(), missing));
    unsetenv("SLURM_JOB_ID");
    assert_int_equal(oomi_sync_open(&s, dir, NULL, plain, 1), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "--sync-id"));
    assert_null(s);
}

static void test_job_id(void **state)
{
    static const char *const eq[] = {"torchrun", "--nnodes=2", "--rdzv_id=abc", "t.py", NULL};
    static const char *const none[] = {"python3",        "-m",   "torch.distributed.run",
                                       "--rdzv-id",      "none", "--rdzv-endpoint",
                                       "10.0.0.1:29500", "t.py", "--rdzv-id",
                                       "not-torchrun's", NULL};
    char *id;
    (void)state;
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    unsetenv("PET_RDZV_ID");
    id = oomi_job_id(eq);
    assert_string_equal(id, "abc");
    oomi_free(id);
    id = oomi_job_id(none); /* "none" is torchrun's default: no id; the endpoint is one */
    assert_string_equal(id, "rdzv-10.0.0.1:29500");
    oomi_free(id);
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_STEP_ID", "3", 1);
    id = oomi_job_id(none);
    assert_string_equal(id, "slurm-4242.3");
    oomi_free(id);
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
}

static int multi(const char *const *argv, char *what)
{
    return oomi_multinode(argv, what, 96);
}

static void test_multinode(void **state)
{
    static const char *const two[] = {"torchrun", "--nnodes", "2", "train.py", NULL};
    static const char *const one[] = {"torchrun", "--nnodes=1", "--nproc-per-node=8", "t.py", NULL};
    static const char *const range[] = {"/usr/bin/python3", "-m",   "torch.distributed.run",
                                        "--nnodes=1:4",     "t.py", NULL};
    static const char *const standalone[] = {"torchrun", "--standalone", "--nnodes",
                                             "2",        "t.py",         NULL};
    static const char *const srun[] = {"srun", "torchrun", "--nnodes", "4", "t.py", NULL};
    static const char *const after[] = {"torchrun", "t.py", "--nnodes", "4", NULL};
    static const char *const plain[] = {"python3", "t.py", NULL};
    static const char *const acc[] = {"accelerate", "launch", "--num_machines", "2", "t.py", NULL};
    char what[96] = "";
    (void)state;
    unsetenv("PET_NNODES");
    unsetenv("SLURM_STEP_NUM_TASKS");
    unsetenv("SLURM_PROCID");
    assert_int_equal(multi(two, what), 1);
    assert_string_equal(what, "torchrun --nnodes 2");
    assert_int_equal(multi(range, what), 1);
    assert_string_equal(what, "torchrun --nnodes 1:4");
    assert_int_equal(multi(acc, what), 1);
    assert_string_equal(what, "accelerate launch --num_machines 2");
    assert_int_equal(multi(one, what), 0);
    assert_int_equal(multi(standalone, what), 0);
    assert_int_equal(multi(srun, what), 0);  /* one supervisor sees every node's output */
    assert_int_equal(multi(after, what), 0); /* the script's own option */
    assert_int_equal(multi(plain, what), 0);
    setenv("PET_NNODES", "3", 1);
    assert_int_equal(multi(after, what), 1);
    assert_string_equal(what, "torchrun --nnodes 3");
    unsetenv("PET_NNODES");
    setenv("SLURM_STEP_NUM_TASKS", "8", 1); /* `srun oomless run -- python3 t.py`, 8 tasks */
    setenv("SLURM_PROCID", "5", 1);
    assert_int_equal(multi(plain, what), 1);
    assert_string_equal(what, "task 5 of the 8 tasks of a Slurm step");
    assert_int_equal(multi(srun, what), 0);
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    assert_int_equal(multi(plain, what), 0);
    unsetenv("SLURM_STEP_NUM_TASKS");
    unsetenv("SLURM_PROCID");
}

static void test_integration(void **state)
{
    const char *argv[] = {"torchrun", "--nnodes", "2", NULL, NULL};
    char *path;
    (void)state;
    path = test_write_tmp("\"\"\"A plain job (no oomless.torch here).\"\"\"\nimport torch\n");
    assert_non_null(path);
    argv[3] = path;
    assert_int_equal(oomi_uses_integration(argv), 0); /* no ".py": not a script it can read */
    unlink(path);
    path = test_write_tmp("import os\n    from oomless.torch import TrainStep\n");
    assert_non_null(path);
    {
        char py[600];
        snprintf(py, sizeof(py), "%s.py", path);
        assert_int_equal(rename(path, py), 0);
        argv[3] = py;
        assert_int_equal(oomi_uses_integration(argv), 1);
        unlink(py);
        path = test_write_tmp("\"\"\"Not oomless.hf nor oomless.lightning.\"\"\"\nimport "
                              "oomless\n");
        assert_int_equal(rename(path, py), 0);
        assert_int_equal(oomi_uses_integration(argv), 0);
        unlink(py);
        path = test_write_tmp("from oomless import hf\n");
        assert_int_equal(rename(path, py), 0);
        assert_int_equal(oomi_uses_integration(argv), 1);
        unlink(py);
    }
}

static void test_rdzv_scan(void **state)
{
    static const char timeout[] = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError";
    static const char closed[] = "[rank0]: ...api.RendezvousClosedError: closed";
    oomi_launch l;
    (void)state;
    memset(&l, 0, sizeof(l));
    oomi_rdzv_scan(&l, "RendezvousTimeout", 17);
    assert_int_equal(l.rdzv_error, 0);
    oomi_rdzv_scan(&l, timeout, strlen(timeout));
    assert_int_equal(l.rdzv_error, OOMI_RDZV_TIMEOUT);
    oomi_rdzv_scan(&l, closed, strlen(closed));
    assert_int_equal(l.rdzv_error, OOMI_RDZV_CLOSED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_oom_after_own_launch_decides),
        cmocka_unit_test(test_nodes_of_the_first_attempt),
        cmocka_unit_test(test_give_up_and_stop),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_job_id),
        cmocka_unit_test(test_multinode),
        cmocka_unit_test(test_integration),
        cmocka_unit_test(test_rdzv_scan),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
