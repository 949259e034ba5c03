/* test_apply.c - `apply`: byte spans, splicing, creation, refusals, specs, diff, safe writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "core/core.h"
#include "oomless.h"
#include "unit/tmpdir.h"

static const char plan_json[] =
    "{\"plan\": {\"batch_size\": 8, \"grad_accum\": 4, \"effective_batch\": 32, \"seq_len\": "
    "2048, \"checkpointing\": \"none\", \"precision\": \"bf16\", \"optimizer\": \"adamw\", "
    "\"sharding\": \"zero2\", \"offload\": \"none\", \"gpus\": 2}, \"memory\": {\"device_peak\": "
    "21474836480, \"parts\": [1, 2.5]}}";

/* runs one assignment over `in` and returns the new text (or NULL with *err set) */
static char *edit_err(const char *name, const char *in, const char *key, const char *spec,
                      unsigned set_flags, unsigned flags, int *err)
{
    oom_apply *a;
    char *out = NULL;
    size_t len = 0;

    assert_int_equal(oom_apply_create(&a), OOM_OK);
    assert_int_equal(oom_apply_load_plan(a, plan_json, "plan"), OOM_OK);
    assert_int_equal(oom_apply_set(a, key, spec, set_flags), OOM_OK);
    *err = oom_apply_buffer(a, name, in, strlen(in), flags, &out, &len);
    if (!*err)
        assert_int_equal(len, strlen(out));
    oom_apply_free(a);
    return out;
}

static void edit_ok(const char *name, const char *in, const char *key, const char *spec,
                    unsigned flags, const char *want)
{
    int err;
    char *out = edit_err(name, in, key, spec, 0, flags, &err);
    if (err)
        fail_msg("%s=%s refused: %s", key, spec, oom_last_message());
    assert_string_equal(out, want);
    oom_free(out);
}

static void edit_refused(const char *name, const char *in, const char *key, const char *spec,
                         unsigned flags, int code, const char *msg_part)
{
    int err;
    char *out = edit_err(name, in, key, spec, 0, flags, &err);
    assert_null(out);
    assert_int_equal(err, code);
    if (!strstr(oom_last_message(), msg_part))
        fail_msg("message '%s' lacks '%s'", oom_last_message(), msg_part);
}

static void test_utf8_before_key(void **state)
{
    (void)state;
    /* 2-, 3- and 4-byte characters before the value: libyaml counts them as one each */
    edit_ok("c.yaml", "# größe — ünïcödé 😀😀\nmodel:\n  name: \"é\"  # ö\n  batch: 45  # 😀\n",
            "model.batch", "batch_size", 0,
            "# größe — ünïcödé 😀😀\nmodel:\n  name: \"é\"  # ö\n  batch: 8  # 😀\n");
    edit_ok("c.yaml", "a: \"ü😀\"\nb: 'x'\n", "b", "precision", 0, "a: \"ü😀\"\nb: 'bf16'\n");
    /* a BOM and CRLF line ends */
    edit_ok("c.yaml", "\xEF\xBB\xBF# é\r\nx: 1\r\ny: 2\r\n", "y", "literal:3", 0,
            "\xEF\xBB\xBF# é\r\nx: 1\r\ny: 3\r\n");
}

static void test_flow_and_lists(void **state)
{
    (void)state;
    edit_ok("c.yaml", "t: {a: 1, b: [10, 20, 30]}  # c\n", "t.b[2]", "batch_size", 0,
            "t: {a: 1, b: [10, 20, 8]}  # c\n");
    edit_ok("c.yaml", "t: {a: 1, b: [10, 20, 30]}\n", "t.a", "grad_accum", 0,
            "t: {a: 4, b: [10, 20, 30]}\n");
    edit_ok("c.yaml", "l:\n  - x: 1\n    y: 2\n  - x: 3\n", "l[1].x", "literal:7", 0,
            "l:\n  - x: 1\n    y: 2\n  - x: 7\n");
    edit_refused("c.yaml", "l: [1, 2]\n", "l[2]", "literal:1", OOM_APPLY_CREATE, OOM_EREFUSED,
                 "past the end");
}

static void test_quoting_kept(void **state)
{
    (void)state;
    edit_ok("c.yaml", "p: \"16-mixed\"\n", "p", "literal:bf16-mixed", 0, "p: \"bf16-mixed\"\n");
    edit_ok("c.yaml", "p: '16'\n", "p", "literal:'it''s'", 0, "p: 'it''s'\n");
    edit_ok("c.yaml", "p: fp32\n", "p", "precision", 0, "p: bf16\n");
    /* a plain string that would read back as another type is quoted */
    edit_ok("c.yaml", "p: fp32\n", "p", "literal:\"true\"", 0, "p: \"true\"\n");
    edit_ok("c.yaml", "p: fp32\n", "p", "literal:'a: b'", 0, "p: \"a: b\"\n");
    edit_ok("c.yaml", "f: True\ng: yes\nh: OFF\n", "f", "literal:false", 0,
            "f: False\ng: yes\nh: OFF\n");
    edit_ok("c.yaml", "g: yes\n", "g", "literal:false", 0, "g: no\n");
    edit_ok("c.yaml", "h: OFF\n", "h", "literal:true", 0, "h: ON\n");
}

