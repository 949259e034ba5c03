/* calibration_estimate.c - `oomless estimate -- CMD...`: the peak a probe's measured line
 * predicts on this GPU, against the budget. */
#include "calib/calib.h"

#include <json-c/json.h>
#include <string.h>

static int calibration_json(json_object **out, const oom_calibration *rec)
{
    json_object *c = json_object_new_object(), *cmd = NULL;
    int err = OOM_OK;

    if (!c)
        return oomi_nomem();
    cmd = json_tokener_parse(rec->command);
    if ((err = oomi_json_put(c, "gpu", json_object_new_string(rec->gpu))) ||
        (err = oomi_json_put(c, "command", cmd ? cmd : json_object_new_string(rec->command))) ||
        (err = oomi_json_put(c, "workload",
                             json_object_new_string(rec->workload ? rec->workload : ""))) ||
        (err = oomi_json_put(c, "fixed_bytes", oomi_json_number(rec->fit.fixed_bytes, 0))) ||
        (err = oomi_json_put(c, "per_sample_bytes",
                             oomi_json_number(rec->fit.per_sample_bytes, 0))) ||
        (err = oomi_json_put(c, "per_sample2_bytes",
                             oomi_json_number(rec->fit.per_sample2_bytes, 0))) ||
        (err = oomi_json_put(c, "measured_max_batch", json_object_new_int(rec->max_batch))) ||
        (err = oomi_json_put(c, "time", oomi_json_number(rec->time, 3)))) {
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
    if ((err = oomi_json_put(o, "target_bytes", json_object_new_int64((int64_t)b->target_bytes))) ||
        (err = oomi_json_put(o, "safety_margin_bytes",
                             json_object_new_int64((int64_t)b->safety_margin_bytes))) ||
        (err = oomi_json_put(o, "usable_bytes", json_object_new_int64((int64_t)b->usable_bytes))) ||
        (err = oomi_json_put(o, "fits", json_object_new_boolean(peak <= b->usable_bytes))) ||
        (err = oomi_json_put(o, "headroom_bytes",
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
    if ((err = calibration_json(&c, rec)) || (err = oomi_json_put(root, "calibration", c)))
        goto fail;
    if ((err = oomi_json_put(root, "batch", json_object_new_int64(batch))) ||
        (err =
             oomi_json_put(root, "extrapolated", json_object_new_boolean(batch > rec->max_batch))))
        goto fail;
    if (!(mem = json_object_new_object())) {
        err = oomi_nomem();
        goto fail;
    }
    if ((err = oomi_json_put(root, "memory", mem)) ||
        (err = oomi_json_put(mem, "device_peak", json_object_new_int64((int64_t)peak))))
        goto fail;
    if ((err = budget_json(&bj, b, peak)) || (err = oomi_json_put(root, "budget", bj)))
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
    oom_calibration *rec = NULL;
    oom_target t = OOM_TARGET_INIT;
    uint64_t peak;
    double p;
    int err;

    if (!out || !command)
        return oomi_fail(OOM_EINVAL, "calibrated estimate: missing argument");
    *out = NULL;
    if (batch < 1)
        return oomi_fail(OOM_EINVAL, "batch %ld must be at least 1", batch);
    if ((err = oomi_target_resolve_request(&t, request)))
        return err;
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
    oom_target_dispose(&t);
    return err;
}
