/* apply_edit.c - the assignments of one text: find each key's byte span, check the edit is safe
 * and of the same type, and splice the new values' text in (or create the keys); then read every
 * edited value back through the parser.
 *
 * Parses cost time in proportion to the file, so there are few: one for every replaced value
 * (their spans come from the same tree and cannot overlap, so they are spliced in one pass), one
 * per created key (a created key may hold the next one's parent, so they go one at a time, after
 * the replacements, which change no structure), and one for the read-back. */
#include "apply/apply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum walk_state { FOUND, MISSING, ABSENT };

struct walk {
    const oomi_node *node; /* FOUND: the value; MISSING/ABSENT: the deepest container */
    const oomi_node *key;  /* FOUND in a map: its key node */
    size_t matched;        /* segments matched */
    const char *why;       /* ABSENT: why it cannot be created */
};

struct target {
    const char *buf, *key;
    size_t len;
    const oomi_doc *doc;
};

/* buf[start..end) is to become `with` (allocated; NULL: nothing to do) */
struct splice {
    size_t start, end;
    char *with;
};

static int refuse(const struct target *t, const char *why)
{
    return oomi_fail(OOM_EREFUSED, "'%s': key '%s' %s; the file is unchanged", t->doc->file, t->key,
                     why);
}

/* the child of map for key; MISSING when there is none */
static int map_child(const struct target *t, const oomi_node *map, const char *k, size_t *at,
                     bool *found)
{
    size_t i;

    *found = false;
    for (i = 0; i < map->n; i++) {
        if (!oomi_key_is(map->keys[i], t->buf, k))
            continue;
        if (*found)
            return refuse(t, "is there more than once (duplicate key)");
        *found = true;
        *at = i;
    }
    if (!*found)
        for (i = 0; i < map->n; i++)
            if (oomi_key_is(map->keys[i], t->buf, "<<"))
                return refuse(t, "is not there, and its map has a merge key (<<) it may come "
                                 "from; edit the merged map");
    return OOM_OK;
}

static int walk(const struct target *t, const oomi_node *root, const oomi_pathseg *segs, size_t n,
                struct walk *w, enum walk_state *st)
{
    const oomi_node *node = root, *next;
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
            found = segs[i].index < node->count;
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
        next = segs[i].key ? node->vals[at] : oomi_node_item(node, segs[i].index);
        if (!next)
            return oomi_fail(OOM_EINTERNAL,
                             "'%s': key '%s': list item %zu was not read "
                             "(please report this)",
                             t->doc->file, t->key, segs[i].index);
        node = next;
    }
    w->node = node;
    w->matched = n;
    *st = FOUND;
    return OOM_OK;
}

static char *render(const struct target *t, const oomi_node *old, const oomi_aval *v)
{
    return t->doc->json ? oomi_json_render(v) : oomi_yaml_render(old, t->buf, v);
}

static int make_create(const struct target *t, const struct walk *w, const oomi_pathseg *segs,
                       size_t n, const oomi_aval *v, struct splice *sp)
{
    char *vt, *ins = NULL;
    size_t pos = 0, i;
    int err;

    for (i = w->matched; i < n; i++)
        if (!segs[i].key)
            return refuse(t, "is not there, and list items are never created");
    if (!(vt = render(t, NULL, v)))
        return oomi_nomem();
    if (t->doc->json)
        err = oomi_json_create(&ins, &pos, w->node, t->buf, t->len, segs + w->matched,
                               n - w->matched, vt);
    else
        err = oomi_yaml_create(&ins, &pos, w->node, t->buf, t->len, segs + w->matched,
                               n - w->matched, vt);
    oomi_free(vt);
    if (!err)
        *sp = (struct splice){pos, pos, ins};
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
    if (!t->doc->json && memchr(t->buf + node->start, '\n', node->end - node->start))
        return refuse(t, "is a scalar spread over several lines");
    return OOM_OK;
}

static int set_reason(oomi_edit_result *res, const char *reason)
{
    res->action = "skipped";
    res->reason = oomi_strdup(reason);
    return res->reason ? OOM_OK : oomi_nomem();
}

