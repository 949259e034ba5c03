/* apply_yaml.c - YAML for `apply`: a tree with byte offsets built from libyaml's events, the
 * text of a replacement scalar in the old one's style, and the text that creates a missing key.
 *
 * libyaml's marks count characters, not bytes (a UTF-8 'é' is one character); a table from
 * character index to byte offset turns them back into bytes. */
#include "apply/apply.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

struct yctx {
    yaml_parser_t parser;
    const char *buf;
    size_t len;
    const char *file;
    size_t *cmap; /* character index -> byte offset, nchars + 1 entries */
    size_t nchars;
    int depth; /* collections open in build(): bounded, as JSON's, so the stack is */
};

static int build_cmap(struct yctx *c)
{
    size_t i, n = 0;

    /* the encoding is set explicitly, so a BOM is read as one character (and skipped) */
    if (!(c->cmap = oomi_reallocarray(NULL, c->len + 1, sizeof(size_t))))
        return oomi_nomem();
    for (i = 0; i < c->len; i++)
        if (((unsigned char)c->buf[i] & 0xC0) != 0x80)
            c->cmap[n++] = i;
    c->cmap[n] = c->len;
    c->nchars = n;
    return OOM_OK;
}

static size_t byte_at(const struct yctx *c, yaml_mark_t m)
{
    return m.index <= c->nchars ? c->cmap[m.index] : c->len;
}

static int parse_error(struct yctx *c)
{
    const yaml_parser_t *p = &c->parser;
    if (p->error == YAML_MEMORY_ERROR)
        return oomi_nomem();
    return oomi_fail(OOM_EPARSE, "'%s' line %zu column %zu: %s%s%s", c->file,
                     p->problem_mark.line + 1, p->problem_mark.column + 1,
                     p->problem ? p->problem : "invalid YAML", p->context ? " " : "",
                     p->context ? p->context : "");
}

static int next_event(struct yctx *c, yaml_event_t *ev)
{
    return yaml_parser_parse(&c->parser, ev) ? OOM_OK : parse_error(c);
}

static oomi_node *new_node(struct yctx *c, oomi_nkind kind, const yaml_event_t *ev)
{
    oomi_node *n = oomi_calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    n->kind = kind;
    n->start = byte_at(c, ev->start_mark);
    n->end = byte_at(c, ev->end_mark);
    return n;
}

static int scalar_node(struct yctx *c, const yaml_event_t *ev, oomi_node **out)
{
    const char *text = (const char *)ev->data.scalar.value;
    oomi_node *n = new_node(c, OOMI_N_SCALAR, ev);
    int err;

    if (!n)
        return oomi_nomem();
    n->anchored = ev->data.scalar.anchor != NULL;
    n->tagged = ev->data.scalar.tag != NULL;
    switch (ev->data.scalar.style) {
    case YAML_SINGLE_QUOTED_SCALAR_STYLE:
        n->quote = OOMI_Q_SINGLE;
        break;
    case YAML_DOUBLE_QUOTED_SCALAR_STYLE:
        n->quote = OOMI_Q_DOUBLE;
        break;
    case YAML_LITERAL_SCALAR_STYLE:
    case YAML_FOLDED_SCALAR_STYLE:
        n->quote = OOMI_Q_BLOCK;
        break;
    default:
        n->quote = OOMI_Q_PLAIN;
    }
    if (n->quote == OOMI_Q_PLAIN && !n->tagged) {
        err = oomi_aval_from_plain(&n->val, text);
    } else {
        n->val.type = OOMI_AV_STRING;
        err = (n->val.s = oomi_strdup(text)) ? OOM_OK : oomi_nomem();
    }
    if (err) {
        oomi_node_free(n);
        return err;
    }
    *out = n;
    return OOM_OK;
}

static int build(struct yctx *c, yaml_event_t *ev, oomi_node **out);