static void test_numbers(void **state)
{
    (void)state;
    /* equal values keep their spelling; neighbours are untouched */
    edit_ok("c.yaml", "a: 5e8\nb: 1\n", "a", "literal:500000000", 0, "a: 5e8\nb: 1\n");
    edit_ok("c.yaml", "a: 5e8\nb: 1_000\n", "b", "literal:1000", 0, "a: 5e8\nb: 1_000\n");
    edit_ok("c.yaml", "a: 5e8\nb: 1\n", "b", "literal:2", 0, "a: 5e8\nb: 2\n");
    /* an int into a float stays a float */
    edit_ok("c.yaml", "lr: 0.5\n", "lr", "grad_accum", 0, "lr: 4.0\n");
    edit_ok("c.yaml", "lr: 0.5\n", "lr", "literal:1e-05", 0, "lr: 1e-05\n");
    edit_ok("d.json", "{\"a\": 5e8, \"b\": 1.50}", "a", "literal:500000000", 0,
            "{\"a\": 5e8, \"b\": 1.50}");
    edit_ok("d.json", "{\"a\": 5e8, \"b\": 1.50}", "b", "literal:1.5", 0,
            "{\"a\": 5e8, \"b\": 1.50}");
}

static void test_types(void **state)
{
    (void)state;
    edit_refused("c.yaml", "b: 45\n", "b", "precision", 0, OOM_EREFUSED, "holds a int");
    edit_refused("c.yaml", "b: 45\n", "b", "literal:0.5", 0, OOM_EREFUSED, "--force-type");
    edit_refused("c.yaml", "b: true\n", "b", "literal:1", 0, OOM_EREFUSED, "key 'b'");
    edit_refused("d.json", "{\"b\": \"auto\"}", "b", "batch_size", 0, OOM_EREFUSED, "'d.json'");
    edit_ok("d.json", "{\"b\": \"auto\"}", "b", "batch_size", OOM_APPLY_FORCE_TYPE, "{\"b\": 8}");
    edit_ok("c.yaml", "b: 45\n", "b", "precision", OOM_APPLY_FORCE_TYPE, "b: bf16\n");
    /* null takes anything; an empty value gets a space after the colon */
    edit_ok("c.yaml", "b: ~\nc:\nd: 1\n", "b", "precision", 0, "b: bf16\nc:\nd: 1\n");
    edit_ok("c.yaml", "b: ~\nc:\nd: 1\n", "c", "batch_size", 0, "b: ~\nc: 8\nd: 1\n");
    edit_ok("c.yaml", "f: {a, b: 1}\n", "f.a", "batch_size", 0, "f: {a: 8, b: 1}\n");
    edit_ok("c.yaml", "f: {a: , b: 1}\n", "f.a", "batch_size", 0, "f: {a: 8 , b: 1}\n");
    edit_refused("c.yaml", "?\n", "a.b", "literal:true", OOM_APPLY_CREATE, OOM_EREFUSED,
                 "key 'a.b'");
}

static void test_create(void **state)
{
    (void)state;
    edit_ok("c.yaml", "a:\n    b: 1  # c\n    c:\n        d: 2\nz: 0\n", "a.n", "batch_size",
            OOM_APPLY_CREATE, "a:\n    b: 1  # c\n    c:\n        d: 2\n    n: 8\nz: 0\n");
    edit_ok("c.yaml", "a:\n    b: 1\n    c:\n        d: 2\n", "a.x.y", "batch_size",
            OOM_APPLY_CREATE, "a:\n    b: 1\n    c:\n        d: 2\n    x:\n        y: 8\n");
    edit_ok("c.yaml", "a: 1", "b", "precision", OOM_APPLY_CREATE, "a: 1\nb: bf16\n");
    edit_ok("c.yaml", "l:\n  - x: 1\n    y: 2\nq: 1\n", "l[0].z", "literal:3", OOM_APPLY_CREATE,
            "l:\n  - x: 1\n    y: 2\n    z: 3\nq: 1\n");
    edit_ok("c.yaml", "f: {a: 1,  b: 2}\n", "f.c", "literal:3", OOM_APPLY_CREATE,
            "f: {a: 1,  b: 2,  c: 3}\n");
    edit_ok("c.yaml", "f: {}\n", "f.c.d", "literal:3", OOM_APPLY_CREATE, "f: {c: {d: 3}}\n");
    edit_ok("d.json", "{\n  \"a\": 1,\n  \"o\": {\n    \"p\": 2\n  }\n}\n", "o.q.r", "precision",
            OOM_APPLY_CREATE,
            "{\n  \"a\": 1,\n  \"o\": {\n    \"p\": 2,\n    \"q\": {\n      \"r\": \"bf16\"\n"
            "    }\n  }\n}\n");
    edit_ok("d.json", "{\"a\":1}", "b", "literal:true", OOM_APPLY_CREATE, "{\"a\":1,\"b\":true}");
    edit_ok("d.json", "{}", "b", "literal:null", OOM_APPLY_CREATE, "{\"b\": null}");
    edit_refused("c.yaml", "a: 1\n", "b", "literal:1", 0, OOM_EREFUSED, "--create");
    /* CRLF files get CRLF lines; a block scalar as the last value */
    edit_ok("c.yaml", "a:\r\n  b: 1\r\nz: 2\r\n", "a.c", "literal:3", OOM_APPLY_CREATE,
            "a:\r\n  b: 1\r\n  c: 3\r\nz: 2\r\n");
    edit_ok("c.yaml", "a:\n  s: |\n    text\n\n  # c\nz: 2\n", "a.c", "literal:3", OOM_APPLY_CREATE,
            "a:\n  s: |\n    text\n\n  c: 3\n  # c\nz: 2\n");
}

