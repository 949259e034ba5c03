/* apply_yaml.c - YAML for `apply`: a tree with byte offsets built from libyaml's events, the
 * text of a replacement scalar in the old one's style, and the text that creates a missing key.
 *
 * libyaml's marks count characters, not bytes (a UTF-8 'é' is one character); a cursor that
 * follows the events through the text turns them back into bytes. Only what the edits need is
 * built (see oomi_node): memory stays small and time linear however long the file is. */
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
    size_t ci, bi, first; /* byte_at()'s cursor: character ci starts at byte bi */
    int depth;            /* collections open: bounded, as JSON's, so the stack is */
    const oomi_want *want;
    size_t nwant;
};

static bool continuation(const struct yctx *c, size_t i)
{
    return ((unsigned char)c->buf[i] & 0xC0) == 0x80;
}

/* The byte offset of a mark. libyaml counts characters (a BOM too: the encoding is set
 * explicitly, so it is read as one character and skipped); the events come in the order of the
 * text, so a cursor moving from mark to mark walks the text about once, with no table. */
static size_t byte_at(struct yctx *c, yaml_mark_t m)
{
    while (c->ci < m.index && c->bi < c->len) {
        c->bi++;
        while (c->bi < c->len && continuation(c, c->bi))
            c->bi++;
        c->ci++;
    }
    while (c->ci > m.index && c->bi > c->first) {
        c->bi--;
        while (c->bi > c->first && continuation(c, c->bi))
            c->bi--;
        c->ci--;
    }
    return c->ci == m.index ? c->bi : c->len;
}

static size_t column_of(const char *buf, size_t off)
{
    size_t s = off;
    while (s > 0 && buf[s - 1] != '\n')
        s--;
    return off - s;
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

static int scalar_value(oomi_node *n, const yaml_event_t *ev)
{
    const char *text = (const char *)ev->data.scalar.value;

    if (n->quote == OOMI_Q_PLAIN && !n->tagged)
        return oomi_aval_from_plain(&n->val, text);
    n->val.type = OOMI_AV_STRING;
    return (n->val.s = oomi_strdup(text)) ? OOM_OK : oomi_nomem();
}

static void scalar_node(oomi_node *n, const yaml_event_t *ev)
{
    n->kind = OOMI_N_SCALAR;
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
}

/* whether a key scalar may be one a path wants next (its value or its text spells the segment)
 * or a merge key: only those keys get a value built */
static bool may_match(struct yctx *c, const yaml_event_t *ev, const size_t *act, size_t nact,
                      size_t depth)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t vl = ev->data.scalar.length, rs = byte_at(c, ev->start_mark);
    size_t rl = byte_at(c, ev->end_mark) - rs, i, kl;

    if (vl == 2 && !memcmp(v, "<<", 2))
        return true;
    for (i = 0; i < nact; i++) {
        const oomi_want *w = &c->want[act[i]];
        if (w->n <= depth || !w->segs[depth].key)
            continue;
        kl = strlen(w->segs[depth].key);
        if ((kl == vl && !memcmp(v, w->segs[depth].key, kl)) ||
            (kl == rl && !memcmp(c->buf + rs, w->segs[depth].key, kl)))
            return true;
    }
    return false;
}

static int node(struct yctx *c, yaml_event_t *ev, oomi_node *n, const size_t *act, size_t nact,
                size_t depth, bool value);

/* what a collection's entries add to what is known of it */
static void measure(struct yctx *c, oomi_node *n, const oomi_node *key, const oomi_node *val,
                    bool wanted)
{
    oomi_node_measure(n, key, val);
    if (wanted && key && !n->step && val->kind == OOMI_N_MAP && !val->flow && val->count &&
        column_of(c->buf, val->first_key_start) > column_of(c->buf, n->first_key_start))
        n->step = column_of(c->buf, val->first_key_start) - column_of(c->buf, n->first_key_start);
}

/* Reads the entries of a collection up to its end event. act[0..nact) are the wanted paths that
 * lead here; the entries they go on through are built, the others only measured. */
