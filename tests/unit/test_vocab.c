/*
 * test_vocab.c - the option and format tables hold what the library does: every value of every
 * option is accepted by the parser of the commands it is listed for and a word outside them is
 * refused, naming them all; every default is what a new workload already has; every format of
 * plan is written (or refused as not for that plan, never as unknown) and every other word is
 * refused; each optimizer but none names its Trainer optim; the help line adds the default.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oomless.h"

/* an instance of a value: a form's capitals replaced ("every:N+offload" -> "every:2+offload",
 * "M1,M2" -> "q_proj,v_proj"); NULL for a form with no instance that holds everywhere (a file,
 * a GPU's index or name) */
static const char *instance(char *buf, size_t size, const oom_option_value *v)
{
    const char *p;
    size_t n = 0;
    if (!v->form)
        return v->name;
    if (!strcmp(v->name, "M1,M2"))
        return "q_proj,v_proj";
    if (!strcmp(v->name, "SIZE"))
        return "20GiB";
    if (strcmp(v->name, "N") && !strchr(v->name, ':'))
        return NULL;
    for (p = v->name; *p && n + 2 < size; p++)
        buf[n++] = *p == 'N' ? '2' : *p;
    buf[n] = '\0';
    return buf;
}

/* each value that estimate or probe --set takes is accepted by oom_workload_set, each that plan
 * takes by oom_plan_options_set; a word that is none of them is refused naming every value */
static void test_every_value_parses(void **state)
{
    size_t n, i, j;
    const oom_option *const *o = oom_workload_options(&n);
    (void)state;
    for (i = 0; i < n; i++) {
        char buf[64], *msg;
        oom_workload *w = NULL;
        assert_int_equal(o[i]->version, OOM_OPTION_VERSION);
        assert_true(o[i]->commands != 0);
        for (j = 0; j < o[i]->n_values; j++) {
            const oom_option_value *v = o[i]->values[j];
            const char *text = instance(buf, sizeof(buf), v);
            assert_true((v->commands & ~o[i]->commands) == 0); /* its option's commands, or fewer */
            if (!text)
                continue;
            if (v->commands & (OOM_COMMAND_ESTIMATE | OOM_COMMAND_PROBE)) {
                assert_int_equal(oom_workload_create(&w), OOM_OK);
                if (oom_workload_set(w, o[i]->name, text))
                    fail_msg("%s=%s refused: %s", o[i]->name, text, oom_last_message());
                oom_workload_free(w);
            }
            if (v->commands & OOM_COMMAND_PLAN) {
                oom_plan_options *p = NULL;
                assert_int_equal(oom_plan_options_create(&p), OOM_OK);
                if (oom_plan_options_set(p, o[i]->name, text))
                    fail_msg("plan %s=%s refused: %s", o[i]->name, text, oom_last_message());
                oom_plan_options_free(p);
            }
        }
        for (j = 0; j < o[i]->n_values && !o[i]->values[j]->form; j++)
            ;
        if (!o[i]->n_values || j < o[i]->n_values) /* a form takes more than its words */
            continue;
        assert_int_equal(oom_workload_create(&w), OOM_OK);
        assert_int_equal(oom_workload_set(w, o[i]->name, "bogus"), OOM_EINVAL);
        msg = strstr(oom_last_message(), "is not one of: ");
        assert_non_null(msg);
        for (j = 0; j < o[i]->n_values; j++)
            if (!strstr(msg, o[i]->values[j]->name))
                fail_msg("%s: '%s' is not in \"%s\"", o[i]->name, o[i]->values[j]->name, msg);
        oom_workload_free(w);
    }
}

/* both texts whole numbers of the same value ("1e9" and "1000000000") */
static int same_number(const char *a, const char *b)
{
    char *ea, *eb;
    double x = strtod(a, &ea), y = strtod(b, &eb);
    return ea != a && !*ea && eb != b && !*eb && x == y;
}

