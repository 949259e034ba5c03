/* test_watch.c - bands, trends, CSV rows, the events file, plan peaks, and the monitor against
 * the fake NVML (a child process with OOMLESS_BATCH_SIZE in its environment, a foreign PID, a
 * GPU that gets lost). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "oomless.h"
#include "unit/tmpdir.h"

static char tmpdir[512]; /* $TMPDIR/oomless-watch-XXXXXX */

static void write_text(const char *path, const char *mode, const char *text)
{
    FILE *f = fopen(path, mode);
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* ---- bands --------------------------------------------------------------------------------- */

static void test_bands(void **state)
{
    oom_budget b = OOM_BUDGET_INIT;
    (void)state;
    assert_int_equal(oom_budget_make(&b, 10 * OOM_GiB, OOM_GiB), OOM_OK); /* usable 9 GiB */
    /* no plan: safe up to 90% of usable (8.1 GiB), warning up to usable, critical above */
    assert_int_equal(oom_band_classify(0, &b, OOM_UNKNOWN), OOM_BAND_SAFE);
    assert_int_equal(oom_band_classify(8 * OOM_GiB, &b, OOM_UNKNOWN), OOM_BAND_SAFE);
    assert_int_equal(oom_band_classify((uint64_t)(9 * OOM_GiB * 0.9), &b, OOM_UNKNOWN),
                     OOM_BAND_SAFE);
    assert_int_equal(oom_band_classify((uint64_t)(9 * OOM_GiB * 0.9) + 1, &b, OOM_UNKNOWN),
                     OOM_BAND_WARNING);
    assert_int_equal(oom_band_classify(9 * OOM_GiB, &b, OOM_UNKNOWN), OOM_BAND_WARNING);
    assert_int_equal(oom_band_classify(9 * OOM_GiB + 1, &b, OOM_UNKNOWN), OOM_BAND_CRITICAL);
    /* with a plan peak of 6 GiB: above it is elevated until the warning band */
    assert_int_equal(oom_band_classify(6 * OOM_GiB, &b, 6 * OOM_GiB), OOM_BAND_SAFE);
    assert_int_equal(oom_band_classify(6 * OOM_GiB + 1, &b, 6 * OOM_GiB), OOM_BAND_ELEVATED);
    assert_int_equal(oom_band_classify(8 * OOM_GiB + 512 * OOM_MiB, &b, 6 * OOM_GiB),
                     OOM_BAND_WARNING);
    /* a plan peak above the budget does not hide the warning */
    assert_int_equal(oom_band_classify(9 * OOM_GiB + 1, &b, 20 * OOM_GiB), OOM_BAND_CRITICAL);
    /* a budget of a version this library does not know: unknown, and said */
    b.version = 999;
    assert_int_equal(oom_band_classify(1, &b, OOM_UNKNOWN), OOM_BAND_UNKNOWN);
    assert_non_null(strstr(oom_last_message(), "oom_budget: version 999"));
    b.version = OOM_BUDGET_VERSION;
    /* unknown */
    assert_int_equal(oom_band_classify(OOM_UNKNOWN, &b, OOM_UNKNOWN), OOM_BAND_UNKNOWN);
    assert_int_equal(oom_band_classify(1, NULL, OOM_UNKNOWN), OOM_BAND_UNKNOWN);
    b.usable_bytes = 0;
    assert_int_equal(oom_band_classify(1, &b, OOM_UNKNOWN), OOM_BAND_UNKNOWN);
    assert_string_equal(oom_band_name(OOM_BAND_SAFE), "safe");
    assert_string_equal(oom_band_name(OOM_BAND_ELEVATED), "elevated");
    assert_string_equal(oom_band_name(OOM_BAND_WARNING), "warning");
    assert_string_equal(oom_band_name(OOM_BAND_CRITICAL), "critical");
    assert_string_equal(oom_band_name(OOM_BAND_UNKNOWN), "unknown");
    assert_string_equal(oom_band_name((oom_band)99), "unknown");
}

/* ---- trends -------------------------------------------------------------------------------- */

static void test_trend_linear(void **state)
{
    double t[10];
    uint64_t v[10];
    oom_trend tr = OOM_TREND_INIT;
    size_t i;
    (void)state;
    for (i = 0; i < 10; i++) { /* 10 MiB/s from 1 GiB, one sample per second */
        t[i] = 100.0 + (double)i;
        v[i] = OOM_GiB + (uint64_t)i * 10 * OOM_MiB;
    }
    oom_trend_fit(&tr, t, v, 10, OOM_UNKNOWN, 2 * OOM_GiB);
    assert_true(tr.valid);
    assert_true(tr.growing);
    assert_true(tr.has_eta);
    assert_float_equal(tr.slope_bytes_per_s, 10.0 * OOM_MiB, 1e-3);
    assert_float_equal(tr.r2, 1.0, 1e-9);
    /* last value 1 GiB + 90 MiB; (2 GiB - that) / 10 MiB/s = (1024 - 90) / 10 s */
    assert_float_equal(tr.seconds_to_limit, 93.4, 1e-6);
    /* measured against a current value (the GPU's) instead of the fitted one */
    oom_trend_fit(&tr, t, v, 10, OOM_GiB + 524 * OOM_MiB, 2 * OOM_GiB);
    assert_float_equal(tr.seconds_to_limit, 50.0, 1e-6);
    /* already above the limit */
    oom_trend_fit(&tr, t, v, 10, 3 * OOM_GiB, 2 * OOM_GiB);
    assert_true(tr.has_eta);
    assert_float_equal(tr.seconds_to_limit, 0.0, 0.0);
    /* no limit: growing, no ETA */
    oom_trend_fit(&tr, t, v, 10, OOM_UNKNOWN, OOM_UNKNOWN);
    assert_true(tr.growing);
    assert_false(tr.has_eta);
}

static void test_trend_not_growing(void **state)
{
    double t[10];
    uint64_t flat[10], down[10], noisy[10], tiny[10];
    oom_trend tr = OOM_TREND_INIT;
    size_t i;
    (void)state;
    for (i = 0; i < 10; i++) {
        t[i] = (double)i;
        flat[i] = 5 * OOM_GiB;
        down[i] = 5 * OOM_GiB - (uint64_t)i * OOM_MiB * 10;
        noisy[i] = 5 * OOM_GiB + (i % 2 ? 500 * OOM_MiB : 0) + (uint64_t)i * OOM_MiB;
        tiny[i] = 5 * OOM_GiB + (uint64_t)i * 1000; /* steady but 9 kB in all: noise */
    }
    oom_trend_fit(&tr, t, flat, 10, OOM_UNKNOWN, 6 * OOM_GiB);
    assert_true(tr.valid);
    assert_false(tr.growing);
    assert_false(tr.has_eta);
    assert_float_equal(tr.slope_bytes_per_s, 0.0, 0.0);
    assert_float_equal(tr.r2, 1.0, 0.0);
    oom_trend_fit(&tr, t, down, 10, OOM_UNKNOWN, 6 * OOM_GiB);
    assert_true(tr.valid);
    assert_true(tr.slope_bytes_per_s < 0);
    assert_false(tr.growing);
    oom_trend_fit(&tr, t, noisy, 10, OOM_UNKNOWN, 6 * OOM_GiB);
    assert_true(tr.slope_bytes_per_s > 0);
    assert_true(tr.r2 < OOM_TREND_MIN_R2);
    assert_false(tr.growing);
    oom_trend_fit(&tr, t, tiny, 10, OOM_UNKNOWN, 6 * OOM_GiB);
    assert_true(tr.r2 > 0.99);
    assert_false(tr.growing);
    /* too few samples, too short a span, one sample, equal times */
    oom_trend_fit(&tr, t, down, 4, OOM_UNKNOWN, 6 * OOM_GiB);
    assert_false(tr.growing);
    oom_trend_fit(&tr, t, down, 1, OOM_UNKNOWN, 6 * OOM_GiB);
    assert_false(tr.valid);
    {
        double same[3] = {1, 1, 1}, quick[6] = {0, 0.1, 0.2, 0.3, 0.4, 0.5};
        uint64_t up[6] = {0, OOM_GiB, 2 * OOM_GiB, 3 * OOM_GiB, 4 * OOM_GiB, 5 * OOM_GiB};
        oom_trend_fit(&tr, same, up, 3, OOM_UNKNOWN, 6 * OOM_GiB);
        assert_false(tr.valid);
        oom_trend_fit(&tr, quick, up, 6, OOM_UNKNOWN, 6 * OOM_GiB);
        assert_true(tr.valid);
        assert_false(tr.growing); /* 0.5 s is under OOM_TREND_MIN_SECONDS */
    }
}

/* ---- CSV ----------------------------------------------------------------------------------- */

static void test_csv_rows(void **state)
{
    oom_gpu_info g[2];
    oom_watch_gpu wg[2], *wgp[2] = {&wg[0], &wg[1]};
    oom_watch_process p[2], *pp[2] = {&p[0], &p[1]};
    oom_watch_snapshot s = OOM_WATCH_SNAPSHOT_INIT;
    char *rows = NULL;
    (void)state;

    memset(g, 0, sizeof(g));
    memset(wg, 0, sizeof(wg));
    memset(p, 0, sizeof(p));
    snprintf(g[0].name, sizeof(g[0].name), "NVIDIA A100, \"80GB\"");
    g[0].used_bytes = 1000;
    g[0].total_bytes = 5000;
    g[0].free_bytes = 3800; /* 200 reserved by the driver */
    g[0].has_utilization = 1;
    g[0].utilization_gpu = 45;
    g[1].index = 1;
    snprintf(g[1].name, sizeof(g[1].name), "Tesla T4");
    g[1].lost = 1;
    g[1].used_bytes = 77; /* stale: must not be printed */
    p[0] = (oom_watch_process){.version = OOM_WATCH_PROCESS_VERSION,
                               .pid = 42,
                               .used_bytes = 600,
                               .local = 1,
                               .command = (char *)"python train.py --x=1,2",
                               .user = (char *)"alice",
                               .batch_size = 16,
                               .grad_accum = 4};
    p[1] = (oom_watch_process){.version = OOM_WATCH_PROCESS_VERSION,
                               .pid = 7,
                               .used_bytes = OOM_UNKNOWN,
                               .command = (char *)"",
                               .user = (char *)"",
                               .batch_size = -1,
                               .grad_accum = -1};
    wg[0] = (oom_watch_gpu){.version = OOM_WATCH_GPU_VERSION,
                            .info = &g[0],
                            .band = OOM_BAND_WARNING,
                            .process_count = 2,
                            .processes = pp};
    wg[1] =
        (oom_watch_gpu){.version = OOM_WATCH_GPU_VERSION, .info = &g[1], .band = OOM_BAND_UNKNOWN};
    s.time = 1700000000.25;
    s.gpu_count = 2;
    s.gpus = wgp;

    assert_string_equal(oom_watch_csv_header(),
                        "timestamp,kind,gpu_index,gpu_name,pid,command,user,used_bytes,"
                        "total_bytes,utilization_gpu,temperature_c,band,lost,batch_size,"
                        "grad_accum,reserved_bytes\n");
    assert_int_equal(oom_watch_to_csv(&rows, &s), OOM_OK);
    assert_string_equal(
        rows,
        "1700000000.250,gpu,0,\"NVIDIA A100, \"\"80GB\"\"\",,,,1000,5000,45,,warning,0,,,200\n"
        "1700000000.250,process,0,\"NVIDIA A100, \"\"80GB\"\"\",42,"
        "\"python train.py --x=1,2\",alice,600,,,,,,16,4,\n"
        "1700000000.250,process,0,\"NVIDIA A100, \"\"80GB\"\"\",7,,,,,,,,,,,\n"
        "1700000000.250,gpu,1,Tesla T4,,,,,,,,unknown,1,,,\n");
    oom_free(rows);
    assert_int_equal(oom_watch_to_csv(NULL, &s), OOM_EINVAL);
}

/* Anyone sharing the GPU chooses their command line: a field a spreadsheet would run as a
 * formula is written as text, a control character as \xHH, and a long one comes out whole. */
static void test_csv_injection(void **state)
{
    static const char *const commands[] = {
        "=HYPERLINK(\"http://x\",\"y\")", "+1", "-rf", "@SUM(A1)", "\rcalc", "\tx", "a=b"};
    static const char *const fields[] = {",\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",",
                                         ",'+1,",
                                         ",'-rf,",
                                         ",'@SUM(A1),",
                                         ",\\x0dcalc,", /* escaped: starts no formula */
                                         ",\\x09x,",
                                         ",a=b,"};
    oom_gpu_info g = OOM_GPU_INFO_INIT;
    oom_watch_gpu wg = OOM_WATCH_GPU_INIT, *wgp = &wg;
    oom_watch_process p[8], *pp[8];
    oom_watch_snapshot s = OOM_WATCH_SNAPSHOT_INIT;
    char *rows = NULL, full[1100], longer[1001];
    size_t i;
    (void)state;

    memset(p, 0, sizeof(p));
    snprintf(g.name, sizeof(g.name), "=GPU");
    for (i = 0; i < 7; i++)
        p[i] = (oom_watch_process){.version = OOM_WATCH_PROCESS_VERSION,
                                   .pid = (uint32_t)i + 1,
                                   .used_bytes = 1,
                                   .local = 1,
                                   .command = (char *)commands[i],
                                   .user = (char *)"-bob",
                                   .batch_size = -1,
                                   .grad_accum = -1};
    /* a command far longer than the 256 bytes the field once held: all of it comes out */
    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    p[7] = (oom_watch_process){.version = OOM_WATCH_PROCESS_VERSION,
                               .pid = 8,
                               .used_bytes = 1,
                               .command = longer,
                               .user = (char *)"",
                               .batch_size = -1,
                               .grad_accum = -1};
    wg = (oom_watch_gpu){.version = OOM_WATCH_GPU_VERSION,
                         .info = &g,
                         .band = OOM_BAND_SAFE,
                         .process_count = 8,
                         .processes = pp};
    s.time = 1.0;
    s.gpu_count = 1;
    s.gpus = &wgp;
    for (i = 0; i < 8; i++)
        pp[i] = &p[i];
    assert_int_equal(oom_watch_to_csv(&rows, &s), OOM_OK);
    assert_memory_equal(rows, "1.000,gpu,0,'=GPU,,,,", 21);
    for (i = 0; i < 7; i++) {
        char row[512];
        snprintf(row, sizeof(row), "1.000,process,0,'=GPU,%u%s'-bob,1,", (unsigned)i + 1,
                 fields[i]);
        if (!strstr(rows, row))
            fail_msg("row not found: %s\nin:\n%s", row, rows);
    }
    /* the long command: its 1000 bytes, then the next column */
    snprintf(full, sizeof(full), "1.000,process,0,'=GPU,8,%s,,1,,,,,,,,\n", longer);
    assert_non_null(strstr(rows, full));
    oom_free(rows);
}

/* ---- events -------------------------------------------------------------------------------- */

static void test_event_parse(void **state)
{
    oom_run_event e = OOM_RUN_EVENT_INIT;
    const char *line = "{\"time\": 1700000000.5, \"event\": \"oom\", \"pid\": 123, \"attempt\": 2, "
                       "\"batch\": 32, \"grad_accum\": 4, \"peak_bytes\": 85899345920, "
                       "\"exit_code\": null}\n";
    (void)state;
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_OK);
    assert_float_equal(e.time, 1700000000.5, 1e-6);
    assert_int_equal(e.kind, OOM_RUN_EVENT_OOM);
    assert_string_equal(e.name, "oom");
    assert_int_equal(e.pid, 123);
    assert_int_equal(e.attempt, 2);
    assert_int_equal(e.batch, 32);
    assert_int_equal(e.grad_accum, 4);
    assert_int_equal(e.peak_bytes, 85899345920ULL);
    assert_int_equal(e.exit_code, -1);
    line = "{\"time\": 5, \"event\": \"exit\", \"exit_code\": 0}";
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_OK);
    assert_int_equal(e.kind, OOM_RUN_EVENT_EXIT);
    assert_int_equal(e.exit_code, 0);
    assert_int_equal(e.pid, -1);
    assert_int_equal(e.peak_bytes, OOM_UNKNOWN);
    line = "{\"time\": 5, \"event\": \"checkpoint\"}";
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_OK);
    assert_int_equal(e.kind, OOM_RUN_EVENT_OTHER);
    assert_string_equal(oom_run_event_kind_name(e.kind), "other");
    assert_string_equal(oom_run_event_kind_name(OOM_RUN_EVENT_RESTART), "restart");
    line = "{\"time\": 7.25, \"event\": \"signal\", \"pid\": null, \"signal\": 15}";
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_OK);
    assert_int_equal(e.kind, OOM_RUN_EVENT_SIGNAL);
    assert_int_equal(e.pid, -1);
    assert_string_equal(oom_run_event_kind_name(OOM_RUN_EVENT_KILL), "kill");
    assert_string_equal(oom_run_event_kind_name((oom_run_event_kind)42), "other");
    /* refused: not JSON, truncated, no time, no event, not an object, trailing garbage */
    assert_int_equal(oom_run_event_parse(&e, "hello", 5), OOM_EPARSE);
    line = "{\"time\": 5, \"event\": \"oo";
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_EPARSE);
    line = "{\"event\": \"oom\"}";
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_EPARSE);
    line = "{\"time\": 5}";
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_EPARSE);
    assert_int_equal(oom_run_event_parse(&e, "[1]", 3), OOM_EPARSE);
    line = "{\"time\": 5, \"event\": \"oom\"} x";
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_EPARSE);
    assert_non_null(strstr(oom_last_message(), "event line"));
    /* an event name far longer than the 16 bytes the field once held comes back whole */
    line = "{\"time\": 9, \"event\": \"checkpoint-written-to-shared-storage\"}";
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_OK);
    assert_string_equal(e.name, "checkpoint-written-to-shared-storage");
    oom_run_event_dispose(&e);
    assert_null(e.name);
    oom_run_event_dispose(&e); /* twice is fine */
    oom_run_event_dispose(NULL);
    /* an event of a version this library does not know */
    e.version = 0;
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "oom_run_event: version 0"));
    e.version = 999;
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "oom_run_event: version 999"));
}

