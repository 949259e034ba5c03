/* apply_comment.c - the whole numbers written in the YAML comments beside a value: on the value's
 * own line (after it) and on a comment line just above it. apply reports the ones that still
 * name an old value (apply_run.c) and never edits them. */
#include "apply/apply.h"

#include <string.h>

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* a byte that makes a digit next to it part of a word (bf16, A100, 1e5) or of a number */
static bool joins(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static size_t line_end(const char *t, size_t len, size_t at)
{
    const char *nl = memchr(t + at, '\n', len - at);
    return nl ? (size_t)(nl - t) : len;
}

/* The '#' that starts a comment in t[from..to), the text after a value: YAML wants a blank
 * before it; a quoted scalar that follows (a flow map's next entry) is skipped. `to` when none. */
static size_t comment_in(const char *t, size_t from, size_t to)
{
    size_t i;
    char q = 0;

    for (i = from; i < to; i++) {
        char c = t[i];
        if (q) {
            if (q == '"' && c == '\\')
                i++;
            else if (c == q && q == '\'' && i + 1 < to && t[i + 1] == '\'')
                i++;
            else if (c == q)
                q = 0;
            continue;
        }
        if ((c == '\'' || c == '"') && i > from && strchr(" \t,[{:", t[i - 1]))
            q = c;
        else if (c == '#' && (i == from || t[i - 1] == ' ' || t[i - 1] == '\t'))
            return i;
    }
    return to;
}

/* every whole number in t[from..to) */
static int numbers(const char *t, size_t from, size_t to, size_t line, oomi_number_fn fn,
                   void *user)
{
    size_t i = from, j;
    int err;

    while (i < to) {
        if (!is_digit(t[i]) || (i > from && (joins(t[i - 1]) || t[i - 1] == '.'))) {
            i++;
            continue;
        }
        for (j = i; j < to && is_digit(t[j]); j++)
            ;
        /* 2.5 is not 2; a sentence's full stop after a number is fine */
        if (!(j < to && (joins(t[j]) || (t[j] == '.' && j + 1 < to && is_digit(t[j + 1])))) &&
            j - i <= 18) {
            long long v = 0;
            size_t k;
            for (k = i; k < j; k++)
                v = v * 10 + (t[k] - '0');
            if ((err = fn(line, v, user)))
                return err;
        }
        i = j;
    }
    return OOM_OK;
}

int oomi_comment_numbers(const char *t, size_t len, size_t start, size_t end, oomi_number_fn fn,
                         void *user)
{
    size_t line, col, ls, le = line_end(t, len, end), c;
    int err;

    oomi_line_col(t, start, &line, &col);
    if ((c = comment_in(t, end, le)) < le && (err = numbers(t, c + 1, le, line, fn, user)))
        return err;
    for (ls = start; ls > 0 && t[ls - 1] != '\n'; ls--)
        ;
    if (ls == 0 || line < 2)
        return OOM_OK;
    le = ls - 1; /* the line above: t[c..le) */
    for (c = le; c > 0 && t[c - 1] != '\n'; c--)
        ;
    c += strspn(t + c, " \t");
    if (c < le && t[c] == '#')
        return numbers(t, c + 1, le, line - 1, fn, user);
    return OOM_OK;
}
