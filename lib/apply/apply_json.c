/* apply_json.c - JSON for `apply`. json-c validates the file (and gives the error position);
 * json-c keeps no offsets, so a small scanner of our own builds the tree with byte offsets. */
#include "apply/apply.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

struct jctx {
    const char *buf;
    size_t len, pos;
    const char *file;
    int depth;
};

static int jfail(struct jctx *c, const char *what)
{
    size_t line, col;
    oomi_line_col(c->buf, c->pos, &line, &col);
    return oomi_fail(OOM_EPARSE, "'%s' line %zu column %zu: %s", c->file, line, col, what);
}

static void skip_ws(struct jctx *c)
{
    while (c->pos < c->len && strchr(" \t\r\n", c->buf[c->pos]) && c->buf[c->pos])
        c->pos++;
}

static unsigned hex4(const char *p)
{
    unsigned v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        char ch = p[i];
        v = v * 16 + (unsigned)(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
    }
    return v;
}

static void put_utf8(oomi_sb *sb, unsigned cp)
{
    if (cp < 0x80) {
        oomi_sb_putc(sb, (char)cp);
    } else if (cp < 0x800) {
        oomi_sb_putc(sb, (char)(0xC0 | cp >> 6));
        oomi_sb_putc(sb, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        oomi_sb_putc(sb, (char)(0xE0 | cp >> 12));
        oomi_sb_putc(sb, (char)(0x80 | ((cp >> 6) & 0x3F)));
        oomi_sb_putc(sb, (char)(0x80 | (cp & 0x3F)));
    } else {
        oomi_sb_putc(sb, (char)(0xF0 | cp >> 18));
        oomi_sb_putc(sb, (char)(0x80 | ((cp >> 12) & 0x3F)));
        oomi_sb_putc(sb, (char)(0x80 | ((cp >> 6) & 0x3F)));
        oomi_sb_putc(sb, (char)(0x80 | (cp & 0x3F)));
    }
}

/* decodes the string at c->pos (the opening quote); the input is already validated by json-c */
static int scan_string(struct jctx *c, char **out)
{
    oomi_sb sb = OOMI_SB_INIT;
    const char *b = c->buf;
    unsigned cp, lo;

    for (c->pos++; c->pos < c->len && b[c->pos] != '"'; c->pos++) {
        if (b[c->pos] != '\\') {
            oomi_sb_putc(&sb, b[c->pos]);
            continue;
        }
        if (++c->pos >= c->len)
            break;
        switch (b[c->pos]) {
        case 'b':
            oomi_sb_putc(&sb, '\b');
            break;
        case 'f':
            oomi_sb_putc(&sb, '\f');
            break;
        case 'n':
            oomi_sb_putc(&sb, '\n');
            break;
        case 'r':
            oomi_sb_putc(&sb, '\r');
            break;
        case 't':
            oomi_sb_putc(&sb, '\t');
            break;
        case 'u':
            if (c->pos + 4 >= c->len)
                break;
            cp = hex4(b + c->pos + 1);
            c->pos += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && c->pos + 6 < c->len && b[c->pos + 1] == '\\' &&
                b[c->pos + 2] == 'u' && (lo = hex4(b + c->pos + 3)) >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                c->pos += 6;
            }
            put_utf8(&sb, cp);
            break;
        default:
            oomi_sb_putc(&sb, b[c->pos]);
        }
    }
    if (c->pos >= c->len) {
        oomi_sb_free(&sb);
        return jfail(c, "unterminated string");
    }
    c->pos++;
    if (oomi_sb_ok(&sb)) {
        oomi_sb_free(&sb);
        return OOM_ENOMEM;
    }
    *out = oomi_sb_steal(&sb);
    return OOM_OK;
}

