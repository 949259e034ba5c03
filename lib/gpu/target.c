/* target.c - which GPU a planning command plans for, and its budget; JSON for `gpus`. */
#include "gpu/gpu.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a detected GPU adds to a target: memory in use now, who holds it, what is free. */
struct detected {
    uint64_t used, free;
    char *pids; /* "pid 4242 (2.00 GiB), ..." or NULL */
    char name[96];
};

void oom_target_dispose(oom_target *t)
{
    if (!t)
        return;
    oomi_profile_clear(&t->profile);
    oomi_free(t->reason);
    t->reason = NULL;
    if (t->version >= 2) {
        oomi_free(t->others);
        t->others = NULL;
    }
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

/* A profile for a detected device: the catalog's numbers when the board is known, its memory
 * the capacity left after the driver's reserve (oom_gpu_reserved_bytes). */
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
    p.memory_bytes = g->total_bytes - oom_gpu_reserved_bytes(g); /* what processes can get */
    if (g->has_cc) {
        p.cc_major = g->cc_major;
        p.cc_minor = g->cc_minor;
    }
    p.user_defined = 0;
    return oomi_profile_copy(out, &p);
}

/* "pid 4242 (2.00 GiB), pid 77 (512 MiB)" for the processes NVML lists on `g`, or NULL. */
static int describe_processes(char **out, const oom_gpu_info *g)
{
    oomi_sb sb = OOMI_SB_INIT;
    size_t i;
    char size[16];

    *out = NULL;
    if (!g->process_count)
        return OOM_OK;
    for (i = 0; i < g->process_count; i++) {
        const oom_gpu_process *p = g->processes[i];
        if (p->used_bytes == OOM_UNKNOWN)
            oomi_sb_printf(&sb, "%spid %u", i ? ", " : "", (unsigned)p->pid);
        else
            oomi_sb_printf(&sb, "%spid %u (%s)", i ? ", " : "", (unsigned)p->pid,
                           oom_format_size(size, sizeof(size), p->used_bytes));
    }
    return oomi_sb_finish(&sb, out);
}

/* Detected GPUs: the one asked for by index, else the smallest. `d` receives its memory. */
static int resolve_detected(oom_target *t, struct detected *d, const char *want_index,
                            const oom_catalog *c)
{
    oom_gpu_session *s = NULL;
    oom_gpu_list *list = NULL;
    size_t i, pick = 0, alive = 0;
    int err;

    if ((err = oom_gpu_open(&s)) || (err = oom_gpu_sample(&list, s, OOM_SAMPLE_PROCESSES)))
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
            err = oomi_fail(OOM_EINVAL,
                            "GPU '%s' read as a GPU index (a GPU is detected), but index %s is "
                            "not visible (%zu GPU%s found)",
                            want_index, want_index, list->count, list->count == 1 ? "" : "s");
            goto done;
        }
        pick = (size_t)idx;
        t->mixed = 0;
    }
    t->gpu_count = want_index ? 1 : (int)alive;
    t->detected = 1;
    d->used = list->gpus[pick]->used_bytes;
    d->free = list->gpus[pick]->free_bytes;
    oomi_snprintf(d->name, sizeof(d->name), "%s", list->gpus[pick]->name);
    if (!(err = profile_for_device(&t->profile, list->gpus[pick], c)))
        err = describe_processes(&d->pids, list->gpus[pick]);
done:
    oom_gpu_list_free(list);
    oom_gpu_close(s);
    return err;
}

/* A profile named by $OOMLESS_GPU/$GPU_PROFILE while another GPU is in the machine: a notice
 * naming both. Detection failing here is not an error (the profile is what was asked for). */
static void say_env_mismatch(const char *var, const oom_gpu_profile *named, const oom_catalog *c)
{
    oom_target probe = OOM_TARGET_INIT;
    struct detected d = {0};
    char a[16], b[16];

    if (resolve_detected(&probe, &d, NULL, c) == OOM_OK &&
        oomi_name_cmp(probe.profile.id, named->id))
        oomi_notice("%s names '%s' (%s, %s) but the GPU detected is %s (%s); planning for '%s'",
                    var, named->id, named->name, oom_format_size(a, sizeof(a), named->memory_bytes),
                    probe.profile.name, oom_format_size(b, sizeof(b), probe.profile.memory_bytes),
                    named->id);
    oomi_free(d.pids);
    oom_target_dispose(&probe);
}

