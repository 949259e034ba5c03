/* util.c - name matching and text positions shared by the parsers. */
#include "core/core.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int norm_char(int c)
{
    if (c == '-' || c == '_' || c == ' ')
        return '-';
    return oomi_tolower((unsigned char)c);
}

int oomi_name_cmp(const char *a, const char *b)
{
    for (;; a++, b++) {
        int ca = norm_char((unsigned char)*a), cb = norm_char((unsigned char)*b);
        if (ca != cb || !ca)
            return ca - cb;
    }
}

size_t oomi_name_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    size_t row[65], prev, tmp;

    if (la > 64)
        la = 64;
    if (lb > 64)
        lb = 64;
    for (j = 0; j <= lb; j++)
        row[j] = j;
    for (i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = i;
        for (j = 1; j <= lb; j++) {
            size_t cost = norm_char((unsigned char)a[i - 1]) != norm_char((unsigned char)b[j - 1]);
            size_t best = prev + cost;
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            tmp = row[j];
            row[j] = best;
            prev = tmp;
        }
    }
    return row[lb];
}

void oomi_line_col(const char *buf, size_t off, size_t *line, size_t *col)
{
    size_t i;

    *line = 1;
    *col = 1;
    for (i = oomi_bom_len(buf, off); i < off && buf[i]; i++) {
        if (buf[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)buf[i] & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}
