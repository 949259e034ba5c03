/* consts.c - the planner's constants: their keys and units, the defaults and their sources
 * (data/gpus/planner.yaml, loaded once), reading and locating overrides. */
#include "gpu/gpu.h"

#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

const struct oomi_pk_info oomi_pk_table[OOMI_PK_COUNT] = {
    [OOMI_PK_MFU_MAX] = {"mfu_max", "fraction", 1.0, 1.0, 1},
    [OOMI_PK_RIDGE] = {"ridge_flop_per_byte", "FLOP/byte", 1.0, 1e6, 0},
    [OOMI_PK_TFLOPS] = {"default_tflops", "TFLOP/s", 1.0, 1e6, 0},
    [OOMI_PK_FP32_DIVISOR] = {"fp32_divisor", "ratio", 1.0, 1e3, 0},
    [OOMI_PK_INTRA] = {"intra_node_gbs", "GB/s", 1e9, 1e5, 1},
    [OOMI_PK_INTER] = {"inter_node_gbps", "Gb/s", 1e9 / 8, 1e6, 0},
    [OOMI_PK_PCIE] = {"pcie_gbs", "GB/s", 1e9, 1e5, 1},
    [OOMI_PK_CPU_ADAM] = {"cpu_adam_params_per_s", "parameters/s", 1.0, 1e15, 0},
    [OOMI_PK_NF4_SPEED] = {"nf4_speed", "fraction", 1.0, 1.0, 0},
    [OOMI_PK_INT8_SPEED] = {"int8_speed", "fraction", 1.0, 1.0, 0},
    [OOMI_PK_CHUNKED_LOSS] = {"chunked_loss_cost", "fraction", 1.0, 1.0, 0},
    [OOMI_PK_EAGER_ATTN] = {"eager_attention_cost", "fraction", 1.0, 1.0, 0},
};

static pthread_mutex_t defaults_lock = PTHREAD_MUTEX_INITIALIZER;
static int defaults_loaded;
static struct oomi_plan_consts defaults;
/* fixed buffers, not the library's allocator: they live as long as the process */
static char default_sources[OOMI_PK_COUNT][1024];
static const char *default_source_ptrs[OOMI_PK_COUNT];

double oomi_pk_si(const struct oomi_plan_consts *c, enum oomi_pk k)
{
    return c->v[k] * oomi_pk_table[k].si;
}

enum oomi_pk oomi_pk_find(const char *name)
{
    int k;
    for (k = 0; k < OOMI_PK_COUNT && strcmp(name, oomi_pk_table[k].name); k++)
        ;
    return (enum oomi_pk)k;
}

const char *oomi_pk_origin_name(enum oomi_pk_origin o)
{
    return o == OOMI_PK_FROM_CATALOG ? "catalog" : o == OOMI_PK_FROM_CONFIG ? "config" : "default";
}

void oomi_pk_apply(struct oomi_plan_consts *c, const struct oomi_pk_over *o,
                   enum oomi_pk_origin origin)
{
    int k;
    for (k = 0; o && k < OOMI_PK_COUNT; k++)
        if (o->set & (1u << k)) {
            c->v[k] = o->v[k];
            c->origin[k] = (unsigned char)origin;
        }
}

int oomi_pk_read(struct oomi_pk_over *o, enum oomi_pk k, json_object *v, const char *where)
{
    const struct oomi_pk_info *info = &oomi_pk_table[k];
    double d;

    if (!v || (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double)))
        return oomi_fail(OOM_EINVAL, "%s%s: '%s' is not a number (%s)", where, info->name,
                         v ? json_object_get_string(v) : "", info->unit);
    d = json_object_get_double(v);
    if (!isfinite(d) || d <= 0 || d > info->max)
        return oomi_fail(OOM_EINVAL, "%s%s: %s is out of range: give a %s above 0 and at most %g",
                         where, info->name, json_object_get_string(v), info->unit, info->max);
    o->v[k] = d;
    o->set |= 1u << k;
    return OOM_OK;
}

static yaml_node_t *mapping_get(yaml_document_t *doc, yaml_node_t *map, const char *key,
                                size_t *line)
{
    yaml_node_pair_t *pair;
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(doc, pair->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key)) {
            if (line)
                *line = k->start_mark.line + 1;
            return yaml_document_get_node(doc, pair->value);
        }
    }
    return NULL;
}

