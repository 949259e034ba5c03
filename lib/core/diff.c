/* diff.c - a line-based unified diff, context 3, for `apply --dry-run` and `apply --diff`. The
 * output is what `diff -u` prints, with a/ and b/ prefixes.
 *
 * Myers' O(ND) algorithm in its linear-space form: the common head and tail are trimmed, then
 * the "middle snake" (where a forward and a backward search for the shortest edit script meet)
 * splits the rest into two smaller problems. Memory is one offset per line of each text, one
 * mark byte per line, and two arrays of O(D) for the search (D: the number of changed lines);
 * time is O((N+M) D). A 2-million-line file with a few changed lines is diffed in well under a
 * second with no limit on its length. */
#include "core/core.h"

#include <string.h>

#define CONTEXT 3

struct lines {
    const char *s;
    size_t *at; /* start of each line; at[n] is the text's length */
    size_t n;
};

static int split(struct lines *l, const char *s, size_t len)
{
    size_t i, n = 0;
    const char *p = s, *end = s + len;

    while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        n++;
        p++;
    }
    n += len && s[len - 1] != '\n';
    l->s = s;
    l->n = n;
    if (!(l->at = oomi_reallocarray(NULL, n + 1, sizeof(*l->at))))
        return oomi_nomem();
    for (i = 0, p = s; i < n; i++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        l->at[i] = (size_t)(p - s);
        p = nl ? nl + 1 : end;
    }
    l->at[n] = len;
    return OOM_OK;
}

static size_t line_len(const struct lines *l, size_t i)
{
    return l->at[i + 1] - l->at[i];
}

static bool same(const struct lines *a, size_t i, const struct lines *b, size_t j)
{
    size_t n = line_len(a, i);
    return n == line_len(b, j) && !memcmp(a->s + a->at[i], b->s + b->at[j], n);
}

/* a growable array indexed from -off to off (the diagonals of the search) */
struct vec {
    long *v;
    long off;
};

static int vec_fit(struct vec *x, long k)
{
    long noff, *nv;

    if (x->off >= k)
        return OOM_OK;
    noff = x->off * 2 > k ? x->off * 2 : k + 16;
    if (!(nv = oomi_calloc((size_t)(2 * noff + 1), sizeof(*nv))))
        return oomi_nomem();
    if (x->v)
        memcpy(nv + noff - x->off, x->v, (size_t)(2 * x->off + 1) * sizeof(*nv));
    oomi_free(x->v);
    x->v = nv;
    x->off = noff;
    return OOM_OK;
}

#define AT(x, k) ((x)->v[(x)->off + (k)])

struct ctx {
    const struct lines *a, *b;
    char *del, *ins; /* per line: removed from a / added in b */
    struct vec fw, bw;
};

/* a diagonal run of equal lines: a[x0..x1) equals b[y0..y1) */
struct snake {
    long x0, y0, x1, y1;
};

/* On a[a0..a0+n) and b[b0..b0+m) (both non-empty, and differing in their first and their last
 * lines), a snake that lies on a shortest edit script and splits it in two halves. The forward
 * search runs from the start, the backward one from the end (its x and y count lines from the
 * ends); they meet on diagonal k (forward) = delta - k (backward). */
static int middle_snake(struct ctx *c, size_t a0, long n, size_t b0, long m, struct snake *s)
{
    long delta = n - m, d, k, x, y, xs, ys;
    bool odd = (delta & 1) != 0;
    int err;

    for (d = 0; d <= (n + m + 1) / 2; d++) {
        if ((err = vec_fit(&c->fw, d + 1)) || (err = vec_fit(&c->bw, d + 1)))
            return err;
        if (d == 0)
            AT(&c->fw, 1) = AT(&c->bw, 1) = 0;
        for (k = -d; k <= d; k += 2) {
            x = (k == -d || (k != d && AT(&c->fw, k - 1) < AT(&c->fw, k + 1)))
                    ? AT(&c->fw, k + 1)
                    : AT(&c->fw, k - 1) + 1;
            y = x - k;
            xs = x;
            ys = y;
            while (x < n && y < m && same(c->a, a0 + (size_t)x, c->b, b0 + (size_t)y)) {
                x++;
                y++;
            }
            AT(&c->fw, k) = x;
            if (odd && delta - k >= -(d - 1) && delta - k <= d - 1 &&
                x >= n - AT(&c->bw, delta - k)) {
                *s = (struct snake){xs, ys, x, y};
                return OOM_OK;
            }
        }
        for (k = -d; k <= d; k += 2) {
            x = (k == -d || (k != d && AT(&c->bw, k - 1) < AT(&c->bw, k + 1)))
                    ? AT(&c->bw, k + 1)
                    : AT(&c->bw, k - 1) + 1;
            y = x - k;
            xs = x;
            ys = y;
            while (x < n && y < m &&
                   same(c->a, a0 + (size_t)(n - 1 - x), c->b, b0 + (size_t)(m - 1 - y))) {
                x++;
                y++;
            }
            AT(&c->bw, k) = x;
            if (!odd && delta - k >= -d && delta - k <= d && AT(&c->fw, delta - k) >= n - x) {
                *s = (struct snake){n - x, m - y, n - xs, m - ys};
                return OOM_OK;
            }
        }
    }
    return oomi_fail(OOM_EINTERNAL, "diff: the searches did not meet");
}