/* reads the children of a collection up to its end event */
static int collection(struct yctx *c, oomi_node *n, yaml_event_type_t end_type)
{
    yaml_event_t ev;
    oomi_node *key = NULL, *val = NULL;
    int err;
    bool is_map = end_type == YAML_MAPPING_END_EVENT;

    for (;;) {
        if ((err = next_event(c, &ev))) {
            oomi_node_free(key);
            return err;
        }
        if (ev.type == end_type) {
            n->close = byte_at(c, ev.start_mark);
            n->end = n->flow ? byte_at(c, ev.end_mark) : n->n ? n->vals[n->n - 1]->end : n->start;
            yaml_event_delete(&ev);
            return OOM_OK;
        }
        err = build(c, &ev, is_map && !key ? &key : &val);
        yaml_event_delete(&ev);
        if (err) {
            oomi_node_free(key);
            return err;
        }
        if (is_map && !val)
            continue;
        if ((err = oomi_node_add(n, key, val)))
            return err;
        key = val = NULL;
    }
}

static int build(struct yctx *c, yaml_event_t *ev, oomi_node **out)
{
    oomi_node *n;
    int err;

    *out = NULL;
    if (ev->type == YAML_SCALAR_EVENT)
        return scalar_node(c, ev, out);
    if (ev->type == YAML_ALIAS_EVENT)
        return (*out = new_node(c, OOMI_N_ALIAS, ev)) ? OOM_OK : oomi_nomem();
    if (ev->type != YAML_MAPPING_START_EVENT && ev->type != YAML_SEQUENCE_START_EVENT)
        return oomi_fail(OOM_EINTERNAL, "'%s': unexpected YAML event %d", c->file, ev->type);
    if (c->depth >= 1000) {
        size_t line, col;
        oomi_line_col(c->buf, byte_at(c, ev->start_mark), &line, &col);
        return oomi_fail(OOM_EPARSE, "'%s' line %zu column %zu: nested too deeply", c->file, line,
                         col);
    }
    if (!(n = new_node(c, ev->type == YAML_MAPPING_START_EVENT ? OOMI_N_MAP : OOMI_N_SEQ, ev)))
        return oomi_nomem();
    if (n->kind == OOMI_N_MAP) {
        n->flow = ev->data.mapping_start.style == YAML_FLOW_MAPPING_STYLE;
        n->anchored = ev->data.mapping_start.anchor != NULL;
        n->tagged = ev->data.mapping_start.tag != NULL;
    } else {
        n->flow = ev->data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE;
        n->anchored = ev->data.sequence_start.anchor != NULL;
        n->tagged = ev->data.sequence_start.tag != NULL;
    }
    c->depth++;
    err =
        collection(c, n, n->kind == OOMI_N_MAP ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT);
    c->depth--;
    if (err) {
        oomi_node_free(n);
        return err;
    }
    *out = n;
    return OOM_OK;
}

/* Walks the whole stream (every document must parse) and keeps the first document's root. */
static int parse_stream(struct yctx *c, oomi_node **root)
{
    yaml_event_t ev;
    oomi_node *node = NULL;
    int err = OOM_OK;
    bool in_doc = false;

    for (;;) {
        if ((err = next_event(c, &ev)))
            break;
        if (ev.type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (ev.type == YAML_DOCUMENT_START_EVENT || ev.type == YAML_DOCUMENT_END_EVENT) {
            in_doc = ev.type == YAML_DOCUMENT_START_EVENT;
        } else if (in_doc && ev.type != YAML_STREAM_START_EVENT) {
            err = build(c, &ev, &node);
            if (!err && *root)
                oomi_node_free(node);
            else if (!err)
                *root = node;
        }
        yaml_event_delete(&ev);
        if (err)
            break;
    }
    return err;
}

int oomi_yaml_parse(oomi_node **root, const char *buf, size_t len, const char *file)
{
    struct yctx c;
    int err;

    memset(&c, 0, sizeof(c));
    *root = NULL;
    c.buf = buf;
    c.len = len;
    c.file = file;
    if ((err = build_cmap(&c)))
        return err;
    if (!yaml_parser_initialize(&c.parser)) {
        oomi_free(c.cmap);
        return oomi_nomem();
    }
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)buf, len);
    yaml_parser_set_encoding(&c.parser, YAML_UTF8_ENCODING);
    err = parse_stream(&c, root);
    yaml_parser_delete(&c.parser);
    oomi_free(c.cmap);
    if (!err && !*root)
        err = oomi_fail(OOM_EREFUSED, "'%s' holds no YAML document", file);
    if (err) {
        oomi_node_free(*root);
        *root = NULL;
    }
    return err;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* a string that reads back as the same string when written plain */
