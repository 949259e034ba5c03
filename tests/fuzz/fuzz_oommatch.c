/*
 * fuzz_oommatch.c - the OOM-message matcher: oom_patterns_parse, oom_patterns_find,
 * oom_is_oom_exit, against the file's documented rules re-implemented here.
 * Input: a patterns text, a NUL byte, then the output tail to search (NUL bytes allowed).
 * Invariants: the number of patterns is the number of lines that are neither blank nor '#'
 * comments once trimmed (none: OOM_EPARSE); find returns one of those patterns, the first (in
 * file order) that occurs case-insensitively in the tail, or NULL when none does; a job that
 * exited 0 is never an OOM exit, a failed one is exactly when find matches. The shipped
 * data/oom-patterns.txt is matched against the whole input too.
 */
#include "fuzz.h"
#include "oomless.h"

#include <ctype.h>
#include <string.h>

static oom_patterns *shipped;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup_env();
    fuzz_check(oom_patterns_load(&shipped, NULL) == OOM_OK && oom_patterns_count(shipped) > 10);
    return 0;
}

/* the documented rules: one pattern per line, trimmed, '#' comments and blank lines skipped */
static size_t next_pattern(const char *text, size_t len, size_t *pos, size_t *b, size_t *e)
{
    while (*pos < len) {
        size_t i = *pos;
        *b = i;
        while (i < len && text[i] != '\n')
            i++;
        *e = i;
        *pos = i + 1;
        while (*b < *e && isspace((unsigned char)text[*b]))
            (*b)++;
        while (*e > *b && isspace((unsigned char)text[*e - 1]))
            (*e)--;
        if (*b < *e && text[*b] != '#')
            return 1;
    }
    return 0;
}

static int occurs(const char *hay, size_t n, const char *needle, size_t m)
{
    size_t i, j;
    for (i = 0; m && i + m <= n; i++) {
        for (j = 0;
             j < m && tolower((unsigned char)hay[i + j]) == tolower((unsigned char)needle[j]); j++)
            ;
        if (j == m)
            return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data, *nul = memchr(data, 0, size), *found, *want = NULL;
    size_t plen = nul ? (size_t)(nul - text) : size, pos = 0, b, e, count = 0, want_len = 0;
    const char *tail = nul ? nul + 1 : text + size;
    size_t tlen = size - plen - (nul ? 1 : 0);
    oom_patterns *p = (oom_patterns *)1;
    int err;

    while (next_pattern(text, plen, &pos, &b, &e)) {
        if (!want && occurs(tail, tlen, text + b, e - b)) {
            want = text + b;
            want_len = e - b;
        }
        count++;
    }
    err = oom_patterns_parse(&p, text, plen, "fuzz");
    if (!count) {
        fuzz_check(err == OOM_EPARSE && p == NULL);
    } else {
        fuzz_check(err == OOM_OK && oom_patterns_count(p) == count);
        found = oom_patterns_find(p, tail, tlen);
        if (want)
            fuzz_check(found && strlen(found) == want_len && !memcmp(found, want, want_len));
        else
            fuzz_check(found == NULL);
        fuzz_check(oom_is_oom_exit(p, 0, tail, tlen) == 0);
        fuzz_check(oom_is_oom_exit(p, 134, tail, tlen) == (found != NULL));
        oom_patterns_free(p);
    }
    found = oom_patterns_find(shipped, text, size);
    fuzz_check(oom_is_oom_exit(shipped, 1, text, size) == (found != NULL));
    return 0;
}
