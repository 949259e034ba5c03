/* test_plan_alloc.c - every allocation failure along the plan workflow of the CLI and the Python
 * package (the JSON plan, options, the search, the formats, the table) gives OOM_ENOMEM and
 * leaks nothing, and the workflow succeeds once enough allocations do.
 *
 * The workflow is swept one library call at a time, each on inputs made once with the ordinary
 * allocator. Swept in one piece, a failure in the table reran the searches of every call before
 * it: the 811 failure points ran the planner's search about 1,900 times, 7.7 s of CPU; one call
 * at a time the same failure points take 1.9 s. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "oomless.h"

/* an allocator that fails after `alloc_budget` allocations and counts live blocks */
static long alloc_budget, alloc_live;
static void *fail_malloc(size_t n, void *u)
{
    void *p;
    (void)u;
    if (alloc_budget-- <= 0 || !(p = malloc(n)))
        return NULL;
    alloc_live++;
    return p;
}
static void *fail_realloc(void *p, size_t n, void *u)
{
    void *q;
    (void)u;
    if (alloc_budget-- <= 0 || !(q = realloc(p, n)))
        return NULL;
    alloc_live += p == NULL;
    return q;
}
static void counting_free(void *p, void *u)
{
    (void)u;
    alloc_live -= p != NULL;
    free(p);
}

static const char *const keys[] = {"model", "method", "seq", "gpu", "allow"};
static const char *const values[] = {"llama-3.1-8b", "lora", "2048", "rtx-4090", "all"};
static oom_plan_options *options; /* what the calls after the first two start from */
static oom_plan_result *result;

static int options_new(oom_plan_options **o)
{
    size_t i;
    int err = oom_plan_options_create(o);
    for (i = 0; i < 5 && !err; i++)
        err = oom_plan_options_set(*o, keys[i], values[i]);
    return err;
}

enum call { JSON, OPTIONS, RUN, FORMATS, TABLE, N_CALLS };

static int call(enum call c)
{
    static const char *const gpus[] = {"rtx-4090", "t4"}, *const name = "w";
    oom_plan_options *o = NULL;
    oom_plan_result *r = NULL;
    char *a = NULL, *b = NULL;
    int err = OOM_OK;
    switch (c) {
    case JSON:
        err = oom_plan_json(&a, keys, values, 5);
        break;
    case OPTIONS:
        err = options_new(&o);
        break;
    case RUN:
        err = oom_plan_options_run(&r, options);
        break;
    case FORMATS:
        if ((err = oom_plan_format(&a, result, "text")) || (err = oom_plan_svg(&b, result)))
            break;
        oom_free(a), a = NULL;
        err = oom_plan_format(&a, result, "deepspeed");
        break;
    case TABLE:
        err = oom_table(&a, (const oom_plan_options *const *)&options, &name, 1, gpus, 2, "csv");
        break;
    case N_CALLS:
        break;
    }
    oom_free(a), oom_free(b);
    oom_plan_free(r);
    oom_plan_options_free(o);
    return err;
}

static void test_allocation_failures(void **state)
{
    oom_allocator a = {OOM_ALLOCATOR_VERSION, fail_malloc, fail_realloc, counting_free, NULL};
    enum call c;
    long n;
    int err;
    (void)state;
    assert_int_equal(options_new(&options), OOM_OK);
    assert_int_equal(oom_plan_options_run(&result, options), OOM_OK);
    for (c = JSON; c < N_CALLS; c++) {
        for (n = 0, err = OOM_ENOMEM; n < 20000 && err == OOM_ENOMEM; n++) {
            alloc_budget = n, alloc_live = 0;
            oom_set_allocator(&a);
            err = call(c);
            oom_set_allocator(NULL);
            if (err != OOM_OK && err != OOM_ENOMEM)
                fail_msg("call %d, after %ld allocations: %d %s", c, n, err, oom_last_message());
            if (alloc_live != 0)
                fail_msg("call %d, after %ld allocations: %ld blocks leaked", c, n, alloc_live);
        }
        assert_int_equal(err, OOM_OK);
        assert_true(n > 1); /* the call allocates: the sweep failed something */
    }
    oom_plan_free(result);
    oom_plan_options_free(options);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
