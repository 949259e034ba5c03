/* diff.c - a small line-based unified diff (Myers' O(ND) algorithm), context 3, for
 * `apply --dry-run`. The output is what `diff -u` prints, with a/ and b/ prefixes. */
#include "core/core.h"

#include <string.h>

#define CONTEXT 3

struct lines {
    const char **at; /* start of each line */
    size_t *len;     /* its length, newline included */
    size_t n;
};

static int split(struct lines *l, const char *s, size_t len)
{
    size_t i, n = 0, start = 0;

    for (i = 0; i < len; i++)
        n += s[i] == '\n';
    n += len && s[len - 1] != '\n';
    l->n = 0;
    l->at = oomi_calloc(n + 1, sizeof(*l->at));
    l->len = oomi_calloc(n + 1, sizeof(*l->len));
    if (!l->at || !l->len)
        return oomi_nomem();
    for (i = 0; i < len; i++) {
        if (s[i] != '\n' && i + 1 < len)
            continue;
        l->at[l->n] = s + start;
        l->len[l->n++] = i + 1 - start;
        start = i + 1;
    }
    return OOM_OK;
}

static bool same(const struct lines *a, size_t i, const struct lines *b, size_t j)
{
    return a->len[i] == b->len[j] && !memcmp(a->at[i], b->at[j], a->len[i]);
}

/* One edit script as a per-line mark: 0 kept, 1 removed (a) / added (b). */
struct script {
    char *del, *ins;
};

/* Myers with a saved V array per D, then a backtrack that marks the edits. */
static int myers(struct script *s, const struct lines *a, const struct lines *b)
{
    size_t n = a->n, m = b->n, max = n + m, off = max + 1, width = 2 * max + 3;
    long *v = NULL, *trace = NULL, d, k, x, y, found = -1;
    int err = OOM_OK;

    s->del = oomi_calloc(n + 1, 1);
    s->ins = oomi_calloc(m + 1, 1);
    v = oomi_calloc(width, sizeof(*v));
    if (!s->del || !s->ins || !v || max > 1000000) {
        err = max > 1000000 ? oomi_fail(OOM_EREFUSED, "file too long to diff") : oomi_nomem();
        goto done;
    }
    for (d = 0; found < 0 && d <= (long)max; d++) {
        long *grown = oomi_reallocarray(trace, (size_t)(d + 1) * width, sizeof(*trace));
        if (!grown) {
            err = oomi_nomem();
            goto done;
        }
        trace = grown;
        for (k = -d; k <= d; k += 2) {
            if (k == -d || (k != d && v[off + k - 1] < v[off + k + 1]))
                x = v[off + k + 1];
            else
                x = v[off + k - 1] + 1;
            for (y = x - k; x < (long)n && y < (long)m && same(a, (size_t)x, b, (size_t)y); y++)
                x++;
            v[off + k] = x;
            if (x >= (long)n && y >= (long)m)
                found = d;
        }
        memcpy(trace + (size_t)d * width, v, width * sizeof(*v));
    }
    x = (long)n;
    y = (long)m;
    for (d = found; d > 0; d--) {
        long *pv = trace + (size_t)(d - 1) * width, pk, px, py;
        k = x - y;
        pk = (k == -d || (k != d && pv[off + k - 1] < pv[off + k + 1])) ? k + 1 : k - 1;
        px = pv[off + pk];
        py = px - pk;
        while (x > px && y > py) {
            x--;
            y--;
        }
        if (pk == k + 1)
            s->ins[--y] = 1;
        else
            s->del[--x] = 1;
    }
done:
    oomi_free(v);
    oomi_free(trace);
    return err;
}

static void put_line(oomi_sb *sb, char mark, const struct lines *l, size_t i)
{
    oomi_sb_putc(sb, mark);
    oomi_sb_add(sb, l->at[i], l->len[i]);
    if (!l->len[i] || l->at[i][l->len[i] - 1] != '\n')
        oomi_sb_puts(sb, "\n\\ No newline at end of file\n");
}

static void range(oomi_sb *sb, char sign, size_t start, size_t count)
{
    if (count == 1)
        oomi_sb_printf(sb, " %c%zu", sign, start + 1);
    else
        oomi_sb_printf(sb, " %c%zu,%zu", sign, count ? start + 1 : start, count);
}

/* prints the hunk covering a[i0..i1) and b[j0..j1) */
static void hunk(oomi_sb *sb, const struct script *s, const struct lines *a, const struct lines *b,
                 size_t i0, size_t i1, size_t j0, size_t j1)
{
    size_t i = i0, j = j0;

    oomi_sb_puts(sb, "@@");
    range(sb, '-', i0, i1 - i0);
    range(sb, '+', j0, j1 - j0);
    oomi_sb_puts(sb, " @@\n");
    while (i < i1 || j < j1) {
        if (i < i1 && s->del[i]) {
            put_line(sb, '-', a, i++);
        } else if (j < j1 && s->ins[j]) {
            put_line(sb, '+', b, j++);
        } else {
            put_line(sb, ' ', a, i++);
            j++;
        }
    }
}

/* walks both files in step, grouping changes closer than 2*CONTEXT lines into one hunk */
static void hunks(oomi_sb *sb, const struct script *s, const struct lines *a, const struct lines *b)
{
    size_t i = 0, j = 0, i0 = 0, j0 = 0, last_i = 0, last_j = 0;
    bool open = false;

    while (i < a->n || j < b->n) {
        if ((i < a->n && s->del[i]) || (j < b->n && s->ins[j])) {
            if (!open) {
                i0 = i > CONTEXT ? i - CONTEXT : 0;
                j0 = j - (i - i0);
                open = true;
            }
            if (i < a->n && s->del[i])
                i++;
            else
                j++;
            last_i = i;
            last_j = j;
            continue;
        }
        if (open && i - last_i >= 2 * CONTEXT && i < a->n) {
            hunk(sb, s, a, b, i0, last_i + CONTEXT, j0, last_j + CONTEXT);
            open = false;
        }
        i++;
        j++;
    }
    if (open) {
        size_t e = last_i + CONTEXT < a->n ? last_i + CONTEXT : a->n;
        hunk(sb, s, a, b, i0, e, j0, last_j + (e - last_i));
    }
}

int oomi_diff(oomi_sb *sb, const char *name, const char *a, size_t alen, const char *b, size_t blen)
{
    struct lines la = {0}, lb = {0};
    struct script s = {0};
    int err;

    if (alen == blen && !memcmp(a, b, alen))
        return OOM_OK;
    if ((err = split(&la, a, alen)) || (err = split(&lb, b, blen)) || (err = myers(&s, &la, &lb)))
        goto done;
    oomi_sb_printf(sb, "--- a/%s\n+++ b/%s\n", name, name);
    hunks(sb, &s, &la, &lb);
    err = oomi_sb_ok(sb);
done:
    oomi_free(la.at);
    oomi_free(la.len);
    oomi_free(lb.at);
    oomi_free(lb.len);
    oomi_free(s.del);
    oomi_free(s.ins);
    return err;
}