/* parses `line` into `e` and checks the summary line it gets */
static void expect_detail(oom_run_event *e, const char *line, const char *want)
{
    assert_int_equal(oom_run_event_parse(e, line, strlen(line)), OOM_OK);
    assert_string_equal(e->detail, want);
}

/* the job's summary of the allocator's snapshot at an OOM (oomless.torch) becomes one line */
static void test_event_snapshot(void **state)
{
    oom_run_event e = OOM_RUN_EVENT_INIT;
    struct {
        oom_run_event ev;
        char after[8];
    } v1;
    const char *line =
        "{\"time\":3.5,\"event\":\"oom_snapshot\",\"pid\":41,\"rank\":1,\"step\":3,"
        "\"allocated_bytes\":7516192768,\"reserved_bytes\":10737418240,"
        "\"inactive_split_bytes\":2147483648,\"frames\":true,\"tried_bytes\":4294967296,"
        "\"largest\":[],\"origins\":[{\"module\":\"lm_head\",\"where\":\"model.py:88 "
        "forward\",\"code\":\"logits = "
        "self.lm_head(h)\",\"bytes\":3328599654,\"count\":1},{\"where\":\"model.py:40 forward\","
        "\"code\":null,\"bytes\":2362232012,\"count\":3}]}";
    (void)state;
    expect_detail(&e, line,
                  "largest: 3.10 GiB (lm_head) model.py:88 forward `logits = "
                  "self.lm_head(h)`, 2.20 GiB model.py:40 forward (3 tensors); "
                  "allocated 7.00 GiB of 10.00 GiB reserved, 2.00 GiB inactive "
                  "split; tried 4.00 GiB; rank 1; step 3");
    assert_string_equal(e.name, "oom_snapshot");
    assert_int_equal(e.pid, 41);
    /* no stacks recorded: the largest blocks, and how to get stacks */
    expect_detail(&e,
                  "{\"time\":4,\"event\":\"oom_snapshot\",\"rank\":null,\"frames\":false,"
                  "\"largest\":[{\"bytes\":1073741824,\"where\":null,\"code\":null}],"
                  "\"origins\":[{\"where\":null,\"bytes\":1073741824,\"count\":1}]}",
                  "largest blocks: 1.00 GiB (no allocation stacks: run --memory-history N records "
                  "them)");
    /* modules tagged, no stacks: the origins by module, and how to get stacks */
    expect_detail(&e,
                  "{\"time\":4,\"event\":\"oom_snapshot\",\"frames\":false,\"tagged\":true,"
                  "\"origins\":[{\"module\":\"decoder.layers.3.mlp\",\"where\":null,"
                  "\"bytes\":2147483648,\"count\":2}]}",
                  "largest: 2.00 GiB (decoder.layers.3.mlp) (2 tensors) (no allocation stacks: "
                  "run --memory-history N records them)");
    /* another event after it: no detail */
    line = "{\"time\": 5, \"event\": \"exit\", \"exit_code\": 0}";
    assert_int_equal(oom_run_event_parse(&e, line, strlen(line)), OOM_OK);
    assert_null(e.detail);
    oom_run_event_dispose(&e);
    /* a version-1 caller's struct ends before `detail`: nothing written past it */
    memset(&v1, 0x5a, sizeof(v1));
    assert_int_equal(oom_run_event_init(&v1.ev, 1), OOM_OK);
    memset((char *)&v1.ev + offsetof(oom_run_event, detail), 0x5a,
           sizeof(v1) - offsetof(oom_run_event, detail));
    line = "{\"time\":4,\"event\":\"oom_snapshot\",\"frames\":false,\"largest\":[]}";
    assert_int_equal(oom_run_event_parse(&v1.ev, line, strlen(line)), OOM_OK);
    assert_string_equal(v1.ev.name, "oom_snapshot");
    assert_int_equal(((unsigned char *)&v1.ev)[offsetof(oom_run_event, detail)], 0x5a);
    oom_run_event_dispose(&v1.ev);
}

