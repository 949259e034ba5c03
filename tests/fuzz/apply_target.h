/*
 * apply_target.h - the body of the apply fuzz targets (fuzz_apply_yaml.c, fuzz_apply_json.c):
 * oom_apply_set + oom_apply_buffer (the in-memory edit: parse, locate, splice) + the report.
 * Input: byte 0 = flags (bit 0: OOM_APPLY_CREATE, bit 1: OOM_APPLY_FORCE_TYPE, bit 2: no plan
 * loaded, bits 3-4: the YAML document to edit, 0 for none); then lines "KEY<TAB>SPEC" (at most
 * 8), each an assignment; the first line without a TAB starts the document.
 * Invariants: a refusal is EREFUSED/EPARSE/EINVAL/ENOTFOUND with a message and no output; an
 * edit's output parses (YAML: the library's loader; JSON: json-c) whenever the input did; the
 * report says "changed" exactly when the bytes changed; applying the same assignments to the
 * output changes nothing more (the edit is idempotent); nothing leaks.
 */
#include "fuzz.h"
#include "core/core.h"
#include "oomless.h"

#include <json-c/json.h>
#include <string.h>

#ifndef APPLY_FILE_NAME
#error "define APPLY_FILE_NAME"
#endif

static const char plan[] =
    "{\"plan\": {\"batch_size\": 8, \"grad_accum\": 4, \"gpus\": 2, \"precision\": \"bf16\","
    " \"sharding\": \"zero2\", \"checkpointing\": \"full\", \"seq_len\": 2048, \"lr\": 0.0003,"
    " \"offload\": null, \"flash\": true, \"name\": \"a b: c\"},"
    " \"memory\": {\"device_peak\": 21474836480}, \"list\": [1, 2.5, \"x\"]}";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup_env();
    return 0;
}

static int parses(const char *text, size_t len)
{
#ifdef APPLY_JSON
    /* as deep as apply's own scanner goes (json-c's default stops at 32 levels) */
    struct json_tokener *tok = json_tokener_new_ex(1024);
    json_object *o;
    size_t end;
    int ok;
    fuzz_check(tok != NULL);
    o = json_tokener_parse_ex(tok, text, (int)len);
    ok = o && json_tokener_get_error(tok) == json_tokener_success;
    for (end = ok ? json_tokener_get_parse_end(tok) : len; end < len; end++)
        ok &= text[end] == ' ' || text[end] == '\t' || text[end] == '\n' || text[end] == '\r';
    json_object_put(o);
    json_tokener_free(tok);
    return ok;
#else
    json_object *o = NULL;
    int err = oomi_yaml_load(&o, text, len, "fuzz");
    json_object_put(o);
    return err == OOM_OK;
#endif
}

/* the report's files[0].changed */
static int reported_changed(const oom_apply *a)
{
    char *json = NULL;
    json_object *root, *files, *changed;
    int v;
    fuzz_check(oom_apply_report(a, &json) == OOM_OK && json);
    root = json_tokener_parse(json);
    fuzz_check(root && json_object_object_get_ex(root, "files", &files) &&
               json_object_array_length(files) == 1 &&
               json_object_object_get_ex(json_object_array_get_idx(files, 0), "changed", &changed));
    v = json_object_get_boolean(changed);
    json_object_put(root);
    oom_free(json);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oom_apply *a = NULL;
    char *text, *p, *nl, *tab, *out = NULL, *out2 = NULL;
    size_t len, out_len = 0, out2_len = 0, n = 0;
    unsigned flags;
    int err;

    if (size < 1)
        return 0;
    flags = (data[0] & 1 ? OOM_APPLY_CREATE : 0) | (data[0] & 2 ? OOM_APPLY_FORCE_TYPE : 0);
    fuzz_check(oom_apply_create(&a) == OOM_OK);
    if (!(data[0] & 4))
        fuzz_check(oom_apply_load_plan(a, plan, "plan.json") == OOM_OK);
    fuzz_check(oom_apply_set_document(a, (size_t)(data[0] >> 3 & 3)) == OOM_OK);
    text = fuzz_cstring(data + 1, size - 1);
    len = size - 1;
    for (p = text; n < 8 && (nl = memchr(p, '\n', len - (size_t)(p - text))) &&
                   (tab = memchr(p, '\t', (size_t)(nl - p)));
         p = nl + 1, n++) {
        *nl = *tab = '\0';
        if (oom_apply_set(a, p, tab + 1, 0) != OOM_OK)
            fuzz_check(oom_last_message()[0]);
    }
    len -= (size_t)(p - text);

    err = oom_apply_buffer(a, APPLY_FILE_NAME, p, len, flags, &out, &out_len);
    if (err) {
        fuzz_check(err == OOM_EREFUSED || err == OOM_EPARSE || err == OOM_EINVAL ||
                   err == OOM_ENOTFOUND);
        fuzz_check(out == NULL && oom_last_message()[0]);
    } else {
        fuzz_check(out != NULL);
        if (parses(p, len))
            fuzz_check(parses(out, out_len));
        fuzz_check(reported_changed(a) == (out_len != len || memcmp(out, p, len) != 0));
        /* once more on the result: nothing left to change */
        err = oom_apply_buffer(a, APPLY_FILE_NAME, out, out_len, flags, &out2, &out2_len);
        fuzz_check(err == OOM_OK);
        fuzz_check(out2_len == out_len && !memcmp(out, out2, out_len));
        oom_free(out2);
    }
    oom_free(out);
    oom_apply_free(a);
    free(text);
    return 0;
}
