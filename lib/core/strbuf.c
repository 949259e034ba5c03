/* strbuf.c - a growable string whose failures latch, so callers check once at the end. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

static bool sb_grow(oomi_sb *sb, size_t extra)
{
    size_t need, cap;
    char *p;

    if (sb->failed)
        return false;
    if (extra > SIZE_MAX - sb->len - 1) {
        sb->failed = true;
        return false;
    }
    need = sb->len + extra + 1;
    if (need <= sb->cap)
        return true;
    cap = sb->cap ? sb->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    p = oomi_realloc(sb->buf, cap);
    if (!p) {
        sb->failed = true;
        return false;
    }
    sb->buf = p;
    sb->cap = cap;
    return true;
}

void oomi_sb_add(oomi_sb *sb, const char *s, size_t n)
{
    if (!sb_grow(sb, n))
        return;
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
}

void oomi_sb_puts(oomi_sb *sb, const char *s)
{
    oomi_sb_add(sb, s, strlen(s));
}

void oomi_sb_putc(oomi_sb *sb, char c)
{
    oomi_sb_add(sb, &c, 1);
}

void oomi_sb_printf(oomi_sb *sb, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = oomi_vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        sb->failed = true;
        return;
    }
    if (!sb_grow(sb, (size_t)n))
        return;
    va_start(ap, fmt);
    oomi_vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

int oomi_sb_ok(oomi_sb *sb)
{
    return sb->failed ? oomi_nomem() : OOM_OK;
}

char *oomi_sb_steal(oomi_sb *sb)
{
    char *p;
    if (sb->failed)
        return NULL;
    if (!sb->buf && !sb_grow(sb, 0))
        return NULL;
    if (sb->len == 0)
        sb->buf[0] = '\0';
    p = sb->buf;
    *sb = (oomi_sb)OOMI_SB_INIT;
    return p;
}

int oomi_sb_finish(oomi_sb *sb, char **out)
{
    *out = sb->failed ? NULL : oomi_sb_steal(sb);
    if (*out)
        return OOM_OK;
    oomi_sb_free(sb);
    return oomi_nomem();
}

void oomi_sb_free(oomi_sb *sb)
{
    oomi_free(sb->buf);
    *sb = (oomi_sb)OOMI_SB_INIT;
}
