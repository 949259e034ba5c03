/* catalog.c - GPU profiles: the built-in catalog (data/gpus/catalog.yaml) plus the user's. */
#include "gpu/gpu.h"

#include <ctype.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct oom_catalog {
    struct oomi_gpu_entry *entries;
    size_t count, cap;
};

static struct oomi_gpu_entry *find_entry(oom_catalog *c, const char *id)
{
    size_t i;
    for (i = 0; i < c->count; i++)
        if (!oomi_name_cmp(c->entries[i].p.id, id))
            return &c->entries[i];
    return NULL;
}

static int add_list(oom_catalog *c, json_object *list, const char *source, int user)
{
    size_t i, n = json_object_array_length(list);
    struct oomi_gpu_entry e, *old;
    int err;

    for (i = 0; i < n; i++) {
        memset(&e, 0, sizeof(e));
        if ((err = oomi_gpu_entry_parse(&e, json_object_array_get_idx(list, i), source, i, user)))
            return err;
        if ((old = find_entry(c, e.p.id))) { /* a user entry replaces the built-in one */
            oomi_gpu_entry_clear(old);
            *old = e;
            continue;
        }
        if (c->count == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 48;
            struct oomi_gpu_entry *p = oomi_reallocarray(c->entries, cap, sizeof(*p));
            if (!p) {
                oomi_gpu_entry_clear(&e);
                return oomi_nomem();
            }
            c->entries = p;
            c->cap = cap;
        }
        c->entries[c->count++] = e;
    }
    return OOM_OK;
}

int oom_catalog_load(oom_catalog **out, const oom_config *config)
{
    oom_catalog *c;
    json_object *root = NULL, *list;
    char *path = NULL;
    int err;

    if (!out)
        return oomi_fail(OOM_EINVAL, "catalog: no output");
    *out = NULL;
    if (!(c = oomi_calloc(1, sizeof(*c))))
        return oomi_nomem();
    if (!(path = oomi_data_path("gpus/catalog.yaml"))) {
        err = oomi_nomem();
        goto done;
    }
    if ((err = oomi_yaml_load_file(&root, path)))
        goto done;
    if (!json_object_is_type(list = oomi_json_get(root, "gpus"), json_type_array)) {
        err = oomi_fail(OOM_EPARSE, "%s: no 'gpus' list", path);
        goto done;
    }
    if ((err = add_list(c, list, path, 0)))
        goto done;
    if (config && oomi_config_gpus(config))
        err = add_list(c, oomi_config_gpus(config), oom_config_path(config), 1);
done:
    json_object_put(root);
    oomi_free(path);
    if (err) {
        oom_catalog_free(c);
        return err;
    }
    *out = c;
    return OOM_OK;
}

void oom_catalog_free(oom_catalog *c)
{
    size_t i;
    if (!c)
        return;
    for (i = 0; i < c->count; i++)
        oomi_gpu_entry_clear(&c->entries[i]);
    oomi_free(c->entries);
    oomi_free(c);
}

size_t oom_catalog_count(const oom_catalog *c)
{
    return c ? c->count : 0;
}

const oom_gpu_profile *oom_catalog_at(const oom_catalog *c, size_t i)
{
    return c && i < c->count ? &c->entries[i].p : NULL;
}

int oom_catalog_find(const oom_gpu_profile **out, const oom_catalog *c, const char *id)
{
    size_t i, j, best[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX}, dist[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
    char list[256] = "";

    if (!out || !c || !id)
        return oomi_fail(OOM_EINVAL, "GPU profile lookup without a name");
    for (i = 0; i < c->count; i++) {
        const struct oomi_gpu_entry *e = &c->entries[i];
        size_t d = oomi_name_distance(id, e->p.id);
        if (!d) {
            *out = &e->p;
            return OOM_OK;
        }
        for (j = 0; j < e->alias_count; j++)
            if (!oomi_name_cmp(id, e->aliases[j])) {
                *out = &e->p;
                return OOM_OK;
            }
        for (j = 0; j < 3; j++) {
            if (d < dist[j]) {
                memmove(&dist[j + 1], &dist[j], (2 - j) * sizeof(size_t));
                memmove(&best[j + 1], &best[j], (2 - j) * sizeof(size_t));
                dist[j] = d;
                best[j] = i;
                break;
            }
        }
    }
    for (j = 0; j < 3 && best[j] != SIZE_MAX; j++) {
        strncat(list, j ? ", " : "", sizeof(list) - strlen(list) - 1);
        strncat(list, c->entries[best[j]].p.id, sizeof(list) - strlen(list) - 1);
    }
    return oomi_fail(OOM_ENOTFOUND,
                     "unknown GPU profile '%s' (closest: %s; see 'oomless gpus --catalog')", id,
                     list);
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle), i;
    if (!n)
        return false;
    for (; *hay; hay++) {
        for (i = 0; i < n && hay[i] &&
                    oomi_tolower((unsigned char)hay[i]) == oomi_tolower((unsigned char)needle[i]);
             i++)
            ;
        if (i == n)
            return true;
    }
    return false;
}

const oom_gpu_profile *oom_catalog_match(const oom_catalog *c, const char *name, uint64_t total)
{
    const oom_gpu_profile *best = NULL;
    size_t i, best_len = 0;
    uint64_t best_diff = UINT64_MAX;

    if (!c || !name)
        return NULL;
    for (i = 0; i < c->count; i++) {
        const oom_gpu_profile *p = &c->entries[i].p;
        size_t len = strlen(p->match);
        uint64_t diff = p->memory_bytes > total ? p->memory_bytes - total : total - p->memory_bytes;
        if (!contains_ci(name, p->match))
            continue;
        if (len > best_len || (len == best_len && diff < best_diff)) {
            best = p;
            best_len = len;
            best_diff = diff;
        }
    }
    return best;
}
