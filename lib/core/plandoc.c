/* plandoc.c - the one reader of plan documents (`oomless plan --json`) for `run --plan` (the
 * batch and accumulation) and `watch --plan` (the device peak). */
#include "core/core.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* .memory.device_peak: bytes as a number, or a size string ("21.5GiB") */
static int take_peak(oomi_plan_doc *out, json_object *root, const char *path)
{
    char where[PATH_MAX + 32];
    json_object *memory = oomi_json_get(root, "memory");
    json_object *peak = oomi_json_get(memory, "device_peak");
    double v;
    int err;

    oomi_snprintf(where, sizeof(where), "plan '%s': .memory.", path);
    if (!peak)
        return oomi_fail(OOM_ENOTFOUND, "plan '%s' has no .memory.device_peak", path);
    if (json_object_is_type(peak, json_type_string)) {
        if ((err = oom_parse_size(&out->device_peak, json_object_get_string(peak), OOM_UNIT_BYTES)))
            return oomi_fail_prefix(err, "%sdevice_peak: ", where);
        return OOM_OK;
    }
    if (!oomi_json_is_number(peak))
        return oomi_fail(OOM_EINVAL, "%sdevice_peak is not a number or a size", where);
    if ((err = oomi_json_double(&v, NULL, memory, "device_peak", 0, 9.2e18, where)))
        return err;
    out->device_peak = (uint64_t)v;
    return OOM_OK;
}

/* .plan.batch_size (needed) and .plan.grad_accum (may be absent or null) */
static int take_batch(oomi_plan_doc *out, json_object *root, const char *path)
{
    char where[PATH_MAX + 32];
    json_object *plan = oomi_json_get(root, "plan");
    int64_t v;
    bool found;
    int err;

    if (!plan || !json_object_is_type(plan, json_type_object))
        return oomi_fail(OOM_ENOTFOUND, "plan '%s' has no \"plan\" object", path);
    oomi_snprintf(where, sizeof(where), "plan '%s': .plan.", path);
    if ((err = oomi_json_int(&v, NULL, plan, "batch_size", 1, INT_MAX, where)))
        return err;
    out->batch_size = (int)v;
    if ((err = oomi_json_int(&v, &found, plan, "grad_accum", 1, INT_MAX, where)))
        return err;
    out->grad_accum = found ? (int)v : 0;
    return OOM_OK;
}

int oomi_plan_doc_read(oomi_plan_doc *out, const char *path, unsigned want)
{
    char *text = NULL, name[PATH_MAX + 16];
    json_object *root = NULL;
    size_t len;
    int err;

    if (!out)
        return oomi_fail(OOM_EINVAL, "plan: no result");
    memset(out, 0, sizeof(*out));
    out->device_peak = OOM_UNKNOWN;
    if (path)
        err = oomi_read_file(&text, &len, path, OOMI_READ_MAX);
    else
        err = oomi_read_fd(&text, &len, STDIN_FILENO, "standard input", OOMI_READ_MAX);
    if (err)
        return err;
    path = path ? path : "-"; /* the plan's name in messages, as the command line gave it */
    oomi_snprintf(name, sizeof(name), "plan '%s'", path);
    err = oomi_json_load(&root, text, len, name);
    if (!err && !json_object_is_type(root, json_type_object))
        err = oomi_fail(OOM_EPARSE, "plan '%s' is not a JSON object", path);
    if (!err && (want & OOMI_PLAN_BATCH))
        err = take_batch(out, root, path);
    if (!err && (want & OOMI_PLAN_PEAK))
        err = take_peak(out, root, path);
    json_object_put(root);
    oomi_free(text);
    return err;
}
