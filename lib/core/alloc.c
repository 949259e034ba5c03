/* alloc.c - the library's allocations, routed through a replaceable allocator. */
#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *default_malloc(size_t n, void *user)
{
    (void)user;
    return malloc(n ? n : 1);
}

static void *default_realloc(void *p, size_t n, void *user)
{
    (void)user;
    return realloc(p, n ? n : 1);
}

static void default_free(void *p, void *user)
{
    (void)user;
    free(p);
}

static oom_allocator current = {OOM_ALLOCATOR_VERSION, default_malloc, default_realloc,
                                default_free, NULL};

int oom_set_allocator(const oom_allocator *a)
{
    int err;
    if (a && (err = oomi_check_version(a->version, OOM_ALLOCATOR_VERSION, "oom_allocator")))
        return err;
    if (a && a->malloc && a->realloc && a->free)
        current = *a;
    else
        current = (oom_allocator){OOM_ALLOCATOR_VERSION, default_malloc, default_realloc,
                                  default_free, NULL};
    return OOM_OK;
}

void oom_free(void *p)
{
    oomi_free(p);
}

void *oomi_malloc(size_t n)
{
    return current.malloc(n, current.user);
}

void *oomi_calloc(size_t count, size_t size)
{
    void *p;
    if (size && count > SIZE_MAX / size)
        return NULL;
    p = oomi_malloc(count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

void *oomi_realloc(void *p, size_t n)
{
    return current.realloc(p, n, current.user);
}

void *oomi_reallocarray(void *p, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    return oomi_realloc(p, count * size);
}

void oomi_free(void *p)
{
    if (p)
        current.free(p, current.user);
}

char *oomi_strndup(const char *s, size_t n)
{
    char *d = oomi_malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *oomi_strdup(const char *s)
{
    return oomi_strndup(s, strlen(s));
}

char *oomi_vasprintf(const char *fmt, va_list ap)
{
    va_list again;
    int n;
    char *s;

    va_copy(again, ap);
    n = oomi_vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    if (n < 0)
        return NULL;
    s = oomi_malloc((size_t)n + 1);
    if (s)
        oomi_vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

char *oomi_asprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    s = oomi_vasprintf(fmt, ap);
    va_end(ap);
    return s;
}

int oomi_strv_addv(char ***v, size_t *n, const char *fmt, va_list ap)
{
    char **grown, *s = oomi_vasprintf(fmt, ap);
    if (!s)
        return oomi_nomem();
    if (!(grown = oomi_reallocarray(*v, *n + 1, sizeof(*grown)))) {
        oomi_free(s);
        return oomi_nomem();
    }
    grown[(*n)++] = s;
    *v = grown;
    return OOM_OK;
}

int oomi_strv_add(char ***v, size_t *n, const char *fmt, ...)
{
    va_list ap;
    int err;

    va_start(ap, fmt);
    err = oomi_strv_addv(v, n, fmt, ap);
    va_end(ap);
    return err;
}

void oomi_strv_free(char ***v, size_t *n)
{
    size_t i;
    for (i = 0; *v && i < *n; i++)
        oomi_free((*v)[i]);
    oomi_free(*v);
    *v = NULL;
    *n = 0;
}
