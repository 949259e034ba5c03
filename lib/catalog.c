/* catalog.c - GPU profiles: the built-in catalog (data/gpus/catalog.yaml) plus the user's. */
#include "internal.h"
#include "catalog_internal.h"

#include <ctype.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    oom_gpu_profile p;
    char **aliases;
    size_t alias_count;
};

struct oom_catalog {
    struct entry *entries;
    size_t count, cap;
};

static const char *const known_keys[] = {
    "id",          "name",        "vendor",      "match", "memory_mib", "memory", "bandwidth_gbs",
    "bf16_tflops", "fp16_tflops", "fp32_tflops", "cc",    "aliases"};

void oomi_profile_clear(oom_gpu_profile *p)
{
    oomi_free((char *)p->id);
    oomi_free((char *)p->name);
    oomi_free((char *)p->vendor);
    oomi_free((char *)p->match);
    memset(p, 0, sizeof(*p));
}

int oomi_profile_copy(oom_gpu_profile *dst, const oom_gpu_profile *src)
{
    *dst = *src;
    dst->id = oomi_strdup(src->id ? src->id : "");
    dst->name = oomi_strdup(src->name ? src->name : "");
    dst->vendor = oomi_strdup(src->vendor ? src->vendor : "");
    dst->match = oomi_strdup(src->match ? src->match : "");
    if (!dst->id || !dst->name || !dst->vendor || !dst->match) {
        oomi_profile_clear(dst);
        return oomi_nomem();
    }
    return OOM_OK;
}

static void entry_clear(struct entry *e)
{
    size_t i;
    oomi_profile_clear(&e->p);
    for (i = 0; i < e->alias_count; i++)
        oomi_free(e->aliases[i]);
    oomi_free(e->aliases);
    memset(e, 0, sizeof(*e));
}

static int get_number(double *out, json_object *obj, const char *key, const char *where)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        return -oomi_fail(OOM_EINVAL, "%s: '%s' must be a number, not '%s'", where, key,
                          json_object_get_string(v));
    *out = json_object_get_double(v);
    if (*out < 0)
        return -oomi_fail(OOM_EINVAL, "%s: '%s' must not be negative", where, key);
    return 1;
}

static const char *get_string(json_object *obj, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v) || !v)
        return NULL;
    return json_object_get_string(v);
}

static int parse_cc(oom_gpu_profile *p, const char *cc, const char *where)
{
    int maj, min, n = 0;
    if (sscanf(cc, "%d.%d%n", &maj, &min, &n) != 2 || cc[n] || maj < 1 || maj > 99 || min < 0 ||
        min > 9)
        return oomi_fail(OOM_EINVAL, "%s: compute capability '%s' is not like 8.9", where, cc);
    p->cc_major = maj;
    p->cc_minor = min;
    return OOM_OK;
}