/* the splice that replaces the found scalar (none when the value is already there) */
static int make_replace(const struct target *t, const struct walk *w, const oomi_edit *e,
                        unsigned flags, struct splice *sp)
{
    const oomi_node *node = w->node;
    oomi_edit_result *res = e->res;
    size_t start = node->start, end = node->end;
    char *vt, *with;
    int err = OOM_OK;

    if ((err = oomi_aval_copy(&res->old, &node->val)))
        return err;
    res->has_old = true;
    res->has_span = true;
    res->start = start;
    res->end = end;
    if (e->optional && node->val.type == OOMI_AV_STRING && !strcmp(node->val.s, "auto"))
        return set_reason(res, "the value is 'auto' (left to the framework)");
    if (!type_ok(node->val.type, e->v->type) && !(flags & OOM_APPLY_FORCE_TYPE)) {
        char why[160];
        oomi_snprintf(why, sizeof(why),
                      "holds a %s value; refusing to write a %s value (--force-type allows it)",
                      oomi_avtype_name(node->val.type), oomi_avtype_name(e->v->type));
        return refuse(t, why);
    }
    res->action = "unchanged";
    if (oomi_aval_equal(&node->val, e->v))
        return OOM_OK;
    res->action = "set";
    if (!(vt = render(t, node, e->v)))
        return oomi_nomem();
    with = vt;
    if (start == end && w->key) { /* "key:" or "{key}" with no value: write after the key */
        size_t p = w->key->end + strspn(t->buf + w->key->end, " \t");
        bool colon = p < t->len && t->buf[p] == ':';
        start = end = colon ? p + 1 : w->key->end;
        res->inserted = true;
        with = oomi_asprintf(colon ? " %s" : ": %s", vt);
        oomi_free(vt);
        if (!with)
            return oomi_nomem();
    }
    *sp = (struct splice){start, end, with};
    return err;
}

/* What one assignment does on the tree of the current text: a splice, a skip or a refusal.
 * Without create_now a key to create is only marked (*later), to be created on its own parse. */
static int decide(const struct target *t, const oomi_node *root, const oomi_want *path,
                  const oomi_edit *e, unsigned flags, bool create_now, struct splice *sp,
                  bool *later)
{
    struct walk w;
    enum walk_state st = ABSENT;
    oomi_edit_result *res = e->res;
    int err;

    if ((err = walk(t, root, path->segs, path->n, &w, &st)))
        return err;
    if (st == FOUND && !e->optional)
        err = check_target(t, w.node);
    else if (st == FOUND && w.node->kind != OOMI_N_SCALAR)
        err = set_reason(res, w.node->kind == OOMI_N_MAP ? "the key holds a map, not a value"
                                                         : "the key holds a list, not a value");
    else if (st == FOUND)
        err = check_target(t, w.node);
    if (err || (st == FOUND && res->action))
        return err;
    if (st == FOUND)
        return make_replace(t, &w, e, flags, sp);
    if (st == MISSING && (flags & OOM_APPLY_CREATE) && w.node->kind == OOMI_N_MAP) {
        if (!create_now) {
            *later = true;
            return OOM_OK;
        }
        res->action = "create";
        res->inserted = true;
        return make_create(t, &w, path->segs, path->n, e->v, sp);
    }
    if (e->optional)
        return set_reason(res, w.why ? w.why : "the file does not have this key");
    return refuse(t, w.why ? w.why : "is not in the file (--create adds it)");
}

