/* apply_json.c - JSON for `apply`: one pass over the text checks it (RFC 8259 syntax) and builds
 * the tree with byte offsets, only as far as the edits need it (see oomi_node), so that memory
 * stays small and time linear however long the file is. */
#include "apply/apply.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct jctx {
    const char *buf;
    size_t len, pos;
    const char *file;
    int depth;
    const oomi_want *want;
    size_t nwant;
    oomi_sb key; /* the decoded text of the key being read (reused) */
};

static int jfail(struct jctx *c, const char *what)
{
    size_t line, col;
    oomi_line_col(c->buf, c->pos, &line, &col);
    return oomi_fail(OOM_EPARSE, "'%s' line %zu column %zu: %s", c->file, line, col, what);
}

static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

static void skip_ws(struct jctx *c)
{
    while (c->pos < c->len && is_ws(c->buf[c->pos]))
        c->pos++;
}

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = (char)(ch | 0x20);
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* the 4 hex digits after "\u" at p (c->pos on the 'u'), or -1 */
static long hex4(const struct jctx *c, size_t p)
{
    long v = 0;
    int i, d;

    if (p + 4 >= c->len)
        return -1;
    for (i = 1; i <= 4; i++) {
        if ((d = hex_digit(c->buf[p + (size_t)i])) < 0)
            return -1;
        v = v * 16 + d;
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

/* one escape after the backslash at c->pos - 1; decoded into sb when sb is not NULL */
static int scan_escape(struct jctx *c, oomi_sb *sb)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *e = c->pos < c->len && c->buf[c->pos] ? strchr(from, c->buf[c->pos]) : NULL;
    long cp, lo;

    if (e) {
        if (sb)
            oomi_sb_putc(sb, to[e - from]);
        c->pos++;
        return OOM_OK;
    }
    if (c->pos >= c->len || c->buf[c->pos] != 'u' || (cp = hex4(c, c->pos)) < 0)
        return jfail(c, "invalid string sequence");
    c->pos += 5;
    if (cp >= 0xD800 && cp < 0xDC00 && c->pos + 1 < c->len && c->buf[c->pos] == '\\' &&
        c->buf[c->pos + 1] == 'u' && (lo = hex4(c, c->pos + 1)) >= 0xDC00 && lo < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        c->pos += 6;
    }
    if (sb)
        put_utf8(sb, (unsigned)cp);
    return OOM_OK;
}

/* the string at c->pos (its opening quote), checked; decoded into sb when sb is not NULL */
static int scan_string(struct jctx *c, oomi_sb *sb)
{
    const char *b = c->buf;
    size_t run;
    int err;

    for (c->pos++;;) {
        run = c->pos;
        while (c->pos < c->len && b[c->pos] != '"' && b[c->pos] != '\\' && b[c->pos])
            c->pos++;
        if (sb)
            oomi_sb_add(sb, b + run, c->pos - run);
        if (c->pos >= c->len || !b[c->pos])
            return jfail(c, "unterminated string");
        if (b[c->pos++] == '"')
            break;
        if ((err = scan_escape(c, sb)))
            return err;
    }
    return sb ? oomi_sb_ok(sb) : OOM_OK;
}

static size_t digits(struct jctx *c)
{
    size_t s = c->pos;
    while (c->pos < c->len && c->buf[c->pos] >= '0' && c->buf[c->pos] <= '9')
        c->pos++;
    return c->pos - s;
}

/* -?digits(.digits*)?([eE][+-]?digits)?: an int when it has no '.' or exponent and fits */
static int scan_number(struct jctx *c, oomi_node *n, bool value)
{
    size_t s = c->pos;
    char small[64], *text = small, *end;
    int err = OOM_OK;

    if (c->buf[c->pos] == '-')
        c->pos++;
    if (!digits(c))
        return jfail(c, "number expected");
    if (c->pos < c->len && c->buf[c->pos] == '.') {
        c->pos++;
        digits(c);
    }
    if (c->pos < c->len && (c->buf[c->pos] == 'e' || c->buf[c->pos] == 'E')) {
        c->pos++;
        if (c->pos < c->len && (c->buf[c->pos] == '+' || c->buf[c->pos] == '-'))
            c->pos++;
        if (!digits(c))
            return jfail(c, "number expected");
    }
    if (!value)
        return OOM_OK;
    if (c->pos - s >= sizeof(small) && !(text = oomi_strndup(c->buf + s, c->pos - s)))
        return oomi_nomem();
    if (text == small) {
        memcpy(small, c->buf + s, c->pos - s);
        small[c->pos - s] = '\0';
    }
    errno = 0;
    n->val.type = OOMI_AV_INT;
    n->val.i = strtoll(text, &end, 10);
    if (*end || errno || strpbrk(text, ".eE")) {
        n->val.type = OOMI_AV_FLOAT;
        n->val.d = oomi_strtod(text, &end);
        if (*end)
            err = jfail(c, "bad number");
    }
    if (text != small)
        oomi_free(text);
    return err;
}

static int scan_word(struct jctx *c, oomi_node *n)
{
    static const char *const words[] = {"true", "false", "null"};
    size_t i, wl;

    for (i = 0; i < 3; i++) {
        wl = strlen(words[i]);
        if (c->len - c->pos >= wl && !memcmp(c->buf + c->pos, words[i], wl)) {
            c->pos += wl;
            n->val.type = i < 2 ? OOMI_AV_BOOL : OOMI_AV_NULL;
            n->val.b = i == 0;
            return OOM_OK;
        }
    }
    return jfail(c, "unexpected character");
}

static int scan_value(struct jctx *c, oomi_node *n, const size_t *act, size_t nact, size_t depth,
                      bool value);

/* a key: decoded into c->key, kept as a node (*key) when a path wants it or it is "<<" */
static int scan_key(struct jctx *c, oomi_node *key)
{
    int err;

    if (c->pos >= c->len || c->buf[c->pos] != '"')
        return jfail(c, "quoted object property name expected");
    key->kind = OOMI_N_SCALAR;
    key->quote = OOMI_Q_DOUBLE;
    key->flow = true;
    key->start = c->pos;
    c->key.len = 0;
    if ((err = scan_string(c, &c->key)))
        return err;
    key->end = c->pos;
    oomi_sb_putc(&c->key, '\0');
    if ((err = oomi_sb_ok(&c->key)))
        return err;
    key->val.type = OOMI_AV_STRING;
    key->val.s = c->key.buf; /* borrowed until the key is kept */
    skip_ws(c);
    if (c->pos >= c->len || c->buf[c->pos] != ':')
        return jfail(c, "object property name separator ':' expected");
    c->pos++;
    skip_ws(c);
    return OOM_OK;
}

static int keep(oomi_node *n, oomi_node *key, oomi_node *val, bool is_obj)
{
    oomi_node *kp = NULL, *vp;

    if (is_obj && !(kp = oomi_node_move(key))) {
        oomi_node_clear(val);
        return oomi_nomem();
    }
    if (!(vp = oomi_node_move(val))) {
        oomi_node_free(kp);
        return oomi_nomem();
    }
    return oomi_node_add(n, kp, vp);
}

static int scan_members(struct jctx *c, oomi_node *n, const size_t *act, size_t nact, size_t depth)
{
    bool is_obj = n->kind == OOMI_N_MAP, kept;
    char close = is_obj ? '}' : ']';
    oomi_node key, val;
    size_t *sub = nact ? oomi_reallocarray(NULL, nact, sizeof(*sub)) : NULL, nsub;
    int err = OOM_OK;

    if (nact && !sub)
        return oomi_nomem();
    for (c->pos++, skip_ws(c); !err && c->pos < c->len && c->buf[c->pos] != close; skip_ws(c)) {
        if (n->count && c->buf[c->pos++] != ',') {
            c->pos--;
            err = jfail(c, is_obj ? "object value separator ',' expected"
                                  : "array value separator ',' expected");
            break;
        }
        if (n->count)
            skip_ws(c);
        memset(&key, 0, sizeof(key));
        if (is_obj && (err = scan_key(c, &key)))
            break;
        nsub = nact ? oomi_want_child(c->want, act, nact, depth, is_obj ? &key : NULL, c->buf,
                                      n->count, sub)
                    : 0;
        kept = nsub || (nact && is_obj && oomi_key_is(&key, c->buf, "<<"));
        /* the value's own keys reuse c->key: a kept key gets its own copy first */
        if (is_obj && kept && !(key.val.s = oomi_strdup(key.val.s))) {
            err = oomi_nomem();
            break;
        }
        if (!kept)
            key.val.s = NULL;
        if ((err = scan_value(c, &val, sub, nsub, depth + 1, nsub > 0))) {
            oomi_node_clear(&key);
            break;
        }
        oomi_node_measure(n, is_obj ? &key : NULL, &val);
        val.index = n->count - 1;
        if (kept)
            err = keep(n, &key, &val, is_obj);
        else
            oomi_node_clear(&val);
    }
    oomi_free(sub);
    if (err)
        return err;
    if (c->pos >= c->len)
        return jfail(c, "unexpected end of file");
    n->close = c->pos++;
    return OOM_OK;
}

/* one value at c->pos into *n (which holds nothing); on failure *n holds nothing */
static int scan_value(struct jctx *c, oomi_node *n, const size_t *act, size_t nact, size_t depth,
                      bool value)
{
    int err;
    char ch = c->pos < c->len ? c->buf[c->pos] : '\0';

    memset(n, 0, sizeof(*n));
    n->start = c->pos;
    n->flow = true;
    if (c->pos >= c->len) {
        err = jfail(c, "unexpected end of file");
    } else if (ch == '{' || ch == '[') {
        if (++c->depth > 1000) {
            err = jfail(c, "nested too deeply");
        } else {
            n->kind = ch == '{' ? OOMI_N_MAP : OOMI_N_SEQ;
            err = scan_members(c, n, act, nact, depth);
        }
        c->depth--;
    } else if (ch == '"') {
        n->quote = OOMI_Q_DOUBLE;
        if (value) {
            oomi_sb sb = OOMI_SB_INIT;
            n->val.type = OOMI_AV_STRING;
            if (!(err = scan_string(c, &sb)))
                n->val.s = oomi_sb_steal(&sb);
            oomi_sb_free(&sb);
            if (!err && !n->val.s)
                err = oomi_nomem();
        } else {
            err = scan_string(c, NULL);
        }
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        err = scan_number(c, n, value);
    } else {
        err = scan_word(c, n);
    }
    n->end = c->pos;
    if (err)
        oomi_node_clear(n);
    return err;
}

int oomi_json_parse(oomi_node **root, const char *buf, size_t len, const char *file,
                    const oomi_want *want, size_t nwant, size_t document)
{
    struct jctx c = {buf, len, 0, file, 0, want, nwant, OOMI_SB_INIT};
    oomi_node top;
    size_t i, *all;
    int err;

    *root = NULL;
    if (document > 1)
        return oomi_fail(OOM_EREFUSED, "'%s' is JSON: it holds one document, not %zu", file,
                         document);
    if (!(all = oomi_reallocarray(NULL, nwant ? nwant : 1, sizeof(*all))))
        return oomi_nomem();
    for (i = 0; i < nwant; i++)
        all[i] = i;
    memset(&top, 0, sizeof(top));
    c.pos = oomi_bom_len(buf, len); /* a byte order mark stays where it is */
    skip_ws(&c);
    err = scan_value(&c, &top, all, nwant, 0, true);
    skip_ws(&c);
    if (!err && c.pos < len)
        err = jfail(&c, "text after the JSON document");
    if (!err && !(*root = oomi_node_move(&top)))
        err = oomi_nomem();
    oomi_node_clear(&top);
    oomi_sb_free(&c.key);
    oomi_free(all);
    return err;
}

/* ---- writing ------------------------------------------------------------------------------ */

char *oomi_json_render(const oomi_aval *v)
{
    oomi_sb sb = OOMI_SB_INIT;
    char *text;

    oomi_aval_json(&sb, v);
    return oomi_sb_finish(&sb, &text) ? NULL : text;
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

    (void)len;
    if (!map->count) {
        *pos = map->close;
    } else {
        *pos = map->last_val_end;
        ws = buf + map->start + 1;
        ws_len = map->first_key_start - map->start - 1;
        kv = buf + map->first_key_end;
        kv_len = map->first_val_start - map->first_key_end;
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
    return oomi_sb_finish(&sb, text);
}

bool oomi_json_looks(const char *name, const char *text)
{
    size_t n = strlen(name);

    if (n >= 5 && !oomi_strcasecmp(name + n - 5, ".json"))
        return true;
    if ((n >= 5 && !oomi_strcasecmp(name + n - 5, ".yaml")) ||
        (n >= 4 && !oomi_strcasecmp(name + n - 4, ".yml")))
        return false;
    text += strspn(text, " \t\r\n");
    return *text == '{' || *text == '[';
}