/* setting an option to its default leaves a new workload as it was: the table's default is the
 * library's */
static void test_defaults_are_the_library_defaults(void **state)
{
    size_t n, i;
    const oom_option *const *o = oom_workload_options(&n);
    (void)state;
    for (i = 0; i < n; i++) {
        oom_workload *fresh = NULL, *set = NULL;
        char *a = NULL, *b = NULL;
        if (!o[i]->default_value)
            continue;
        assert_int_equal(oom_workload_create(&fresh), OOM_OK);
        assert_int_equal(oom_workload_create(&set), OOM_OK);
        assert_int_equal(oom_workload_set(set, o[i]->name, o[i]->default_value), OOM_OK);
        assert_int_equal(oom_workload_get(&a, fresh, o[i]->name), OOM_OK);
        assert_int_equal(oom_workload_get(&b, set, o[i]->name), OOM_OK);
        if (strcmp(a, b) && !same_number(a, o[i]->default_value))
            fail_msg("%s: default '%s' gives '%s', a new workload has '%s'", o[i]->name,
                     o[i]->default_value, b, a);
        oom_free(a), oom_free(b);
        oom_workload_free(fresh), oom_workload_free(set);
    }
}

/* every option's reading of w, into an array of n strings (freed by free_readings) */
static char **readings(const oom_workload *w, const oom_option *const *o, size_t n)
{
    char **r = calloc(n, sizeof(*r));
    size_t i;
    assert_non_null(r);
    for (i = 0; i < n; i++)
        if (oom_workload_get(&r[i], w, o[i]->name))
            fail_msg("%s: no reading: %s", o[i]->name, oom_last_message());
    return r;
}

static void free_readings(char **r, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        oom_free(r[i]);
    free(r);
}

/* whether setting option a may change what option b reads: the method resolves an auto precision
 * and reference, the objective a reference */
static int coupled(const char *a, const char *b)
{
    return !strcmp(a, b) ||
           (!strcmp(a, "method") && (!strcmp(b, "precision") || !strcmp(b, "reference"))) ||
           (!strcmp(a, "objective") && !strcmp(b, "reference"));
}

/* every option reads back what was set, and setting it changes no other option's reading: each
 * plain value the estimator takes (auto precision and reference read back resolved, the
 * reference under an objective that has one), and what a new workload reads sets it again */
static void test_every_option_reads_back(void **state)
{
    size_t n, i, j, m;
    const oom_option *const *o = oom_workload_options(&n);
    (void)state;
    for (i = 0; i < n; i++) {
        oom_workload *w = NULL;
        char **before, **after;
        assert_int_equal(oom_workload_create(&w), OOM_OK);
        if (!strcmp(o[i]->name, "reference")) /* read back as sft resolves it: none */
            assert_int_equal(oom_workload_set(w, "objective", "dpo"), OOM_OK);
        before = readings(w, o, n);
        if (*before[i] && strcmp(o[i]->name, "model"))
            assert_int_equal(oom_workload_set(w, o[i]->name, before[i]), OOM_OK);
        for (j = 0; j < o[i]->n_values; j++) {
            const oom_option_value *v = o[i]->values[j];
            if (v->form || !(v->commands & OOM_COMMAND_ESTIMATE) || !strcmp(v->name, "auto"))
                continue;
            assert_int_equal(oom_workload_set(w, o[i]->name, v->name), OOM_OK);
            after = readings(w, o, n);
            if (strcmp(after[i], v->name))
                fail_msg("%s: set '%s', reads '%s'", o[i]->name, v->name, after[i]);
            for (m = 0; m < n; m++)
                if (!coupled(o[i]->name, o[m]->name) && strcmp(before[m], after[m]))
                    fail_msg("%s '%s' changed %s from '%s' to '%s'", o[i]->name, v->name,
                             o[m]->name, before[m], after[m]);
            free_readings(after, n);
        }
        free_readings(before, n);
        oom_workload_free(w);
    }
}