static bool plain_safe(const char *s)
{
    oomi_aval v;
    bool ok;
    const char *p;

    if (!*s || !(oomi_isalnum((unsigned char)*s) || *s == '_' || *s == '/' || *s == '.'))
        return false;
    for (p = s; *p; p++)
        if (!oomi_isalnum((unsigned char)*p) && !strchr("_./+-", *p))
            return false;
    if (oomi_aval_from_plain(&v, s))
        return false;
    ok = v.type == OOMI_AV_STRING;
    oomi_aval_clear(&v);
    return ok;
}

static void put_single(oomi_sb *sb, const char *s)
{
    oomi_sb_putc(sb, '\'');
    for (; *s; s++) {
        if (*s == '\'')
            oomi_sb_putc(sb, '\'');
        oomi_sb_putc(sb, *s);
    }
    oomi_sb_putc(sb, '\'');
}

/* The UTF-8 length of a character YAML does not allow raw in a quoted scalar, or 0: C0 controls
 * but tab, DEL, C1 controls (NEL included) and the line/paragraph separators, which libyaml
 * reads as line breaks. */
static size_t unprintable(const unsigned char *p)
{
    if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
        return 1;
    if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
        return 2;
    if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9))
        return 3;
    return 0;
}

/* a double-quoted scalar with YAML escapes (\uXXXX) for what cannot appear raw */
static void put_double(oomi_sb *sb, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n;

    oomi_sb_putc(sb, '"');
    while (*p) {
        if (*p == '"' || *p == '\\') {
            oomi_sb_printf(sb, "\\%c", *p++);
        } else if ((n = unprintable(p))) {
            unsigned cp = n == 1 ? p[0] : n == 2 ? p[1] : 0x2000u | (p[2] & 0x3fu);
            oomi_sb_printf(sb, "\\u%04x", cp);
            p += n;
        } else {
            oomi_sb_putc(sb, (char)*p++);
        }
    }
    oomi_sb_putc(sb, '"');
}

static bool has_unprintable(const char *s)
{
    for (; *s; s++)
        if (unprintable((const unsigned char *)s))
            return true;
    return false;
}

/* "true"/"True"/"TRUE" or yes/no, on/off, as the old boolean was spelled */
static void put_bool(oomi_sb *sb, const oomi_node *old, const char *buf, bool b)
{
    static const char *const words[][2] = {{"false", "true"}, {"no", "yes"}, {"off", "on"}};
    const char *src = old && old->val.type == OOMI_AV_BOOL ? buf + old->start : "true";
    size_t family = 0, i;
    char w[8];

    if (oomi_tolower((unsigned char)src[0]) == 'y' || oomi_tolower((unsigned char)src[0]) == 'n')
        family = 1;
    else if (oomi_tolower((unsigned char)src[0]) == 'o')
        family = 2;
    oomi_snprintf(w, sizeof(w), "%s", words[family][b]);
    if (oomi_isupper((unsigned char)src[0]))
        for (i = 0; w[i]; i++)
            if (i == 0 || oomi_isupper((unsigned char)src[1]))
                w[i] = (char)oomi_toupper((unsigned char)w[i]);
    oomi_sb_puts(sb, w);
}

static void put_scalar(oomi_sb *sb, const oomi_node *old, const char *buf, const oomi_aval *v)
{
    char num[40];
    oomi_quote q = old ? old->quote : OOMI_Q_PLAIN;

    switch (v->type) {
    case OOMI_AV_STRING:
        if (q == OOMI_Q_SINGLE && !has_unprintable(v->s))
            put_single(sb, v->s);
        else if (q == OOMI_Q_PLAIN && plain_safe(v->s))
            oomi_sb_puts(sb, v->s);
        else
            put_double(sb, v->s);
        break;
    case OOMI_AV_BOOL:
        put_bool(sb, old, buf, v->b);
        break;
    case OOMI_AV_INT:
        if (old && old->val.type == OOMI_AV_FLOAT) {
            oomi_format_float(num, sizeof(num), (double)v->i);
            oomi_sb_puts(sb, num);
        } else {
            oomi_sb_printf(sb, "%lld", v->i);
        }
        break;
    case OOMI_AV_FLOAT:
        oomi_format_float(num, sizeof(num), v->d);
        oomi_sb_puts(sb, num);
        break;
    case OOMI_AV_NULL:
        oomi_sb_puts(sb, "null");
        break;
    }
}

