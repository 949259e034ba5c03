/* test_apply_guard.c - what apply checks before it writes: a comparison with alternatives
 * (precision==bf16|4bit), a group of alternative keys (the first the text has is set, else the
 * first is created), a preset's unset: default, a file's effective batch kept, and a key the
 * plan's memory needs that a file lacks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "apply/apply.h"
#include "oomless.h"

/* 4 x 8 on one GPU (32), full checkpointing, a 4-bit base */
static const char plan_json[] =
    "{\"plan\": {\"batch_size\": 4, \"grad_accum\": 8, \"effective_batch\": 32, \"seq_len\": "
    "2048, \"checkpointing\": \"full\", \"precision\": \"4bit\", \"sharding\": \"none\", "
    "\"offload\": \"none\", \"gpus\": 1}}";

static oom_apply *with_plan(void)
{
    oom_apply *a;
    assert_int_equal(oom_apply_create(&a), OOM_OK);
    assert_int_equal(oom_apply_load_plan(a, plan_json, "plan"), OOM_OK);
    return a;
}

/* text after one run of `a` on `in` as name, flags; NULL when refused (err set) */
static char *run(oom_apply *a, const char *name, const char *in, unsigned flags, int *err)
{
    char *out = NULL;
    size_t len;
    *err = oom_apply_buffer(a, name, in, strlen(in), flags, &out, &len);
    return out;
}

static void expect(oom_apply *a, const char *in, unsigned flags, const char *want)
{
    int err;
    char *out = run(a, "c.yaml", in, flags, &err);
    if (err)
        fail_msg("refused: %s", oom_last_message());
    assert_string_equal(out, want);
    oom_free(out);
}

static void test_comparison_alternatives(void **state)
{
    oom_apply *a = with_plan();
    (void)state;
    assert_int_equal(oom_apply_set(a, "bf16", "precision==bf16|4bit|int8", 0), OOM_OK);
    assert_int_equal(oom_apply_set(a, "fp16", "precision==fp16", 0), OOM_OK);
    assert_int_equal(oom_apply_set(a, "q", "precision!=bf16|4bit", 0), OOM_OK);
    expect(a, "bf16: false\nfp16: true\nq: true\n", 0, "bf16: true\nfp16: false\nq: false\n");
    oom_apply_free(a);
}

/* the preset entries of "K1|K2: spec" with an unset: default, as the presets file gives them */
static void preset(oom_apply *a, const char *keys, const char *spec, const char *unset)
{
    assert_int_equal(oomi_apply_preset_entry(keys, spec, unset, a), OOM_OK);
}

static void test_group_of_keys(void **state)
{
    oom_apply *a = with_plan();
    char *rep = NULL;
    (void)state;
    preset(a, "new_ck|old_ck", "checkpointing!=none", "false");
    /* the second name in the file: set, the first skipped (no refusal: the group is there) */
    expect(a, "old_ck: false  # off\n", 0, "old_ck: true  # off\n");
    assert_int_equal(oom_apply_report(a, &rep), OOM_OK);
    assert_non_null(strstr(rep, "the file has 'old_ck' instead"));
    oom_free(rep);
    /* both in the file: both set */
    expect(a, "new_ck: false\nold_ck: false\n", 0, "new_ck: true\nold_ck: true\n");
    /* neither: --create adds the first only */
    expect(a, "x: 1\n", OOM_APPLY_CREATE, "x: 1\nnew_ck: true\n");
    oom_apply_free(a);
}

static void test_missing_memory_key(void **state)
{
    oom_apply *a = with_plan();
    int err;
    char *out;
    (void)state;
    preset(a, "ck", "checkpointing!=none", "false");
    out = run(a, "c.yaml", "x: 1\n", 0, &err);
    assert_null(out);
    assert_int_equal(err, OOM_EREFUSED);
    assert_non_null(strstr(oom_last_message(), "'c.yaml' has no 'ck': the plan fits only with "
                                               "checkpointing full; without the key the "
                                               "framework uses false"));
    expect(a, "x: 1\n", OOM_APPLY_ALLOW_SKIPPED, "x: 1\n");
    oom_apply_free(a);
    /* a framework whose default is the plan's (TRL turns checkpointing on): nothing to say */
    a = with_plan();
    preset(a, "ck", "checkpointing!=none", "true");
    expect(a, "x: 1\n", 0, "x: 1\n");
    oom_apply_free(a);
    /* a default not known: refused too */
    a = with_plan();
    preset(a, "ck", "checkpointing!=none", NULL);
    out = run(a, "c.yaml", "x: 1\n", 0, &err);
    assert_int_equal(err, OOM_EREFUSED);
    oom_apply_free(a);
}

static void test_effective_batch_kept(void **state)
{
    oom_apply *a = with_plan();
    int err;
    char *out;
    (void)state;
    assert_int_equal(oom_apply_set(a, "mb", "batch_size", 0), OOM_OK);
    assert_int_equal(oom_apply_set(a, "acc", "grad_accum", 0), OOM_OK);
    /* 1 x 8: the file's 8 kept at micro-batch 4 */
    expect(a, "mb: 1\nacc: 8  # 8 in all\n", 0, "mb: 4\nacc: 2  # 8 in all\n");
    /* the plan's own: its values */
    expect(a, "mb: 2\nacc: 16\n", 0, "mb: 4\nacc: 8\n");
    /* 6: not a multiple of 4, refused; allowed, the plan's */
    out = run(a, "c.yaml", "mb: 2\nacc: 3\n", 0, &err);
    assert_null(out);
    assert_int_equal(err, OOM_EREFUSED);
    expect(a, "mb: 2\nacc: 3\n", OOM_APPLY_ALLOW_BATCH_CHANGE, "mb: 4\nacc: 8\n");
    oom_apply_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comparison_alternatives),
        cmocka_unit_test(test_group_of_keys),
        cmocka_unit_test(test_missing_memory_key),
        cmocka_unit_test(test_effective_batch_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