static void test_json_bytes(void **state)
{
    (void)state;
    edit_ok("d.json", "{ \"a\" :  1 ,\"b\":{ \"c\":2 }, \"s\": \"x\\\"y\\u00e9\" }\t\n", "b.c",
            "literal:3", 0, "{ \"a\" :  1 ,\"b\":{ \"c\":3 }, \"s\": \"x\\\"y\\u00e9\" }\t\n");
    edit_ok("d.json", "{\"s\": \"x\\\"y\\u00e9\", \"t\": \"é\"}", "s", "literal:a\"b", 0,
            "{\"s\": \"a\\\"b\", \"t\": \"é\"}");
    edit_ok("d.json", "{\"s\": \"x\\\"y\\u00e9\"}", "s", "literal:x\"yé", 0,
            "{\"s\": \"x\\\"y\\u00e9\"}");
    edit_ok("d.json", "[{\"a\": [1, {\"b\": false}]}]\n", "[0].a[1].b", "literal:true", 0,
            "[{\"a\": [1, {\"b\": true}]}]\n");
}

static void test_refusals(void **state)
{
    (void)state;
    edit_refused("c.yaml", "a: |\n  text\n", "a", "literal:x", 0, OOM_EREFUSED, "block scalar");
    edit_refused("c.yaml", "a: >\n  text\n", "a", "literal:x", 0, OOM_EREFUSED, "block scalar");
    edit_refused("c.yaml", "a: &x 1\nb: *x\n", "a", "literal:2", 0, OOM_EREFUSED, "anchor");
    edit_refused("c.yaml", "a: &x 1\nb: *x\n", "b", "literal:2", 0, OOM_EREFUSED, "alias");
    edit_refused("c.yaml", "a: !!str 1\n", "a", "literal:'2'", 0, OOM_EREFUSED, "tag");
    edit_refused("c.yaml", "a: 1\na: 2\n", "a", "literal:2", 0, OOM_EREFUSED, "duplicate");
    edit_refused("c.yaml", "b: &b {x: 1}\nc:\n  <<: *b\n", "c.x", "literal:2", 0, OOM_EREFUSED,
                 "merge key");
    edit_refused("c.yaml", "a:\n  b: 1\n", "a", "literal:2", 0, OOM_EREFUSED, "is a map");
    edit_refused("c.yaml", "a: this is\n  two lines\n", "a", "literal:x", 0, OOM_EREFUSED,
                 "several lines");
    edit_refused("c.yaml", "a: [1, 2\n", "a[0]", "literal:2", 0, OOM_EPARSE, "line 2 column");
    /* an error right after a map key (the pending key node is freed: valgrind/ASan check) */
    edit_refused("c.yaml", "? b", "a", "literal:2", 0, OOM_EREFUSED, "is not in the file");
    edit_refused("c.yaml", "? b\n", "a.b", "literal:s", OOM_APPLY_CREATE, OOM_EREFUSED,
                 "would not parse");
    edit_refused("c.yaml", "a: 1\nb: 2\nc d: [\n", "a", "literal:2", 0, OOM_EPARSE, "line 4");
    edit_refused("d.json", "{\"a\": 1,\n \"b\": }", "a", "literal:2", 0, OOM_EPARSE,
                 "'d.json' line 2 column");
    edit_refused("c.yaml", "a: 1\n", "a", "nosuchfield", 0, OOM_ENOTFOUND, "nosuchfield");
}

static void test_optional(void **state)
{
    int err;
    char *out;

    (void)state;
    /* a preset (optional) key the file lacks, or that is "auto", is skipped */
    out = edit_err("d.json", "{\"a\": 1}", "b", "batch_size", OOM_APPLY_OPTIONAL, 0, &err);
    assert_int_equal(err, OOM_OK);
    assert_string_equal(out, "{\"a\": 1}");
    oom_free(out);
    out = edit_err("d.json", "{\"a\": \"auto\"}", "a", "batch_size", OOM_APPLY_OPTIONAL, 0, &err);
    assert_int_equal(err, OOM_OK);
    assert_string_equal(out, "{\"a\": \"auto\"}");
    oom_free(out);
    out = edit_err("d.json", "{\"a\": 1}", "a", "nosuch", OOM_APPLY_OPTIONAL, 0, &err);
    assert_int_equal(err, OOM_OK);
    assert_string_equal(out, "{\"a\": 1}");
    oom_free(out);
}

static void test_specs(void **state)
{
    (void)state;
    edit_ok("c.yaml", "x: 0\n", "x", "memory.device_peak", 0, "x: 21474836480\n");
    edit_ok("c.yaml", "x: 0.0\n", "x", "memory.parts[1]", 0, "x: 2.5\n");
    edit_ok("c.yaml", "x: 0\n", "x", "zero_stage", 0, "x: 2\n");
    edit_ok("c.yaml", "x: 0\n", "x", "global_batch", 0, "x: 64\n");
    edit_ok("c.yaml", "x: false\n", "x", "precision==bf16", 0, "x: true\n");
    edit_ok("c.yaml", "x: true\n", "x", "checkpointing!=none", 0, "x: false\n");
    edit_ok("c.yaml", "x: true\n", "x", "batch_size==8", 0, "x: true\n");
    edit_ok("c.yaml", "x: a\n", "x", "literal:\"8\"", 0, "x: \"8\"\n");
    edit_ok("c.yaml", "x: ~\n", "x", "literal:null", 0, "x: ~\n");
}