char *oomi_yaml_render(const oomi_node *old, const char *buf, const oomi_aval *v)
{
    oomi_sb sb = OOMI_SB_INIT;

    put_scalar(&sb, old, buf, v);
    if (oomi_sb_ok(&sb)) {
        oomi_sb_free(&sb);
        return NULL;
    }
    return oomi_sb_steal(&sb);
}

static void put_key(oomi_sb *sb, const char *key)
{
    oomi_aval v = {.type = OOMI_AV_STRING, .s = (char *)key};
    put_scalar(sb, NULL, NULL, &v);
}

static size_t column_of(const char *buf, size_t off)
{
    size_t s = off;
    while (s > 0 && buf[s - 1] != '\n')
        s--;
    return off - s;
}

/* indentation step of the file: the first nested block map's offset from its parent */
static size_t indent_step(const oomi_node *map, const char *buf)
{
    size_t i, base = column_of(buf, map->keys[0]->start);

    for (i = 0; i < map->n; i++) {
        const oomi_node *v = map->vals[i];
        if (v->kind == OOMI_N_MAP && !v->flow && v->n && column_of(buf, v->keys[0]->start) > base)
            return column_of(buf, v->keys[0]->start) - base;
    }
    return 2;
}

static void put_flow_chain(oomi_sb *sb, const oomi_pathseg *segs, size_t n, const char *v_text)
{
    size_t i;

    for (i = 0; i < n; i++) {
        put_key(sb, segs[i].key);
        oomi_sb_puts(sb, i + 1 < n ? ": {" : ": ");
    }
    oomi_sb_puts(sb, v_text);
    for (i = 1; i < n; i++)
        oomi_sb_putc(sb, '}');
}

static void put_block_chain(oomi_sb *sb, size_t indent, size_t step, const oomi_pathseg *segs,
                            size_t n, const char *v_text, const char *eol)
{
    size_t i;

    for (i = 0; i < n; i++) {
        oomi_sb_printf(sb, "%*s", (int)(indent + i * step), "");
        put_key(sb, segs[i].key);
        oomi_sb_puts(sb, ":");
        oomi_sb_puts(sb, i + 1 < n ? eol : " ");
    }
    oomi_sb_puts(sb, v_text);
    oomi_sb_puts(sb, eol);
}

static void flow_create(oomi_sb *sb, size_t *pos, const oomi_node *map, const char *buf,
                        const oomi_pathseg *segs, size_t n, const char *v_text)
{
    if (!map->n) {
        *pos = map->close;
    } else {
        const oomi_node *prev = map->n >= 2 ? map->vals[map->n - 2] : NULL;
        const oomi_node *last = map->keys[map->n - 1];
        size_t a = prev ? prev->end : 0, b = prev ? last->start : 0;
        *pos = map->vals[map->n - 1]->end;
        if (prev && b > a && memchr(buf + a, ',', b - a) && !memchr(buf + a, '#', b - a))
            oomi_sb_add(sb, buf + a, b - a);
        else
            oomi_sb_puts(sb, ", ");
    }
    put_flow_chain(sb, segs, n, v_text);
}

int oomi_yaml_create(char **text, size_t *pos, const oomi_node *map, const char *buf, size_t len,
                     const oomi_pathseg *segs, size_t n, const char *v_text)
{
    oomi_sb sb = OOMI_SB_INIT;
    const char *nl;
    int err;

    if (map->flow || !map->n) {
        flow_create(&sb, pos, map, buf, segs, n, v_text);
    } else {
        /* after the line of the map's last value (a block scalar's span ends on a line start) */
        size_t end = map->vals[map->n - 1]->end;
        const char *first_nl = memchr(buf, '\n', len);
        const char *eol = first_nl && first_nl > buf && first_nl[-1] == '\r' ? "\r\n" : "\n";
        nl = end && buf[end - 1] == '\n' ? buf + end - 1 : memchr(buf + end, '\n', len - end);
        *pos = nl ? (size_t)(nl - buf) + 1 : len;
        if (!nl)
            oomi_sb_puts(&sb, eol);
        put_block_chain(&sb, column_of(buf, map->keys[0]->start), indent_step(map, buf), segs, n,
                        v_text, eol);
    }
    if ((err = oomi_sb_ok(&sb))) {
        oomi_sb_free(&sb);
        return err;
    }
    *text = oomi_sb_steal(&sb);
    return OOM_OK;
}