static void test_event_log(void **state)
{
    char path[1024];
    oom_event_log *log = NULL;
    size_t added = 99;
    (void)state;

    snprintf(path, sizeof(path), "%s/events.jsonl", tmpdir);
    unlink(path);
    assert_int_equal(oom_event_log_open(&log, path), OOM_OK);
    /* a file that does not exist yet */
    assert_int_equal(oom_event_log_poll(log, &added), OOM_OK);
    assert_int_equal(added, 0);
    assert_int_equal(oom_event_log_count(log), 0);
    assert_null(oom_event_log_at(log, 0));
    /* two lines, the second still being written */
    write_text(path, "w",
               "{\"time\": 1, \"event\": \"launch\", \"batch\": 32}\n{\"time\": 2, \"event\": \"o");
    assert_int_equal(oom_event_log_poll(log, &added), OOM_OK);
    assert_int_equal(added, 1);
    assert_int_equal(oom_event_log_at(log, 0)->kind, OOM_RUN_EVENT_LAUNCH);
    assert_false(oom_event_log_at(log, 0)->batch_changed);
    write_text(path, "a",
               "om\", \"batch\": 32}\nnot json\n\n{\"time\": 3, \"event\": \"restart\", "
               "\"batch\": 16}\n");
    assert_int_equal(oom_event_log_poll(log, &added), OOM_OK);
    assert_int_equal(added, 2);
    assert_int_equal(oom_event_log_count(log), 3);
    assert_int_equal(oom_event_log_skipped(log), 1);
    assert_int_equal(oom_event_log_at(log, 1)->kind, OOM_RUN_EVENT_OOM);
    assert_false(oom_event_log_at(log, 1)->batch_changed);
    assert_int_equal(oom_event_log_at(log, 2)->kind, OOM_RUN_EVENT_RESTART);
    assert_true(oom_event_log_at(log, 2)->batch_changed);
    /* nothing new */
    assert_int_equal(oom_event_log_poll(log, &added), OOM_OK);
    assert_int_equal(added, 0);
    /* replaced by a shorter file: read from the start */
    write_text(path, "w", "{\"time\": 9, \"event\": \"exit\"}\n");
    assert_int_equal(oom_event_log_poll(log, &added), OOM_OK);
    assert_int_equal(added, 1);
    assert_int_equal(oom_event_log_count(log), 1);
    assert_int_equal(oom_event_log_at(log, 0)->kind, OOM_RUN_EVENT_EXIT);
    /* another, longer file renamed over it (a new run): read from its start too */
    {
        char other[1100];
        snprintf(other, sizeof(other), "%s.new", path);
        write_text(other, "w",
                   "{\"time\": 10, \"event\": \"launch\", \"batch\": 8}\n"
                   "{\"time\": 11, \"event\": \"oom\", \"batch\": 8}\n"
                   "{\"time\": 12, \"event\": \"restart\", \"batch\": 4}\n");
        assert_int_equal(rename(other, path), 0);
    }
    assert_int_equal(oom_event_log_poll(log, &added), OOM_OK);
    assert_int_equal(added, 3);
    assert_int_equal(oom_event_log_count(log), 3);
    assert_int_equal(oom_event_log_at(log, 0)->batch, 8);
    assert_true(oom_event_log_at(log, 2)->batch_changed);
    oom_event_log_free(log);
    unlink(path);
    assert_int_equal(oom_event_log_open(&log, ""), OOM_EINVAL);
}