/* The GPU: detected (auto, or a bare number while a GPU is detected: its index), else the
 * config's default profile, else a named profile. `var` names where `gpu` came from. */
static int resolve_gpu(oom_target *t, struct detected *d, const char *gpu, const char *var,
                       const oom_target_request *req, const oom_catalog *c)
{
    const oom_gpu_profile *prof;
    int err, number = is_index(gpu);

    if (!oomi_name_cmp(gpu, "auto") || number) {
        err = resolve_detected(t, d, number ? gpu : NULL, c);
        if (err == OOM_ENODEV && number) { /* no GPU: the number is read as a profile id */
            char *why = oomi_strdup(oom_last_message());
            if (!why)
                return oomi_nomem();
            if (oom_catalog_find(&prof, c, gpu)) { /* neither: the GPU's absence is the error */
                char none[256];
                oomi_snprintf(none, sizeof(none), "%s", oom_last_message());
                err = oomi_fail(OOM_ENODEV,
                                "%s '%s' read as a profile, as no GPU is detected (%s), and no "
                                "profile has that id (%s)",
                                var, gpu, why, none);
                oomi_free(why);
                return err;
            }
            oomi_free(why);
            oomi_notice("%s '%s' read as a profile (no GPU is detected, so it is not a GPU index)",
                        var, gpu);
            t->gpu_count = 1;
            return oomi_profile_copy(&t->profile, prof);
        }
        if (!err && number)
            oomi_notice("%s '%s' read as a GPU index (a GPU is detected): %s", var, gpu,
                        t->profile.name);
        if (err != OOM_ENODEV)
            return err;
        if (!(t->reason = oomi_strdup(oom_last_message())))
            return oomi_nomem();
        if ((err =
                 oom_catalog_find(&prof, c, oom_config_default_profile(req ? req->config : NULL))))
            return oomi_fail_prefix(err, "default profile: ");
        t->fallback = 1;
        t->gpu_count = 1;
        return oomi_profile_copy(&t->profile, prof);
    }
    if ((err = oom_catalog_find(&prof, c, gpu)) || (err = oomi_profile_copy(&t->profile, prof)))
        return err;
    t->gpu_count = 1;
    if (strcmp(var, "--gpu"))
        say_env_mismatch(var, prof, c);
    return OOM_OK;
}

/* The target memory: --vram auto (or none: the GPU's), free (the detected GPU's free memory) or
 * a size, which a detected GPU must have. */
static int target_memory(uint64_t *out, const oom_target *t, const struct detected *d,
                         const char *vram)
{
    char a[16], b[16];
    int err;

    *out = t->profile.memory_bytes;
    if (!vram || !oomi_name_cmp(vram, "auto"))
        return OOM_OK;
    if (!oomi_name_cmp(vram, "free")) {
        if (!t->detected || d->free == OOM_UNKNOWN)
            return oomi_fail(OOM_EINVAL,
                             "--vram free needs a detected GPU (planning for profile '%s'%s%s)",
                             t->profile.id, t->reason ? ": " : "", t->reason ? t->reason : "");
        *out = d->free;
        return OOM_OK;
    }
    if ((err = oom_parse_size(out, vram, OOM_UNIT_GIB)))
        return err;
    if (*out == 0)
        return oomi_fail(OOM_EINVAL, "--vram '%s' must be more than 0", vram);
    if (t->detected && *out > t->profile.memory_bytes)
        return oomi_fail(OOM_EINVAL,
                         "--vram '%s' (%s) is more than the detected GPU has: %s has %s (to plan "
                         "for a larger card, name it with --gpu PROFILE)",
                         vram, oom_format_size(a, sizeof(a), *out), t->profile.name,
                         oom_format_size(b, sizeof(b), t->profile.memory_bytes));
    /* a card named by profile: planning for more than it has is allowed (a larger card of its
     * speed), but said; the default profile is only a stand-in for the speed */
    if (!t->detected && !t->fallback && *out > t->profile.memory_bytes)
        oomi_notice("--vram '%s' (%s) is more than %s has (%s): planning for %s per GPU, which "
                    "that card cannot hold (name a larger card with --gpu PROFILE)",
                    vram, oom_format_size(a, sizeof(a), *out), t->profile.name,
                    oom_format_size(b, sizeof(b), t->profile.memory_bytes),
                    oom_format_size(a, sizeof(a), *out));
    return OOM_OK;
}

