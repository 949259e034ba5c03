/* calibration_estimate.c - `oomless estimate -- CMD...`: the peak a probe's measured line
 * predicts on this GPU, against the budget. */
#include "calib/calib.h"

#include <json-c/json.h>
#include <string.h>

static int put(json_object *o, const char *k, json_object *v)
{
    return json_object_object_add(o, k, v) ? oomi_nomem() : OOM_OK;
}

static int calibration_json(json_object **out, const oom_calibration *rec)
{
    json_object *c = json_object_new_object(), *cmd = NULL;
    int err = OOM_OK;

    if (!c)
        return oomi_nomem();
    cmd = json_tokener_parse(rec->command);
    if ((err = put(c, "gpu", json_object_new_string(rec->gpu))) ||
        (err = put(c, "command", cmd ? cmd : json_object_new_string(rec->command))) ||
        (err = put(c, "workload", json_object_new_string(rec->workload ? rec->workload : ""))) ||
        (err = put(c, "fixed_bytes", oomi_json_number(rec->fit.fixed_bytes, 0))) ||
        (err = put(c, "per_sample_bytes", oomi_json_number(rec->fit.per_sample_bytes, 0))) ||
        (err = put(c, "per_sample2_bytes", oomi_json_number(rec->fit.per_sample2_bytes, 0))) ||
        (err = put(c, "measured_max_batch", json_object_new_int(rec->max_batch))) ||
        (err = put(c, "time", oomi_json_number(rec->time, 3)))) {
        json_object_put(c);
        return err;
    }
    *out = c;
    return OOM_OK;
}

static int budget_json(json_object **out, const oom_budget *b, uint64_t peak)
{
    json_object *o = json_object_new_object();
    int err;
    if (!o)
        return oomi_nomem();
    if ((err = put(o, "target_bytes", json_object_new_int64((int64_t)b->target_bytes))) ||
        (err = put(o, "safety_margin_bytes",
                   json_object_new_int64((int64_t)b->safety_margin_bytes))) ||
        (err = put(o, "usable_bytes", json_object_new_int64((int64_t)b->usable_bytes))) ||
        (err = put(o, "fits", json_object_new_boolean(peak <= b->usable_bytes))) ||
        (err = put(o, "headroom_bytes",
                   json_object_new_int64((int64_t)b->usable_bytes - (int64_t)peak)))) {
        json_object_put(o);
        return err;
    }
    *out = o;
    return OOM_OK;
}

static int build(char **out, const oom_calibration *rec, long batch, const oom_budget *b,
                 uint64_t peak)
{
    json_object *root = json_object_new_object(), *c = NULL, *mem = NULL, *bj = NULL;
    int err;

    if (!root)
        return oomi_nomem();
    if ((err = calibration_json(&c, rec)) || (err = put(root, "calibration", c)))
        goto fail;
    if ((err = put(root, "batch", json_object_new_int64(batch))) ||
        (err = put(root, "extrapolated", json_object_new_boolean(batch > rec->max_batch))))
        goto fail;
    if (!(mem = json_object_new_object())) {
        err = oomi_nomem();
        goto fail;
    }
    if ((err = put(root, "memory", mem)) ||
        (err = put(mem, "device_peak", json_object_new_int64((int64_t)peak))))
        goto fail;
    if ((err = budget_json(&bj, b, peak)) || (err = put(root, "budget", bj)))
        goto fail;
    return oomi_json_finish(out, root);
fail:
    json_object_put(root);
    return err;
}

int oom_calibration_estimate_json(char **out, int *fits, const char *path, const char *command,
                                  const char *workload, long batch,
                                  const oom_target_request *request)
{
    oom_config *own = NULL;
    oom_catalog *cat = NULL;
    oom_calibration *rec = NULL;
    oom_target t = OOM_TARGET_INIT;
    oom_target_request req = OOM_TARGET_REQUEST_INIT;
    uint64_t peak;
    double p;
    int err, have_target = 0;

    if (!out || !command)
        return oomi_fail(OOM_EINVAL, "calibrated estimate: missing argument");
    *out = NULL;
    if (batch < 1)
        return oomi_fail(OOM_EINVAL, "batch %ld must be at least 1", batch);
    if (request && (err = oomi_check_version(request->version, OOM_TARGET_REQUEST_VERSION,
                                             "oom_target_request")))
        return err;
    if (request)
        req = *request;
    if (!req.config && (err = oom_config_load(&own, NULL)))
        return err;
    if (!req.config)
        req.config = own;
    if ((err = oom_catalog_load(&cat, req.config)) || (err = oom_target_resolve(&t, &req, cat)))
        goto done;
    have_target = 1;
    if ((err = oom_calibration_lookup(&rec, path, t.profile.name, command,
                                      workload ? workload : ""))) {
        if (err == OOM_ENOTFOUND)
            err = oomi_fail(OOM_ENOTFOUND,
                            "no calibration record for this command on '%s': run 'oomless probe "
                            "-- CMD...' on that GPU first",
                            t.profile.name);
        goto done;
    }
    if (rec->traced) {
        err = oomi_fail(OOM_EINVAL,
                        "the calibration record for this command was traced on the meta device "
                        "(allocated bytes, no CUDA context): plan on it with 'oomless plan -- "
                        "CMD...', or estimate the workload with 'oomless estimate --model ...'");
        goto done;
    }
    p = oom_probe_fit_peak(&rec->fit, (int)(batch > 1 << 30 ? 1 << 30 : batch));
    peak = p > 0 ? (uint64_t)p : 0;
    if (fits)
        *fits = peak <= t.budget.usable_bytes;
    err = build(out, rec, batch, &t.budget, peak);
done:
    oom_calibration_free(rec);
    if (have_target)
        oom_target_dispose(&t);
    oom_catalog_free(cat);
    oom_config_free(own);
    return err;
}
