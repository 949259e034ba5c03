/* profile.c - one GPU profile entry (catalog or user-config format): parsing, validating,
 * copying. Shared by the catalog (catalog.c) and the user config (config.c), which no longer
 * need each other for it. */
#include "gpu/gpu.h"

#include <ctype.h>
#include <float.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const known_keys[] = {
    "id",          "name",        "vendor",      "match", "memory_mib", "memory", "bandwidth_gbs",
    "bf16_tflops", "fp16_tflops", "fp32_tflops", "cc",    "aliases"};

/* the planner constants an entry may set (oomi_pk_table's per_gpu keys) */
static int parse_planner(struct oomi_pk_over *o, json_object *obj, const char *source,
                         const char *id, size_t index, const char *text, size_t len)
{
    char where[600];
    json_object *v;
    int k, err;

    for (k = 0; k < OOMI_PK_COUNT; k++) /* lines (another parse) only for an entry that has some */
        if (oomi_pk_table[k].per_gpu && json_object_object_get_ex(obj, oomi_pk_table[k].name, NULL))
            break;
    if (k == OOMI_PK_COUNT)
        return OOM_OK;
    oomi_pk_lines(o, text, len, "gpus", (long)index);
    for (k = 0; k < OOMI_PK_COUNT; k++) {
        if (!oomi_pk_table[k].per_gpu || !json_object_object_get_ex(obj, oomi_pk_table[k].name, &v))
            continue;
        if (o->line[k])
            oomi_snprintf(where, sizeof(where), "%s:%zu: gpu '%s': ", source, o->line[k], id);
        else
            oomi_snprintf(where, sizeof(where), "%s: gpu '%s': ", source, id);
        if ((err = oomi_pk_read(o, (enum oomi_pk)k, v, where)))
            return err;
    }
    return OOM_OK;
}

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
    dst->version = OOM_GPU_PROFILE_VERSION;
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

void oomi_gpu_entry_clear(struct oomi_gpu_entry *e)
{
    size_t i;
    oomi_profile_clear(&e->p);
    for (i = 0; i < e->alias_count; i++)
        oomi_free(e->aliases[i]);
    oomi_free(e->aliases);
    memset(e, 0, sizeof(*e));
}

/* a number >= 0 at obj.key: 1 when there, 0 when absent, -code when bad (message naming it) */
static int get_number(double *out, json_object *obj, const char *key, const char *where)
{
    char prefix[520];
    bool found;
    int err;
    oomi_snprintf(prefix, sizeof(prefix), "%s: ", where);
    err = oomi_json_double(out, &found, obj, key, 0, DBL_MAX, prefix);
    return err ? -err : found;
}

/* a scalar as text (a YAML `id: 4090` is the name "4090"); NULL when absent */
static const char *get_string(json_object *obj, const char *key)
{
    json_object *v = oomi_json_get(obj, key);
    return v ? json_object_get_string(v) : NULL;
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

int oomi_gpu_entry_parse(struct oomi_gpu_entry *e, json_object *obj, const char *source,
                         size_t index, int user, const char *text, size_t len)
{
    char where[512];
    struct oomi_gpu_entry tmp = {0};
    const char *id, *s;
    double mib = 0, v;
    size_t i, k;
    json_object *aliases = NULL;
    int r, err = OOM_OK;

    oomi_snprintf(where, sizeof(where), "%s: gpus[%zu]", source, index);
    if (!json_object_is_type(obj, json_type_object))
        return oomi_fail(OOM_EINVAL, "%s must be a mapping", where);
    json_object_object_foreach(obj, key, val)
    {
        (void)val;
        enum oomi_pk pk = oomi_pk_find(key);
        for (k = 0; k < OOMI_ARRAY_LEN(known_keys) && strcmp(key, known_keys[k]); k++)
            ;
        if (k == OOMI_ARRAY_LEN(known_keys) && (pk == OOMI_PK_COUNT || !oomi_pk_table[pk].per_gpu))
            return oomi_fail(OOM_EINVAL, "%s: unknown key '%s'", where, key);
    }
    if (!(id = get_string(obj, "id")) || !*id)
        return oomi_fail(OOM_EINVAL, "%s: 'id' is missing", where);
    oomi_snprintf(where, sizeof(where), "%s: gpu '%s'", source, id);
    if ((r = get_number(&mib, obj, "memory_mib", where)) < 0)
        return -r;
    if (!r) {
        if (!(s = get_string(obj, "memory")))
            return oomi_fail(OOM_EINVAL, "%s: 'memory' (or 'memory_mib') is missing", where);
        if ((err = oom_parse_size(&tmp.p.memory_bytes, s, OOM_UNIT_GIB)))
            return oomi_fail_prefix(err, "%s: ", where);
    } else if (mib * (double)OOM_MiB < 9.2233720368547758e18)
        tmp.p.memory_bytes = (uint64_t)(mib * (double)OOM_MiB);
    else
        return oomi_fail(OOM_EINVAL, "%s: 'memory_mib' is out of range", where);
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
    for (i = 0; aliases && i < json_object_array_length(aliases); i++) {
        json_type t = json_object_get_type(json_object_array_get_idx(aliases, i));
        if (t == json_type_null || t == json_type_array || t == json_type_object)
            return oomi_fail(OOM_EINVAL, "%s: aliases[%zu] must be a name", where, i);
    }
    if ((err = parse_planner(&tmp.planner, obj, source, id, index, text, len)))
        return err;
    if (!e)
        return OOM_OK;

    tmp.p.user_defined = user;
    tmp.p.id = id;
    tmp.p.name = (s = get_string(obj, "name")) ? s : id;
    tmp.p.vendor = (s = get_string(obj, "vendor")) ? s : "nvidia";
    tmp.p.match = (s = get_string(obj, "match")) ? s : "";
    if ((err = oomi_profile_copy(&e->p, &tmp.p)))
        return err;
    e->planner = tmp.planner;
    if (aliases) {
        size_t n = json_object_array_length(aliases);
        if (!(e->aliases = oomi_calloc(n ? n : 1, sizeof(char *)))) {
            oomi_gpu_entry_clear(e);
            return oomi_nomem();
        }
        for (i = 0; i < n; i++) {
            if (!(e->aliases[i] =
                      oomi_strdup(json_object_get_string(json_object_array_get_idx(aliases, i))))) {
                oomi_gpu_entry_clear(e);
                return oomi_nomem();
            }
            e->alias_count++;
        }
    }
    return OOM_OK;
}

int oomi_catalog_validate_entries(json_object *list, const char *source, const char *text,
                                  size_t len)
{
    size_t i;
    int err;
    for (i = 0; i < json_object_array_length(list); i++)
        if ((err = oomi_gpu_entry_parse(NULL, json_object_array_get_idx(list, i), source, i, 1,
                                        text, len)))
            return err;
    return OOM_OK;
}
