/* test_core.c - the core helpers: the whole-file reader and its cap, the JSON member helpers,
 * plan documents, another process's text made safe to show. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/core.h"
#include "oomless.h"
#include "tmpdir.h"

#include <float.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* a file of `text` in $TMPDIR; its name into path */
static void make_file(char *path, size_t size, const char *text)
{
    FILE *f;
    int fd;
    test_tmp_path(path, size, "oomless-core.XXXXXX");
    assert_true((fd = mkstemp(path)) >= 0);
    assert_non_null(f = fdopen(fd, "w"));
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void test_read_cap(void **state)
{
    char path[256], want[400], text[1501], *got = NULL;
    size_t len = 0;
    (void)state;
    memset(text, 'a', 1500);
    text[1500] = '\0';
    make_file(path, sizeof(path), text);
    assert_int_equal(oomi_read_file(&got, &len, path, 1500), OOM_OK);
    assert_int_equal(len, 1500);
    assert_string_equal(got, text);
    oom_free(got);
    assert_int_equal(oomi_read_file(&got, &len, path, 1499), OOM_EINVAL);
    assert_null(got);
    assert_int_equal(len, 0);
    snprintf(want, sizeof(want), "%s: 1500 bytes is larger than the 1499 bytes this reads", path);
    assert_string_equal(oom_last_message(), want);
    unlink(path);
    assert_int_equal(oomi_read_file(&got, &len, path, OOMI_READ_MAX), OOM_EIO);
    assert_non_null(strstr(oom_last_message(), path));
}

/* a pipe has no size: refused once more than the cap came */
static void test_read_pipe_cap(void **state)
{
    int fds[2];
    char buf[3000], *got = NULL;
    size_t len;
    (void)state;
    memset(buf, 'b', sizeof(buf));
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(write(fds[1], buf, sizeof(buf)), (ssize_t)sizeof(buf));
    close(fds[1]);
    assert_int_equal(oomi_read_fd(&got, &len, fds[0], "the pipe", 2 * 1024 * 1024), OOM_OK);
    assert_int_equal(len, sizeof(buf));
    oom_free(got);
    close(fds[0]);

    assert_int_equal(pipe(fds), 0);
    assert_int_equal(write(fds[1], buf, sizeof(buf)), (ssize_t)sizeof(buf));
    close(fds[1]);
    assert_int_equal(oomi_read_fd(&got, &len, fds[0], "the pipe", 2999), OOM_EINVAL);
    assert_null(got);
    assert_string_equal(oom_last_message(), "the pipe: more than the 2999 bytes this reads");
    close(fds[0]);
}

static void test_json_members(void **state)
{
    json_object *o = json_tokener_parse("{\"n\": 8, \"big\": 3000000000, \"d\": 2.5, \"s\": \"x\","
                                        " \"z\": null, \"q\": \"8\"}");
    int64_t i = -1;
    double d = -1;
    bool found = true;
    (void)state;
    assert_non_null(o);
    assert_int_equal(oomi_json_int(&i, NULL, o, "n", 1, INT_MAX, "doc: ."), OOM_OK);
    assert_int_equal(i, 8);
    assert_int_equal(oomi_json_int(&i, NULL, o, "big", 1, INT_MAX, "doc: ."), OOM_EINVAL);
    assert_string_equal(oom_last_message(),
                        "doc: .big 3000000000 is out of range (1 to 2147483647)");
    assert_int_equal(oomi_json_int(&i, NULL, o, "q", 1, 9, "doc: ."), OOM_EINVAL);
    assert_string_equal(oom_last_message(), "doc: .q must be a whole number, not \"8\"");
    assert_int_equal(oomi_json_int(&i, NULL, o, "d", 1, 9, "doc: ."), OOM_EINVAL);
    assert_int_equal(oomi_json_int(&i, NULL, o, "gone", 1, 9, "doc: ."), OOM_ENOTFOUND);
    assert_string_equal(oom_last_message(), "doc: .gone is missing");
    i = 5;
    assert_int_equal(oomi_json_int(&i, &found, o, "z", 1, 9, "doc: ."), OOM_OK);
    assert_false(found);
    assert_int_equal(i, 5);
    assert_int_equal(oomi_json_double(&d, &found, o, "d", 0, 3, "doc: ."), OOM_OK);
    assert_true(found);
    assert_true(d == 2.5);
    assert_int_equal(oomi_json_double(&d, NULL, o, "d", 0, 2, "doc: ."), OOM_EINVAL);
    assert_string_equal(oom_last_message(), "doc: .d 2.5 is out of range (0 to 2)");
    assert_int_equal(oomi_json_double(&d, NULL, o, "d", 3, DBL_MAX, "doc: ."), OOM_EINVAL);
    assert_string_equal(oom_last_message(), "doc: .d 2.5 is out of range (at least 3)");
    assert_int_equal(oomi_json_int(&i, NULL, o, "n", INT64_MIN, 7, "doc: ."), OOM_EINVAL);
    assert_string_equal(oom_last_message(), "doc: .n 8 is out of range (at most 7)");
    assert_int_equal(oomi_json_double(&d, NULL, o, "s", 0, 2, "doc: ."), OOM_EINVAL);
    assert_null(oomi_json_get(o, "z"));
    assert_null(oomi_json_get(NULL, "n"));
    json_object_put(o);
}

static void test_json_writers(void **state)
{
    json_object *o = json_object_new_object();
    (void)state;
    assert_int_equal(oomi_json_put(o, "unknown", oomi_json_bytes(OOM_UNKNOWN)), OOM_OK);
    assert_int_equal(oomi_json_put(o, "bytes", oomi_json_bytes(1024)), OOM_OK);
    assert_int_equal(oomi_json_put(o, "huge", oomi_json_size(UINT64_MAX - 1)), OOM_OK);
    assert_int_equal(oomi_json_put(o, "empty", oomi_json_string_or_null("")), OOM_OK);
    assert_int_equal(oomi_json_put(o, "n", oomi_json_number(0.050, 3)), OOM_OK);
    assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                        "{\"unknown\":null,\"bytes\":1024,\"huge\":9223372036854775807,"
                        "\"empty\":null,\"n\":0.05}");
    json_object_put(o);
}

