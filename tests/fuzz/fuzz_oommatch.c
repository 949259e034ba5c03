/*
 * fuzz_oommatch.c - the OOM-message matcher: oom_patterns_parse, oom_patterns_find,
 * oom_is_oom_exit, against the file's documented rules re-implemented here.
 * Input: a patterns text, a NUL byte, then the output tail to search (NUL bytes allowed).
 * Invariants: the number of patterns is the number of lines that are neither blank nor '#'
 * comments once trimmed (none: OOM_EPARSE); find returns one of those patterns, the first (in
 * file order) that occurs case-insensitively in the tail, or NULL when none does; a job that
 * exited 0 is never an OOM exit; a failed one is an OOM exit only when find matches, and
 * exactly then when the tail has nothing that reports another error (no "Traceback", "Error",
 * "Exception", "terminate called after throwing", "Fatal Python error:") and no line longer
 * than the 4 KiB window. The shipped data/oom-patterns.txt is matched against the whole input.
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

/* whether the text could hold another error than an OOM, or a line read in several windows */
static int may_decide_otherwise(const char *text, size_t n)
{
    static const char *const markers[] = {"Traceback", "Error", "Exception",
                                          "terminate called after throwing", "Fatal Python error:"};
    size_t i, k, line = 0;
    for (i = 0; i < n; i++) {
        line = text[i] == '\n' ? 0 : line + 1;
        if (line > 4096)
            return 1;
        for (k = 0; k < sizeof(markers) / sizeof(markers[0]); k++)
            if (n - i >= strlen(markers[k]) && !memcmp(text + i, markers[k], strlen(markers[k])))
                return 1;
    }
    return 0;
}

/* oom_is_oom_exit for a failed job against what find says */
static void check_exit(const oom_patterns *p, const char *tail, size_t tlen, const char *found)
{
    int oom = oom_is_oom_exit(p, 134, tail, tlen);
    fuzz_check(oom_is_oom_exit(p, 0, tail, tlen) == 0);
    fuzz_check(!oom || found != NULL);
    if (!may_decide_otherwise(tail, tlen))
        fuzz_check(oom == (found != NULL));
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
        check_exit(p, tail, tlen, found);
        oom_patterns_free(p);
    }
    check_exit(shipped, text, size, oom_patterns_find(shipped, text, size));
    return 0;
}