static void test_event_log_keeps_last(void **state)
{
    char path[1024], line[128];
    oom_event_log *log = NULL;
    FILE *f;
    int i;
    (void)state;

    snprintf(path, sizeof(path), "%s/many.jsonl", tmpdir);
    f = fopen(path, "w");
    assert_non_null(f);
    for (i = 0; i < OOM_EVENTS_KEPT + 10; i++) {
        snprintf(line, sizeof(line), "{\"time\": %d, \"event\": \"oom\", \"attempt\": %d}\n", i, i);
        fputs(line, f);
    }
    fclose(f);
    assert_int_equal(oom_event_log_open(&log, path), OOM_OK);
    assert_int_equal(oom_event_log_poll(log, NULL), OOM_OK);
    assert_int_equal(oom_event_log_count(log), OOM_EVENTS_KEPT);
    assert_int_equal(oom_event_log_at(log, 0)->attempt, 10);
    assert_int_equal(oom_event_log_at(log, OOM_EVENTS_KEPT - 1)->attempt, OOM_EVENTS_KEPT + 9);
    oom_event_log_free(log);
    unlink(path);
}

/* NUL bytes where events were (ext4 after a crash) do not hide the events written after them;
 * a line still being written after them is not read twice. */
static void test_event_log_nul_bytes(void **state)
{
    static const char before[] = "{\"time\": 1, \"event\": \"launch\", \"batch\": 8}\n{\"tim";
    static const char after[] = "{\"time\": 2, \"event\": \"oom\", \"batch\": 8}\n{\"time\": 3, ";
    char path[1024], zeros[512] = {0};
    oom_event_log *log = NULL;
    size_t added = 0;
    FILE *f;
    (void)state;

    snprintf(path, sizeof(path), "%s/nul.jsonl", tmpdir);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(before, 1, sizeof(before) - 1, f), sizeof(before) - 1);
    assert_int_equal(fwrite(zeros, 1, sizeof(zeros), f), sizeof(zeros));
    assert_int_equal(fwrite(after, 1, sizeof(after) - 1, f), sizeof(after) - 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(oom_event_log_open(&log, path), OOM_OK);
    assert_int_equal(oom_event_log_poll(log, &added), OOM_OK);
    assert_int_equal(added, 2);
    assert_int_equal(oom_event_log_at(log, 1)->kind, OOM_RUN_EVENT_OOM);
    assert_int_equal(oom_event_log_skipped(log), 2); /* the cut line, the NULs */
    write_text(path, "a", "\"event\": \"restart\", \"batch\": 4}\n");
    assert_int_equal(oom_event_log_poll(log, &added), OOM_OK);
    assert_int_equal(added, 1);
    assert_int_equal(oom_event_log_count(log), 3);
    assert_int_equal(oom_event_log_at(log, 2)->batch, 4);
    assert_int_equal(oom_event_log_skipped(log), 2);
    oom_event_log_free(log);
    unlink(path);
}

