/* catalog.c - GPU profiles: the built-in catalog (data/gpus/catalog.yaml) plus the user's, and
 * the planner constants that follow from them and the config's `cluster:`. */
#include "gpu/gpu.h"

#include <ctype.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct oom_catalog {
    struct oomi_gpu_entry *entries;
    size_t count, cap;
    char *path, *config_path;    /* the built-in catalog file; the config file (or NULL) */
    struct oomi_pk_over cluster; /* the config's `cluster:` */
};

static struct oomi_gpu_entry *find_entry(oom_catalog *c, const char *id)
{
    size_t i;
    for (i = 0; i < c->count; i++)
        if (!oomi_name_cmp(c->entries[i].p.id, id))
            return &c->entries[i];
    return NULL;
}

static int add_list(oom_catalog *c, json_object *list, const char *source, int user,
                    const char *text, size_t len)
{
    size_t i, n = json_object_array_length(list);
    struct oomi_gpu_entry e, *old;
    int err;

    for (i = 0; i < n; i++) {
        memset(&e, 0, sizeof(e));
        if ((err = oomi_gpu_entry_parse(&e, json_object_array_get_idx(list, i), source, i, user,
                                        text, len)))
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
    const struct oomi_plan_consts *defaults;
    const char *ctext;
    char *path = NULL, *text = NULL;
    size_t len = 0, clen;
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
    if ((err = oomi_plan_defaults(&defaults, NULL)) ||
        (err = oomi_read_file(&text, &len, path, OOMI_READ_MAX)) ||
        (err = oomi_yaml_load(&root, text, len, path)))
        goto done;
    if (!json_object_is_type(list = oomi_json_get(root, "gpus"), json_type_array)) {
        err = oomi_fail(OOM_EPARSE, "%s: no 'gpus' list", path);
        goto done;
    }
    if ((err = add_list(c, list, path, 0, text, len)))
        goto done;
    ctext = oomi_config_text(config, &clen);
    if (config && oomi_config_gpus(config) &&
        (err = add_list(c, oomi_config_gpus(config), oom_config_path(config), 1, ctext, clen)))
        goto done;
    c->cluster = *oomi_config_cluster(config);
    c->path = path;
    path = NULL;
    if (oom_config_path(config) && !(c->config_path = oomi_strdup(oom_config_path(config))))
        err = oomi_nomem();
done:
    json_object_put(root);
    oomi_free(text);
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
    oomi_free(c->path);
    oomi_free(c->config_path);
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
    /* a device name as NVML and nvidia-smi print it ("NVIDIA H100 80GB HBM3"): the profile
     * detection would pick for it */
    if (strchr(id, ' ') && (*out = oom_catalog_match(c, id, 0)))
        return OOM_OK;
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

/* The constants for entry e (NULL: none) and, when `where` is given, where each came from. */
#define WHERE_LEN 600
static int effective(struct oomi_plan_consts *out, char (*where)[WHERE_LEN], const oom_catalog *c,
                     const struct oomi_gpu_entry *e)
{
    const struct oomi_plan_consts *defaults;
    const char *const *sources;
    int k, err;

    if ((err = oomi_plan_defaults(&defaults, &sources)))
        return err;
    *out = *defaults;
    for (k = 0; where && k < OOMI_PK_COUNT; k++)
        oomi_snprintf(where[k], WHERE_LEN, "%s", sources[k]);
    if (!c)
        return OOM_OK;
    if (e && !e->p.user_defined)
        oomi_pk_apply(out, &e->planner, OOMI_PK_FROM_CATALOG);
    oomi_pk_apply(out, &c->cluster, OOMI_PK_FROM_CONFIG);
    if (e && e->p.user_defined)
        oomi_pk_apply(out, &e->planner, OOMI_PK_FROM_CONFIG);
    for (k = 0; where && k < OOMI_PK_COUNT; k++) {
        unsigned bit = 1u << k;
        int from_entry =
            e && (e->planner.set & bit) && (e->p.user_defined || !(c->cluster.set & bit));
        if (from_entry)
            oomi_snprintf(where[k], WHERE_LEN, "%s:%zu: gpu '%s'",
                          e->p.user_defined ? c->config_path : c->path, e->planner.line[k],
                          e->p.id);
        else if (c->cluster.set & bit)
            oomi_snprintf(where[k], WHERE_LEN, "%s:%zu: cluster", c->config_path,
                          c->cluster.line[k]);
    }
    return OOM_OK;
}

int oomi_catalog_plan_consts(struct oomi_plan_consts *out, const oom_catalog *c, const char *id)
{
    return effective(out, NULL, c, c && id ? find_entry((oom_catalog *)c, id) : NULL);
}

int oomi_catalog_plan_json(json_object **out, const oom_catalog *c, const char *id,
                           int only_differing)
{
    struct oomi_plan_consts all, mine;
    char(*where)[WHERE_LEN] = oomi_calloc(OOMI_PK_COUNT, WHERE_LEN);
    json_object *root = NULL, *o;
    int k, err;

    *out = NULL;
    if (!where)
        return oomi_nomem();
    if ((err = effective(&all, NULL, c, NULL)) ||
        (err = effective(&mine, where, c, id ? find_entry((oom_catalog *)c, id) : NULL)))
        goto done;
    for (k = 0; k < OOMI_PK_COUNT; k++) {
        if (only_differing && mine.origin[k] == all.origin[k] && mine.v[k] == all.v[k])
            continue;
        if ((!root && !(root = json_object_new_object())) || !(o = json_object_new_object()) ||
            json_object_object_add(root, oomi_pk_table[k].name, o) ||
            json_object_object_add(o, "value", json_object_new_double(mine.v[k])) ||
            json_object_object_add(o, "unit", json_object_new_string(oomi_pk_table[k].unit)) ||
            json_object_object_add(o, "origin",
                                   json_object_new_string(oomi_pk_origin_name(mine.origin[k]))) ||
            json_object_object_add(o, "source", json_object_new_string(where[k]))) {
            err = oomi_nomem();
            break;
        }
    }
done:
    oomi_free(where);
    if (err) {
        json_object_put(root);
        return err;
    }
    *out = root;
    return OOM_OK;
}
