/* apply_value.c - typed scalar values, key paths and the config tree shared by YAML and JSON. */
#include "apply/apply.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void oomi_aval_clear(oomi_aval *v)
{
    if (!v)
        return;
    oomi_free(v->s);
    memset(v, 0, sizeof(*v));
}

int oomi_aval_copy(oomi_aval *dst, const oomi_aval *src)
{
    *dst = *src;
    dst->s = NULL;
    if (src->type == OOMI_AV_STRING && !(dst->s = oomi_strdup(src->s ? src->s : "")))
        return oomi_nomem();
    return OOM_OK;
}

bool oomi_aval_equal(const oomi_aval *a, const oomi_aval *b)
{
    bool an = a->type == OOMI_AV_INT || a->type == OOMI_AV_FLOAT;
    bool bn = b->type == OOMI_AV_INT || b->type == OOMI_AV_FLOAT;

    if (an && bn) {
        if (a->type == OOMI_AV_INT && b->type == OOMI_AV_INT)
            return a->i == b->i;
        return (a->type == OOMI_AV_INT ? (double)a->i : a->d) ==
               (b->type == OOMI_AV_INT ? (double)b->i : b->d);
    }
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case OOMI_AV_BOOL:
        return a->b == b->b;
    case OOMI_AV_STRING:
        return !strcmp(a->s ? a->s : "", b->s ? b->s : "");
    default:
        return true;
    }
}

const char *oomi_avtype_name(oomi_avtype t)
{
    static const char *const names[] = {"null", "bool", "int", "float", "string"};
    return t <= OOMI_AV_STRING ? names[t] : "?";
}

static bool word_in(const char *text, const char *const *words)
{
    for (; *words; words++)
        if (!strcmp(text, *words))
            return true;
    return false;
}

/* [-+]?digits with '_' allowed between digits, or 0x / 0o forms */
static bool parse_int(const char *t, long long *out)
{
    char clean[64];
    size_t n = 0;
    int base = 10;
    const char *p = t;
    char *end;

    if (*p == '-' || *p == '+')
        clean[n++] = *p++;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'o')) {
        base = p[1] == 'x' ? 16 : 8;
        p += 2;
    }
    if (!*p || *p == '_')
        return false;
    for (; *p && n < sizeof(clean) - 1; p++) {
        if (*p == '_')
            continue;
        if (!(base == 16 ? isxdigit((unsigned char)*p) : (*p >= '0' && *p < '0' + base)))
            return false;
        clean[n++] = *p;
    }
    if (*p)
        return false;
    clean[n] = '\0';
    errno = 0;
    *out = strtoll(clean, &end, base);
    return !errno && *end == '\0';
}

/* [-+]?(.digits|digits[.digits])([eE][-+]?digits)?, .inf, .nan (OmegaConf accepts 5e8) */
static bool parse_float(const char *t, double *out)
{
    static const char *const inf[] = {".inf", ".Inf", ".INF", NULL};
    static const char *const nan_[] = {".nan", ".NaN", ".NAN", NULL};
    const char *p = t;
    bool digits = false;
    char *end;

    if (*p == '-' || *p == '+')
        p++;
    if (word_in(p, inf) || word_in(t, nan_)) {
        *out = word_in(t, nan_) ? NAN : (*t == '-' ? -INFINITY : INFINITY);
        return true;
    }
    for (; isdigit((unsigned char)*p) || (digits && *p == '_'); p++)
        digits = true;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++)
            digits = true;
    if (!digits)
        return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        if (!isdigit((unsigned char)*p))
            return false;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p || strchr(t, '_'))
        return false;
    *out = oomi_strtod(t, &end);
    return *end == '\0';
}