static int cmp_splice(const void *a, const void *b)
{
    const struct splice *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* sp[0..n) (sorted here; those with no text skipped) into one new text *out; NULL when none has
 * a text */
static int apply_splices(const char *text, size_t len, char **out, size_t *out_len,
                         struct splice *sp, size_t n)
{
    size_t i, nl = len, at = 0, prev = 0;
    char *o;
    bool any = false;

    *out = NULL;
    qsort(sp, n, sizeof(*sp), cmp_splice);
    for (i = 0; i < n; i++) {
        if (!sp[i].with)
            continue;
        if (sp[i].start < prev || sp[i].end > len)
            return oomi_fail(OOM_EINTERNAL, "two edits overlap (please report this)");
        prev = sp[i].end;
        nl = nl - (sp[i].end - sp[i].start) + strlen(sp[i].with);
        any = true;
    }
    if (!any)
        return OOM_OK;
    if (!(*out = o = oomi_malloc(nl + 1)))
        return oomi_nomem();
    for (i = 0; i < n; i++) {
        size_t wl;
        if (!sp[i].with)
            continue;
        memcpy(o, text + at, sp[i].start - at);
        o += sp[i].start - at;
        wl = strlen(sp[i].with);
        memcpy(o, sp[i].with, wl);
        o += wl;
        at = sp[i].end;
    }
    memcpy(o, text + at, len - at);
    (*out)[nl] = '\0';
    *out_len = nl;
    return OOM_OK;
}

static int parse(const oomi_doc *doc, const char *buf, size_t len, const oomi_want *want,
                 size_t nwant, oomi_node **root)
{
    return doc->json ? oomi_json_parse(root, buf, len, doc->file, want, nwant, doc->document)
                     : oomi_yaml_parse(root, buf, len, doc->file, want, nwant, doc->document);
}

/* a text that no longer parses after edits: the edit is refused, naming the key */
static int edited_parse_error(int err, const char *key)
{
    if (err == OOM_EINTERNAL || err == OOM_ENOMEM || err == OOM_EREFUSED)
        return err;
    return oomi_fail_prefix(OOM_EREFUSED,
                            "key '%s': refused, the edited text would not parse: ", key);
}

/* the text being edited: the caller's, then each new version (owned) */
struct text {
    const char *buf;
    size_t len;
    char *owned;
};

static int splice_into(struct text *t, struct splice *sp, size_t n)
{
    char *out;
    size_t out_len = 0;
    int err;

    if ((err = apply_splices(t->buf, t->len, &out, &out_len, sp, n)) || !out)
        return err;
    oomi_free(t->owned);
    t->buf = t->owned = out;
    t->len = out_len;
    return OOM_OK;
}

/* Of a group of alternative keys, the first the text has is set and the others skipped, or,
 * with none there, only the first to create is created */
static int one_of_group(oomi_edit *e, size_t n, bool *later)
{
    size_t i, j, pick;
    int err;

    for (i = 0; i < n; i++) {
        if (!e[i].group)
            continue;
        for (j = 0; j < i && e[j].group != e[i].group; j++)
            ;
        if (j < i) /* not the group's first: done with it */
            continue;
        for (pick = i; pick < n; pick++)
            if (e[pick].group == e[i].group && e[pick].res->has_old)
                break;
        if (pick == n) /* none in the text: the first to be created, if any */
            for (pick = i; pick < n && !(e[pick].group == e[i].group && later[pick]); pick++)
                ;
        if (pick == n)
            continue;
        for (j = i; j < n; j++) {
            char why[160];
            if (j == pick || e[j].group != e[i].group || e[j].res->has_old)
                continue;
            later[j] = false;
            oomi_free(e[j].res->reason);
            e[j].res->reason = NULL;
            oomi_snprintf(why, sizeof(why),
                          later[pick] ? "'%s' is created instead" : "the file has '%s' instead",
                          e[pick].key);
            if ((err = set_reason(e[j].res, why)))
                return err;
            e[j].res->instead = true;
        }
    }
    return OOM_OK;
}

/* every replacement on one parse of the original text; keys to create are marked in later[] */
static int replace_all(struct text *tx, const oomi_doc *doc, oomi_edit *e, const oomi_want *want,
                       size_t n, unsigned flags, bool *later)
{
    struct splice *sp = oomi_calloc(n ? n : 1, sizeof(*sp));
    oomi_node *root = NULL;
    size_t i;
    int err;

    if (!sp)
        return oomi_nomem();
    err = parse(doc, tx->buf, tx->len, want, n, &root);
    for (i = 0; !err && i < n; i++) {
        struct target t = {tx->buf, e[i].key, tx->len, doc};
        err = decide(&t, root, &want[i], &e[i], flags, false, &sp[i], &later[i]);
    }
    oomi_node_free(root);
    if (!err)
        err = one_of_group(e, n, later);
    if (!err)
        err = splice_into(tx, sp, n);
    for (i = 0; i < n; i++)
        oomi_free(sp[i].with);
    oomi_free(sp);
    return err;
}

/* one key to create, on a parse of the text as it is now */
static int create_one(struct text *tx, const oomi_doc *doc, oomi_edit *e, const oomi_want *want,
                      unsigned flags)
{
    struct splice sp = {0, 0, NULL};
    struct target t = {tx->buf, e->key, tx->len, doc};
    oomi_node *root = NULL;
    bool later = false;
    int err;

    if ((err = parse(doc, tx->buf, tx->len, want, 1, &root)))
        return tx->owned ? edited_parse_error(err, e->key) : err;
    err = decide(&t, root, want, e, flags, true, &sp, &later);
    oomi_node_free(root);
    if (!err)
        err = splice_into(tx, &sp, 1);
    oomi_free(sp.with);
    return err;
}

/* every edited value read back on one parse */
static int verify_all(const struct text *tx, const oomi_doc *doc, const oomi_edit *e,
                      const oomi_want *want, size_t n)
{
    oomi_want *vw = oomi_calloc(n ? n : 1, sizeof(*vw));
    const oomi_edit **ve = oomi_calloc(n ? n : 1, sizeof(*ve));
    oomi_node *root = NULL;
    size_t i, nv = 0;
    int err = OOM_OK;

    if (!vw || !ve) {
        err = oomi_nomem();
        goto done;
    }
    for (i = 0; i < n; i++)
        if (strcmp(e[i].res->action, "skipped")) {
            vw[nv] = want[i];
            ve[nv++] = &e[i];
        }
    if (!nv)
        goto done;
    if ((err = parse(doc, tx->buf, tx->len, vw, nv, &root))) {
        err = edited_parse_error(err, ve[0]->key);
        goto done;
    }
    for (i = 0; !err && i < nv; i++) {
        struct target t = {tx->buf, ve[i]->key, tx->len, doc};
        struct walk w;
        enum walk_state st = ABSENT;
        if ((err = walk(&t, root, vw[i].segs, vw[i].n, &w, &st)))
            break;
        if (st == FOUND && w.node->kind == OOMI_N_SCALAR && oomi_aval_equal(&w.node->val, ve[i]->v))
            continue;
        if (ve[i]->res->inserted)
            err = refuse(&t, "cannot be written here (the new text would not read back as "
                             "written)");
        else
            err = oomi_fail(OOM_EINTERNAL,
                            "'%s': key '%s' does not read back as written; nothing was written "
                            "(please report this)",
                            doc->file, ve[i]->key);
    }
done:
    oomi_node_free(root);
    oomi_free(vw);
    oomi_free(ve);
    return err;
}

int oomi_edit_all(const char *in, size_t in_len, char **out, size_t *out_len, const oomi_doc *doc,
                  oomi_edit *e, size_t n, unsigned flags)
{
    oomi_pathseg **segs = oomi_calloc(n ? n : 1, sizeof(*segs));
    oomi_want *want = oomi_calloc(n ? n : 1, sizeof(*want));
    bool *later = oomi_calloc(n ? n : 1, sizeof(*later));
    struct text tx = {in, in_len, NULL};
    size_t i, nsegs;
    int err = OOM_OK;

    *out = NULL;
    *out_len = in_len;
    if (!n) /* every assignment was skipped before looking at the text */
        goto done;
    if (!segs || !want || !later) {
        err = oomi_nomem();
        goto done;
    }
    for (i = 0; !err && i < n; i++) {
        memset(e[i].res, 0, sizeof(*e[i].res));
        if (!(err = oomi_path_parse(&segs[i], &nsegs, e[i].key)))
            want[i] = (oomi_want){segs[i], nsegs};
    }
    if (!err)
        err = replace_all(&tx, doc, e, want, n, flags, later);
    for (i = 0; !err && i < n; i++)
        if (later[i])
            err = create_one(&tx, doc, &e[i], &want[i], flags);
    if (!err)
        err = verify_all(&tx, doc, e, want, n);
    if (!err) {
        *out = tx.owned;
        *out_len = tx.len;
        tx.owned = NULL;
    }
done:
    oomi_free(tx.owned);
    for (i = 0; segs && want && i < n; i++)
        oomi_path_free(segs[i], want[i].n);
    oomi_free(segs);
    oomi_free(want);
    oomi_free(later);
    return err;
}