/* marks a shortest edit script of a[a0..a1) -> b[b0..b1); recursion depth O(log D) */
static int compare(struct ctx *c, size_t a0, size_t a1, size_t b0, size_t b1)
{
    struct snake s = {0, 0, 0, 0};
    int err;

    while (a0 < a1 && b0 < b1 && same(c->a, a0, c->b, b0)) {
        a0++;
        b0++;
    }
    while (a1 > a0 && b1 > b0 && same(c->a, a1 - 1, c->b, b1 - 1)) {
        a1--;
        b1--;
    }
    if (a0 == a1 || b0 == b1) { /* one side empty: the other is all added or all removed */
        memset(c->ins + b0, 1, b1 - b0);
        memset(c->del + a0, 1, a1 - a0);
        return OOM_OK;
    }
    /* trimmed, the two differ by at least two lines: both halves are strictly smaller */
    if ((err = middle_snake(c, a0, (long)(a1 - a0), b0, (long)(b1 - b0), &s)))
        return err;
    if ((err = compare(c, a0, a0 + (size_t)s.x0, b0, b0 + (size_t)s.y0)))
        return err;
    return compare(c, a0 + (size_t)s.x1, a1, b0 + (size_t)s.y1, b1);
}

static void put_line(oomi_sb *sb, char mark, const struct lines *l, size_t i)
{
    size_t n = line_len(l, i);

    oomi_sb_putc(sb, mark);
    oomi_sb_add(sb, l->s + l->at[i], n);
    if (!n || l->s[l->at[i] + n - 1] != '\n')
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
static void hunk(oomi_sb *sb, const struct ctx *c, size_t i0, size_t i1, size_t j0, size_t j1)
{
    size_t i = i0, j = j0;

    oomi_sb_puts(sb, "@@");
    range(sb, '-', i0, i1 - i0);
    range(sb, '+', j0, j1 - j0);
    oomi_sb_puts(sb, " @@\n");
    while (i < i1 || j < j1) {
        if (i < i1 && c->del[i]) {
            put_line(sb, '-', c->a, i++);
        } else if (j < j1 && c->ins[j]) {
            put_line(sb, '+', c->b, j++);
        } else {
            put_line(sb, ' ', c->a, i++);
            j++;
        }
    }
}

/* walks both files in step, grouping changes closer than 2*CONTEXT lines into one hunk */
static void hunks(oomi_sb *sb, const struct ctx *c)
{
    size_t i = 0, j = 0, i0 = 0, j0 = 0, last_i = 0, last_j = 0, an = c->a->n, bn = c->b->n;
    bool open = false;

    while (i < an || j < bn) {
        if ((i < an && c->del[i]) || (j < bn && c->ins[j])) {
            if (!open) {
                i0 = i > CONTEXT ? i - CONTEXT : 0;
                j0 = j - (i - i0);
                open = true;
            }
            if (i < an && c->del[i])
                i++;
            else
                j++;
            last_i = i;
            last_j = j;
            continue;
        }
        if (open && i - last_i >= 2 * CONTEXT && i < an) {
            hunk(sb, c, i0, last_i + CONTEXT, j0, last_j + CONTEXT);
            open = false;
        }
        i++;
        j++;
    }
    if (open) {
        size_t e = last_i + CONTEXT < an ? last_i + CONTEXT : an;
        hunk(sb, c, i0, e, j0, last_j + (e - last_i));
    }
}

int oomi_diff(oomi_sb *sb, const char *name, const char *a, size_t alen, const char *b, size_t blen)
{
    struct lines la = {0}, lb = {0};
    struct ctx c = {&la, &lb, NULL, NULL, {NULL, 0}, {NULL, 0}};
    int err;

    if (alen == blen && !memcmp(a, b, alen))
        return OOM_OK;
    if ((err = split(&la, a, alen)) || (err = split(&lb, b, blen)))
        goto done;
    c.del = oomi_calloc(la.n + 1, 1);
    c.ins = oomi_calloc(lb.n + 1, 1);
    if (!c.del || !c.ins) {
        err = oomi_nomem();
        goto done;
    }
    if ((err = compare(&c, 0, la.n, 0, lb.n)))
        goto done;
    oomi_sb_printf(sb, "--- a/%s\n+++ b/%s\n", name, name);
    hunks(sb, &c);
    err = oomi_sb_ok(sb);
done:
    oomi_free(la.at);
    oomi_free(lb.at);
    oomi_free(c.del);
    oomi_free(c.ins);
    oomi_free(c.fw.v);
    oomi_free(c.bw.v);
    return err;
}
