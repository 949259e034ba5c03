/*
 * test_calib.c - the calibration store against damaged and hostile files: lines are parsed by
 * length (NUL bytes and cut records are skipped, with a notice), an append is all or nothing
 * (a short write leaves the file as it was; a file without a final newline gets one first),
 * symbolic links and FIFOs are refused without waiting, a relative $XDG_CACHE_HOME is ignored
 * and a missing $HOME is not created.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "oomless.h"
#include "unit/tmpdir.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const argv_a[] = {"python", "train.py", "--bs", "{batch}", NULL};
static const char GPU[] = "NVIDIA H100 80GB HBM3";

/* ---- notices --------------------------------------------------------------------------------- */

static char notices[8][1024];
static size_t n_notices;

static void on_notice(const char *message, void *user)
{
    (void)user;
    if (n_notices < 8)
        snprintf(notices[n_notices++], sizeof(notices[0]), "%s", message);
}

/* ---- a temporary folder per test ----------------------------------------------------------------
 */

struct fixture {
    char dir[256];
    char path[320]; /* dir/calibration.jsonl */
    char *key;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    test_tmp_path(f->dir, sizeof(f->dir), "oomless-calib.XXXXXX");
    if (!mkdtemp(f->dir) || oom_calibration_command_key(&f->key, argv_a) != OOM_OK) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof(f->path), "%s/calibration.jsonl", f->dir);
    n_notices = 0;
    oom_set_notice_handler(on_notice, NULL);
    *state = f;
    return 0;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    oom_set_notice_handler(NULL, NULL);
    nftw(f->dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    oom_free(f->key);
    free(f);
    return 0;
}