static int scan_literal(struct jctx *c, oomi_node *n)
{
    size_t s = c->pos;
    char text[64];
    char *end;

    while (c->pos < c->len && strchr("+-.0123456789eEtrufalsn", c->buf[c->pos]) && c->buf[c->pos])
        c->pos++;
    if (c->pos == s || c->pos - s >= sizeof(text))
        return jfail(c, "unexpected character");
    memcpy(text, c->buf + s, c->pos - s);
    text[c->pos - s] = '\0';
    if (!strcmp(text, "true") || !strcmp(text, "false")) {
        n->val.type = OOMI_AV_BOOL;
        n->val.b = text[0] == 't';
    } else if (!strcmp(text, "null")) {
        n->val.type = OOMI_AV_NULL;
    } else {
        errno = 0;
        n->val.type = OOMI_AV_INT;
        n->val.i = strtoll(text, &end, 10);
        if (*end || errno || strpbrk(text, ".eE")) {
            n->val.type = OOMI_AV_FLOAT;
            n->val.d = oomi_strtod(text, &end);
            if (*end)
                return jfail(c, "bad number");
        }
    }
    return OOM_OK;
}

static int scan_value(struct jctx *c, oomi_node **out);

static int scan_members(struct jctx *c, oomi_node *n)
{
    bool is_obj = n->kind == OOMI_N_MAP;
    char close = is_obj ? '}' : ']';
    oomi_node *key = NULL, *val = NULL;
    int err;

    for (c->pos++, skip_ws(c); c->pos < c->len && c->buf[c->pos] != close; skip_ws(c)) {
        if (n->n && c->buf[c->pos++] != ',')
            return jfail(c, "expected ','");
        skip_ws(c);
        if (is_obj) {
            if ((err = scan_value(c, &key)))
                return err;
            skip_ws(c);
            if (key->kind != OOMI_N_SCALAR || key->val.type != OOMI_AV_STRING || c->pos >= c->len ||
                c->buf[c->pos++] != ':') {
                oomi_node_free(key);
                return jfail(c, "expected a \"key\":");
            }
            skip_ws(c);
        }
        if ((err = scan_value(c, &val))) {
            oomi_node_free(key);
            return err;
        }
        if ((err = oomi_node_add(n, key, val)))
            return err;
        key = val = NULL;
    }
    if (c->pos >= c->len)
        return jfail(c, "unterminated object or array");
    n->close = c->pos++;
    return OOM_OK;
}

static int scan_value(struct jctx *c, oomi_node **out)
{
    oomi_node *n = oomi_calloc(1, sizeof(*n));
    int err;
    char ch = c->pos < c->len ? c->buf[c->pos] : '\0';

    if (!n)
        return oomi_nomem();
    n->start = c->pos;
    n->flow = true;
    if (++c->depth > 1000) {
        err = jfail(c, "nested too deeply");
    } else if (ch == '{' || ch == '[') {
        n->kind = ch == '{' ? OOMI_N_MAP : OOMI_N_SEQ;
        err = scan_members(c, n);
    } else if (ch == '"') {
        n->quote = OOMI_Q_DOUBLE;
        n->val.type = OOMI_AV_STRING;
        err = scan_string(c, &n->val.s);
    } else {
        err = scan_literal(c, n);
    }
    c->depth--;
    n->end = c->pos;
    if (err) {
        oomi_node_free(n);
        return err;
    }
    *out = n;
    return OOM_OK;
}

static int validate(const char *buf, size_t len, const char *file)
{
    struct json_tokener *tok = json_tokener_new();
    struct json_object *obj;
    enum json_tokener_error jerr;
    struct jctx c = {buf, len, 0, file, 0};

    if (!tok)
        return oomi_nomem();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    obj = json_tokener_parse_ex(tok, buf, (int)len);
    jerr = json_tokener_get_error(tok);
    c.pos = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (obj)
        json_object_put(obj);
    if (jerr == json_tokener_continue)
        return jfail(&c, "unexpected end of file");
    if (jerr != json_tokener_success)
        return jfail(&c, json_tokener_error_desc(jerr));
    skip_ws(&c);
    if (c.pos < len)
        return jfail(&c, "text after the JSON document");
    return OOM_OK;
}