static int collection(struct yctx *c, oomi_node *n, const size_t *act, size_t nact, size_t depth)
{
    yaml_event_t ev;
    oomi_node key, val, *kp = NULL, *vp;
    size_t *sub = nact ? oomi_reallocarray(NULL, nact, sizeof(*sub)) : NULL, nsub = 0;
    bool is_map = n->kind == OOMI_N_MAP, have_key = false, keep_key = false;
    int err = OOM_OK;

    if (nact && !sub)
        return oomi_nomem();
    memset(&key, 0, sizeof(key));
    while (!(err = next_event(c, &ev))) {
        if (ev.type == (is_map ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT)) {
            n->close = byte_at(c, ev.start_mark);
            n->end = n->flow ? byte_at(c, ev.end_mark) : n->count ? n->last_val_end : n->start;
            yaml_event_delete(&ev);
            break;
        }
        if (is_map && !have_key) { /* a key: built when a path may want it */
            err = node(c, &ev, &key, NULL, 0, depth + 1,
                       nact && ev.type == YAML_SCALAR_EVENT && may_match(c, &ev, act, nact, depth));
            yaml_event_delete(&ev);
            if (err)
                break;
            nsub = nact ? oomi_want_child(c->want, act, nact, depth, &key, c->buf, 0, sub) : 0;
            keep_key = nsub || (nact && oomi_key_is(&key, c->buf, "<<"));
            have_key = true;
            continue;
        }
        if (!is_map)
            nsub =
                nact ? oomi_want_child(c->want, act, nact, depth, NULL, c->buf, n->count, sub) : 0;
        err = node(c, &ev, &val, sub, nsub, depth + 1, nsub > 0);
        yaml_event_delete(&ev);
        if (err)
            break;
        measure(c, n, is_map ? &key : NULL, &val, nact > 0);
        val.index = n->count - 1;
        if (nsub || keep_key) {
            kp = is_map ? oomi_node_move(&key) : NULL;
            vp = oomi_node_move(&val);
            if ((is_map && !kp) || !vp) {
                oomi_node_free(kp);
                oomi_node_free(vp);
                err = oomi_nomem();
                break;
            }
            if ((err = oomi_node_add(n, kp, vp)))
                break;
        } else {
            oomi_node_clear(&val);
        }
        oomi_node_clear(&key);
        have_key = keep_key = false;
    }
    oomi_node_clear(&key);
    oomi_free(sub);
    return err;
}

/* One node from its first event into *n (which holds nothing): built in full when act/nact
 * want it, else measured. `value`: scalars get their typed value. On failure *n holds nothing. */
static int node(struct yctx *c, yaml_event_t *ev, oomi_node *n, const size_t *act, size_t nact,
                size_t depth, bool value)
{
    int err = OOM_OK;

    memset(n, 0, sizeof(*n));
    n->start = byte_at(c, ev->start_mark);
    n->end = byte_at(c, ev->end_mark);
    if (ev->type == YAML_SCALAR_EVENT) {
        scalar_node(n, ev);
        return value ? scalar_value(n, ev) : OOM_OK;
    }
    if (ev->type == YAML_ALIAS_EVENT) {
        n->kind = OOMI_N_ALIAS;
        return OOM_OK;
    }
    if (ev->type != YAML_MAPPING_START_EVENT && ev->type != YAML_SEQUENCE_START_EVENT)
        return oomi_fail(OOM_EINTERNAL, "'%s': unexpected YAML event %d", c->file, ev->type);
    if (c->depth >= 1000) {
        size_t line, col;
        oomi_line_col(c->buf, n->start, &line, &col);
        return oomi_fail(OOM_EPARSE, "'%s' line %zu column %zu: nested too deeply", c->file, line,
                         col);
    }
    if (ev->type == YAML_MAPPING_START_EVENT) {
        n->kind = OOMI_N_MAP;
        n->flow = ev->data.mapping_start.style == YAML_FLOW_MAPPING_STYLE;
        n->anchored = ev->data.mapping_start.anchor != NULL;
        n->tagged = ev->data.mapping_start.tag != NULL;
    } else {
        n->kind = OOMI_N_SEQ;
        n->flow = ev->data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE;
        n->anchored = ev->data.sequence_start.anchor != NULL;
        n->tagged = ev->data.sequence_start.tag != NULL;
    }
    c->depth++;
    err = collection(c, n, act, nact, depth);
    c->depth--;
    if (err)
        oomi_node_clear(n);
    return err;
}