static void test_bad_keys(void **state)
{
    oom_apply *a;
    static const char *const bad[] = {"", ".a", "a.", "a..b", "a[", "a[x]", "a[0]b", "a]"};
    size_t i;

    (void)state;
    assert_int_equal(oom_apply_create(&a), OOM_OK);
    for (i = 0; i < OOMI_ARRAY_LEN(bad); i++) {
        assert_int_equal(oom_apply_set(a, bad[i], "batch_size", 0), OOM_EINVAL);
        assert_non_null(strstr(oom_last_message(), "key '"));
    }
    assert_int_equal(oom_apply_set(a, "a", "b..c", 0), OOM_EINVAL);
    assert_int_equal(oom_apply_set(a, "a.b[0].c", "literal:..", 0), OOM_OK);
    assert_int_equal(oom_apply_load_plan(a, "{\"plan\": [1,", "p.json"), OOM_EPARSE);
    assert_non_null(strstr(oom_last_message(), "'p.json' line 1"));
    assert_int_equal(oom_apply_load_plan(a, "[1]", "p.json"), OOM_EINVAL);
    assert_int_equal(oom_apply_preset(a, "no-such-preset"), OOM_ENOTFOUND);
    assert_non_null(strstr(oom_last_message(), "hydra-lightning"));
    oom_apply_free(a);
}

/* YAML files of several documents: refused unless one is chosen */
static void test_documents(void **state)
{
    static const char multi[] = "a: 1\n---\nb: 2  # two\n...\n---\nb: 3\n";
    oom_apply *a;
    char *out = NULL;
    size_t len;

    (void)state;
    assert_int_equal(oom_apply_create(&a), OOM_OK);
    assert_int_equal(oom_apply_set(a, "b", "literal:8", 0), OOM_OK);
    assert_int_equal(oom_apply_buffer(a, "m.yaml", multi, strlen(multi), 0, &out, &len),
                     OOM_EREFUSED);
    assert_non_null(strstr(oom_last_message(), "'m.yaml' holds 3 YAML documents"));
    assert_int_equal(oom_apply_set_document(a, 3), OOM_OK);
    assert_int_equal(oom_apply_buffer(a, "m.yaml", multi, strlen(multi), 0, &out, &len), OOM_OK);
    assert_string_equal(out, "a: 1\n---\nb: 2  # two\n...\n---\nb: 8\n");
    oom_free(out);
    assert_int_equal(oom_apply_set_document(a, 2), OOM_OK);
    assert_int_equal(oom_apply_buffer(a, "m.yaml", multi, strlen(multi), 0, &out, &len), OOM_OK);
    assert_string_equal(out, "a: 1\n---\nb: 8  # two\n...\n---\nb: 3\n");
    oom_free(out);
    assert_int_equal(oom_apply_set_document(a, 4), OOM_OK);
    assert_int_equal(oom_apply_buffer(a, "m.yaml", multi, strlen(multi), 0, &out, &len),
                     OOM_EREFUSED);
    assert_non_null(strstr(oom_last_message(), "holds 3 YAML documents, not 4"));
    /* one document is one document, whether or not it is chosen; JSON has one */
    assert_int_equal(oom_apply_set_document(a, 1), OOM_OK);
    assert_int_equal(oom_apply_buffer(a, "o.yaml", "---\nb: 1\n", 9, 0, &out, &len), OOM_OK);
    assert_string_equal(out, "---\nb: 8\n");
    oom_free(out);
    assert_int_equal(oom_apply_buffer(a, "o.json", "{\"b\": 1}", 8, 0, &out, &len), OOM_OK);
    assert_string_equal(out, "{\"b\": 8}");
    oom_free(out);
    assert_int_equal(oom_apply_set_document(a, 2), OOM_OK);
    assert_int_equal(oom_apply_buffer(a, "o.json", "{\"b\": 1}", 8, 0, &out, &len), OOM_EREFUSED);
    oom_apply_free(a);
}

/* the writing options: an empty backup suffix, lock timeouts */
static void test_options(void **state)
{
    oom_apply *a;

    (void)state;
    assert_int_equal(oom_apply_create(&a), OOM_OK);
    assert_int_equal(oom_apply_set_backup_suffix(a, ""), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "backup suffix '' is empty"));
    assert_int_equal(oom_apply_set_backup_suffix(a, "a/b"), OOM_EINVAL);
    assert_int_equal(oom_apply_set_backup_suffix(a, NULL), OOM_OK);
    assert_int_equal(oom_apply_set_lock_timeout(a, -1), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "-1"));
    assert_int_equal(oom_apply_set_lock_timeout(a, NAN), OOM_EINVAL);
    assert_int_equal(oom_apply_set_lock_timeout(a, 0.25), OOM_OK);
    oom_apply_free(a);
}