int oomi_aval_from_plain(oomi_aval *out, const char *text)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", "yes", "Yes",
                                        "YES",  "on",   "On",   "ON",  NULL};
    static const char *const falses[] = {"false", "False", "FALSE", "no",  "No",
                                         "NO",    "off",   "Off",   "OFF", NULL};

    memset(out, 0, sizeof(*out));
    if (word_in(text, nulls)) {
        out->type = OOMI_AV_NULL;
    } else if (word_in(text, trues) || word_in(text, falses)) {
        out->type = OOMI_AV_BOOL;
        out->b = word_in(text, trues);
    } else if (parse_int(text, &out->i)) {
        out->type = OOMI_AV_INT;
    } else if (parse_float(text, &out->d)) {
        out->type = OOMI_AV_FLOAT;
    } else {
        out->type = OOMI_AV_STRING;
        if (!(out->s = oomi_strdup(text)))
            return oomi_nomem();
    }
    return OOM_OK;
}

void oomi_format_float(char *buf, size_t size, double d)
{
    int prec;

    if (isnan(d)) {
        oomi_snprintf(buf, size, ".nan");
        return;
    }
    if (isinf(d)) {
        oomi_snprintf(buf, size, d < 0 ? "-.inf" : ".inf");
        return;
    }
    for (prec = 1; prec < 17; prec++) {
        oomi_snprintf(buf, size, "%.*g", prec, d);
        if (oomi_strtod(buf, NULL) == d)
            break;
    }
    if (prec == 17)
        oomi_snprintf(buf, size, "%.17g", d);
    if (!strpbrk(buf, ".en") && strlen(buf) + 3 <= size)
        strcat(buf, ".0");
}

static void json_string(oomi_sb *sb, const char *s)
{
    oomi_sb_putc(sb, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            oomi_sb_printf(sb, "\\%c", c);
        else if (c == '\n')
            oomi_sb_puts(sb, "\\n");
        else if (c == '\t')
            oomi_sb_puts(sb, "\\t");
        else if (c < 0x20)
            oomi_sb_printf(sb, "\\u%04x", c);
        else
            oomi_sb_putc(sb, (char)c);
    }
    oomi_sb_putc(sb, '"');
}

void oomi_aval_json(oomi_sb *sb, const oomi_aval *v)
{
    char num[40];

    switch (v->type) {
    case OOMI_AV_NULL:
        oomi_sb_puts(sb, "null");
        break;
    case OOMI_AV_BOOL:
        oomi_sb_puts(sb, v->b ? "true" : "false");
        break;
    case OOMI_AV_INT:
        oomi_sb_printf(sb, "%lld", v->i);
        break;
    case OOMI_AV_FLOAT:
        if (!isfinite(v->d)) {
            oomi_sb_puts(sb, "null");
            break;
        }
        oomi_format_float(num, sizeof(num), v->d);
        oomi_sb_puts(sb, num);
        break;
    case OOMI_AV_STRING:
        json_string(sb, v->s ? v->s : "");
        break;
    }
}

/* ---- the tree ----------------------------------------------------------------------------- */

void oomi_node_clear(oomi_node *node)
{
    size_t i;

    if (!node)
        return;
    if (!node->vals && !node->keys && !node->val.s) /* most nodes: measured, not built */
        return;
    for (i = 0; i < node->n; i++) {
        if (node->keys)
            oomi_node_free(node->keys[i]);
        oomi_node_free(node->vals[i]);
    }
    oomi_free(node->keys);
    oomi_free(node->vals);
    oomi_aval_clear(&node->val);
    memset(node, 0, sizeof(*node));
}

void oomi_node_free(oomi_node *node)
{
    oomi_node_clear(node);
    oomi_free(node);
}

oomi_node *oomi_node_move(oomi_node *node)
{
    oomi_node *n = oomi_malloc(sizeof(*n));

    if (!n) {
        oomi_node_clear(node);
        return NULL;
    }
    *n = *node;
    memset(node, 0, sizeof(*node));
    return n;
}

void oomi_node_measure(oomi_node *n, const oomi_node *key, const oomi_node *val)
{
    if (!n->count) {
        n->first_key_start = key ? key->start : val->start;
        n->first_key_end = key ? key->end : val->start;
        n->first_val_start = val->start;
    }
    n->last_key_start = key ? key->start : val->start;
    n->prev_val_end = n->last_val_end;
    n->last_val_end = val->end;
    n->count++;
}

