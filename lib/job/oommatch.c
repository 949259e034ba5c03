/* oommatch.c - recognising an out-of-memory death: exit status + output tail against patterns. */
#include "job/job.h"

#include <ctype.h>
#include <string.h>

struct oom_patterns {
    size_t count;
    char **items;
};

void oom_patterns_free(oom_patterns *p)
{
    size_t i;
    if (!p)
        return;
    for (i = 0; i < p->count; i++)
        oomi_free(p->items[i]);
    oomi_free(p->items);
    oomi_free(p);
}

static int add_pattern(oom_patterns *p, const char *s, size_t n)
{
    char **grown = oomi_reallocarray(p->items, p->count + 1, sizeof(*grown));
    if (!grown)
        return oomi_nomem();
    p->items = grown;
    if (!(p->items[p->count] = oomi_strndup(s, n)))
        return oomi_nomem();
    p->count++;
    return OOM_OK;
}

int oom_patterns_parse(oom_patterns **out, const char *text, size_t len, const char *name)
{
    oom_patterns *p;
    size_t i = 0;
    int err = OOM_OK;

    if (!out || (!text && len))
        return oomi_fail(OOM_EINVAL, "oom patterns: no output or text");
    *out = NULL;
    if (!(p = oomi_calloc(1, sizeof(*p))))
        return oomi_nomem();
    while (i < len && !err) {
        size_t b = i, e;
        while (i < len && text[i] != '\n')
            i++;
        e = i++;
        while (b < e && isspace((unsigned char)text[b]))
            b++;
        while (e > b && isspace((unsigned char)text[e - 1]))
            e--;
        if (b < e && text[b] != '#')
            err = add_pattern(p, text + b, e - b);
    }
    if (!err && p->count == 0)
        err = oomi_fail(OOM_EPARSE, "oom patterns '%s': no pattern in it", name ? name : "");
    if (err) {
        oom_patterns_free(p);
        return err;
    }
    *out = p;
    return OOM_OK;
}

int oom_patterns_load(oom_patterns **out, const char *path)
{
    char *text = NULL, *def = NULL;
    size_t len;
    int err;

    if (!path && !(path = def = oomi_data_path("oom-patterns.txt")))
        return oomi_nomem();
    if ((err = oomi_read_file(&text, &len, path)) == OOM_OK)
        err = oom_patterns_parse(out, text, len, path);
    oomi_free(text);
    oomi_free(def);
    return err;
}

size_t oom_patterns_count(const oom_patterns *p)
{
    return p ? p->count : 0;
}

/* case-insensitive search of needle in hay[0..n); NUL bytes in hay are ordinary bytes */
static int has(const char *hay, size_t n, const char *needle)
{
    size_t m = strlen(needle), i, j;
    if (m == 0 || m > n)
        return 0;
    for (i = 0; i + m <= n; i++) {
        for (j = 0; j < m; j++)
            if (oomi_tolower((unsigned char)hay[i + j]) != oomi_tolower((unsigned char)needle[j]))
                break;
        if (j == m)
            return 1;
    }
    return 0;
}

const char *oom_patterns_find(const oom_patterns *p, const char *text, size_t len)
{
    size_t i;
    if (!p || !text)
        return NULL;
    for (i = 0; i < p->count; i++)
        if (has(text, len, p->items[i]))
            return p->items[i];
    return NULL;
}

int oom_is_oom_exit(const oom_patterns *p, int exit_code, const char *tail, size_t len)
{
    return exit_code != 0 && oom_patterns_find(p, tail, len) != NULL;
}

const char *oom_job_event_name(oom_job_event_kind kind)
{
    switch (kind) {
    case OOM_EVENT_LAUNCH:
        return "launch";
    case OOM_EVENT_OOM:
        return "oom";
    case OOM_EVENT_RESTART:
        return "restart";
    case OOM_EVENT_EXIT:
        return "exit";
    case OOM_EVENT_SIGNAL:
        return "signal";
    case OOM_EVENT_KILL:
        return "kill";
    }
    return "unknown";
}