/* Parses one entry; with `e` NULL it only validates. */
static int parse_entry(struct entry *e, json_object *obj, const char *source, size_t index,
                       int user)
{
    char where[512];
    struct entry tmp = {0};
    const char *id, *s;
    double mib = 0, v;
    size_t i, k;
    json_object *aliases;
    int r, err = OOM_OK;

    snprintf(where, sizeof(where), "%s: gpus[%zu]", source, index);
    if (!json_object_is_type(obj, json_type_object))
        return oomi_fail(OOM_EINVAL, "%s must be a mapping", where);
    json_object_object_foreach(obj, key, val)
    {
        (void)val;
        for (k = 0; k < OOMI_ARRAY_LEN(known_keys) && strcmp(key, known_keys[k]); k++)
            ;
        if (k == OOMI_ARRAY_LEN(known_keys))
            return oomi_fail(OOM_EINVAL, "%s: unknown key '%s'", where, key);
    }
    if (!(id = get_string(obj, "id")) || !*id)
        return oomi_fail(OOM_EINVAL, "%s: 'id' is missing", where);
    snprintf(where, sizeof(where), "%s: gpu '%s'", source, id);
    if ((r = get_number(&mib, obj, "memory_mib", where)) < 0)
        return -r;
    if (!r) {
        if (!(s = get_string(obj, "memory")))
            return oomi_fail(OOM_EINVAL, "%s: 'memory' (or 'memory_mib') is missing", where);
        if ((err = oom_parse_size(&tmp.p.memory_bytes, s, OOM_UNIT_GIB)))
            return oomi_fail_prefix(err, "%s: ", where);
    } else
        tmp.p.memory_bytes = (uint64_t)(mib * (double)OOM_MiB);
    if (tmp.p.memory_bytes < OOM_MiB * 64)
        return oomi_fail(OOM_EINVAL, "%s: memory must be at least 64 MiB", where);
    if ((r = get_number(&v, obj, "bandwidth_gbs", where)) < 0)
        return -r;
    tmp.p.has_bandwidth = r;
    tmp.p.bandwidth_gbs = r ? v : 0;
    if ((r = get_number(&v, obj, "bf16_tflops", where)) < 0)
        return -r;
    tmp.p.has_tflops = r;
    tmp.p.bf16_tflops = r ? v : 0;
    if ((r = get_number(&v, obj, "fp16_tflops", where)) < 0)
        return -r;
    tmp.p.fp16_tflops = r ? v : tmp.p.bf16_tflops;
    tmp.p.has_tflops |= r;
    if ((r = get_number(&v, obj, "fp32_tflops", where)) < 0)
        return -r;
    tmp.p.fp32_tflops = r ? v : 0;
    if ((s = get_string(obj, "cc")) && (err = parse_cc(&tmp.p, s, where)))
        return err;
    if (json_object_object_get_ex(obj, "aliases", &aliases) && aliases &&
        !json_object_is_type(aliases, json_type_array))
        return oomi_fail(OOM_EINVAL, "%s: 'aliases' must be a list", where);
    if (!e)
        return OOM_OK;

    tmp.p.user_defined = user;
    tmp.p.id = id;
    tmp.p.name = (s = get_string(obj, "name")) ? s : id;
    tmp.p.vendor = (s = get_string(obj, "vendor")) ? s : "nvidia";
    tmp.p.match = (s = get_string(obj, "match")) ? s : "";
    if ((err = oomi_profile_copy(&e->p, &tmp.p)))
        return err;
    if (aliases) {
        size_t n = json_object_array_length(aliases);
        if (!(e->aliases = oomi_calloc(n ? n : 1, sizeof(char *)))) {
            entry_clear(e);
            return oomi_nomem();
        }
        for (i = 0; i < n; i++) {
            if (!(e->aliases[i] =
                      oomi_strdup(json_object_get_string(json_object_array_get_idx(aliases, i))))) {
                entry_clear(e);
                return oomi_nomem();
            }
            e->alias_count++;
        }
    }
    return OOM_OK;
}

int oomi_catalog_validate_entries(json_object *list, const char *source)
{
    size_t i;
    int err;
    for (i = 0; i < json_object_array_length(list); i++)
        if ((err = parse_entry(NULL, json_object_array_get_idx(list, i), source, i, 1)))
            return err;
    return OOM_OK;
}

static struct entry *find_entry(oom_catalog *c, const char *id)
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
    struct entry e, *old;
    int err;

    for (i = 0; i < n; i++) {
        memset(&e, 0, sizeof(e));
        if ((err = parse_entry(&e, json_object_array_get_idx(list, i), source, i, user)))
            return err;
        if ((old = find_entry(c, e.p.id))) { /* a user entry replaces the built-in one */
            entry_clear(old);
            *old = e;
            continue;
        }
        if (c->count == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 48;
            struct entry *p = oomi_reallocarray(c->entries, cap, sizeof(*p));
            if (!p) {
                entry_clear(&e);
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
    if (!root || !json_object_object_get_ex(root, "gpus", &list) ||
        !json_object_is_type(list, json_type_array)) {
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
        entry_clear(&c->entries[i]);
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
        const struct entry *e = &c->entries[i];
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
        for (i = 0;
             i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]);
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