int oomi_node_add(oomi_node *parent, oomi_node *key, oomi_node *val)
{
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? parent->cap * 2 : 8;
        oomi_node **v = oomi_reallocarray(parent->vals, cap, sizeof(*v));
        oomi_node **k = v ? oomi_reallocarray(parent->keys, cap, sizeof(*k)) : NULL;
        if (v)
            parent->vals = v;
        if (!k) {
            oomi_node_free(key);
            oomi_node_free(val);
            return oomi_nomem();
        }
        parent->keys = k;
        parent->cap = cap;
    }
    parent->keys[parent->n] = key;
    parent->vals[parent->n++] = val;
    return OOM_OK;
}

const oomi_node *oomi_node_item(const oomi_node *seq, size_t index)
{
    size_t i;

    for (i = 0; i < seq->n; i++)
        if (seq->vals[i]->index == index)
            return seq->vals[i];
    return NULL;
}

bool oomi_key_is(const oomi_node *k, const char *buf, const char *key)
{
    size_t n = strlen(key);

    if (!k || k->kind != OOMI_N_SCALAR)
        return false;
    if (k->val.type == OOMI_AV_STRING)
        return !strcmp(k->val.s, key);
    return k->end - k->start == n && !memcmp(buf + k->start, key, n);
}

size_t oomi_want_child(const oomi_want *want, const size_t *act, size_t nact, size_t depth,
                       const oomi_node *key, const char *buf, size_t index, size_t *out)
{
    size_t i, n = 0;

    for (i = 0; i < nact; i++) {
        const oomi_want *w = &want[act[i]];
        if (w->n <= depth)
            continue;
        if (key ? w->segs[depth].key && oomi_key_is(key, buf, w->segs[depth].key)
                : !w->segs[depth].key && w->segs[depth].index == index)
            out[n++] = act[i];
    }
    return n;
}

/* ---- key paths ---------------------------------------------------------------------------- */

void oomi_path_free(oomi_pathseg *segs, size_t count)
{
    size_t i;

    for (i = 0; segs && i < count; i++)
        oomi_free(segs[i].key);
    oomi_free(segs);
}

static int path_bad(const char *path, const char *why)
{
    return oomi_fail(OOM_EINVAL, "key '%s': %s (write keys as a.b.c, list items as a.b[0])", path,
                     why);
}

static int path_index(oomi_pathseg *seg, const char **pp, const char *path)
{
    const char *p = *pp + 1;
    size_t v = 0;

    if (!isdigit((unsigned char)*p))
        return path_bad(path, "an index must be a number");
    for (; isdigit((unsigned char)*p); p++) {
        if (v > (SIZE_MAX - 9) / 10)
            return path_bad(path, "index too large");
        v = v * 10 + (size_t)(*p - '0');
    }
    if (*p != ']')
        return path_bad(path, "missing ']'");
    seg->key = NULL;
    seg->index = v;
    *pp = p + 1;
    return OOM_OK;
}

int oomi_path_parse(oomi_pathseg **out, size_t *count, const char *path)
{
    oomi_pathseg *segs = NULL, *grown;
    size_t n = 0;
    const char *p = path;
    int err = OOM_OK;

    while (!err && *p) {
        size_t len;
        if (!(grown = oomi_reallocarray(segs, n + 1, sizeof(*segs)))) {
            err = oomi_nomem();
            break;
        }
        segs = grown;
        segs[n].key = NULL;
        if (*p == '[') {
            err = path_index(&segs[n++], &p, path);
        } else {
            len = strcspn(p, ".[]");
            if (!len) {
                err = path_bad(path, "empty key");
                break;
            }
            segs[n].key = oomi_strndup(p, len);
            if (!segs[n++].key)
                err = oomi_nomem();
            p += len;
        }
        if (!err && *p == '.' && (!*++p || *p == '.' || *p == '['))
            err = path_bad(path, "empty key");
        else if (!err && *p && *p != '[' && p[-1] != '.')
            err = path_bad(path, "unexpected character after ']'");
    }
    if (!err && !n)
        err = path_bad(path, "empty key");
    if (err) {
        oomi_path_free(segs, n);
        return err;
    }
    *out = segs;
    *count = n;
    return OOM_OK;
}