static void test_diff(void **state)
{
    oomi_sb sb = OOMI_SB_INIT;
    const char *a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n";
    const char *b = "1\n2\nX\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\nY";

    (void)state;
    assert_int_equal(oomi_diff(&sb, "f", a, strlen(a), b, strlen(b)), OOM_OK);
    assert_string_equal(sb.buf, "--- a/f\n+++ b/f\n"
                                "@@ -1,6 +1,6 @@\n 1\n 2\n-3\n+X\n 4\n 5\n 6\n"
                                "@@ -18,3 +18,4 @@\n 18\n 19\n 20\n+Y\n"
                                "\\ No newline at end of file\n");
    oomi_sb_free(&sb);
    assert_int_equal(oomi_diff(&sb, "f", a, strlen(a), a, strlen(a)), OOM_OK);
    assert_null(sb.buf);
}

/* a file of `n` lines "line I" with lines 1 and n-2 changed in the copy */
static void two_far_changes(char **a, char **b, size_t n)
{
    oomi_sb sa = OOMI_SB_INIT, sb = OOMI_SB_INIT;
    size_t i;

    for (i = 0; i < n; i++) {
        oomi_sb_printf(&sa, "line %zu\n", i);
        oomi_sb_printf(&sb, i == 1 || i == n - 2 ? "changed %zu\n" : "line %zu\n", i);
    }
    assert_int_equal(oomi_sb_ok(&sa), OOM_OK);
    assert_int_equal(oomi_sb_ok(&sb), OOM_OK);
    *a = oomi_sb_steal(&sa);
    *b = oomi_sb_steal(&sb);
}

/* no length limit: 600,000 lines each (1.2 million in all) with changes at both ends */
static void test_diff_long(void **state)
{
    oomi_sb sb = OOMI_SB_INIT;
    char *a, *b;
    const char *want = "--- a/f\n+++ b/f\n@@ -1,5 +1,5 @@\n line 0\n-line 1\n+changed 1\n line 2\n"
                       " line 3\n line 4\n@@ -599996,5 +599996,5 @@\n line 599995\n line 599996\n"
                       " line 599997\n-line 599998\n+changed 599998\n line 599999\n";

    (void)state;
    two_far_changes(&a, &b, 600000);
    assert_int_equal(oomi_diff(&sb, "f", a, strlen(a), b, strlen(b)), OOM_OK);
    assert_string_equal(sb.buf, want);
    oomi_sb_free(&sb);
    oom_free(a);
    oom_free(b);
}

/* the longest common subsequence of two line lists, by dynamic programming (small inputs) */
static size_t lcs(const char *const *a, size_t n, const char *const *b, size_t m)
{
    size_t t[13][13] = {{0}}, i, j;

    for (i = n; i-- > 0;)
        for (j = m; j-- > 0;)
            t[i][j] = !strcmp(a[i], b[j])         ? t[i + 1][j + 1] + 1
                      : t[i + 1][j] > t[i][j + 1] ? t[i + 1][j]
                                                  : t[i][j + 1];
    return t[0][0];
}

/* applies a unified diff (of texts of whole lines) to the lines of a, into out; *changes counts
 * its - and + lines */
static void patch(oomi_sb *out, const char *const *a, size_t n, const char *diff, size_t *changes)
{
    const char *p = strstr(diff, "@@");
    size_t at = 0, s = 0, c = 0, len, first;
    int got;

    *changes = 0;
    while (p && *p == '@') {
        got = sscanf(p, "@@ -%zu,%zu", &s, &c);
        assert_true(got >= 1);
        first = got == 2 && c == 0 ? s : s - 1; /* an empty range names the line before it */
        for (; at < first && at < n; at++)
            oomi_sb_printf(out, "%s\n", a[at]);
        p = strchr(p, '\n') + 1;
        while (*p && *p != '@') {
            len = (size_t)(strchr(p, '\n') - p);
            if (*p == ' ' || *p == '-')
                at++;
            if (*p == ' ' || *p == '+')
                oomi_sb_printf(out, "%.*s\n", (int)(len - 1), p + 1);
            *changes += *p != ' ';
            p += len + 1;
        }
    }
    for (; at < n; at++)
        oomi_sb_printf(out, "%s\n", a[at]);
}

/* random small texts: the diff turns a into b, with as few changed lines as can be */
static void test_diff_minimal(void **state)
{
    static const char *const words[] = {"a", "b", "c", "d"};
    const char *la[12], *lb[12];
    char ta[64], tb[64], *want;
    size_t round, n, m, i, changes;
    unsigned seed = 12345;
    oomi_sb sb, out;

    (void)state;
    for (round = 0; round < 3000; round++) {
        n = (seed = seed * 1103515245u + 12345u) >> 16 & 7;
        m = (seed = seed * 1103515245u + 12345u) >> 16 & 7;
        ta[0] = tb[0] = '\0';
        for (i = 0; i < n; i++) {
            la[i] = words[(seed = seed * 1103515245u + 12345u) >> 16 & 3];
            strcat(strcat(ta, la[i]), "\n");
        }
        for (i = 0; i < m; i++) {
            lb[i] = words[(seed = seed * 1103515245u + 12345u) >> 16 & 3];
            strcat(strcat(tb, lb[i]), "\n");
        }
        sb = (oomi_sb)OOMI_SB_INIT;
        out = (oomi_sb)OOMI_SB_INIT;
        assert_int_equal(oomi_diff(&sb, "f", ta, strlen(ta), tb, strlen(tb)), OOM_OK);
        if (!sb.buf) {
            assert_string_equal(ta, tb);
            continue;
        }
        patch(&out, la, n, sb.buf, &changes);
        want = out.buf ? out.buf : "";
        if (strcmp(want, tb) || changes != n + m - 2 * lcs(la, n, lb, m))
            fail_msg("diff of\n%s-- and\n%s--:\n%s(%zu changed lines)", ta, tb, sb.buf, changes);
        oomi_sb_free(&sb);
        oomi_sb_free(&out);
    }
}

