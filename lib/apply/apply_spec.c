/* apply_spec.c - what an assignment's value is: a plan field, a path into the plan document, a
 * comparison, a literal; and the presets files that name sets of assignments. */
#include "apply/apply.h"

#include <ctype.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

#define LITERAL "literal:"

/* splits "FIELD==TEXT" / "FIELD!=TEXT"; op is '=' or '!' or 0 */
static const char *comparison(const char *spec, char *op, size_t *field_len)
{
    const char *eq = strstr(spec, "=="), *ne = strstr(spec, "!=");
    const char *at = eq && (!ne || eq < ne) ? eq : ne;

    *op = at ? *at : 0;
    *field_len = at ? (size_t)(at - spec) : strlen(spec);
    return at ? at + 2 : NULL;
}

int oomi_spec_check(const char *spec)
{
    oomi_pathseg *segs;
    size_t n, flen;
    char op, *field;
    int err;

    if (!strncmp(spec, LITERAL, strlen(LITERAL)))
        return OOM_OK;
    comparison(spec, &op, &flen);
    if (!(field = oomi_strndup(spec, flen)))
        return oomi_nomem();
    err = oomi_path_parse(&segs, &n, field);
    oomi_free(field);
    if (err == OOM_ENOMEM)
        return err;
    if (err)
        return oomi_fail(OOM_EINVAL,
                         "value '%s' is not a plan field, a dotted path, FIELD==TEXT or "
                         "literal:VALUE",
                         spec);
    oomi_path_free(segs, n);
    return OOM_OK;
}

/* 'it''s' and "a\"b" read as YAML reads them; anything else as a plain scalar */
static int literal(oomi_aval *out, const char *text)
{
    size_t n = strlen(text), i;
    oomi_sb sb = OOMI_SB_INIT;
    char q = text[0];

    if (n < 2 || (q != '"' && q != '\'') || text[n - 1] != q)
        return oomi_aval_from_plain(out, text);
    for (i = 1; i + 1 < n; i++) {
        char ch = text[i];
        if (q == '\'' && ch == '\'' && text[i + 1] == '\'')
            i++;
        else if (q == '"' && ch == '\\' && i + 2 < n)
            ch = text[++i] == 'n' ? '\n' : text[i] == 't' ? '\t' : text[i];
        oomi_sb_putc(&sb, ch);
    }
    oomi_sb_puts(&sb, "");
    memset(out, 0, sizeof(*out));
    out->type = OOMI_AV_STRING;
    return oomi_sb_finish(&sb, &out->s);
}

static int from_json(oomi_aval *out, struct json_object *o, const char *field)
{
    memset(out, 0, sizeof(*out));
    switch (json_object_get_type(o)) {
    case json_type_null:
        out->type = OOMI_AV_NULL;
        return OOM_OK;
    case json_type_boolean:
        out->type = OOMI_AV_BOOL;
        out->b = json_object_get_boolean(o);
        return OOM_OK;
    case json_type_int:
        out->type = OOMI_AV_INT;
        out->i = (long long)json_object_get_int64(o);
        return OOM_OK;
    case json_type_double:
        out->type = OOMI_AV_FLOAT;
        out->d = json_object_get_double(o);
        return OOM_OK;
    case json_type_string:
        out->type = OOMI_AV_STRING;
        return (out->s = oomi_strdup(json_object_get_string(o))) ? OOM_OK : oomi_nomem();
    default:
        return oomi_fail(OOM_EINVAL, "plan field '%s' is not a single value", field);
    }
}

/* a path through the document; NULL when some part is missing */
static struct json_object *walk(struct json_object *doc, const oomi_pathseg *segs, size_t n)
{
    size_t i;

    for (i = 0; doc && i < n; i++) {
        if (segs[i].key && json_object_is_type(doc, json_type_object))
            doc = json_object_object_get(doc, segs[i].key);
        else if (!segs[i].key && json_object_is_type(doc, json_type_array))
            doc = json_object_array_get_idx(doc, segs[i].index);
        else
            doc = NULL;
    }
    return doc;
}

static long long int_field(struct json_object *plan, const char *key, long long dflt, bool *ok)
{
    struct json_object *o = oomi_json_get(plan, key);
    if (!o)
        return dflt;
    if (!json_object_is_type(o, json_type_int))
        *ok = false;
    return json_object_get_int64(o);
}