/* the lists of the plan table: each value, and all of them at once */
static void test_plan_lists(void **state)
{
    size_t n, i, j;
    const oom_option *const *o = oom_plan_option_table(&n);
    (void)state;
    for (i = 0; i < n; i++) {
        oom_plan_options *p = NULL;
        char all[512] = "";
        if (!o[i]->list)
            continue;
        assert_int_equal(oom_plan_options_create(&p), OOM_OK);
        for (j = 0; j < o[i]->n_values; j++) {
            if (oom_plan_options_set(p, o[i]->name, o[i]->values[j]->name))
                fail_msg("%s=%s: %s", o[i]->name, o[i]->values[j]->name, oom_last_message());
            strcat(strcat(all, j ? "," : ""), o[i]->values[j]->name);
        }
        assert_int_equal(oom_plan_options_set(p, o[i]->name, all), OOM_OK);
        assert_int_equal(oom_plan_options_set(p, o[i]->name, o[i]->default_value), OOM_OK);
        assert_int_equal(oom_plan_options_set(p, o[i]->name, "bogus"), OOM_EINVAL);
        oom_plan_options_free(p);
    }
}

static void test_lookup_and_help(void **state)
{
    char *h = NULL;
    const oom_option *o = oom_option_lookup("lora_rank");
    (void)state;
    assert_non_null(o);
    assert_string_equal(o->name, "lora-rank");
    assert_non_null(oom_option_lookup("allow-downscale"));
    assert_null(oom_option_lookup("bogus"));
    assert_int_equal(oom_option_help(&h, o), OOM_OK);
    assert_string_equal(h, "LoRA rank (default 16)");
    oom_free(h);
    assert_int_equal(oom_option_help(&h, oom_option_lookup("method")), OOM_OK);
    assert_string_equal(h, "what is run (default full: every weight trained)");
    oom_free(h);
    assert_int_equal(oom_option_help(&h, oom_option_lookup("overhead")), OOM_OK);
    assert_null(strstr(h, "(default overhead"));
    oom_free(h);
}

/* transformers' TrainingArguments.optim for every optimizer that has a step */
static void test_trainer_names(void **state)
{
    const oom_option *o = oom_option_lookup("optimizer");
    size_t i;
    (void)state;
    /* one value per oom_optimizer, in its order: no enum value beyond the table */
    assert_string_equal(oom_optimizer_name((oom_optimizer)o->n_values), "?");
    for (i = 0; i < o->n_values; i++) {
        const oom_option_value *v = o->values[i];
        assert_string_equal(v->name, oom_optimizer_name((oom_optimizer)i));
        if (strcmp(v->name, "none") && !v->trainer)
            fail_msg("optimizer '%s' has no Trainer optim", v->name);
    }
    assert_string_equal(o->values[OOM_OPTIMIZER_LION]->trainer, "lion_32bit");
    assert_string_equal(o->values[OOM_OPTIMIZER_SGD_MOMENTUM]->trainer_args, "momentum=0.9");
}

/* every plan format writes the plan of a model, or says the plan is not of its kind; no other
 * word is a format */
