/*
 * test_locale.c - the library in a host program that called setlocale(LC_ALL, "de_DE.UTF-8"),
 * where strtod stops at the '.' of "20.5" and printf writes "20,5": every number the library
 * reads (sizes, the bundled YAML catalog, calibration records) and writes (JSON documents, text
 * reports, SVG, messages, calibration records) is the same as in the C locale. And under
 * tr_TR.UTF-8, where tolower('I') is not 'i', names and units still match in any case.
 * Exit 77 (ctest: skipped) when a locale is not installed; scripts/install-deps.sh makes them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/core.h"
#include "oomless.h"
#include "unit/tmpdir.h"

#include <ctype.h>
#include <json-c/json.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COMMA_LOCALE   "de_DE.UTF-8"
#define TURKISH_LOCALE "tr_TR.UTF-8"

/* Switches the process to the decimal-comma locale, and checks that it writes one. */
static int to_comma(void **state)
{
    char buf[16];
    (void)state;
    if (!setlocale(LC_ALL, COMMA_LOCALE))
        return -1;
    snprintf(buf, sizeof(buf), "%.1f", 20.5);
    return strcmp(buf, "20,5") ? -1 : 0;
}

/* Switches to Turkish, and checks that its case folding is not ASCII's. */
static int to_turkish(void **state)
{
    (void)state;
    if (!setlocale(LC_ALL, TURKISH_LOCALE))
        return -1;
    return tolower('I') == 'i' ? -1 : 0;
}

static int to_c(void **state)
{
    (void)state;
    setlocale(LC_ALL, "C");
    return 0;
}

static void test_sizes_parse(void **state)
{
    uint64_t v = 0;
    double d = 0;
    (void)state;
    assert_int_equal(oom_parse_size(&v, "20.5GiB", OOM_UNIT_BYTES), OOM_OK);
    assert_int_equal(v, 22011707392ULL);
    assert_int_equal(oom_parse_size(&v, "20.5", OOM_UNIT_GIB), OOM_OK);
    assert_int_equal(v, 22011707392ULL);
    assert_int_equal(oom_parse_size(&v, "1.5 T", OOM_UNIT_BYTES), OOM_OK);
    assert_int_equal(v, 3ULL << 39);
    assert_int_equal(oom_parse_margin(&v, "7.5%", 1000), OOM_OK);
    assert_int_equal(v, 75);
    assert_int_equal(oomi_parse_double(&d, "0.25", "value"), OOM_OK);
    assert_true(d == 0.25);
    /* and "20,5" is no size in any locale */
    assert_int_equal(oom_parse_size(&v, "20,5", OOM_UNIT_GIB), OOM_EINVAL);
}

static void test_sizes_format(void **state)
{
    char buf[16];
    oom_budget b = OOM_BUDGET_INIT;
    (void)state;
    assert_string_equal(oom_format_size(buf, sizeof(buf), 23 * OOM_GiB), "23.00 GiB");
    assert_string_equal(oom_format_size(buf, sizeof(buf), 512 * OOM_MiB + OOM_MiB / 2),
                        "512.5 MiB");
    assert_int_equal(oom_budget_make(&b, OOM_GiB, 2 * OOM_GiB + OOM_GiB / 2), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "2.50 GiB"));
}

static void test_yaml_and_catalog(void **state)
{
    json_object *root = NULL, *v;
    oom_catalog *cat = NULL;
    const oom_gpu_profile *p = NULL;
    (void)state;
    assert_int_equal(oomi_yaml_load(&root, "x: 2.5\n", 7, "test"), OOM_OK);
    assert_true(json_object_object_get_ex(root, "x", &v));
    assert_true(json_object_is_type(v, json_type_double));
    assert_true(json_object_get_double(v) == 2.5);
    json_object_put(root);
    assert_int_equal(oom_catalog_load(&cat, NULL), OOM_OK);
    assert_int_equal(oom_catalog_find(&p, cat, "rtx-2060"), OOM_OK);
    assert_true(p->fp16_tflops == 25.8);
    oom_catalog_free(cat);
}

/* A record saved in the comma locale is written with '.', and found again. */
static void test_calibration_record(void **state)
{
    char dir[256], path[300], *key = NULL, *text = NULL;
    const char *argv[] = {"python", "train.py", "{batch}", NULL};
    oom_calibration rec = OOM_CALIBRATION_INIT, *got = NULL;
    size_t len;
    (void)state;
    assert_non_null(mkdtemp(test_tmp_path(dir, sizeof(dir), "oomless-locale.XXXXXX")));
    snprintf(path, sizeof(path), "%s/calibration.jsonl", dir);
    assert_int_equal(oom_calibration_command_key(&key, argv), OOM_OK);
    rec.gpu = "NVIDIA A100-SXM4-80GB";
    rec.command = key;
    rec.workload = "";
    rec.fit = (oom_probe_fit){OOM_PROBE_FIT_VERSION, 1, 1, 1e9, 2e7, 0.25};
    rec.recommended_batch = 8;
    rec.max_batch = 9;
    rec.time = 1700000000.5;
    assert_int_equal(oom_calibration_save(path, &rec), OOM_OK);
    assert_int_equal(oomi_read_file(&text, &len, path, OOMI_READ_MAX), OOM_OK);
    assert_non_null(strstr(text, "\"time\":1700000000.5,"));
    assert_non_null(strstr(text, "\"per_sample2_bytes\":0.25,"));
    assert_int_equal(oom_calibration_lookup(&got, path, rec.gpu, key, ""), OOM_OK);
    assert_true(got->time == 1700000000.5);
    assert_true(got->fit.per_sample2_bytes == 0.25);
    oom_calibration_free(got);
    oom_free(text);
    oom_free(key);
    unlink(path);
    rmdir(dir);
}

