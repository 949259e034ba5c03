/* test_apply_alloc.c - `apply` with the n-th allocation failing, for every n: OOM_ENOMEM comes
 * back, nothing leaks (every block handed out is freed), the files are unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oomless.h"
#include "unit/tmpdir.h"

static long fail_at, count, live;

static void *t_malloc(size_t n, void *user)
{
    void *p;
    (void)user;
    if (++count == fail_at)
        return NULL;
    p = malloc(n ? n : 1);
    live += p != NULL;
    return p;
}

static void *t_realloc(void *p, size_t n, void *user)
{
    void *q;
    (void)user;
    if (++count == fail_at)
        return NULL;
    q = realloc(p, n ? n : 1);
    live += q && !p;
    return q;
}

static void t_free(void *p, void *user)
{
    (void)user;
    live -= p != NULL;
    free(p);
}

static const oom_allocator failing = {OOM_ALLOCATOR_VERSION, t_malloc, t_realloc, t_free, NULL};

static const char plan[] = "{\"plan\": {\"batch_size\": 8, \"grad_accum\": 4, \"precision\": "
                           "\"bf16\", \"sharding\": \"zero3\", \"gpus\": 2}}";
static const char yaml[] = "# ü 😀\na:\n  b: 1  # é\n  f: {x: 1}\n  l: [1, 'two']\n";
static const char json[] = "{\n  \"a\": {\"b\": 1, \"s\": \"x\"},\n  \"z\": 5e8\n}\n";

/* one whole use of the API; returns the first error */
static int scenario(const char *name, const char *text, const char *path)
{
    oom_apply *a = NULL;
    char *out = NULL, *diff = NULL, *report = NULL;
    size_t len;
    int err;
    const char *files[1] = {path};

    if ((err = oom_apply_create(&a)) || (err = oom_apply_load_plan(a, plan, "plan")) ||
        (err = oom_apply_set(a, "a.b", "batch_size", 0)) ||
        (err = oom_apply_set(a, "a.new.deep", "precision==bf16", 0)) ||
        (err = oom_apply_set(a, "a.f.y", "global_batch", OOM_APPLY_OPTIONAL)) ||
        (err = oom_apply_buffer(a, name, text, strlen(text), OOM_APPLY_CREATE, &out, &len)) ||
        (err = oom_apply_report(a, &report)))
        goto done;
    oom_free(report);
    report = NULL;
    if ((err = oom_apply_run(a, files, 1, OOM_APPLY_CREATE | OOM_APPLY_DRY_RUN, &diff)) ||
        (err = oom_apply_report(a, &report)))
        goto done;
done:
    oom_free(out);
    oom_free(diff);
    oom_free(report);
    oom_apply_free(a);
    return err;
}

static void every_n(const char *name, const char *text)
{
    char path[512];
    int fd = mkstemp(test_tmp_path(path, sizeof(path), "oomless-alloc-XXXXXX")), err;
    long n;

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    oom_set_allocator(&failing);
    for (n = 1;; n++) {
        fail_at = n;
        count = live = 0;
        err = scenario(name, text, path);
        if (live != 0)
            fail_msg("%s: %ld blocks leaked with allocation %ld failing", name, live, n);
        if (err == OOM_OK)
            break;
        if (err != OOM_ENOMEM)
            fail_msg("%s: allocation %ld failing gave %d: %s", name, n, err, oom_last_message());
    }
    oom_set_allocator(NULL);
    assert_true(n > 20); /* the scenario did allocate */
    unlink(path);
}

static void test_yaml_alloc(void **state)
{
    (void)state;
    every_n("c.yaml", yaml);
}

static void test_json_alloc(void **state)
{
    (void)state;
    every_n("c.json", json);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_yaml_alloc),
        cmocka_unit_test(test_json_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