static void test_plan_doc(void **state)
{
    char path[256];
    oomi_plan_doc doc;
    (void)state;
    make_file(path, sizeof(path),
              "{\"plan\": {\"batch_size\": 6, \"grad_accum\": null},"
              " \"memory\": {\"device_peak\": \"1.5GiB\"}}");
    assert_int_equal(oomi_plan_doc_read(&doc, path, OOMI_PLAN_BATCH | OOMI_PLAN_PEAK), OOM_OK);
    assert_int_equal(doc.batch_size, 6);
    assert_int_equal(doc.grad_accum, 0);
    assert_int_equal(doc.device_peak, 1536ull * 1024 * 1024);
    unlink(path);

    make_file(path, sizeof(path), "{\"plan\": {\"batch_size\": 0}}");
    assert_int_equal(oomi_plan_doc_read(&doc, path, OOMI_PLAN_BATCH), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), ".plan.batch_size 0 is out of range (1 to "));
    assert_int_equal(oomi_plan_doc_read(&doc, path, OOMI_PLAN_PEAK), OOM_ENOTFOUND);
    assert_non_null(strstr(oom_last_message(), "has no .memory.device_peak"));
    unlink(path);

    assert_int_equal(oomi_plan_doc_read(&doc, "-", OOMI_PLAN_PEAK), OOM_EIO); /* a name, no more */
    assert_non_null(strstr(oom_last_message(), "'-'"));
    make_file(path, sizeof(path), "[1, 2]");
    assert_int_equal(oomi_plan_doc_read(&doc, path, OOMI_PLAN_BATCH), OOM_EPARSE);
    assert_non_null(strstr(oom_last_message(), "is not a JSON object"));
    unlink(path);
}

/* a JSON document read whole: a byte order mark skipped, json-c's depth limit named, nothing
 * after the value */