/* zero_stage and global_batch, computed from the plan when it does not carry them */
static bool derived(oomi_aval *out, struct json_object *plan, const char *field)
{
    struct json_object *o;
    const char *s, *p;
    bool ok = true;

    memset(out, 0, sizeof(*out));
    out->type = OOMI_AV_INT;
    if (!plan || !json_object_is_type(plan, json_type_object))
        return false;
    if (!strcmp(field, "zero_stage")) {
        if (!(o = json_object_object_get(plan, "sharding")) || !(s = json_object_get_string(o)))
            return false;
        if (!strcmp(s, "none"))
            return true;
        if (oomi_strncasecmp(s, "zero", 4))
            return false;
        for (p = s + 4; *p == '-' || *p == '_'; p++)
            ;
        if (*p < '0' || *p > '3' || p[1])
            return false;
        out->i = *p - '0';
        return true;
    }
    if (!strcmp(field, "global_batch")) {
        long long b = int_field(plan, "batch_size", -1, &ok);
        long long g = int_field(plan, "grad_accum", 1, &ok);
        long long n = int_field(plan, "gpus", 1, &ok);
        if (!ok || b < 0 || g <= 0 || n <= 0 || b > 1000000000LL / g / n)
            return false;
        out->i = b * g * n;
        return true;
    }
    return false;
}

static int field(oomi_aval *out, bool *missing, struct json_object *doc, const char *name)
{
    struct json_object *plan = json_object_object_get(doc, "plan"), *o;
    oomi_pathseg *segs;
    size_t n;
    int err;

    if ((err = oomi_path_parse(&segs, &n, name)))
        return err;
    o = n == 1 ? json_object_object_get(plan, name) : walk(doc, segs, n);
    oomi_path_free(segs, n);
    if (o)
        return from_json(out, o, name);
    if (n == 1 && derived(out, plan, name))
        return OOM_OK;
    *missing = true;
    return OOM_OK;
}

static void text_of(char *buf, size_t size, const oomi_aval *v)
{
    oomi_sb sb = OOMI_SB_INIT;

    if (v->type == OOMI_AV_STRING) {
        oomi_snprintf(buf, size, "%s", v->s);
        return;
    }
    oomi_aval_json(&sb, v);
    oomi_snprintf(buf, size, "%s", oomi_sb_ok(&sb) ? "" : sb.buf);
    oomi_sb_free(&sb);
}

/* whether text is one of the '|'-separated words of `want` ("bf16|4bit|int8") */
static bool one_of(const char *text, const char *want)
{
    size_t len = strlen(text);
    while (*want) {
        size_t n = strcspn(want, "|");
        if (n == len && !strncmp(want, text, n))
            return true;
        want += n + (want[n] == '|');
    }
    return false;
}

int oomi_spec_resolve(oomi_aval *out, bool *missing, struct json_object *plan, const char *spec)
{
    char op, *name, text[256];
    size_t flen;
    const char *want;
    int err;

    *missing = false;
    memset(out, 0, sizeof(*out));
    if (!strncmp(spec, LITERAL, strlen(LITERAL)))
        return literal(out, spec + strlen(LITERAL));
    if (!plan)
        return oomi_fail(OOM_EINVAL, "value '%s' needs a plan (--plan FILE or --plan -)", spec);
    want = comparison(spec, &op, &flen);
    if (!(name = oomi_strndup(spec, flen)))
        return oomi_nomem();
    err = field(out, missing, plan, name);
    oomi_free(name);
    if (err || *missing || !op)
        return err;
    text_of(text, sizeof(text), out);
    oomi_aval_clear(out);
    out->type = OOMI_AV_BOOL;
    out->b = one_of(text, want) == (op == '=');
    return OOM_OK;
}

/* ---- presets files -------------------------------------------------------------------------
 *   NAME:
 *     description: one line
 *     set:
 *       config.key: value spec
 *     unset:                    (optional) what the framework uses where a file lacks a key
 *       config.key: YAML scalar
 */

