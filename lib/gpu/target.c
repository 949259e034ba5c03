/* target.c - which GPU a planning command plans for, and its budget; JSON for `gpus`. */
#include "gpu/gpu.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void oom_target_dispose(oom_target *t)
{
    if (!t)
        return;
    oomi_profile_clear(&t->profile);
    oomi_free(t->reason);
    t->reason = NULL;
}

static bool is_index(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* A profile for a detected device: the catalog's numbers when the board is known. */
static int profile_for_device(oom_gpu_profile *out, const oom_gpu_info *g, const oom_catalog *c)
{
    const oom_gpu_profile *known = oom_catalog_match(c, g->name, g->total_bytes);
    oom_gpu_profile p = {0};

    if (known)
        p = *known;
    else {
        p.id = "detected";
        p.vendor = "nvidia";
        p.match = "";
    }
    p.name = g->name;
    p.memory_bytes = g->total_bytes;
    if (g->has_cc) {
        p.cc_major = g->cc_major;
        p.cc_minor = g->cc_minor;
    }
    p.user_defined = 0;
    return oomi_profile_copy(out, &p);
}

/* Detected GPUs: the one asked for by index, else the smallest. */
static int resolve_detected(oom_target *t, const char *want_index, const oom_catalog *c)
{
    oom_gpu_session *s = NULL;
    oom_gpu_list *list = NULL;
    size_t i, pick = 0, alive = 0;
    int err;

    if ((err = oom_gpu_open(&s)) || (err = oom_gpu_sample(&list, s, 0)))
        goto done;
    for (i = 0; i < list->count; i++) {
        if (list->gpus[i]->lost)
            continue;
        if (alive && list->gpus[i]->total_bytes != list->gpus[pick]->total_bytes)
            t->mixed = 1;
        if (!alive++ || list->gpus[i]->total_bytes < list->gpus[pick]->total_bytes)
            pick = i;
    }
    if (!alive) {
        err = oomi_fail(OOM_ENODEV, "no GPU visible%s",
                        getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES hides them)" : "");
        goto done;
    }
    if (want_index) {
        long idx = strtol(want_index, NULL, 10);
        if (idx >= (long)list->count || list->gpus[idx]->lost) {
            err = oomi_fail(OOM_EINVAL, "GPU index '%s' is not visible (%zu GPU%s found)",
                            want_index, list->count, list->count == 1 ? "" : "s");
            goto done;
        }
        pick = (size_t)idx;
        t->mixed = 0;
    }
    t->gpu_count = want_index ? 1 : (int)alive;
    t->detected = 1;
    err = profile_for_device(&t->profile, list->gpus[pick], c);
done:
    oom_gpu_list_free(list);
    oom_gpu_close(s);
    return err;
}

int oom_target_resolve(oom_target *t, const oom_target_request *req, const oom_catalog *c)
{
    const char *gpu = req ? req->gpu : NULL, *margin_text;
    const oom_gpu_profile *prof;
    uint64_t target, margin;
    int err;

    if (!t || !c)
        return oomi_fail(OOM_EINVAL, "target: missing argument");
    if ((err = oomi_check_version(t->version, OOM_TARGET_VERSION, "oom_target")) ||
        (req && (err = oomi_check_version(req->version, OOM_TARGET_REQUEST_VERSION,
                                          "oom_target_request"))))
        return err;
    *t = (oom_target){.version = t->version, .budget = {.version = OOM_BUDGET_VERSION}};
    if (!gpu || !*gpu)
        gpu = getenv("OOMLESS_GPU");
    if (!gpu || !*gpu)
        gpu = getenv("GPU_PROFILE");
    if (!gpu || !*gpu)
        gpu = "auto";

    if (!oomi_name_cmp(gpu, "auto") || is_index(gpu)) {
        err = resolve_detected(t, is_index(gpu) ? gpu : NULL, c);
        if (err == OOM_ENODEV && !is_index(gpu)) {
            const char *def = oom_config_default_profile(req ? req->config : NULL);
            if (!(t->reason = oomi_strdup(oom_last_message())))
                return oomi_nomem();
            if ((err = oom_catalog_find(&prof, c, def))) {
                oomi_fail_prefix(err, "default profile: ");
                goto fail;
            }
            if ((err = oomi_profile_copy(&t->profile, prof)))
                goto fail;
            t->fallback = 1;
            t->gpu_count = 1;
        } else if (err)
            return err;
    } else {
        if ((err = oom_catalog_find(&prof, c, gpu)) || (err = oomi_profile_copy(&t->profile, prof)))
            return err;
        t->gpu_count = 1;
    }

    target = t->profile.memory_bytes;
    if (req && req->vram && (err = oom_parse_size(&target, req->vram, OOM_UNIT_GIB)))
        goto fail;
    if (req && req->vram && target == 0) {
        err = oomi_fail(OOM_EINVAL, "--vram '%s' must be more than 0", req->vram);
        goto fail;
    }
    margin_text =
        req && req->margin ? req->margin : oom_config_default_margin(req ? req->config : NULL);
    if ((err = oom_parse_margin(&margin, margin_text, target)) ||
        (err = oom_budget_make(&t->budget, target, margin)))
        goto fail;
    return OOM_OK;
fail:
    oom_target_dispose(t);
    return err;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static int finish(char **out, json_object *root, int err)
{
    if (!err)
        return oomi_json_finish(out, root);
    json_object_put(root);
    return err == OOM_ENOMEM ? oomi_nomem() : err;
}

static json_object *gpu_json(const oom_gpu_info *g)
{
    json_object *o = json_object_new_object();
    char cc[16];
    int e = 0;
    if (!o)
        return NULL;
    oomi_snprintf(cc, sizeof(cc), "%d.%d", g->cc_major, g->cc_minor);
    e |= oomi_json_put(o, "index", json_object_new_int(g->index));
    e |= oomi_json_put(o, "nvml_index", json_object_new_int(g->nvml_index));
    e |= oomi_json_put(o, "name", json_object_new_string(g->name));
    e |= oomi_json_put(o, "uuid", oomi_json_string_or_null(g->uuid));
    e |= oomi_json_put(o, "total_bytes", g->lost ? NULL : oomi_json_bytes(g->total_bytes));
    e |= oomi_json_put(o, "used_bytes", g->lost ? NULL : oomi_json_bytes(g->used_bytes));
    e |= oomi_json_put(o, "free_bytes", g->lost ? NULL : oomi_json_bytes(g->free_bytes));
    e |= oomi_json_put(o, "compute_capability", g->has_cc ? json_object_new_string(cc) : NULL);
    e |= oomi_json_put(o, "pci_bus_id", oomi_json_string_or_null(g->pci_bus_id));
    e |= oomi_json_put(o, "lost", json_object_new_boolean(g->lost));
    if (e) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

int oom_gpus_to_json(char **out, const oom_gpu_list *list, const oom_target *t)
{
    json_object *root = json_object_new_object(), *arr = json_object_new_array(), *b, *tj;
    uint64_t total = 0, first = 0;
    size_t i, alive = 0;
    int err = 0, mixed = 0;

    if (!out)
        return oomi_fail(OOM_EINVAL, "gpus json: no output");
    *out = NULL;
    if ((t && (err = oomi_check_version(t->version, OOM_TARGET_VERSION, "oom_target"))) ||
        (list && (err = oomi_check_version(list->version, OOM_GPU_LIST_VERSION, "oom_gpu_list")))) {
        json_object_put(root);
        json_object_put(arr);
        return err;
    }
    if (!root || !arr) {
        json_object_put(arr);
        return finish(out, root, OOM_ENOMEM);
    }
    err |= oomi_json_put(root, "gpus", arr);
    for (i = 0; list && i < list->count; i++) {
        json_object *g = gpu_json(list->gpus[i]);
        if (!g || json_object_array_add(arr, g)) {
            json_object_put(g);
            return finish(out, root, OOM_ENOMEM);
        }
        if (!list->gpus[i]->lost) { /* a lost GPU's sizes are unknown: not compared */
            total += list->gpus[i]->total_bytes;
            if (!alive++)
                first = list->gpus[i]->total_bytes;
            else if (list->gpus[i]->total_bytes != first)
                mixed = 1;
        }
    }
    err |= oomi_json_put(root, "total_bytes", json_object_new_int64((int64_t)total));
    err |= oomi_json_put(root, "mixed", json_object_new_boolean(mixed));
    err |= oomi_json_put(root, "backend", list ? oomi_json_string_or_null(list->backend) : NULL);
    err |= oomi_json_put(root, "driver_version",
                         list ? oomi_json_string_or_null(list->driver_version) : NULL);
    err |= oomi_json_put(
        root, "cuda_driver_version",
        list && list->cuda_driver_version ? json_object_new_int(list->cuda_driver_version) : NULL);
    if (t) {
        if (!(b = json_object_new_object()))
            return finish(out, root, OOM_ENOMEM);
        err |= oomi_json_put(root, "budget", b);
        err |= oomi_json_put(b, "target_bytes",
                             json_object_new_int64((int64_t)t->budget.target_bytes));
        err |= oomi_json_put(b, "safety_margin_bytes",
                             json_object_new_int64((int64_t)t->budget.safety_margin_bytes));
        err |= oomi_json_put(b, "usable_bytes",
                             json_object_new_int64((int64_t)t->budget.usable_bytes));
        if (!(tj = json_object_new_object()))
            return finish(out, root, OOM_ENOMEM);
        err |= oomi_json_put(root, "target", tj);
        err |= oomi_json_put(tj, "profile", json_object_new_string(t->profile.id));
        err |= oomi_json_put(tj, "name", json_object_new_string(t->profile.name));
        err |= oomi_json_put(tj, "detected", json_object_new_boolean(t->detected));
        err |= oomi_json_put(tj, "fallback", json_object_new_boolean(t->fallback));
        err |= oomi_json_put(tj, "reason", oomi_json_string_or_null(t->reason));
        err |= oomi_json_put(tj, "gpu_count", json_object_new_int(t->gpu_count));
    }
    return finish(out, root, err ? OOM_ENOMEM : OOM_OK);
}

int oom_catalog_to_json(char **out, const oom_catalog *c)
{
    json_object *root = json_object_new_object(), *arr = json_object_new_array(), *planner;
    size_t i;
    int err = 0, perr;

    if (!out)
        return oomi_fail(OOM_EINVAL, "catalog json: no output");
    *out = NULL;
    if (!root || !arr) {
        json_object_put(arr);
        return finish(out, root, OOM_ENOMEM);
    }
    err |= oomi_json_put(root, "gpus", arr);
    if ((perr = oomi_catalog_plan_json(&planner, c, NULL, 0))) {
        json_object_put(root);
        return perr;
    }
    err |= oomi_json_put(root, "planner", planner);
    for (i = 0; i < oom_catalog_count(c); i++) {
        const oom_gpu_profile *p = oom_catalog_at(c, i);
        json_object *o = json_object_new_object();
        char cc[16];
        if (!o || json_object_array_add(arr, o)) {
            json_object_put(o);
            return finish(out, root, OOM_ENOMEM);
        }
        oomi_snprintf(cc, sizeof(cc), "%d.%d", p->cc_major, p->cc_minor);
        err |= oomi_json_put(o, "id", json_object_new_string(p->id));
        err |= oomi_json_put(o, "name", json_object_new_string(p->name));
        err |= oomi_json_put(o, "vendor", json_object_new_string(p->vendor));
        err |= oomi_json_put(o, "memory_bytes", json_object_new_int64((int64_t)p->memory_bytes));
        err |= oomi_json_put(o, "bandwidth_gbs",
                             p->has_bandwidth ? json_object_new_double(p->bandwidth_gbs) : NULL);
        err |= oomi_json_put(o, "bf16_tflops",
                             p->has_tflops ? json_object_new_double(p->bf16_tflops) : NULL);
        err |= oomi_json_put(o, "fp16_tflops",
                             p->has_tflops ? json_object_new_double(p->fp16_tflops) : NULL);
        err |= oomi_json_put(o, "fp32_tflops",
                             p->fp32_tflops > 0 ? json_object_new_double(p->fp32_tflops) : NULL);
        err |=
            oomi_json_put(o, "compute_capability", p->cc_major ? json_object_new_string(cc) : NULL);
        err |= oomi_json_put(o, "user_defined", json_object_new_boolean(p->user_defined));
        if ((perr = oomi_catalog_plan_json(&planner, c, p->id, 1))) {
            json_object_put(root);
            return perr;
        }
        if (planner) /* the constants this GPU changes */
            err |= oomi_json_put(o, "planner", planner);
    }
    return finish(out, root, err ? OOM_ENOMEM : OOM_OK);
}

int oomi_target_resolve_request(oom_target *t, const oom_target_request *request)
{
    oom_config *own = NULL;
    oom_catalog *catalog = NULL;
    oom_target_request req = OOM_TARGET_REQUEST_INIT;
    int err;

    if (request && (err = oomi_check_version(request->version, OOM_TARGET_REQUEST_VERSION,
                                             "oom_target_request")))
        return err;
    if (request)
        req = *request;
    if (!req.config && (err = oom_config_load(&own, NULL)))
        return err;
    if (!req.config)
        req.config = own;
    if ((err = oom_catalog_load(&catalog, req.config)) == OOM_OK)
        err = oom_target_resolve(t, &req, catalog);
    oom_catalog_free(catalog);
    oom_config_free(own);
    return err;
}

int oom_gpus_report(char **out, const oom_target_request *request, unsigned flags)
{
    oom_gpu_session *s = NULL;
    oom_gpu_list *list = NULL;
    oom_target t = OOM_TARGET_INIT;
    int err, have_target = 0;

    if (!out)
        return oomi_fail(OOM_EINVAL, "gpus report: no output");
    *out = NULL;
    if ((err = oom_gpu_open(&s)) == OOM_OK)
        err = oom_gpu_sample(&list, s, flags & OOM_SAMPLE_ALL_GPUS);
    if (err && err != OOM_ENODEV)
        goto done;
    if ((err = oomi_target_resolve_request(&t, request)))
        goto done;
    have_target = 1;
    err = oom_gpus_to_json(out, list, &t);
done:
    if (have_target)
        oom_target_dispose(&t);
    oom_gpu_list_free(list);
    oom_gpu_close(s);
    return err;
}