static char *slurp(const char *path)
{
    char *text;
    size_t len;
    assert_int_equal(oomi_read_file(&text, &len, path, OOMI_READ_MAX), OOM_OK);
    return text;
}

static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* two files, the second refused: neither changes, no backup or temporary appears */
static void test_all_or_nothing(void **state)
{
    char dir[512], p1[600], p2[600], bak[620], *t;
    const char *files[2] = {p1, p2};
    oom_apply *a;
    struct stat st;

    (void)state;
    assert_non_null(mkdtemp(test_tmp_path(dir, sizeof(dir), "oomless-apply-XXXXXX")));
    snprintf(p1, sizeof(p1), "%s/a.yaml", dir);
    snprintf(p2, sizeof(p2), "%s/b.yaml", dir);
    snprintf(bak, sizeof(bak), "%s.bak", p1);
    spit(p1, "x: 1\n");
    spit(p2, "y: 1\n");
    chmod(p1, 0640);
    assert_int_equal(oom_apply_create(&a), OOM_OK);
    assert_int_equal(oom_apply_set(a, "x", "literal:2", 0), OOM_OK);
    assert_int_equal(oom_apply_run(a, files, 2, OOM_APPLY_FOLLOW_SYMLINKS, NULL), OOM_EREFUSED);
    assert_non_null(strstr(oom_last_message(), "b.yaml"));
    assert_string_equal(t = slurp(p1), "x: 1\n");
    oom_free(t);
    assert_int_not_equal(access(bak, F_OK), 0);
    /* the first alone goes through, keeping the mode, with a backup */
    assert_int_equal(oom_apply_run(a, files, 1, OOM_APPLY_FOLLOW_SYMLINKS, NULL), OOM_OK);
    assert_string_equal(t = slurp(p1), "x: 2\n");
    oom_free(t);
    assert_string_equal(t = slurp(bak), "x: 1\n");
    oom_free(t);
    assert_int_equal(stat(p1, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    oom_apply_free(a);
    unlink(p1);
    unlink(p2);
    unlink(bak);
    assert_int_equal(rmdir(dir), 0); /* nothing else was left in it */
}

/* the preset assignments micro=batch_size and accum=grad_accum (NULL: not assigned) over `in`;
 * *report gets the run's report (NULL when refused) */
static char *batch_edit(const char *name, const char *in, const char *micro, const char *accum,
                        unsigned flags, int *err, char **report)
{
    oom_apply *a;
    char *out = NULL;
    size_t len = 0;

    *report = NULL;
    assert_int_equal(oom_apply_create(&a), OOM_OK);
    assert_int_equal(oom_apply_load_plan(a, plan_json, "plan"), OOM_OK);
    if (micro)
        assert_int_equal(oom_apply_set(a, micro, "batch_size", OOM_APPLY_OPTIONAL), OOM_OK);
    if (accum)
        assert_int_equal(oom_apply_set(a, accum, "grad_accum", OOM_APPLY_OPTIONAL), OOM_OK);
    *err = oom_apply_buffer(a, name, in, strlen(in), flags, &out, &len);
    if (!*err)
        assert_int_equal(oom_apply_report(a, report), OOM_OK);
    oom_apply_free(a);
    return out;
}

static void has(const char *text, const char *part)
{
    if (!text || !strstr(text, part))
        fail_msg("'%s' lacks '%s'", text ? text : "(null)", part);
}

/* the first file's notes of a report, as compact JSON: [{"line":1,"message":"..."}] (freed
 * with free) */
static char *notes(const char *report)
{
    struct json_object *doc = json_tokener_parse(report);
    struct json_object *f = json_object_array_get_idx(oomi_json_get(doc, "files"), 0);
    char *s;

    assert_non_null(f);
    s = strdup(json_object_to_json_string_ext(
        oomi_json_get(f, "notes"), JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(doc);
    assert_non_null(s);
    return s;
}

/* batch_edit that must succeed with the text `want` (NULL: not checked) and, when `note` is
 * given, a note holding it */
static void batch_ok(const char *name, const char *in, const char *micro, const char *accum,
                     unsigned flags, const char *want, const char *note)
{
    char *out, *rep;
    int err;

    out = batch_edit(name, in, micro, accum, flags, &err, &rep);
    if (err)
        fail_msg("refused: %s", oom_last_message());
    if (want)
        assert_string_equal(out, want);
    if (note)
        has(rep, note);
    oom_free(out);
    oom_free(rep);
}

/* batch_edit without flags that must be refused with a message holding `msg` */
static void batch_refused(const char *name, const char *in, const char *micro, const char *accum,
                          const char *msg)
{
    char *rep;
    int err;

    assert_null(batch_edit(name, in, micro, accum, 0, &err, &rep));
    assert_int_equal(err, OOM_EREFUSED);
    assert_null(rep);
    has(oom_last_message(), msg);
}

/* a file with one of the effective batch's keys but not the other: refused unless --create or
 * --partial (the plan: 8 x 4 on 2 GPUs, effective batch 64) */
static void test_batch_guard(void **state)
{
    const char *yaml = "t:\n  bs: 45  # per GPU\n  workers: 2\n";

    (void)state;
    batch_refused("c.yaml", yaml, "t.bs", "t.acc",
                  "'c.yaml' has 't.bs' but not 't.acc' (grad_accum 4 in the plan): "
                  "writing only the micro-batch would silently change the effective "
                  "batch from 90 to 16 (an accumulation the file does not set is 1; "
                  "the plan's effective batch is 64); --create adds 't.acc'");
    /* --partial: the batch alone, and a note */
    batch_ok("c.yaml", yaml, "t.bs", "t.acc", OOM_APPLY_PARTIAL,
             "t:\n  bs: 8  # per GPU\n  workers: 2\n",
             "no 't.acc' (--partial): the effective batch changes from 90 to 16");
    /* --create: in a block map, a flow map, a JSON object */
    batch_ok("c.yaml", yaml, "t.bs", "t.acc", OOM_APPLY_CREATE,
             "t:\n  bs: 8  # per GPU\n  workers: 2\n  acc: 4\n", NULL);
    batch_ok("c.yaml", "t: {bs: 45, workers: 2}\n", "t.bs", "t.acc", OOM_APPLY_CREATE,
             "t: {bs: 8, workers: 2, acc: 4}\n", NULL);
    batch_ok("d.json", "{\n  \"bs\": 45\n}\n", "bs", "acc", OOM_APPLY_CREATE,
             "{\n  \"bs\": 8,\n  \"acc\": 4\n}\n", NULL);
    /* the micro-batch is already the plan's: the effective batch is still not the plan's */
    batch_refused("c.yaml", "bs: 8\n", "bs", "acc",
                  "writing only the micro-batch would silently leave the effective "
                  "batch at 16 (an accumulation");
    batch_ok("c.yaml", "bs: 8\n", "bs", "acc", OOM_APPLY_PARTIAL, "bs: 8\n",
             "no 'acc' (--partial): the effective batch stays 16 (an accumulation");
    /* the accumulation without the micro-batch */
    batch_refused("d.json", "{\"acc\": 5}", "bs", "acc",
                  "'d.json' has 'acc' but not 'bs' (batch_size 8 in the plan): writing "
                  "only the accumulation would silently change the effective batch "
                  "from B x 10 to B x 8 (B: the micro-batch the job uses");
    /* neither key, both keys, only the micro-batch assigned: nothing to refuse */
    batch_ok("d.json", "{\"x\": 1}", "bs", "acc", 0, "{\"x\": 1}", NULL);
    batch_ok("d.json", "{\"bs\": 2, \"acc\": 16}", "bs", "acc", 0, "{\"bs\": 8, \"acc\": 4}", NULL);
    /* both keys, another effective batch: kept when the plan's micro-batch x GPUs divides it,
     * else refused unless the change is allowed, which is said */
    batch_ok("d.json", "{\"bs\": 4, \"acc\": 16}", "bs", "acc", 0, "{\"bs\": 8, \"acc\": 8}",
             "the file's effective batch 128 is kept: micro-batch 8 x accumulation 8 x 2 GPUs");
    batch_refused("d.json", "{\"bs\": 1, \"acc\": 1}", "bs", "acc",
                  "'d.json' states an effective batch of 2, and the plan was made for 64: its "
                  "micro-batch 8 x 2 GPUs does not divide 2");
    batch_ok("d.json", "{\"bs\": 1, \"acc\": 1}", "bs", "acc", OOM_APPLY_ALLOW_BATCH_CHANGE,
             "{\"bs\": 8, \"acc\": 4}",
             "the effective batch changes from 2 to 64, the plan's "
             "(--allow-effective-batch-change)");
    batch_ok("d.json", "{\"bs\": 1}", "bs", NULL, 0, "{\"bs\": 8}", NULL);
}

/* the global batch fixes the effective batch by itself (DeepSpeed's train_batch_size) */
static void test_batch_global(void **state)
{
    oom_apply *a;
    char *out = NULL;
    size_t len;
    const char *in = "{\"g\": 10, \"bs\": 5}";

    (void)state;
    assert_int_equal(oom_apply_create(&a), OOM_OK);
    assert_int_equal(oom_apply_load_plan(a, plan_json, "plan"), OOM_OK);
    assert_int_equal(oom_apply_preset(a, "deepspeed"), OOM_OK);
    assert_int_equal(oom_apply_set(a, "bs", "batch_size", OOM_APPLY_OPTIONAL), OOM_OK);
    assert_int_equal(oom_apply_set(a, "acc", "grad_accum", OOM_APPLY_OPTIONAL), OOM_OK);
    assert_int_equal(oom_apply_set(a, "g", "global_batch", OOM_APPLY_OPTIONAL), OOM_OK);
    /* a global batch of 10 that the plan's micro-batch 8 x 2 GPUs cannot keep: written as the
     * plan's only when the change is allowed */
    assert_int_equal(oom_apply_buffer(a, "d.json", in, strlen(in), 0, &out, &len), OOM_EREFUSED);
    assert_non_null(strstr(oom_last_message(), "'d.json' states an effective batch of 10, and "
                                               "the plan was made for 64"));
    /* (the file has no zero_optimization.stage, which the plan's ZeRO-2 needs) */
    assert_int_equal(oom_apply_buffer(a, "d.json", in, strlen(in),
                                      OOM_APPLY_ALLOW_BATCH_CHANGE | OOM_APPLY_ALLOW_SKIPPED, &out,
                                      &len),
                     OOM_OK);
    assert_string_equal(out, "{\"g\": 64, \"bs\": 8}");
    oom_free(out);
    /* 32 = 8 x 2 GPUs x 2: kept, with the accumulation that keeps it */
    in = "{\"g\": 32, \"bs\": 5, \"acc\": 1}";
    assert_int_equal(
        oom_apply_buffer(a, "d.json", in, strlen(in), OOM_APPLY_ALLOW_SKIPPED, &out, &len), OOM_OK);
    assert_string_equal(out, "{\"g\": 32, \"bs\": 8, \"acc\": 2}");
    oom_free(out);
    oom_apply_free(a);
}

/* the notes of one assignment key=spec over `in` (freed with free) */
static char *notes_of(const char *name, const char *in, const char *key, const char *spec)
{
    oom_apply *a;
    char *out = NULL, *rep = NULL;
    size_t len;

    assert_int_equal(oom_apply_create(&a), OOM_OK);
    assert_int_equal(oom_apply_load_plan(a, plan_json, "plan"), OOM_OK);
    assert_int_equal(oom_apply_set(a, key, spec, 0), OOM_OK);
    assert_int_equal(oom_apply_buffer(a, name, in, strlen(in), 0, &out, &len), OOM_OK);
    assert_int_equal(oom_apply_report(a, &rep), OOM_OK);
    oom_free(out);
    oom_apply_free(a);
    out = notes(rep);
    oom_free(rep);
    return out;
}

static void no_notes(const char *name, const char *in, const char *key, const char *spec)
{
    char *n = notes_of(name, in, key, spec);
    assert_string_equal(n, "[]");
    free(n);
}

/* which comments are stale: whole numbers equal to the old value (or the old effective batch)
 * on the changed value's line or in a comment line just above it */
static void test_stale_comments(void **state)
{
    oom_apply *a;
    char *n, *out, *rep;
    size_t len;
    const char *in = "b: 45  # 450 in all\nacc: 5\n";

    (void)state;
    n = notes_of("c.yaml", "a: 45  # was 45.\n", "a", "batch_size");
    assert_string_equal(n, "[{\"line\":1,\"message\":\"comment mentions 45, the old value of "
                           "'a'; the new value is 8\"}]");
    free(n);
    n = notes_of("c.yaml", "x: 1\n  # keep 45 here\na: 45\n", "a", "batch_size");
    assert_string_equal(n, "[{\"line\":2,\"message\":\"comment mentions 45, the old value of "
                           "'a'; the new value is 8\"}]");
    free(n);
    /* with both factors: 45 x 5 on the plan's 2 GPUs was 450; now 8 x 4 x 2 */
    assert_int_equal(oom_apply_create(&a), OOM_OK);
    assert_int_equal(oom_apply_load_plan(a, plan_json, "plan"), OOM_OK);
    assert_int_equal(oom_apply_set(a, "b", "batch_size", 0), OOM_OK);
    assert_int_equal(oom_apply_set(a, "acc", "grad_accum", 0), OOM_OK);
    assert_int_equal(
        oom_apply_buffer(a, "c.yaml", in, strlen(in), OOM_APPLY_ALLOW_BATCH_CHANGE, &out, &len),
        OOM_OK);
    assert_string_equal(out, "b: 8  # 450 in all\nacc: 4\n");
    assert_int_equal(oom_apply_report(a, &rep), OOM_OK);
    n = notes(rep);
    assert_string_equal(n, "[{\"message\":\"the effective batch changes from 450 to 64, the "
                           "plan's (--allow-effective-batch-change)\"},{\"line\":1,\"message\":"
                           "\"comment mentions effective batch 450; the new effective batch is "
                           "64\"}]");
    free(n);
    oom_free(out);
    oom_free(rep);
    oom_apply_free(a);
    /* not stale: part of a word or a decimal, another number, a quoted '#', two lines up, an
     * unchanged value, JSON */
    no_notes("c.yaml", "a: 45  # bf45 A45 45x 0.45 45.5 v4.45 1e45 45_0\n", "a", "batch_size");
    no_notes("c.yaml", "a: 45  # 46 450 4 5\n", "a", "batch_size");
    no_notes("c.yaml", "m: {a: 45, s: \" # 45\"}\n", "m.a", "batch_size");
    no_notes("c.yaml", "# 45\nx: 1\na: 45\n", "a", "batch_size");
    no_notes("c.yaml", "a: 8  # 8\n", "a", "batch_size");
    no_notes("c.json", "{\"a\": 45, \"s\": \"# 45\"}", "a", "batch_size");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_before_key), cmocka_unit_test(test_flow_and_lists),
        cmocka_unit_test(test_quoting_kept),    cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_types),           cmocka_unit_test(test_create),
        cmocka_unit_test(test_json_bytes),      cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_optional),        cmocka_unit_test(test_specs),
        cmocka_unit_test(test_bad_keys),        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_diff_long),       cmocka_unit_test(test_diff_minimal),
        cmocka_unit_test(test_documents),       cmocka_unit_test(test_options),
        cmocka_unit_test(test_all_or_nothing),  cmocka_unit_test(test_batch_guard),
        cmocka_unit_test(test_batch_global),    cmocka_unit_test(test_stale_comments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