int oomi_json_parse(oomi_node **root, const char *buf, size_t len, const char *file)
{
    struct jctx c = {buf, len, 0, file, 0};
    int err;

    *root = NULL;
    if (len > (size_t)INT32_MAX)
        return oomi_fail(OOM_EREFUSED, "'%s' is too large", file);
    if ((err = validate(buf, len, file)))
        return err;
    if (len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3))
        c.pos = 3;
    skip_ws(&c);
    if ((err = scan_value(&c, root)))
        return err;
    return OOM_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

char *oomi_json_render(const oomi_aval *v)
{
    oomi_sb sb = OOMI_SB_INIT;

    oomi_aval_json(&sb, v);
    if (oomi_sb_ok(&sb)) {
        oomi_sb_free(&sb);
        return NULL;
    }
    return oomi_sb_steal(&sb);
}

static void put_key(oomi_sb *sb, const char *key)
{
    oomi_aval v = {.type = OOMI_AV_STRING, .s = (char *)key};
    oomi_aval_json(sb, &v);
}

/* the leading whitespace of the line holding `off` */
static size_t line_indent(const char *buf, size_t off, size_t *start)
{
    size_t s = off, e;
    while (s > 0 && buf[s - 1] != '\n')
        s--;
    for (e = s; buf[e] == ' ' || buf[e] == '\t'; e++)
        ;
    *start = s;
    return e - s;
}

/* "key": {"key2": v} spread over lines as the object's own members are */
static void put_chain(oomi_sb *sb, const char *ind, size_t ind_len, const char *unit,
                      size_t unit_len, const char *kv, size_t kv_len, bool multiline,
                      const oomi_pathseg *segs, size_t n, size_t depth, const char *v_text)
{
    size_t d;

    put_key(sb, segs[0].key);
    oomi_sb_add(sb, kv, kv_len);
    if (n == 1) {
        oomi_sb_puts(sb, v_text);
        return;
    }
    oomi_sb_putc(sb, '{');
    if (multiline) {
        oomi_sb_putc(sb, '\n');
        oomi_sb_add(sb, ind, ind_len);
        for (d = 0; d <= depth; d++)
            oomi_sb_add(sb, unit, unit_len);
    }
    put_chain(sb, ind, ind_len, unit, unit_len, kv, kv_len, multiline, segs + 1, n - 1, depth + 1,
              v_text);
    if (multiline) {
        oomi_sb_putc(sb, '\n');
        oomi_sb_add(sb, ind, ind_len);
        for (d = 0; d < depth; d++)
            oomi_sb_add(sb, unit, unit_len);
    }
    oomi_sb_putc(sb, '}');
}

int oomi_json_create(char **text, size_t *pos, const oomi_node *map, const char *buf, size_t len,
                     const oomi_pathseg *segs, size_t n, const char *v_text)
{
    oomi_sb sb = OOMI_SB_INIT;
    const char *ws = "", *kv = ": ", *unit = "  ", *ind = "";
    size_t ws_len = 0, kv_len = 2, unit_len = 2, ind_len = 0, base_len, ls, i;
    bool multiline = false;
    int err;

    (void)len;
    if (!map->n) {
        *pos = map->close;
    } else {
        *pos = map->vals[map->n - 1]->end;
        ws = buf + map->start + 1;
        ws_len = map->keys[0]->start - map->start - 1;
        kv = buf + map->keys[0]->end;
        kv_len = map->vals[0]->start - map->keys[0]->end;
        oomi_sb_putc(&sb, ',');
        oomi_sb_add(&sb, ws, ws_len);
        for (i = 0; i < ws_len; i++)
            if (ws[i] == '\n') {
                multiline = true;
                ind = ws + i + 1;
                ind_len = ws_len - i - 1;
            }
        base_len = line_indent(buf, map->start, &ls);
        if (multiline && ind_len > base_len && !memcmp(ind, buf + ls, base_len)) {
            unit = ind + base_len;
            unit_len = ind_len - base_len;
        }
    }
    put_chain(&sb, ind, ind_len, unit, unit_len, kv, kv_len, multiline, segs, n, 0, v_text);
    if ((err = oomi_sb_ok(&sb))) {
        oomi_sb_free(&sb);
        return err;
    }
    *text = oomi_sb_steal(&sb);
    return OOM_OK;
}