/* A FIFO as the events file: refused at once (the alarm fails a hang), not waited on. */
static void test_event_log_fifo(void **state)
{
    char path[1024];
    oom_event_log *log = NULL;
    (void)state;

    snprintf(path, sizeof(path), "%s/fifo.jsonl", tmpdir);
    assert_int_equal(mkfifo(path, 0644), 0);
    assert_int_equal(oom_event_log_open(&log, path), OOM_OK);
    alarm(20);
    assert_int_equal(oom_event_log_poll(log, NULL), OOM_EIO);
    alarm(0);
    assert_non_null(strstr(oom_last_message(), "is a FIFO, not a regular file"));
    oom_event_log_free(log);
    unlink(path);
}

/* ---- plan peak ----------------------------------------------------------------------------- */

static void test_plan_peak(void **state)
{
    char path[1024];
    uint64_t peak = 0;
    (void)state;
    snprintf(path, sizeof(path), "%s/plan.json", tmpdir);
    write_text(path, "w", "{\"memory\": {\"device_peak\": 21474836480}}");
    assert_int_equal(oom_plan_file_peak(&peak, path), OOM_OK);
    assert_int_equal(peak, 20 * OOM_GiB);
    write_text(path, "w", "{\"memory\": {\"device_peak\": \"21.5GiB\"}}");
    assert_int_equal(oom_plan_file_peak(&peak, path), OOM_OK);
    assert_int_equal(peak, 21 * OOM_GiB + 512 * OOM_MiB);
    write_text(path, "w", "{\"memory\": {}}");
    assert_int_equal(oom_plan_file_peak(&peak, path), OOM_ENOTFOUND);
    assert_non_null(strstr(oom_last_message(), "device_peak"));
    write_text(path, "w", "{\"memory\": {\"device_peak\": -5}}");
    assert_int_equal(oom_plan_file_peak(&peak, path), OOM_EINVAL);
    write_text(path, "w", "{\"memory\": {\"device_peak\": \"lots\"}}");
    assert_int_equal(oom_plan_file_peak(&peak, path), OOM_EINVAL);
    write_text(path, "w", "not json");
    assert_int_equal(oom_plan_file_peak(&peak, path), OOM_EPARSE);
    unlink(path);
    assert_int_equal(oom_plan_file_peak(&peak, path), OOM_EIO);
}

