/* apply_edit.c - one assignment in one text: find the key's byte span, check the edit is safe
 * and of the same type, and splice the new value's text in (or create the key). */
#include "apply/apply.h"

#include <stdio.h>
#include <string.h>

enum walk_state { FOUND, MISSING, ABSENT };

struct walk {
    const oomi_node *node; /* FOUND: the value; MISSING/ABSENT: the deepest container */
    const oomi_node *key;  /* FOUND in a map: its key node */
    size_t matched;        /* segments matched */
    const char *why;       /* ABSENT: why it cannot be created */
};

struct target {
    const char *buf, *file, *key;
    size_t len;
    bool json;
};

static bool key_is(const oomi_node *k, const char *buf, const char *key)
{
    size_t n = strlen(key);

    if (!k || k->kind != OOMI_N_SCALAR)
        return false;
    if (k->val.type == OOMI_AV_STRING)
        return !strcmp(k->val.s, key);
    return k->end - k->start == n && !memcmp(buf + k->start, key, n);
}

static int refuse(const struct target *t, const char *why)
{
    return oomi_fail(OOM_EREFUSED, "'%s': key '%s' %s; the file is unchanged", t->file, t->key,
                     why);
}

/* the child of map for key; MISSING when there is none */
static int map_child(const struct target *t, const oomi_node *map, const char *k, size_t *at,
                     bool *found)
{
    size_t i;

    *found = false;
    for (i = 0; i < map->n; i++) {
        if (!key_is(map->keys[i], t->buf, k))
            continue;
        if (*found)
            return refuse(t, "is there more than once (duplicate key)");
        *found = true;
        *at = i;
    }
    if (!*found)
        for (i = 0; i < map->n; i++)
            if (key_is(map->keys[i], t->buf, "<<"))
                return refuse(t, "is not there, and its map has a merge key (<<) it may come "
                                 "from; edit the merged map");
    return OOM_OK;
}

static int walk(const struct target *t, const oomi_node *root, const oomi_pathseg *segs, size_t n,
                struct walk *w, enum walk_state *st)
{
    const oomi_node *node = root;
    size_t i, at = 0;
    bool found;
    int err;

    memset(w, 0, sizeof(*w));
    for (i = 0; i < n; i++) {
        w->node = node;
        w->matched = i;
        if (node->kind == OOMI_N_ALIAS || node->anchored)
            return refuse(t, "goes through an alias or anchor (&/*), shared with other places");
        if (segs[i].key && node->kind == OOMI_N_MAP) {
            if ((err = map_child(t, node, segs[i].key, &at, &found)))
                return err;
        } else if (!segs[i].key && node->kind == OOMI_N_SEQ) {
            found = segs[i].index < node->n;
            at = segs[i].index;
        } else {
            w->why = segs[i].key ? "is under something that is not a map"
                                 : "is under something that is not a list";
            *st = ABSENT;
            return OOM_OK;
        }
        if (!found) {
            w->why = segs[i].key ? NULL : "is past the end of its list";
            *st = segs[i].key ? MISSING : ABSENT;
            return OOM_OK;
        }
        w->key = segs[i].key ? node->keys[at] : NULL;
        node = node->vals[at];
    }
    w->node = node;
    w->matched = n;
    *st = FOUND;
    return OOM_OK;
}

static int splice(char **text, size_t *len, size_t start, size_t end, const char *with)
{
    size_t wl = strlen(with), nl = *len - (end - start) + wl;
    char *out = oomi_malloc(nl + 1);

    if (!out)
        return oomi_nomem();
    memcpy(out, *text, start);
    memcpy(out + start, with, wl);
    memcpy(out + start + wl, *text + end, *len - end);
    out[nl] = '\0';
    oomi_free(*text);
    *text = out;
    *len = nl;
    return OOM_OK;
}

static char *render(const struct target *t, const oomi_node *old, const oomi_aval *v)
{
    return t->json ? oomi_json_render(v) : oomi_yaml_render(old, t->buf, v);
}

static int create(const struct target *t, char **text, size_t *len, const struct walk *w,
                  const oomi_pathseg *segs, size_t n, const oomi_aval *v)
{
    char *vt = render(t, NULL, v), *ins = NULL;
    size_t pos = 0, i;
    int err;

    if (!vt)
        return oomi_nomem();
    for (i = w->matched; i < n; i++)
        if (!segs[i].key) {
            oomi_free(vt);
            return refuse(t, "is not there, and list items are never created");
        }
    if (t->json)
        err = oomi_json_create(&ins, &pos, w->node, t->buf, t->len, segs + w->matched,
                               n - w->matched, vt);
    else
        err = oomi_yaml_create(&ins, &pos, w->node, t->buf, t->len, segs + w->matched,
                               n - w->matched, vt);
    if (!err)
        err = splice(text, len, pos, pos, ins);
    oomi_free(vt);
    oomi_free(ins);
    return err;
}

static bool type_ok(oomi_avtype old, oomi_avtype nw)
{
    return old == nw || old == OOMI_AV_NULL || (old == OOMI_AV_FLOAT && nw == OOMI_AV_INT);
}

/* refusals that hold for any value at the target */
static int check_target(const struct target *t, const oomi_node *node)
{
    if (node->kind == OOMI_N_ALIAS)
        return refuse(t, "is an alias (*name); edit the anchored value instead");
    if (node->kind != OOMI_N_SCALAR)
        return refuse(t, node->kind == OOMI_N_MAP ? "is a map, not a single value"
                                                  : "is a list, not a single value");
    if (node->quote == OOMI_Q_BLOCK)
        return refuse(t, "is a block scalar (| or >); edit it by hand");
    if (node->anchored)
        return refuse(t, "has an anchor (&name): aliases elsewhere would change too");
    if (node->tagged)
        return refuse(t, "has an explicit tag (!!type)");
    if (!t->json && memchr(t->buf + node->start, '\n', node->end - node->start))
        return refuse(t, "is a scalar spread over several lines");
    return OOM_OK;
}