static void write_bytes(const char *path, const char *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

/* the whole file (malloc'ed, NUL-terminated), *len its size */
static char *read_bytes(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    char *buf;
    long n;
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    n = ftell(fp);
    rewind(fp);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    buf[n] = '\0';
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

static oom_calibration record(const struct fixture *f, int batch)
{
    oom_calibration rec = OOM_CALIBRATION_INIT;
    rec.gpu = (char *)GPU;
    rec.command = f->key;
    rec.workload = "seq=2048";
    rec.fit = (oom_probe_fit){OOM_PROBE_FIT_VERSION, 1, 0, 1e9, 2e7, 0};
    rec.recommended_batch = batch;
    rec.max_batch = batch + 1;
    rec.usable_bytes = 3000000000ULL;
    rec.time = 1700000000.5;
    return rec;
}

/* the line save() writes for a record with this batch (malloc'ed), through a scratch file */
static char *record_line(const struct fixture *f, int batch, size_t *len)
{
    char scratch[320];
    oom_calibration rec = record(f, batch);
    char *line;
    snprintf(scratch, sizeof(scratch), "%s/scratch.jsonl", f->dir);
    assert_int_equal(oom_calibration_save(scratch, &rec), OOM_OK);
    line = read_bytes(scratch, len);
    assert_int_equal(unlink(scratch), 0);
    assert_true(*len > 40 && line[*len - 1] == '\n');
    return line;
}

/* the recommended batch of the record lookup finds, or -1 with the error code in *err */
static int found_batch(const struct fixture *f, const char *path, int *err)
{
    oom_calibration *got = NULL;
    int b;
    *err = oom_calibration_lookup(&got, path, GPU, f->key, "seq=2048");
    if (*err)
        return -1;
    b = got->recommended_batch;
    oom_calibration_free(got);
    return b;
}

/* ---- reading ------------------------------------------------------------------------------------
 */

/* A run of NUL bytes (ext4 after a crash) in the middle: the records after it are still found. */
static void test_nul_bytes_do_not_hide_later_records(void **state)
{
    struct fixture *f = *state;
    size_t n1, n2, len = 0;
    char *r1 = record_line(f, 10, &n1), *r2 = record_line(f, 20, &n2);
    char *text = malloc(n1 + 4096 + n2);
    int err;

    assert_non_null(text);
    memcpy(text, r1, n1);
    len += n1;
    memset(text + len, 0, 4096); /* where a record was, then one glued right after the NULs */
    len += 4096;
    memcpy(text + len, r2, n2);
    len += n2;
    write_bytes(f->path, text, len);
    assert_int_equal(found_batch(f, f->path, &err), 20);
    assert_int_equal(n_notices, 1);
    assert_non_null(strstr(notices[0], f->path));
    assert_non_null(strstr(notices[0], "skipped 1 damaged line (the first is line 2"));

    /* NULs on a line of their own, and a line that ends in them: both skipped, records kept */
    n_notices = 0;
    len = 0;
    memcpy(text, r2, n2 - 1);
    len += n2 - 1;
    memset(text + len, 0, 100);
    len += 100;
    text[len++] = '\n';
    memcpy(text + len, r1, n1);
    len += n1;
    write_bytes(f->path, text, len);
    assert_int_equal(found_batch(f, f->path, &err), 10);
    assert_non_null(strstr(notices[0], "skipped 1 damaged line (the first is line 1"));
    free(text);
    free(r1);
    free(r2);
}

/* A record cut short (a full disk) with the next one glued to it, and trailing garbage: those
 * lines are skipped and reported; the whole lines around them are read. */
static void test_cut_and_glued_lines_are_skipped(void **state)
{
    struct fixture *f = *state;
    size_t n1, n2;
    char *r1 = record_line(f, 10, &n1), *r2 = record_line(f, 20, &n2), *text;
    int err;

    text = malloc(2 * n1 + 2 * n2 + 64);
    assert_non_null(text);
    /* line 1: r1 cut after 40 bytes, then r2 glued; line 2: r1 whole; line 3: r2 + garbage */
    memcpy(text, r1, 40);
    memcpy(text + 40, r2, n2);
    memcpy(text + 40 + n2, r1, n1);
    memcpy(text + 40 + n2 + n1, r2, n2 - 1);
    memcpy(text + 40 + n2 + n1 + n2 - 1, " x\n", 3);
    write_bytes(f->path, text, 40 + n2 + n1 + n2 + 2);
    assert_int_equal(found_batch(f, f->path, &err), 10);
    assert_int_equal(n_notices, 1);
    assert_non_null(strstr(notices[0], "skipped 2 damaged lines (the first is line 1"));
    free(text);
    free(r1);
    free(r2);
}

/* Values no probe, run or trace writes (NaN, infinite, negative, not whole where a batch is,
 * absurdly large, a string, a curve that goes below zero): the record is skipped as damaged, with
 * the notice naming the line and the field, and the record before it is found. Before, the newer
 * NaN record was taken (a plan then said batch 1 "needs 8.00 EiB"). */
static void test_values_no_probe_writes_are_damage(void **state)
{
    static const struct {
        const char *from, *to, *said;
    } cases[] = {
        {"\"fixed_bytes\":1000000000", "\"fixed_bytes\":NaN", "'fixed_bytes' is NaN"},
        {"\"fixed_bytes\":1000000000", "\"fixed_bytes\":-1", "'fixed_bytes' is -1"},
        {"\"per_sample_bytes\":20000000", "\"per_sample_bytes\":Infinity",
         "'per_sample_bytes' is Infinity"},
        {"\"per_sample_bytes\":20000000", "\"per_sample_bytes\":\"20000000\"",
         "'per_sample_bytes' is not a number"},
        {"\"per_sample_bytes\":20000000", "\"per_sample_bytes\":-20000000",
         "its line has a peak that falls below zero"},
        {"\"per_sample2_bytes\":0.0", "\"per_sample2_bytes\":1e30", "'per_sample2_bytes' is 1e30"},
        {"\"per_sample2_bytes\":0.0", "\"per_sample2_bytes\":-1.5", "'per_sample2_bytes' is -1.5"},
        {"\"recommended_batch\":20", "\"recommended_batch\":2.5", "'recommended_batch' is 2.5"},
        {"\"max_batch\":21", "\"max_batch\":4294967296", "'max_batch' is 4294967296"},
        {"\"usable_bytes\":3000000000", "\"usable_bytes\":-3", "'usable_bytes' is -3"},
    };
    struct fixture *f = *state;
    size_t n1, n2, i;
    char *r1 = record_line(f, 10, &n1), *r2 = record_line(f, 20, &n2);
    int err;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[2048], *at = strstr(r2, cases[i].from);
        size_t head, tail, to = strlen(cases[i].to);
        assert_non_null(at);
        head = (size_t)(at - r2);
        tail = n2 - head - strlen(cases[i].from);
        assert_true(n1 + head + to + tail < sizeof(text));
        memcpy(text, r1, n1); /* line 1: good; line 2: the newer record, damaged */
        memcpy(text + n1, r2, head);
        memcpy(text + n1 + head, cases[i].to, to);
        memcpy(text + n1 + head + to, at + strlen(cases[i].from), tail);
        write_bytes(f->path, text, n1 + head + to + tail);
        n_notices = 0;
        assert_int_equal(found_batch(f, f->path, &err), 10);
        assert_int_equal(n_notices, 1);
        if (!strstr(notices[0], "skipped 1 damaged line (the first is line 2: ") ||
            !strstr(notices[0], cases[i].said))
            fail_msg("%s: %s", cases[i].to, notices[0]);
    }
    /* nor is such a line saved: it would be skipped when read */
    {
        oom_calibration rec = record(f, 30);
        rec.fit.fixed_bytes = NAN;
        assert_int_equal(oom_calibration_save(f->path, &rec), OOM_EINVAL);
        assert_non_null(strstr(oom_last_message(), "not a finite number; not saved"));
        rec.fit.fixed_bytes = 1e9;
        rec.fit.per_sample_bytes = -1e6; /* a line that falls below zero */
        assert_int_equal(oom_calibration_save(f->path, &rec), OOM_EINVAL);
        assert_int_equal(found_batch(f, f->path, &err), 10);
    }
    free(r1);
    free(r2);
}

/* ---- appending ----------------------------------------------------------------------------------
 */

/* A file that does not end in a newline (a half line an older version left): the new record
 * starts a line of its own instead of being glued to it. */
static void test_append_starts_a_fresh_line(void **state)
{
    struct fixture *f = *state;
    oom_calibration rec = record(f, 20);
    size_t n1, len;
    char *r1 = record_line(f, 10, &n1), *text;
    int err;

    write_bytes(f->path, r1, 40);
    assert_int_equal(oom_calibration_save(f->path, &rec), OOM_OK);
    text = read_bytes(f->path, &len);
    assert_int_equal(text[40], '\n');
    assert_memory_equal(text, r1, 40);
    assert_int_equal(found_batch(f, f->path, &err), 20);
    assert_non_null(strstr(notices[0], "skipped 1 damaged line (the first is line 1"));
    free(text);
    free(r1);
}

/* The disk fills part way through the line (a file-size limit makes write() stop short, then
 * fail with EFBIG): the error says so, and the file is left byte for byte as it was. */
static void test_short_write_leaves_the_file_unchanged(void **state)
{
    struct fixture *f = *state;
    oom_calibration rec = record(f, 20);
    struct rlimit old, lim;
    size_t n1, len;
    char *r1 = record_line(f, 10, &n1), *text;
    void (*old_handler)(int);
    sigset_t pending, mask;
    int err, rc;

    write_bytes(f->path, r1, n1);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = n1 + 25; /* room for 25 bytes of the new line */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    /* SIGXFSZ's default action (the death of this program) in place: the library holds it
     * back for the append and takes back the one the append raised */
    old_handler = signal(SIGXFSZ, SIG_DFL);
    rc = oom_calibration_save(f->path, &rec);
    assert_int_equal(sigpending(&pending), 0);
    assert_false(sigismember(&pending, SIGXFSZ));
    assert_int_equal(sigprocmask(SIG_BLOCK, NULL, &mask), 0);
    assert_false(sigismember(&mask, SIGXFSZ)); /* the mask as it was */
    signal(SIGXFSZ, old_handler);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);

    assert_int_equal(rc, OOM_EIO);
    assert_non_null(strstr(oom_last_message(), f->path));
    assert_non_null(strstr(oom_last_message(), strerror(EFBIG)));
    assert_null(strstr(oom_last_message(), strerror(EEXIST)));
    text = read_bytes(f->path, &len);
    assert_int_equal(len, n1);
    assert_memory_equal(text, r1, n1);
    free(text);

    /* with room again, the next record is whole and found */
    assert_int_equal(oom_calibration_save(f->path, &rec), OOM_OK);
    assert_int_equal(found_batch(f, f->path, &err), 20);
    assert_int_equal(n_notices, 0);
    free(r1);
}

