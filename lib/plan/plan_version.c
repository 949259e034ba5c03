/* plan_version.c - framework versions as the format table lists them ("0.3", "5.23") against
 * those asked for or installed ("0.3.0", "5.23.0rc1", "v0.2.2"). */
#include "plan/plan.h"

#include <stdlib.h>

/* "5.23.0" into numbers (at most 3; a leading 'v' as tags spell it; what follows the numbers,
 * "rc1", "+cpu", ".dev0", is read past); false for a text that does not start with a number */
bool oomi_version_numbers(long v[3], size_t *n, const char *s)
{
    char *end;
    *n = 0;
    if (!s)
        return false;
    s += *s == 'v';
    while (*n < 3 && *s >= '0' && *s <= '9') {
        v[(*n)++] = strtol(s, &end, 10);
        if (*end != '.' || end[1] < '0' || end[1] > '9')
            break;
        s = end + 1;
    }
    return *n > 0 && v[0] >= 0;
}

int oomi_version_cmp(const char *a, const char *b, bool *ok)
{
    long x[3] = {0}, y[3] = {0};
    size_t nx, ny, i;
    *ok = oomi_version_numbers(x, &nx, a) && oomi_version_numbers(y, &ny, b);
    for (i = 0; *ok && i < 3; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

bool oomi_format_since(const oomi_format *f, const char *v)
{
    bool ok;
    return f->version && oomi_version_cmp(f->version, v, &ok) >= 0 && ok;
}

/* want against a listed version on the numbers the listed one has (0.3.1 is 0.3): <0, 0, >0 */
int oomi_version_against(const char *listed, const char *want)
{
    long l[3], w[3] = {0};
    size_t nl, nw, i;
    oomi_version_numbers(l, &nl, listed);
    oomi_version_numbers(w, &nw, want);
    for (i = 0; i < nl; i++)
        if (l[i] != w[i])
            return l[i] < w[i] ? -1 : 1;
    return 0;
}