static int set_reason(oomi_edit_result *res, const char *reason)
{
    res->action = "skipped";
    res->reason = oomi_strdup(reason);
    return res->reason ? OOM_OK : oomi_nomem();
}

/* replaces the found scalar */
static int replace(const struct target *t, char **text, size_t *len, const struct walk *w,
                   const oomi_aval *v, bool optional, unsigned flags, oomi_edit_result *res)
{
    const oomi_node *node = w->node;
    size_t start = node->start, end = node->end;
    char *vt, *with;
    int err;

    if ((err = oomi_aval_copy(&res->old, &node->val)))
        return err;
    res->has_old = true;
    if (optional && node->val.type == OOMI_AV_STRING && !strcmp(node->val.s, "auto"))
        return set_reason(res, "the value is 'auto' (left to the framework)");
    if (!type_ok(node->val.type, v->type) && !(flags & OOM_APPLY_FORCE_TYPE)) {
        char why[160];
        oomi_snprintf(why, sizeof(why),
                      "holds a %s value; refusing to write a %s value (--force-type allows it)",
                      oomi_avtype_name(node->val.type), oomi_avtype_name(v->type));
        return refuse(t, why);
    }
    res->action = "unchanged";
    if (oomi_aval_equal(&node->val, v))
        return OOM_OK;
    res->action = "set";
    if (!(vt = render(t, node, v)))
        return oomi_nomem();
    with = vt;
    if (start == end && w->key) { /* "key:" or "{key}" with no value: write after the key */
        size_t p = w->key->end + strspn(t->buf + w->key->end, " \t");
        bool colon = p < t->len && t->buf[p] == ':';
        start = end = colon ? p + 1 : w->key->end;
        res->inserted = true;
        if (!(with = oomi_asprintf(colon ? " %s" : ": %s", vt)))
            err = oomi_nomem();
    }
    if (!err)
        err = splice(text, len, start, end, with);
    if (with != vt)
        oomi_free(with);
    oomi_free(vt);
    return err;
}

static int parse(const struct target *t, oomi_node **root)
{
    return t->json ? oomi_json_parse(root, t->buf, t->len, t->file)
                   : oomi_yaml_parse(root, t->buf, t->len, t->file);
}

int oomi_edit_text(char **text, size_t *len, bool json, const char *file, const char *key,
                   const oomi_aval *v, bool optional, unsigned flags, oomi_edit_result *res)
{
    struct target t = {*text, file, key, *len, json};
    oomi_pathseg *segs = NULL;
    oomi_node *root = NULL;
    struct walk w;
    enum walk_state st = ABSENT;
    size_t n = 0;
    int err;

    memset(res, 0, sizeof(*res));
    if ((err = oomi_path_parse(&segs, &n, key)) || (err = parse(&t, &root)) ||
        (err = walk(&t, root, segs, n, &w, &st)))
        goto done;
    if (st == FOUND && !optional)
        err = check_target(&t, w.node);
    else if (st == FOUND && w.node->kind != OOMI_N_SCALAR)
        err = set_reason(res, w.node->kind == OOMI_N_MAP ? "the key holds a map, not a value"
                                                         : "the key holds a list, not a value");
    else if (st == FOUND)
        err = check_target(&t, w.node);
    if (err || (st == FOUND && res->action))
        goto done;
    if (st == FOUND) {
        err = replace(&t, text, len, &w, v, optional, flags, res);
    } else if (st == MISSING && (flags & OOM_APPLY_CREATE) && w.node->kind == OOMI_N_MAP) {
        res->action = "create";
        res->inserted = true;
        err = create(&t, text, len, &w, segs, n, v);
    } else if (optional) {
        err = set_reason(res, w.why ? w.why : "the file does not have this key");
    } else {
        err = refuse(&t, w.why ? w.why : "is not in the file (--create adds it)");
    }
done:
    oomi_node_free(root);
    oomi_path_free(segs, n);
    return err;
}

int oomi_edit_verify(const char *text, size_t len, bool json, const char *file, const char *key,
                     const oomi_aval *v, bool inserted)
{
    struct target t = {text, file, key, len, json};
    oomi_pathseg *segs = NULL;
    oomi_node *root = NULL;
    struct walk w;
    enum walk_state st = ABSENT;
    size_t n = 0;
    int err;

    if ((err = oomi_path_parse(&segs, &n, key)) || (err = parse(&t, &root)) ||
        (err = walk(&t, root, segs, n, &w, &st)))
        goto done;
    if (st == FOUND && w.node->kind == OOMI_N_SCALAR && oomi_aval_equal(&w.node->val, v))
        goto done;
    if (inserted)
        err = refuse(&t, "cannot be written here (the new text would not read back as written)");
    else
        err = oomi_fail(OOM_EINTERNAL,
                        "'%s': key '%s' does not read back as written; nothing was written "
                        "(please report this)",
                        file, key);
done:
    if (err && err != OOM_EINTERNAL && err != OOM_ENOMEM && err != OOM_EREFUSED)
        err = oomi_fail_prefix(OOM_EREFUSED,
                               "key '%s': refused, the edited text would not parse: ", key);
    oomi_node_free(root);
    oomi_path_free(segs, n);
    return err;
}