/* ---- what the store may be ----------------------------------------------------------------------
 */

/* A symbolic link as the store is not written through (it may point anywhere: ~/.bashrc). */
static void test_symlink_store_is_refused(void **state)
{
    struct fixture *f = *state;
    oom_calibration rec = record(f, 20);
    char target[320], link[320], dangling[320], missing[320];
    size_t len;
    char *text;

    snprintf(target, sizeof(target), "%s/target", f->dir);
    snprintf(link, sizeof(link), "%s/link.jsonl", f->dir);
    snprintf(dangling, sizeof(dangling), "%s/dangling.jsonl", f->dir);
    snprintf(missing, sizeof(missing), "%s/missing", f->dir);
    write_bytes(target, "keep\n", 5);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(symlink(missing, dangling), 0);

    assert_int_equal(oom_calibration_save(link, &rec), OOM_EIO);
    assert_non_null(strstr(oom_last_message(), link));
    assert_non_null(strstr(oom_last_message(), "is a symbolic link: refused"));
    text = read_bytes(target, &len);
    assert_int_equal(len, 5);
    assert_memory_equal(text, "keep\n", 5);
    free(text);

    assert_int_equal(oom_calibration_save(dangling, &rec), OOM_EIO);
    assert_non_null(strstr(oom_last_message(), "is a symbolic link: refused"));
    assert_int_equal(access(missing, F_OK), -1);
}