/* On a detected GPU, the memory in use now lowers the budget; a notice says by how much. */
static int count_others(oom_target *t, const struct detected *d, const char *vram)
{
    char a[16], b[16];
    uint64_t before = t->budget.usable_bytes;
    int err;

    if (!t->detected || d->used == OOM_UNKNOWN || d->used == 0)
        return OOM_OK;
    if (t->version >= 2) {
        t->others_bytes = d->used;
        t->others = d->pids ? oomi_strdup(d->pids) : NULL;
        if (d->pids && !t->others)
            return oomi_nomem();
    }
    if (vram && !oomi_name_cmp(vram, "free")) /* already left out */
        return OOM_OK;
    if ((err = oom_budget_less_others(&t->budget, t->profile.memory_bytes, d->used)))
        return err;
    oomi_notice("other processes hold %s of %s (%s): the usable budget is %s%s",
                oom_format_size(a, sizeof(a), d->used), d->name,
                d->pids ? d->pids : "no process named",
                oom_format_size(b, sizeof(b), t->budget.usable_bytes),
                t->budget.usable_bytes < before ? " (lowered for them)" : "");
    return OOM_OK;
}

int oom_target_resolve(oom_target *t, const oom_target_request *req, const oom_catalog *c)
{
    const char *gpu = req ? req->gpu : NULL, *margin_text, *var = "--gpu";
    const char *vram = req ? req->vram : NULL;
    struct detected d = {0};
    uint64_t target, margin;
    unsigned version;
    int err;

    if (!t || !c)
        return oomi_fail(OOM_EINVAL, "target: missing argument");
    if ((err = oomi_check_version(t->version, OOM_TARGET_VERSION, "oom_target")) ||
        (req && (err = oomi_check_version(req->version, OOM_TARGET_REQUEST_VERSION,
                                          "oom_target_request"))))
        return err;
    version = t->version;
    if ((err = oom_target_init(t, version)))
        return err;
    t->budget.version = OOM_BUDGET_VERSION;
    if ((!gpu || !*gpu) && (gpu = getenv("OOMLESS_GPU")) && *gpu)
        var = "OOMLESS_GPU";
    else if ((!gpu || !*gpu) && (gpu = getenv("GPU_PROFILE")) && *gpu)
        var = "GPU_PROFILE";
    if (!gpu || !*gpu)
        gpu = "auto";

    if ((err = resolve_gpu(t, &d, gpu, var, req, c)) || (err = target_memory(&target, t, &d, vram)))
        goto fail;
    margin_text =
        req && req->margin ? req->margin : oom_config_default_margin(req ? req->config : NULL);
    if ((err = oom_parse_margin(&margin, margin_text, target)) ||
        (err = oom_budget_make(&t->budget, target, margin)) || (err = count_others(t, &d, vram)))
        goto fail;
    oomi_free(d.pids);
    return OOM_OK;
fail:
    oomi_free(d.pids);
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
    e |= oomi_json_put(o, "reserved_bytes",
                       g->lost ? NULL : oomi_json_bytes(oom_gpu_reserved_bytes(g)));
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
        err |= oomi_json_put(b, "others_bytes",
                             json_object_new_int64(t->version >= 2 ? (int64_t)t->others_bytes : 0));
        err |= oomi_json_put(b, "others",
                             oomi_json_string_or_null(t->version >= 2 ? t->others : NULL));
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