/* Walks the whole stream (every document must parse) and builds the chosen document's root. */
static int parse_stream(struct yctx *c, oomi_node **root, size_t document)
{
    yaml_event_t ev;
    oomi_node top;
    size_t docs = 0, i, *all = oomi_reallocarray(NULL, c->nwant ? c->nwant : 1, sizeof(*all));
    int err = OOM_OK;
    bool mine;

    if (!all)
        return oomi_nomem();
    for (i = 0; i < c->nwant; i++)
        all[i] = i;
    while (!(err = next_event(c, &ev)) && ev.type != YAML_STREAM_END_EVENT) {
        if (ev.type == YAML_DOCUMENT_START_EVENT) {
            docs++;
        } else if (ev.type != YAML_DOCUMENT_END_EVENT && ev.type != YAML_STREAM_START_EVENT) {
            mine = document ? docs == document : docs == 1;
            err = node(c, &ev, &top, all, mine ? c->nwant : 0, 0, mine);
            if (!err && mine && !(*root = oomi_node_move(&top)))
                err = oomi_nomem();
            oomi_node_clear(&top);
        }
        yaml_event_delete(&ev);
        if (err)
            break;
    }
    if (!err)
        yaml_event_delete(&ev);
    oomi_free(all);
    if (!err && docs > 1 && !document)
        err = oomi_fail(OOM_EREFUSED,
                        "'%s' holds %zu YAML documents (separated by ---); choose the one to "
                        "edit with --document N (1 to %zu)",
                        c->file, docs, docs);
    else if (!err && document > docs && docs)
        err = oomi_fail(OOM_EREFUSED, "'%s' holds %zu YAML document%s, not %zu", c->file, docs,
                        docs == 1 ? "" : "s", document);
    return err;
}

int oomi_yaml_parse(oomi_node **root, const char *buf, size_t len, const char *file,
                    const oomi_want *want, size_t nwant, size_t document)
{
    struct yctx c;
    int err;

    memset(&c, 0, sizeof(c));
    *root = NULL;
    c.buf = buf;
    c.len = len;
    c.file = file;
    c.want = want;
    c.nwant = nwant;
    while (c.first < len && continuation(&c, c.first))
        c.first++;
    c.bi = c.first;
    if (!yaml_parser_initialize(&c.parser))
        return oomi_nomem();
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)buf, len);
    yaml_parser_set_encoding(&c.parser, YAML_UTF8_ENCODING);
    err = parse_stream(&c, root, document);
    yaml_parser_delete(&c.parser);
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
    char *text;

    put_scalar(&sb, old, buf, v);
    return oomi_sb_finish(&sb, &text) ? NULL : text;
}

static void put_key(oomi_sb *sb, const char *key)
{
    oomi_aval v = {.type = OOMI_AV_STRING, .s = (char *)key};
    put_scalar(sb, NULL, NULL, &v);
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
    if (!map->count) {
        *pos = map->close;
    } else {
        bool prev = map->count >= 2;
        size_t a = prev ? map->prev_val_end : 0, b = prev ? map->last_key_start : 0;
        *pos = map->last_val_end;
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

    if (map->flow || !map->count) {
        flow_create(&sb, pos, map, buf, segs, n, v_text);
    } else {
        /* after the line of the map's last value (a block scalar's span ends on a line start) */
        size_t end = map->last_val_end;
        const char *first_nl = memchr(buf, '\n', len);
        const char *eol = first_nl && first_nl > buf && first_nl[-1] == '\r' ? "\r\n" : "\n";
        nl = end && buf[end - 1] == '\n' ? buf + end - 1 : memchr(buf + end, '\n', len - end);
        *pos = nl ? (size_t)(nl - buf) + 1 : len;
        if (!nl)
            oomi_sb_puts(&sb, eol);
        put_block_chain(&sb, column_of(buf, map->first_key_start), map->step ? map->step : 2, segs,
                        n, v_text, eol);
    }
    return oomi_sb_finish(&sb, text);
}