static void test_json_load(void **state)
{
    static const char bom[] = "\xEF\xBB\xBF{\"a\": 1}\n";
    char deep[200], *d;
    json_object *o = NULL;
    int64_t v;
    size_t i;
    (void)state;
    assert_int_equal(oomi_json_load(&o, bom, strlen(bom), "doc 'x'"), OOM_OK);
    assert_int_equal(oomi_json_int(&v, NULL, o, "a", 0, 9, ""), OOM_OK);
    assert_int_equal(v, 1);
    json_object_put(o);
    /* 33 arrays in an object: one level more than json-c reads */
    d = deep + sprintf(deep, "{\"x\": ");
    for (i = 0; i < 33; i++)
        *d++ = '[';
    for (i = 0; i < 33; i++)
        *d++ = ']';
    strcpy(d, "}");
    assert_int_equal(oomi_json_load(&o, deep, strlen(deep), "doc 'x'"), OOM_EPARSE);
    assert_null(o);
    assert_string_equal(oom_last_message(), "doc 'x' nests deeper than 32 levels, the most json-c "
                                            "reads (its JSON_TOKENER_DEFAULT_DEPTH)");
    assert_int_equal(oomi_json_load(&o, "{} x", 4, "doc 'x'"), OOM_EPARSE);
    assert_string_equal(oom_last_message(),
                        "doc 'x' line 1 column 4: text after the JSON document");
    assert_int_equal(oomi_json_load(&o, "\xEF\xBB\xBF\n {", 6, "doc 'x'"), OOM_EPARSE);
    assert_string_equal(oom_last_message(), "doc 'x' line 2 column 3: unexpected end of input");
    assert_int_equal(oomi_json_load(&o, " \n", 2, "doc 'x'"), OOM_EPARSE);
    assert_string_equal(oom_last_message(), "doc 'x' line 2 column 1: empty");
}

/* run --plan / watch --plan: a byte order mark is read; a valid plan 100,000 levels deep is
 * refused as too deep, naming the file and the limit */
static void test_plan_doc_bom_and_depth(void **state)
{
    char path[256], *text;
    oomi_plan_doc doc;
    size_t i, n = 100000;
    (void)state;
    make_file(path, sizeof(path), "\xEF\xBB\xBF{\"plan\": {\"batch_size\": 4}}\r\n");
    assert_int_equal(oomi_plan_doc_read(&doc, path, OOMI_PLAN_BATCH), OOM_OK);
    assert_int_equal(doc.batch_size, 4);
    unlink(path);
    assert_non_null(text = malloc(2 * n + 64));
    i = (size_t)sprintf(text, "{\"plan\": {\"batch_size\": 4}, \"x\": ");
    memset(text + i, '[', n);
    memset(text + i + n, ']', n);
    strcpy(text + i + 2 * n, "}");
    make_file(path, sizeof(path), text);
    free(text);
    assert_int_equal(oomi_plan_doc_read(&doc, path, OOMI_PLAN_BATCH), OOM_EPARSE);
    assert_non_null(strstr(oom_last_message(), path));
    assert_non_null(strstr(oom_last_message(), "nests deeper than 32 levels"));
    unlink(path);
}

/* oomi_shown(text) compared with `want` */
static void shown_is(const char *text, const char *want)
{
    char *got = oomi_shown(text);
    assert_non_null(got);
    assert_string_equal(got, want);
    oomi_free(got);
}

