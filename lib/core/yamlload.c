/* yamlload.c - loads a YAML document into a json-c tree, for the data and config files. */
#include "core/core.h"

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
    d = oomi_strtod(s, &end);
    if (!*end && errno != ERANGE && isfinite(d) &&
        (s[0] == '-' || s[0] == '+' || s[0] == '.' || (s[0] >= '0' && s[0] <= '9')))
        return json_object_new_double(d);
    return json_object_new_string(s);
}

/* Aliases make a document a graph: "a: &a [x, x], b: &b [*a, *a], ..." doubles at each level.
 * Converting it into a tree expands every alias, so the expansion is bounded. */
#define MAX_NODES 1000000

static int convert(json_object **out, yaml_document_t *doc, yaml_node_t *node, int depth,
                   size_t *nodes, const char *name)
{
    yaml_node_item_t *item;
    yaml_node_pair_t *pair;
    json_object *obj = NULL, *child;
    int err;

    *out = NULL;
    if (depth > 64)
        return oomi_fail(OOM_EPARSE, "%s: nested too deeply", name);
    if (++*nodes > MAX_NODES)
        return oomi_fail(OOM_EPARSE, "%s: more than %d values (aliases expanding?)", name,
                         MAX_NODES);
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
            if ((err = convert(&child, doc, yaml_document_get_node(doc, *item), depth + 1, nodes,
                               name)))
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
                               nodes, name)))
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

/* Nesting is bounded before the document is built: libyaml's scanner spends O(depth) per token
 * inside flow collections, so a 600 KB file of '[' took minutes to load. One pass over the events
 * stops at the first collection nested deeper than convert() accepts; a syntax error is left to
 * the load that follows. */
static int check_depth(const char *text, size_t len, const char *name)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    int depth = 0, err = OOM_OK;
    bool end = false;

    if (!yaml_parser_initialize(&parser))
        return oomi_nomem();
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    while (!end && !err && yaml_parser_parse(&parser, &ev)) {
        if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) {
            if (++depth > 64)
                err = oomi_fail(OOM_EPARSE, "%s:%zu:%zu: nested too deeply", name,
                                ev.start_mark.line + 1, ev.start_mark.column + 1);
        } else if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT) {
            depth--;
        }
        end = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    return err;
}

int oomi_yaml_single_document(yaml_parser_t *parser, const char *name)
{
    yaml_document_t doc;
    int err = OOM_OK;

    if (!yaml_parser_load(parser, &doc))
        return oomi_fail(OOM_EPARSE, "%s:%zu:%zu: %s%s%s", name, parser->problem_mark.line + 1,
                         parser->problem_mark.column + 1,
                         parser->problem ? parser->problem : "bad YAML", parser->context ? " " : "",
                         parser->context ? parser->context : "");
    if (yaml_document_get_root_node(&doc))
        err = oomi_fail(OOM_EPARSE,
                        "%s:%zu:%zu: a second YAML document (---); the file must hold one", name,
                        doc.start_mark.line + 1, doc.start_mark.column + 1);
    yaml_document_delete(&doc);
    return err;
}

int oomi_yaml_load(json_object **out, const char *text, size_t len, const char *name)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_node_t *root;
    size_t nodes = 0;
    int err;

    *out = NULL;
    if ((err = check_depth(text, len, name)))
        return err;
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
    err = root ? convert(out, &doc, root, 0, &nodes, name) : OOM_OK;
    yaml_document_delete(&doc);
    if (!err)
        err = oomi_yaml_single_document(&parser, name);
    yaml_parser_delete(&parser);
    if (err) {
        json_object_put(*out);
        *out = NULL;
    }
    return err;
}

int oomi_yaml_load_file(json_object **out, const char *path)
{
    char *text;
    size_t len;
    int err;

    if ((err = oomi_read_file(&text, &len, path, OOMI_READ_MAX)))
        return err;
    err = oomi_yaml_load(out, text, len, path);
    oomi_free(text);
    return err;
}