/* The documents a program gets: estimate (JSON, SVG), plan (JSON, text), a JSON number. */
struct docs {
    char *estimate, *svg, *plan, *text, number[32];
};

static void make_docs(struct docs *d)
{
    const char *keys[] = {
        "model", "method", "seq", "gpu", "target-effective-batch", "vram-safety-margin"};
    const char *values[] = {"llama-3.1-8b", "lora", "2048", "rtx-4090", "32", "1.5GiB"};
    oom_workload *w = NULL;
    oom_estimate e = OOM_ESTIMATE_INIT;
    oom_plan_options *o = NULL;
    oom_plan_result *r = NULL;
    oom_budget b = OOM_BUDGET_INIT;
    json_object *n;
    size_t i;

    memset(d, 0, sizeof(*d));
    assert_int_equal(oom_workload_create(&w), OOM_OK);
    assert_int_equal(oom_workload_set(w, "model", "gpt2"), OOM_OK);
    assert_int_equal(oom_workload_set(w, "method", "lora"), OOM_OK);
    assert_int_equal(oom_workload_set(w, "lora_dropout", "0.05"), OOM_OK);
    assert_int_equal(oom_workload_set(w, "batch", "8"), OOM_OK);
    assert_int_equal(oom_estimate_run(&e, w), OOM_OK);
    assert_int_equal(oom_budget_make(&b, 24 * OOM_GiB, OOM_GiB + OOM_GiB / 2), OOM_OK);
    assert_int_equal(oom_estimate_to_json_budget(&d->estimate, w, &e, &b), OOM_OK);
    assert_int_equal(oom_estimate_svg(&d->svg, w, &e, &b), OOM_OK);
    oom_workload_free(w);
    assert_int_equal(oom_plan_json(&d->plan, keys, values, 6), OOM_OK);
    assert_int_equal(oom_plan_options_create(&o), OOM_OK);
    for (i = 0; i < 6; i++)
        assert_int_equal(oom_plan_options_set(o, keys[i], values[i]), OOM_OK);
    assert_int_equal(oom_plan_options_run(&r, o), OOM_OK);
    assert_int_equal(oom_plan_format(&d->text, r, "text"), OOM_OK);
    oom_plan_free(r);
    oom_plan_options_free(o);
    n = oomi_json_number(0.05, 3);
    snprintf(d->number, sizeof(d->number), "%s", json_object_to_json_string(n));
    json_object_put(n);
}

static void free_docs(struct docs *d)
{
    oom_free(d->estimate);
    oom_free(d->svg);
    oom_free(d->plan);
    oom_free(d->text);
}

static void test_documents_as_in_the_c_locale(void **state)
{
    struct docs c, comma;
    json_object *doc;
    (void)state;
    setlocale(LC_ALL, "C");
    make_docs(&c);
    assert_int_equal(to_comma(NULL), 0);
    make_docs(&comma);
    assert_string_equal(comma.number, "0.05");
    assert_string_equal(comma.estimate, c.estimate);
    assert_string_equal(comma.svg, c.svg);
    assert_string_equal(comma.plan, c.plan);
    assert_string_equal(comma.text, c.text);
    /* and they are JSON (a "0,05" would not be) */
    assert_non_null(doc = json_tokener_parse(comma.estimate));
    json_object_put(doc);
    free_docs(&c);
    free_docs(&comma);
}

/* Units, GPU ids and OOM patterns in capitals, under Turkish case folding. */
static void test_case_in_turkish(void **state)
{
    static const char text[] = "RuntimeError: FAILED TO ALLOCATE MEMORY ON DEVICE 0";
    oom_catalog *cat = NULL;
    const oom_gpu_profile *p = NULL;
    oom_patterns *pat = NULL;
    uint64_t v = 0;
    (void)state;
    assert_int_equal(oom_parse_size(&v, "16GIB", OOM_UNIT_BYTES), OOM_OK);
    assert_int_equal(v, 16 * OOM_GiB);
    assert_int_equal(oom_parse_size(&v, "512 MIB", OOM_UNIT_BYTES), OOM_OK);
    assert_int_equal(v, 512 * OOM_MiB);
    assert_int_equal(oom_catalog_load(&cat, NULL), OOM_OK);
    assert_int_equal(oom_catalog_find(&p, cat, "MI300X"), OOM_OK);
    assert_string_equal(p->id, "mi300x");
    oom_catalog_free(cat);
    assert_int_equal(oom_patterns_parse(&pat, "failed to allocate\n", 19, "test"), OOM_OK);
    assert_non_null(oom_patterns_find(pat, text, sizeof(text) - 1));
    oom_patterns_free(pat);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sizes_parse, to_comma, to_c),
        cmocka_unit_test_setup_teardown(test_sizes_format, to_comma, to_c),
        cmocka_unit_test_setup_teardown(test_yaml_and_catalog, to_comma, to_c),
        cmocka_unit_test_setup_teardown(test_calibration_record, to_comma, to_c),
        cmocka_unit_test_setup_teardown(test_documents_as_in_the_c_locale, to_c, to_c),
        cmocka_unit_test_setup_teardown(test_case_in_turkish, to_turkish, to_c),
    };
    if (to_comma(NULL) != 0 || to_turkish(NULL) != 0) {
        fprintf(stderr,
                "test_locale: SKIPPED: the locales %s and %s are not both installed (or do "
                "not write a decimal comma, fold I to dotless i); scripts/install-deps.sh "
                "generates them\n",
                COMMA_LOCALE, TURKISH_LOCALE);
        return 77;
    }
    to_c(NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