/* A FIFO as the store: refused at once by both save and lookup (the alarm fails a hang). */
static void test_fifo_store_is_refused_without_waiting(void **state)
{
    struct fixture *f = *state;
    oom_calibration rec = record(f, 20);
    int err;

    assert_int_equal(mkfifo(f->path, 0644), 0);
    alarm(20);
    assert_int_equal(oom_calibration_save(f->path, &rec), OOM_EIO);
    assert_non_null(strstr(oom_last_message(), "is a FIFO, not a regular file"));
    assert_int_equal(found_batch(f, f->path, &err), -1);
    assert_int_equal(err, OOM_EIO);
    assert_non_null(strstr(oom_last_message(), "is a FIFO, not a regular file"));
    alarm(0);
    /* a directory is no store either */
    assert_int_equal(oom_calibration_save(f->dir, &rec), OOM_EIO);
    assert_non_null(strstr(oom_last_message(), f->dir));
}

/* ---- where the default store is -----------------------------------------------------------------
 */

struct saved_env {
    char *xdg, *home, cwd[512];
};

static void save_env(struct saved_env *s)
{
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    s->xdg = x ? strdup(x) : NULL;
    s->home = h ? strdup(h) : NULL;
    assert_non_null(getcwd(s->cwd, sizeof(s->cwd)));
}