static void test_every_format_is_written(void **state)
{
    size_t n, i;
    const oom_plan_format_info *const *f = oom_plan_formats(&n);
    oom_plan_options *o = NULL;
    oom_plan_result *r = NULL;
    char *text = NULL;
    (void)state;
    assert_int_equal(oom_plan_options_create(&o), OOM_OK);
    assert_int_equal(oom_plan_options_set(o, "model", "gpt2"), OOM_OK);
    assert_int_equal(oom_plan_options_set(o, "gpu", "h100"), OOM_OK);
    assert_int_equal(oom_plan_options_set(o, "optimizer", "lion"), OOM_OK);
    assert_int_equal(oom_plan_options_run(&r, o), OOM_OK);
    for (i = 0; i < n; i++) {
        int err;
        assert_int_equal(f[i]->version, OOM_PLAN_FORMAT_INFO_VERSION);
        assert_true(f[i]->commands & (OOM_COMMAND_PLAN | OOM_COMMAND_TABLE));
        if (!(f[i]->commands & OOM_COMMAND_PLAN)) {
            assert_int_equal(oom_plan_format(&text, r, f[i]->name), OOM_EINVAL);
            continue;
        }
        err = oom_plan_format(&text, r, f[i]->name);
        if (err != OOM_OK && err != OOM_EUNSUPPORTED)
            fail_msg("format %s: %s", f[i]->name, oom_last_message());
        if (!strcmp(f[i]->name, "args"))
            assert_non_null(strstr(text, " --optim lion_32bit"));
        oom_free(text);
        text = NULL;
    }
    assert_int_equal(oom_plan_format(&text, r, "bogus"), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "(text, json, env, args, deepspeed"));
    oom_plan_free(r);
    oom_plan_options_free(o);
}

/* each format's versions: every one listed is picked as itself, the default is the last, a
 * version between two picks the older (a later patch of one, its own), one older than all and
 * a word are refused naming the list; a format that follows no framework takes none */
static void test_format_versions(void **state)
{
    size_t n, i;
    const oom_plan_format_info *const *f = oom_plan_formats(&n);
    const char *w = NULL;
    char piece[16], patch[24];
    (void)state;
    for (i = 0; i < n; i++) {
        const char *p = f[i]->versions;
        if (!p) {
            assert_null(f[i]->framework);
            assert_int_equal(oom_plan_format_pick(&w, f[i]->name, NULL), OOM_OK);
            assert_null(w);
            assert_int_equal(oom_plan_format_pick(&w, f[i]->name, "1.0"), OOM_EINVAL);
            continue;
        }
        assert_non_null(f[i]->framework);
        assert_non_null(f[i]->package);
        while (*p) {
            size_t len = strcspn(p, ",");
            snprintf(piece, sizeof(piece), "%.*s", (int)len, p);
            assert_int_equal(oom_plan_format_pick(&w, f[i]->name, piece), OOM_OK);
            assert_string_equal(w, piece);
            snprintf(patch, sizeof(patch), "%s.7rc1", piece); /* a later patch: the same keys */
            assert_int_equal(oom_plan_format_pick(&w, f[i]->name, patch), OOM_OK);
            assert_string_equal(w, piece);
            p += len + strspn(p + len, ", ");
        }
        assert_int_equal(oom_plan_format_pick(&w, f[i]->name, NULL), OOM_OK);
        assert_string_equal(w, piece); /* the default: the last listed */
        assert_int_equal(oom_plan_format_pick(&w, f[i]->name, "0.0.1"), OOM_EINVAL);
        assert_non_null(strstr(oom_last_message(), "and later"));
        assert_int_equal(oom_plan_format_pick(&w, f[i]->name, "latest"), OOM_EINVAL);
        assert_non_null(strstr(oom_last_message(), f[i]->versions));
    }
    /* between two listed versions: the older one's keys */
    assert_int_equal(oom_plan_format_pick(&w, "args", "5.22.9"), OOM_OK);
    assert_string_equal(w, "4.56");
    assert_int_equal(oom_plan_format_pick(&w, "torchtitan", "v0.2.2"), OOM_OK);
    assert_string_equal(w, "0.2");
    assert_int_equal(oom_plan_format_pick(&w, "torchtitan", "0.3.0+cpu"), OOM_OK);
    assert_string_equal(w, "0.3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_versions),
        cmocka_unit_test(test_every_value_parses),
        cmocka_unit_test(test_defaults_are_the_library_defaults),
        cmocka_unit_test(test_every_option_reads_back),
        cmocka_unit_test(test_plan_lists),
        cmocka_unit_test(test_lookup_and_help),
        cmocka_unit_test(test_trainer_names),
        cmocka_unit_test(test_every_format_is_written),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