/* ---- the monitor against the fake NVML ----------------------------------------------------- */

/* waits (up to 10 s) until the child has exec'd sleep, so /proc shows the new image */
static void wait_exec(pid_t pid, const char *argv0)
{
    char path[64], buf[64] = "";
    struct timespec pause = {0, 10 * 1000 * 1000};
    size_t want = strlen(argv0) < sizeof(buf) - 1 ? strlen(argv0) + 1 : sizeof(buf) - 1;
    int i;
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    for (i = 0; i < 1000; i++) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        if (n >= want && !memcmp(buf, argv0, want))
            return;
        nanosleep(&pause, NULL);
    }
    fail_msg("child %d did not exec sleep", (int)pid);
}

/* a child that runs sleep as `argv0` with OOMLESS_BATCH_SIZE/OOMLESS_GRAD_ACCUM in its
 * environment */
static pid_t spawn_job(const char *argv0)
{
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {(char *)argv0, "60", NULL};
        char *envp[] = {"PATH=/usr/bin:/bin", "OOMLESS_BATCH_SIZE=24", "OOMLESS_GRAD_ACCUM=3",
                        NULL};
        execve("/bin/sleep", argv, envp);
        execve("/usr/bin/sleep", argv, envp);
        _exit(127);
    }
    assert_true(pid > 0);
    wait_exec(pid, argv0);
    return pid;
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    json_object_object_get_ex(o, key, &v);
    return v;
}