static void test_shown(void **state)
{
    oomi_sb sb = OOMI_SB_INIT;
    char *out;
    (void)state;
    /* kept: printable ASCII (a backslash too) and UTF-8 text from U+00A0 on, up to 4 bytes */
    shown_is("python train.py --lr=1e-4 'a b' \\x41", "python train.py --lr=1e-4 'a b' \\x41");
    shown_is("caf\xc3\xa9 \xc2\xa0 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \xef\xbf\xbd",
             "caf\xc3\xa9 \xc2\xa0 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \xef\xbf\xbd");
    shown_is("", "");
    shown_is(NULL, "");
    /* C0 controls and DEL: OSC 52 (clipboard), a title, a screen clear, BEL, tab, line breaks */
    shown_is("\x1b]52;c;cm0gLXJmIH4=\x07", "\\x1b]52;c;cm0gLXJmIH4=\\x07");
    shown_is("\x1b]0;pwned\x1b\\x\x1b[2J\x1b[H", "\\x1b]0;pwned\\x1b\\x\\x1b[2J\\x1b[H");
    shown_is("a\tb\nc\rd\x7f\x01", "a\\x09b\\x0ac\\x0dd\\x7f\\x01");
    /* C1 controls, as one byte and in UTF-8 (U+009B CSI, U+009D OSC, U+0080, U+009F) */
    shown_is("\x9b"
             "31m \x9d",
             "\\x9b31m \\x9d");
    shown_is("\xc2\x9b"
             "2J \xc2\x9d"
             "0;t\xc2\x9c \xc2\x80\xc2\x9f",
             "\\xc2\\x9b2J \\xc2\\x9d0;t\\xc2\\x9c \\xc2\\x80\\xc2\\x9f");
    /* invalid UTF-8: a stray continuation, a cut sequence (at the end too), overlong forms, a
     * surrogate, past U+10FFFF, bytes that never start a sequence */
    shown_is("a\x80"
             "b",
             "a\\x80b");
    shown_is("\xe6\x97x", "\\xe6\\x97x");
    shown_is("end\xf0\x9f\x98", "end\\xf0\\x9f\\x98");
    shown_is("\xc0\xaf \xe0\x80\xaf", "\\xc0\\xaf \\xe0\\x80\\xaf");
    shown_is("\xed\xa0\x80", "\\xed\\xa0\\x80");
    shown_is("\xf4\x90\x80\x80 \xff\xfe", "\\xf4\\x90\\x80\\x80 \\xff\\xfe");
    /* bidirectional formatting characters (Trojan Source): U+202E, U+2066, U+200F */
    shown_is("x\xe2\x80\xae"
             "y\xe2\x81\xa6z\xe2\x80\x8f",
             "x\\xe2\\x80\\xaey\\xe2\\x81\\xa6z\\xe2\\x80\\x8f");
    /* a length, not the NUL: text with a NUL in it */
    oomi_sb_put_shown(&sb, "a\0b", 3);
    assert_int_equal(oomi_sb_finish(&sb, &out), OOM_OK);
    assert_string_equal(out, "a\\x00b");
    oomi_free(out);
}

/* oomi_utf8_clean(text) compared with `want` */
static void clean_is(const char *text, const char *want)
{
    char *got = oomi_utf8_clean(text);
    assert_non_null(got);
    assert_string_equal(got, want);
    oomi_free(got);
}

static void test_utf8_clean(void **state)
{
    json_object *o;
    (void)state;
    /* UTF-8 and every control kept (json-c escapes the controls itself) */
    clean_is("caf\xc3\xa9 \x1b]52;c;x\x07 \xc2\x9b", "caf\xc3\xa9 \x1b]52;c;x\x07 \xc2\x9b");
    clean_is(NULL, "");
    /* each byte of what is not UTF-8 becomes U+FFFD: a stray continuation, a cut sequence,
     * an overlong form, a surrogate, bytes that never start one */
    clean_is("a\x80"
             "b",
             "a\xef\xbf\xbd"
             "b");
    clean_is("end\xf0\x9f\x98", "end\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    clean_is("\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd");
    clean_is("\xed\xa0\x80 \xff", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd");
    /* as a JSON string: valid UTF-8 in the document */
    o = oomi_json_text("x\xfey");
    assert_non_null(o);
    assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                        "\"x\xef\xbf\xbdy\"");
    json_object_put(o);
    assert_null(oomi_json_text(""));
    assert_null(oomi_json_text(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_cap),
        cmocka_unit_test(test_read_pipe_cap),
        cmocka_unit_test(test_json_members),
        cmocka_unit_test(test_json_writers),
        cmocka_unit_test(test_plan_doc),
        cmocka_unit_test(test_json_load),
        cmocka_unit_test(test_plan_doc_bom_and_depth),
        cmocka_unit_test(test_shown),
        cmocka_unit_test(test_utf8_clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
