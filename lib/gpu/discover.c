/* discover.c - GPU discovery through a backend, CUDA_VISIBLE_DEVICES, and planning targets. */
#include "gpu/gpu.h"
#include "gpu/backend.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct oom_gpu_session {
    const struct oomi_gpu_backend *backend;
    void *state;
};

int oom_gpu_open(oom_gpu_session **out)
{
    oom_gpu_session *s;
    int err;

    if (!out)
        return oomi_fail(OOM_EINVAL, "gpu session: no output");
    *out = NULL;
    if (!(s = oomi_calloc(1, sizeof(*s))))
        return oomi_nomem();
    s->backend = oomi_gpu_default_backend;
    if ((err = s->backend->open(&s->state))) {
        oomi_free(s);
        return err;
    }
    *out = s;
    return OOM_OK;
}

void oom_gpu_close(oom_gpu_session *s)
{
    if (!s)
        return;
    s->backend->close(s->state);
    oomi_free(s);
}

void oom_gpu_list_free(oom_gpu_list *list)
{
    size_t i, j;
    if (!list)
        return;
    for (i = 0; list->gpus && i < list->count; i++) {
        oom_gpu_info *g = list->gpus[i];
        for (j = 0; g && g->processes && j < g->process_count; j++)
            oomi_free(g->processes[j]);
        if (g)
            oomi_free(g->processes);
        oomi_free(g);
    }
    oomi_free(list->gpus);
    oomi_free(list);
}

uint64_t oom_gpu_reserved_bytes(const oom_gpu_info *g)
{
    uint64_t used;
    if (!g || g->lost || g->used_bytes == OOM_UNKNOWN || g->free_bytes == OOM_UNKNOWN)
        return 0;
    used = g->used_bytes + g->free_bytes;
    return used < g->total_bytes ? g->total_bytes - used : 0;
}

/* ---- CUDA_VISIBLE_DEVICES ---------------------------------------------------------------- */

static bool all_digits(const char *s, size_t n)
{
    size_t i;
    if (!n)
        return false;
    for (i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return true;
}

static bool prefix_ci(const char *s, const char *prefix, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!s[i] || oomi_tolower((unsigned char)s[i]) != oomi_tolower((unsigned char)prefix[i]))
            return false;
    return true;
}

/* The device whose UUID starts with entry[0..n), or -1 when none or several do. */
static long uuid_match(const char *entry, size_t n, const char *const *uuids, size_t count)
{
    size_t i;
    long found = -1;
    for (i = 0; i < count; i++) {
        if (!uuids[i] || !prefix_ci(uuids[i], entry, n))
            continue;
        if (found >= 0)
            return -1; /* ambiguous prefix */
        found = (long)i;
    }
    return found;
}

size_t oom_cuda_visible(int *visible, size_t max_visible, const char *value,
                        const char *const *uuids, size_t count)
{
    size_t n = 0, i, len;
    const char *p = value, *end;
    long dev;

    if (!value) {
        for (i = 0; i < count && i < max_visible; i++)
            visible[i] = (int)i;
        return i;
    }
    while (*p && n < max_visible) {
        while (*p == ' ' || *p == '\t')
            p++;
        end = strchr(p, ',');
        len = end ? (size_t)(end - p) : strlen(p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (all_digits(p, len)) {
            dev = len > 9 ? -1 : strtol(p, NULL, 10);
            if (dev >= (long)count)
                dev = -1;
        } else if (len > 4 && (prefix_ci(p, "GPU-", 4) || prefix_ci(p, "MIG-", 4))) {
            dev = uuid_match(p, len, uuids, count);
        } else {
            dev = -1;
        }
        if (dev < 0)
            break; /* CUDA stops at the first invalid entry */
        for (i = 0; i < n; i++)
            if (visible[i] == (int)dev)
                return n; /* a repeated device ends the list too */
        visible[n++] = (int)dev;
        if (!end)
            break;
        p = end + 1;
    }
    return n;
}

/* ---- sampling ------------------------------------------------------------------------------- */

int oom_gpu_sample(oom_gpu_list **out, oom_gpu_session *s, unsigned flags)
{
    oom_gpu_list *list = NULL;
    unsigned count = 0, i;
    char(*uuids)[96] = NULL;
    const char **uuid_ptrs = NULL;
    int *visible = NULL;
    size_t nvis;
    int err;

    if (!out || !s)
        return oomi_fail(OOM_EINVAL, "gpu sample: no session");
    *out = NULL;
    if ((err = s->backend->device_count(s->state, &count)))
        return err;
    if (count > 1024)
        count = 1024;
    if (!(list = oomi_calloc(1, sizeof(*list))) ||
        !(uuids = oomi_calloc(count + 1, sizeof(*uuids))) ||
        !(uuid_ptrs = oomi_calloc(count + 1, sizeof(*uuid_ptrs))) ||
        !(visible = oomi_calloc(count + 1, sizeof(*visible)))) {
        err = oomi_nomem();
        goto done;
    }
    list->version = OOM_GPU_LIST_VERSION;
    list->backend = s->backend->name;
    s->backend->versions(s->state, list);
    for (i = 0; i < count; i++) {
        s->backend->device_uuid(s->state, i, uuids[i], sizeof(uuids[i]));
        uuid_ptrs[i] = uuids[i];
    }
    nvis = oom_cuda_visible(visible, count,
                            (flags & OOM_SAMPLE_ALL_GPUS) ? NULL : getenv("CUDA_VISIBLE_DEVICES"),
                            uuid_ptrs, count);
    if (nvis && !(list->gpus = oomi_calloc(nvis, sizeof(*list->gpus)))) {
        err = oomi_nomem();
        goto done;
    }
    for (i = 0; i < nvis; i++) {
        oom_gpu_info *g = list->gpus[i] = oomi_calloc(1, sizeof(*g));
        if (!g) {
            err = oomi_nomem();
            goto done;
        }
        list->count++;
        g->version = OOM_GPU_INFO_VERSION;
        g->index = (int)i;
        if ((err = s->backend->device_read(s->state, (unsigned)visible[i], g, flags)))
            goto done;
        if (!g->uuid[0])
            oomi_snprintf(g->uuid, sizeof(g->uuid), "%s", uuids[visible[i]]);
    }
done:
    oomi_free(uuids);
    oomi_free(uuid_ptrs);
    oomi_free(visible);
    if (err) {
        oom_gpu_list_free(list);
        return err;
    }
    *out = list;
    return OOM_OK;
}