static void check_json(const oom_watch_snapshot *s, pid_t job)
{
    char *doc = NULL;
    json_object *root, *g0, *procs, *p0, *p1;
    assert_int_equal(oom_watch_to_json(&doc, s, 0), OOM_OK);
    assert_null(strchr(doc, '\n')); /* one line */
    root = json_tokener_parse(doc);
    assert_non_null(root);
    g0 = json_object_array_get_idx(get(root, "gpus"), 0);
    assert_string_equal(json_object_get_string(get(g0, "name")), "Fake A100");
    assert_int_equal(json_object_get_int64(get(g0, "used_bytes")), 4 * OOM_GiB);
    assert_int_equal(json_object_get_int(get(g0, "utilization")), 50);
    assert_string_equal(json_object_get_string(get(g0, "band")), "safe");
    procs = get(g0, "processes");
    assert_int_equal(json_object_array_length(procs), 2);
    p0 = json_object_array_get_idx(procs, 0);
    p1 = json_object_array_get_idx(procs, 1);
    assert_int_equal(json_object_get_int(get(p0, "pid")), job);
    assert_int_equal(json_object_get_int(get(p0, "batch_size")), 24);
    assert_string_equal(json_object_get_string(get(p0, "command")), "sleep 60");
    assert_int_equal(json_object_get_int(get(p1, "pid")), 999999);
    assert_null(get(p1, "command"));
    assert_false(json_object_get_boolean(get(p1, "local")));
    assert_int_equal(json_object_get_int(get(root, "foreign_pids")), 1);
    json_object_put(root);
    oom_free(doc);
}

static void check_first(const oom_watch_snapshot *s, pid_t job)
{
    const oom_watch_gpu *g0 = s->gpus[0];
    assert_int_equal(s->gpu_count, 2);
    assert_int_equal(s->foreign_pids, 1);
    assert_int_equal(s->plan_peak_bytes, OOM_GiB);
    assert_string_equal(g0->info->name, "Fake A100");
    /* default budget: total - 1 GiB; used 4 GiB is above the plan's 1 GiB: elevated */
    assert_int_equal(g0->budget.usable_bytes, 7 * OOM_GiB);
    assert_int_equal(g0->band, OOM_BAND_ELEVATED);
    assert_int_equal(g0->process_count, 2);
    /* sorted by memory: the job (2 GiB) first, then the foreign PID (1 GiB) */
    assert_int_equal(g0->processes[0]->pid, (uint32_t)job);
    assert_true(g0->processes[0]->local);
    assert_string_equal(g0->processes[0]->command, "sleep 60");
    assert_true(g0->processes[0]->user[0] != '\0');
    assert_int_equal(g0->processes[0]->batch_size, 24);
    assert_int_equal(g0->processes[0]->grad_accum, 3);
    assert_int_equal(g0->processes[1]->pid, 999999);
    assert_false(g0->processes[1]->local);
    assert_string_equal(g0->processes[1]->command, "");
    assert_int_equal(g0->processes[1]->batch_size, -1);
    assert_false(s->gpus[1]->info->lost);
}

static void test_monitor(void **state)
{
    const char *lib = getenv("FAKE_NVML_LIB");
    char spec[1024], procdir[1024], file[1100], text[2048];
    oom_gpu_session *session = NULL;
    oom_monitor *m = NULL;
    const oom_watch_snapshot *s;
    oom_budget tight = OOM_BUDGET_INIT;
    pid_t job;
    (void)state;

    if (!lib)
        skip();
    job = spawn_job("sleep");
    snprintf(procdir, sizeof(procdir), "%s/procs", tmpdir);
    snprintf(file, sizeof(file), "%s/%d", procdir, (int)job);
    snprintf(spec, sizeof(spec), "%s/nvml.spec", tmpdir);
    assert_int_equal(mkdir(procdir, 0700), 0);
    write_text(file, "w", "0 2147483648\n");
    snprintf(text, sizeof(text),
             "gpu name=\"Fake A100\" total=8589934592 used=1073741824 util=50 temp=40\n"
             "gpu name=\"Fake T4\" total=4294967296 used=0 lost_after=1\n"
             "proc gpu=0 pid=999999 used=1073741824\nprocdir %s\n",
             procdir);
    write_text(spec, "w", text);
    setenv("OOMLESS_NVML_LIBRARY", lib, 1);
    setenv("FAKE_NVML_SPEC", spec, 1);

    assert_int_equal(oom_gpu_open(&session), OOM_OK);
    assert_int_equal(oom_monitor_create(&m, session), OOM_OK);
    assert_null(oom_monitor_snapshot(m));
    assert_int_equal(oom_monitor_set_margin(m, "bogus"), OOM_EINVAL);
    assert_int_equal(oom_monitor_set_margin(m, "1GiB"), OOM_OK);
    oom_monitor_set_plan_peak(m, OOM_GiB);
    assert_int_equal(oom_monitor_sample(m), OOM_OK);
    s = oom_monitor_snapshot(m);
    assert_non_null(s);
    check_first(s, job);
    oom_monitor_set_plan_peak(m, OOM_UNKNOWN);
    assert_int_equal(oom_monitor_sample(m), OOM_OK);
    s = oom_monitor_snapshot(m);
    check_json(s, job);
    /* the second GPU is lost now and keeps its name */
    assert_true(s->gpus[1]->info->lost);
    assert_string_equal(s->gpus[1]->info->name, "Fake T4");
    assert_int_equal(s->gpus[1]->band, OOM_BAND_UNKNOWN);
    /* an explicit budget of 1.5 GiB usable: the 2 GiB left after the job is critical */
    assert_int_equal(oom_budget_make(&tight, 2 * OOM_GiB, 512 * OOM_MiB), OOM_OK);
    assert_int_equal(oom_monitor_set_budget(m, 0, &tight), OOM_OK);
    assert_int_equal(oom_monitor_set_budget(m, 64, &tight), OOM_EINVAL);
    /* the job ends: its process disappears from the list */
    kill(job, SIGKILL);
    waitpid(job, NULL, 0);
    assert_int_equal(oom_monitor_sample(m), OOM_OK);
    s = oom_monitor_snapshot(m);
    assert_int_equal(s->gpus[0]->band, OOM_BAND_CRITICAL);
    assert_int_equal(s->gpus[0]->budget.usable_bytes, 1536 * OOM_MiB);
    assert_int_equal(s->gpus[0]->info->used_bytes, 2 * OOM_GiB);
    assert_int_equal(s->gpus[0]->process_count, 1);
    assert_int_equal(s->gpus[0]->processes[0]->pid, 999999);
    oom_monitor_free(m);
    oom_gpu_close(session);
    unlink(file);
    rmdir(procdir);
    unlink(spec);
}

