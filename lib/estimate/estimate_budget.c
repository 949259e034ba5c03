/* estimate_budget.c - the optional budget of `oomless estimate`, shared with the bindings. */
#include "estimate/estimate.h"

#include <stdio.h>
#include <string.h>

/* *label (when asked for) = prefix + value, allocated */
static int set_label(char **label, const char *prefix, const char *value)
{
    if (!label)
        return OOM_OK;
    oomi_free(*label);
    *label = oomi_asprintf("%s%s", prefix, value);
    return *label ? OOM_OK : oomi_nomem();
}

/* On a GPU without bf16, a bf16 precision becomes its fp16 twin, with a notice (as plan does). */
static int without_bf16(oom_workload *w, const oom_gpu_profile *gpu)
{
    oom_precision p = oomi_resolved_precision(w), q = oomi_precision_without_bf16(p);
    int err;

    if (!oomi_gpu_lacks_bf16(gpu) || q == p)
        return OOM_OK;
    if ((err = oom_workload_set(w, "precision", oom_precision_name(q))))
        return err;
    oomi_notice("%s has no bf16 tensor cores: estimating with %s", gpu->id, oom_precision_name(q));
    return OOM_OK;
}

static int from_gpu(oom_budget *out, char **label, oom_workload *w, const oom_target_request *req)
{
    oom_target t = OOM_TARGET_INIT;
    int err;

    if ((err = oomi_target_resolve_request(&t, req)))
        return err;
    *out = t.budget;
    if (!(err = set_label(label, "", t.profile.name ? t.profile.name : req->gpu)) &&
        !(err = oom_workload_set_gpu(w, &t.profile)))
        err = without_bf16(w, &t.profile);
    oom_target_dispose(&t);
    return err;
}

int oom_estimate_budget(oom_budget *out, int *have, char **label, oom_workload *w,
                        const oom_target_request *req)
{
    uint64_t target = 0, margin = OOM_DEFAULT_SAFETY_MARGIN;
    const char *margin_text;
    int err;

    if (!out || !have || !w)
        return oomi_fail(OOM_EINVAL, "estimate budget: missing argument");
    if ((err = oomi_check_version(out->version, OOM_BUDGET_VERSION, "oom_budget")) ||
        (req && (err = oomi_check_version(req->version, OOM_TARGET_REQUEST_VERSION,
                                          "oom_target_request"))))
        return err;
    *have = 0;
    if (label)
        *label = NULL;
    if (!req)
        return OOM_OK;
    /* --vram auto|free name the detected GPU's memory: resolved as --gpu auto would be */
    if (req->gpu ||
        (req->vram && (!oomi_name_cmp(req->vram, "auto") || !oomi_name_cmp(req->vram, "free")))) {
        if ((err = from_gpu(out, label, w, req))) {
            if (label) {
                oomi_free(*label);
                *label = NULL;
            }
            return err;
        }
        *have = 1;
        return OOM_OK;
    }
    if (!req->vram) {
        if (req->margin)
            return oomi_fail(OOM_EINVAL, "--vram-safety-margin '%s' needs --vram or --gpu",
                             req->margin);
        return OOM_OK;
    }
    margin_text = req->margin   ? req->margin
                  : req->config ? oom_config_default_margin(req->config)
                                : NULL;
    if ((err = oom_parse_size(&target, req->vram, OOM_UNIT_GIB)) ||
        (margin_text && (err = oom_parse_margin(&margin, margin_text, target))) ||
        (err = oom_budget_make(out, target, margin)))
        return err;
    *have = 1;
    return set_label(label, "--vram ", req->vram);
}
