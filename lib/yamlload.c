/* yamlload.c - loads a YAML document into a json-c tree, for the data and config files. */
#include "internal.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static bool is_null(const char *s)
{
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

/* YAML 1.2 core schema for plain non-null scalars: bool, int, float, else string. */
static json_object *plain_scalar(const char *s)
{
    char *end;
    long long ll;
    double d;

    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
        return json_object_new_boolean(1);
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
        return json_object_new_boolean(0);
    errno = 0;
    ll = strtoll(s, &end, 10);
    if (!*end && errno != ERANGE && (s[0] == '-' || s[0] == '+' || (s[0] >= '0' && s[0] <= '9')))
        return json_object_new_int64(ll);
    errno = 0;
    d = strtod(s, &end);
    if (!*end && errno != ERANGE && isfinite(d) &&
        (s[0] == '-' || s[0] == '+' || s[0] == '.' || (s[0] >= '0' && s[0] <= '9')))
        return json_object_new_double(d);
    return json_object_new_string(s);
}

static int convert(json_object **out, yaml_document_t *doc, yaml_node_t *node, int depth,
                   const char *name)
{
    yaml_node_item_t *item;
    yaml_node_pair_t *pair;
    json_object *obj = NULL, *child;
    int err;

    *out = NULL;
    if (depth > 64)
        return oomi_fail(OOM_EPARSE, "%s: nested too deeply", name);
    switch (node->type) {
    case YAML_SCALAR_NODE:
        if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
            const char *v = (const char *)node->data.scalar.value;
            if (is_null(v))
                return OOM_OK;
            if (!(obj = plain_scalar(v)))
                return oomi_nomem();
        } else {
            obj = json_object_new_string_len((const char *)node->data.scalar.value,
                                             (int)node->data.scalar.length);
            if (!obj)
                return oomi_nomem();
        }
        *out = obj;
        return OOM_OK;
    case YAML_SEQUENCE_NODE:
        if (!(obj = json_object_new_array()))
            return oomi_nomem();
        for (item = node->data.sequence.items.start; item < node->data.sequence.items.top; item++) {
            if ((err = convert(&child, doc, yaml_document_get_node(doc, *item), depth + 1, name)))
                goto fail;
            if (json_object_array_add(obj, child)) {
                json_object_put(child);
                err = oomi_nomem();
                goto fail;
            }
        }
        *out = obj;
        return OOM_OK;
    case YAML_MAPPING_NODE:
        if (!(obj = json_object_new_object()))
            return oomi_nomem();
        for (pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
            yaml_node_t *k = yaml_document_get_node(doc, pair->key);
            if (!k || k->type != YAML_SCALAR_NODE) {
                err = oomi_fail(OOM_EPARSE, "%s:%zu:%zu: mapping keys must be scalars", name,
                                k ? k->start_mark.line + 1 : 0, k ? k->start_mark.column + 1 : 0);
                goto fail;
            }
            if ((err = convert(&child, doc, yaml_document_get_node(doc, pair->value), depth + 1,
                               name)))
                goto fail;
            if (json_object_object_add(obj, (const char *)k->data.scalar.value, child)) {
                json_object_put(child);
                err = oomi_nomem();
                goto fail;
            }
        }
        *out = obj;
        return OOM_OK;
    default:
        *out = NULL;
        return OOM_OK;
    }
fail:
    json_object_put(obj);
    return err;
}

int oomi_yaml_load(json_object **out, const char *text, size_t len, const char *name)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_node_t *root;
    int err;

    *out = NULL;
    if (!yaml_parser_initialize(&parser))
        return oomi_nomem();
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        err =
            oomi_fail(OOM_EPARSE, "%s:%zu:%zu: %s%s%s", name, parser.problem_mark.line + 1,
                      parser.problem_mark.column + 1, parser.problem ? parser.problem : "bad YAML",
                      parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return err;
    }
    root = yaml_document_get_root_node(&doc);
    err = root ? convert(out, &doc, root, 0, name) : OOM_OK;
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return err;
}

int oomi_yaml_load_file(json_object **out, const char *path)
{
    char *text;
    size_t len;
    int err;

    if ((err = oomi_read_file(&text, &len, path)))
        return err;
    err = oomi_yaml_load(out, text, len, path);
    oomi_free(text);
    return err;
}