/* A command line longer than the 256 bytes oom_watch_process.command once held comes back whole,
 * and is written to CSV as text even though it starts with '=' */
static void test_long_command(void **state)
{
    const char *lib = getenv("FAKE_NVML_LIB");
    char spec[1024], procdir[1024], file[1100], text[2048], argv0[512], expect[520], field[600];
    oom_gpu_session *session = NULL;
    oom_monitor *m = NULL;
    const oom_watch_snapshot *s;
    char *rows = NULL;
    pid_t job;
    int i;
    (void)state;

    if (!lib)
        skip();
    snprintf(argv0, sizeof(argv0), "=cmd ");
    for (i = 0; i < 200; i++) /* 'é' is 2 bytes: byte 252 falls inside one */
        strcat(argv0, "\xc3\xa9");
    job = spawn_job(argv0);
    snprintf(procdir, sizeof(procdir), "%s/long", tmpdir);
    snprintf(file, sizeof(file), "%s/%d", procdir, (int)job);
    snprintf(spec, sizeof(spec), "%s/long.spec", tmpdir);
    assert_int_equal(mkdir(procdir, 0700), 0);
    write_text(file, "w", "0 1073741824\n");
    snprintf(text, sizeof(text), "gpu name=\"Fake A100\" total=8589934592 used=0\nprocdir %s\n",
             procdir);
    write_text(spec, "w", text);
    setenv("OOMLESS_NVML_LIBRARY", lib, 1);
    setenv("FAKE_NVML_SPEC", spec, 1);
    assert_int_equal(oom_gpu_open(&session), OOM_OK);
    assert_int_equal(oom_monitor_create(&m, session), OOM_OK);
    assert_int_equal(oom_monitor_sample(m), OOM_OK);
    s = oom_monitor_snapshot(m);
    assert_int_equal(s->gpus[0]->process_count, 1);
    /* the whole line, 405 + 3 bytes: nothing cut, no marker */
    snprintf(expect, sizeof(expect), "%s 60", argv0);
    assert_int_equal(strlen(expect), 408);
    assert_string_equal(s->gpus[0]->processes[0]->command, expect);
    assert_int_equal(oom_watch_to_csv(&rows, s), OOM_OK);
    snprintf(field, sizeof(field), ",'%s,", expect);
    assert_non_null(strstr(rows, field));
    oom_free(rows);
    oom_monitor_free(m);
    oom_gpu_close(session);
    kill(job, SIGKILL);
    waitpid(job, NULL, 0);
    unlink(file);
    rmdir(procdir);
    unlink(spec);
}

static void test_monitor_args(void **state)
{
    oom_monitor *m = (oom_monitor *)1;
    (void)state;
    assert_int_equal(oom_monitor_create(&m, NULL), OOM_EINVAL);
    assert_int_equal(oom_monitor_sample(NULL), OOM_EINVAL);
    assert_null(oom_monitor_snapshot(NULL));
    oom_monitor_free(NULL);
    oom_event_log_free(NULL);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(test_tmp_path(tmpdir, sizeof(tmpdir), "oomless-watch-XXXXXX")) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return rmdir(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bands),
        cmocka_unit_test(test_trend_linear),
        cmocka_unit_test(test_trend_not_growing),
        cmocka_unit_test(test_csv_rows),
        cmocka_unit_test(test_csv_injection),
        cmocka_unit_test(test_event_parse),
        cmocka_unit_test(test_event_snapshot),
        cmocka_unit_test(test_event_log),
        cmocka_unit_test(test_event_log_keeps_last),
        cmocka_unit_test(test_event_log_nul_bytes),
        cmocka_unit_test(test_event_log_fifo),
        cmocka_unit_test(test_plan_peak),
        cmocka_unit_test(test_monitor),
        cmocka_unit_test(test_long_command),
        cmocka_unit_test(test_monitor_args),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