static const char *scalar(yaml_document_t *doc, yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *map_get(yaml_document_t *doc, yaml_node_t *map, const char *key)
{
    yaml_node_pair_t *p;
    const char *k;

    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
        if ((k = scalar(doc, yaml_document_get_node(doc, p->key))) && !strcmp(k, key))
            return yaml_document_get_node(doc, p->value);
    return NULL;
}

static int preset_in(yaml_document_t *doc, const char *path, const char *name, oomi_preset_fn fn,
                     void *user, bool *found)
{
    yaml_node_t *p = map_get(doc, yaml_document_get_root_node(doc), name), *set, *unset;
    yaml_node_pair_t *pair;
    const char *k, *v;
    int err;

    if (!p)
        return OOM_OK;
    *found = true;
    if (!(set = map_get(doc, p, "set")) || set->type != YAML_MAPPING_NODE)
        return oomi_fail(OOM_EINVAL, "presets file '%s': preset '%s' has no 'set:' map", path,
                         name);
    unset = map_get(doc, p, "unset");
    for (pair = set->data.mapping.pairs.start; pair < set->data.mapping.pairs.top; pair++) {
        k = scalar(doc, yaml_document_get_node(doc, pair->key));
        v = scalar(doc, yaml_document_get_node(doc, pair->value));
        if (!k || !v)
            return oomi_fail(OOM_EINVAL,
                             "presets file '%s': preset '%s': 'set:' entries are "
                             "'config.key: value'",
                             path, name);
        if ((err = fn(k, v, scalar(doc, map_get(doc, unset, k)), user)))
            return oomi_fail_prefix(err, "presets file '%s', preset '%s': ", path, name);
    }
    return OOM_OK;
}

static void list_names(yaml_document_t *doc, oomi_sb *names)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    yaml_node_pair_t *p;
    const char *k;

    if (!root || root->type != YAML_MAPPING_NODE)
        return;
    for (p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++)
        if ((k = scalar(doc, yaml_document_get_node(doc, p->key))))
            oomi_sb_printf(names, "%s%s", names->len ? ", " : "", k);
}

/* one presets file; a missing user file is fine (optional) */
static int presets_file(const char *path, bool optional, const char *name, oomi_preset_fn fn,
                        void *user, bool *found, oomi_sb *names)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    char *text;
    size_t len;
    int err;

    if (optional && access(path, F_OK) != 0)
        return OOM_OK;
    /* the user's file is read as a regular file only (a FIFO there would make apply wait) */
    if ((err = optional ? oomi_read_regular(&text, &len, path, "presets file", OOMI_READ_MAX)
                        : oomi_read_file(&text, &len, path, OOMI_READ_MAX)))
        return err;
    if (!yaml_parser_initialize(&parser)) {
        oomi_free(text);
        return oomi_nomem();
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        err = oomi_fail(OOM_EPARSE, "presets file '%s' line %zu column %zu: %s", path,
                        parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                        parser.problem ? parser.problem : "invalid YAML");
    } else {
        err = preset_in(&doc, path, name, fn, user, found);
        list_names(&doc, names);
        yaml_document_delete(&doc);
        if (!err)
            err = oomi_yaml_single_document(&parser, path);
    }
    yaml_parser_delete(&parser);
    oomi_free(text);
    return err;
}

int oomi_preset_each(const char *name, oomi_preset_fn fn, void *user)
{
    char *base = NULL, *user_path = NULL, *data_path = oomi_data_path("apply/presets.yaml");
    oomi_sb names = OOMI_SB_INIT;
    bool found = false;
    int err = oomi_xdg_base(&base, NULL, "XDG_CONFIG_HOME", ".config");

    if (!err && base && !(user_path = oomi_asprintf("%s/oomless/apply-presets.yaml", base)))
        err = oomi_nomem();
    oomi_free(base);
    if (!err && !data_path)
        err = oomi_nomem();
    if (!err && user_path)
        err = presets_file(user_path, true, name, fn, user, &found, &names);
    if (!err && !found)
        err = presets_file(data_path, false, name, fn, user, &found, &names);
    if (!err && !found)
        err = oomi_fail(OOM_ENOTFOUND, "unknown preset '%s' (known: %s)", name,
                        oomi_sb_ok(&names) ? "?"
                        : names.buf        ? names.buf
                                           : "none");
    oomi_sb_free(&names);
    oomi_free(user_path);
    oomi_free(data_path);
    return err;
}