void oomi_pk_lines(struct oomi_pk_over *o, const char *text, size_t len, const char *section,
                   long index)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_node_t *node;
    int k;

    if (!text || !yaml_parser_initialize(&parser))
        return;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (yaml_parser_load(&parser, &doc)) {
        node = mapping_get(&doc, yaml_document_get_root_node(&doc), section, NULL);
        if (node && index >= 0) {
            if (node->type == YAML_SEQUENCE_NODE &&
                index < node->data.sequence.items.top - node->data.sequence.items.start)
                node = yaml_document_get_node(&doc, node->data.sequence.items.start[index]);
            else
                node = NULL;
        }
        for (k = 0; node && k < OOMI_PK_COUNT; k++)
            mapping_get(&doc, node, oomi_pk_table[k].name, &o->line[k]);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
}

/* reads the `planner:` mapping of the defaults file; every key must be there, with a source */
static int read_defaults(json_object *root, const char *path, const char *text, size_t len)
{
    struct oomi_pk_over over;
    json_object *planner, *value, *source;
    char where[600];
    int k, err;

    memset(&over, 0, sizeof(over));
    if (!root || !json_object_object_get_ex(root, "planner", &planner) ||
        !json_object_is_type(planner, json_type_object))
        return oomi_fail(OOM_EPARSE, "%s: no 'planner' mapping", path);
    oomi_pk_lines(&over, text, len, "planner", -1);
    json_object_object_foreach(planner, key, entry)
    {
        enum oomi_pk pk = oomi_pk_find(key);
        if (pk == OOMI_PK_COUNT)
            return oomi_fail(OOM_EPARSE, "%s: unknown key 'planner.%s'", path, key);
        oomi_snprintf(where, sizeof(where), "%s:%zu: planner.", path, over.line[pk]);
        if (!json_object_is_type(entry, json_type_object) ||
            !json_object_object_get_ex(entry, "source", &source) ||
            !json_object_is_type(source, json_type_string) || !*json_object_get_string(source))
            return oomi_fail(OOM_EPARSE, "%s%s: give 'value' and 'source'", where, key);
        json_object_object_foreach(entry, sub, subval)
        {
            (void)subval;
            if (strcmp(sub, "value") && strcmp(sub, "source"))
                return oomi_fail(OOM_EPARSE, "%s%s: unknown key '%s' (expected value, source)",
                                 where, key, sub);
        }
        value = json_object_object_get_ex(entry, "value", &value) ? value : NULL;
        if ((err = oomi_pk_read(&over, pk, value, where)))
            return err;
        if (strlen(json_object_get_string(source)) >= sizeof(default_sources[pk]))
            return oomi_fail(OOM_EPARSE, "%s%s: the source is longer than %zu characters", where,
                             key, sizeof(default_sources[pk]) - 1);
        oomi_snprintf(default_sources[pk], sizeof(default_sources[pk]), "%s",
                      json_object_get_string(source));
        default_source_ptrs[pk] = default_sources[pk];
    }
    for (k = 0; k < OOMI_PK_COUNT; k++)
        if (!(over.set & (1u << k)))
            return oomi_fail(OOM_EPARSE, "%s: 'planner.%s' is missing", path,
                             oomi_pk_table[k].name);
    memset(&defaults, 0, sizeof(defaults));
    oomi_pk_apply(&defaults, &over, OOMI_PK_FROM_DEFAULT);
    return OOM_OK;
}

static int load_defaults(void)
{
    char *path = oomi_data_path("gpus/planner.yaml"), *text = NULL;
    json_object *root = NULL;
    size_t len = 0;
    int err;

    if (!path)
        return oomi_nomem();
    if (!(err = oomi_read_file(&text, &len, path, OOMI_READ_MAX)) &&
        !(err = oomi_yaml_load(&root, text, len, path)))
        err = read_defaults(root, path, text, len);
    json_object_put(root);
    oomi_free(text);
    oomi_free(path);
    return err;
}

int oomi_plan_defaults(const struct oomi_plan_consts **out, const char *const **sources)
{
    int err = OOM_OK;
    pthread_mutex_lock(&defaults_lock);
    if (!defaults_loaded && !(err = load_defaults()))
        defaults_loaded = 1;
    pthread_mutex_unlock(&defaults_lock);
    if (err)
        return err;
    *out = &defaults;
    if (sources)
        *sources = default_source_ptrs;
    return OOM_OK;
}