static void restore_env(struct saved_env *s)
{
    if (s->xdg)
        setenv("XDG_CACHE_HOME", s->xdg, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    if (s->home)
        setenv("HOME", s->home, 1);
    else
        unsetenv("HOME");
    assert_int_equal(chdir(s->cwd), 0);
    free(s->xdg);
    free(s->home);
}

/* The XDG Base Directory spec: a relative $XDG_CACHE_HOME is invalid and must be ignored. */
static void test_relative_xdg_cache_home_is_ignored(void **state)
{
    struct fixture *f = *state;
    oom_calibration rec = record(f, 20);
    char home[300], want[400], rel[300], *path = NULL;
    struct saved_env env;
    struct stat st;
    int err;

    save_env(&env);
    snprintf(home, sizeof(home), "%s/home", f->dir);
    assert_int_equal(mkdir(home, 0755), 0);
    assert_int_equal(chdir(f->dir), 0);
    setenv("XDG_CACHE_HOME", "relcache", 1);
    setenv("HOME", home, 1);

    assert_int_equal(oom_calibration_default_path(&path), OOM_OK);
    snprintf(want, sizeof(want), "%s/.cache/oomless/calibration.jsonl", home);
    assert_string_equal(path, want);
    assert_int_equal(n_notices, 1);
    assert_non_null(strstr(notices[0], "$XDG_CACHE_HOME 'relcache' is not an absolute path: "
                                       "ignored"));
    assert_int_equal(oom_calibration_save(NULL, &rec), OOM_OK);
    assert_int_equal(found_batch(f, NULL, &err), 20);
    snprintf(rel, sizeof(rel), "%s/relcache", f->dir);
    assert_int_equal(access(rel, F_OK), -1);
    /* the cache folders oomless made are private, as the spec asks */
    snprintf(want, sizeof(want), "%s/.cache", home);
    assert_int_equal(stat(want, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    oom_free(path);
    restore_env(&env);
}

/* $HOME=/nonexistent (a service account): oomless does not create it. */
static void test_missing_home_is_not_created(void **state)
{
    struct fixture *f = *state;
    oom_calibration rec = record(f, 20);
    char home[300];
    struct saved_env env;
    int err;

    save_env(&env);
    snprintf(home, sizeof(home), "%s/nonexistent", f->dir);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", home, 1);
    assert_int_equal(oom_calibration_save(NULL, &rec), OOM_EIO);
    assert_non_null(strstr(oom_last_message(), home));
    assert_non_null(strstr(oom_last_message(), "does not exist; not creating it"));
    assert_int_equal(access(home, F_OK), -1);
    assert_int_equal(found_batch(f, NULL, &err), -1);
    assert_int_equal(err, OOM_ENOTFOUND);
    assert_int_equal(access(home, F_OK), -1);
    restore_env(&env);
}

/* A record's further members (version 2's extra: what `oomless trace --calibrate` keeps of its
 * trace) are written after the store's own, and a lookup hands back those it does not know; the
 * quadratic term is written as short as it reads back (Python's repr: 0.1, not
 * 0.10000000000000001), so that the line does not depend on the writer. */
static void test_extra_members_round_trip(void **state)
{
    struct fixture *f = *state;
    oom_calibration rec = record(f, 4), *got = NULL;
    size_t len;
    char *text;

    rec.fit.per_sample2_bytes = 0.1;
    rec.traced = 1;
    rec.gpu = "";
    rec.extra = "{\"counter\":\"allocated\",\"seq\":2048,\"points\":[[1,2.50]]}";
    assert_int_equal(oom_calibration_save(f->path, &rec), OOM_OK);
    text = read_bytes(f->path, &len);
    assert_string_equal(
        text, "{\"time\":1700000000.5,\"gpu\":\"\",\"command\":[\"python\",\"train.py\",\"--bs\","
              "\"{batch}\"],\"workload\":\"seq=2048\",\"fixed_bytes\":1000000000,\"per_sample_"
              "bytes\":20000000,\"per_sample2_bytes\":0.1,\"recommended_batch\":4,\"max_batch\":5,"
              "\"usable_bytes\":3000000000,\"traced\":true,\"counter\":\"allocated\",\"seq\":2048,"
              "\"points\":[[1,2.50]]}\n");
    free(text);
    assert_int_equal(oom_calibration_lookup(&got, f->path, "any GPU", f->key, "seq=2048"), OOM_OK);
    assert_int_equal(got->version, OOM_CALIBRATION_VERSION);
    assert_string_equal(got->extra,
                        "{\"counter\":\"allocated\",\"seq\":2048,\"points\":[[1,2.50]]}");
    assert_true(got->fit.per_sample2_bytes == 0.1);
    oom_calibration_free(got);

    /* a record without further members gives none back */
    rec = record(f, 6);
    assert_int_equal(oom_calibration_save(f->path, &rec), OOM_OK);
    assert_int_equal(oom_calibration_lookup(&got, f->path, GPU, f->key, "seq=2048"), OOM_OK);
    assert_int_equal(got->recommended_batch, 6);
    assert_null(got->extra);
    oom_calibration_free(got);
}

/* extra that is not one JSON object, or that names a member of the store's own, is refused and
 * nothing is written; a version-1 record's caller has no extra to read */
static void test_bad_extra_is_refused(void **state)
{
    struct fixture *f = *state;
    oom_calibration rec = record(f, 4);
    const char *bad[] = {"[1,2]", "{\"seq\":", "{\"max_batch\":9}"};
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rec.extra = (char *)bad[i];
        assert_int_equal(oom_calibration_save(f->path, &rec), OOM_EPARSE);
        assert_non_null(strstr(oom_last_message(), i < 2 ? "not a JSON object" : "'max_batch'"));
        assert_int_equal(access(f->path, F_OK), -1);
    }
    rec.version = 1; /* a program built against version 1: its struct ends before extra */
    assert_int_equal(oom_calibration_save(f->path, &rec), OOM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nul_bytes_do_not_hide_later_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cut_and_glued_lines_are_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_values_no_probe_writes_are_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_starts_a_fresh_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_write_leaves_the_file_unchanged, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_symlink_store_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_store_is_refused_without_waiting, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_relative_xdg_cache_home_is_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_home_is_not_created, setup, teardown),
        cmocka_unit_test_setup_teardown(test_extra_members_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_extra_is_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
