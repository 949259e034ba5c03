/* estimate_budget.c - the optional budget of `oomless estimate`, shared with the bindings. */
#include "estimate/estimate.h"

#include <stdio.h>
#include <string.h>

static void set_label(char *label, size_t size, const char *prefix, const char *value)
{
    if (label && size)
        oomi_snprintf(label, size, "%s%s", prefix, value);
}

static int from_gpu(oom_budget *out, char *label, size_t label_size, oom_workload *w,
                    const oom_target_request *req)
{
    oom_config *own = NULL;
    oom_catalog *cat = NULL;
    oom_target t = OOM_TARGET_INIT;
    oom_target_request r = *req;
    int err, have_target = 0;

    if (!r.config && (err = oom_config_load(&own, NULL)))
        return err;
    if (!r.config)
        r.config = own;
    if ((err = oom_catalog_load(&cat, r.config)) || (err = oom_target_resolve(&t, &r, cat)))
        goto done;
    have_target = 1;
    *out = t.budget;
    set_label(label, label_size, "", t.profile.name ? t.profile.name : req->gpu);
    err = oom_workload_set_gpu(w, &t.profile);
done:
    if (have_target)
        oom_target_dispose(&t);
    oom_catalog_free(cat);
    oom_config_free(own);
    return err;
}

int oom_estimate_budget(oom_budget *out, int *have, char *label, size_t label_size, oom_workload *w,
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
    if (label && label_size)
        label[0] = '\0';
    if (!req)
        return OOM_OK;
    if (req->gpu) {
        if ((err = from_gpu(out, label, label_size, w, req)))
            return err;
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
    set_label(label, label_size, "--vram ", req->vram);
    return OOM_OK;
}
