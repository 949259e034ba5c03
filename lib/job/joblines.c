/*
 * joblines.c - a job's output read as it comes, line by line, for what it says: the error that
 * ends it (the OOM scan, oommatch.c), its step ("step 12") and the micro-batch its ranks agreed
 * on after an OOM (OOMLESS_RECOVERY). No byte is looked at one by one: memchr finds the lines
 * and the 'O' of each OOMLESS_RECOVERY, memrchr the 'p' of the last "step", and a whole line is
 * read where it lies in the bytes read, once for all three.
 */
#define _GNU_SOURCE /* memrchr */
#include "job/job.h"

#include <json-c/json.h>
#include <limits.h>
#include <string.h>

/* "OOMLESS_RECOVERY {json}" (after a "[rank0]: " tag or not): what the ranks of a job running
 * oomless.torch/hf/lightning agreed on after an out-of-memory error (bindings/python/oomless/
 * torch.py, relaunch_message): "micro_batch" and "failed_ranks". The last wins. */
static void parse_recovery(oomi_launch *l, const char *s, size_t n)
{
    static const char key[] = "OOMLESS_RECOVERY ";
    const char *at = s, *end = s + n;
    json_object *doc, *v;
    char *text;
    size_t i;
    /* the first key: where its first byte is, compared */
    while ((size_t)(end - at) >= sizeof(key) - 1 &&
           (at = memchr(at, key[0], (size_t)(end - at) - (sizeof(key) - 1) + 1)) &&
           memcmp(at, key, sizeof(key) - 1))
        at++;
    if (!at || (size_t)(end - at) < sizeof(key) - 1)
        return;
    at += sizeof(key) - 1;
    if (!(text = oomi_strndup(at, n - (size_t)(at - s))))
        return;
    doc = json_tokener_parse(text);
    oomi_free(text);
    if (!doc)
        return;
    v = oomi_json_get(doc, "micro_batch"); /* a value out of range is no batch, not an error */
    if (json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= 1 &&
        json_object_get_int64(v) <= INT_MAX)
        l->recovery_batch = (int)json_object_get_int64(v);
    if (json_object_object_get_ex(doc, "failed_ranks", &v)) {
        size_t used = 0;
        l->oom_rank[0] = '\0';
        if (json_object_is_type(v, json_type_array))
            for (i = 0; i < json_object_array_length(v) && used + 12 < sizeof(l->oom_rank); i++)
                used += (size_t)oomi_snprintf(
                    l->oom_rank + used, sizeof(l->oom_rank) - used, "%s%lld", i ? "," : "",
                    (long long)json_object_get_int64(json_object_array_get_idx(v, i)));
        else if (json_object_is_type(v, json_type_int))
            oomi_snprintf(l->oom_rank, sizeof(l->oom_rank), "%lld",
                          (long long)json_object_get_int64(v));
    }
    json_object_put(doc);
}

/* "step 12", "Step 12/100", "global_step=12", "step: 12" (case-insensitive): the last wins, so
 * the candidates are taken from the end, where memrchr finds a 'p' or 'P' that ends "ste" (no
 * look at every byte), until one holds. s may hold several whole lines: a newline stops a number
 * as the end of a line does, and is no letter before "step" (so the last in s is the last of its
 * lines). */
static void parse_step(oomi_launch *l, const char *s, size_t n)
{
    const char *end = s + n, *from = s + 3, *lo = n > 3 ? memrchr(from, 'p', n - 3) : NULL,
               *up = n > 3 ? memrchr(from, 'P', n - 3) : NULL;
    while (lo || up) {
        const char *q = !up || (lo && lo > up) ? lo : up, *at = q - 3;
        size_t j = 4;
        if (q == lo)
            lo = memrchr(from, 'p', (size_t)(q - from));
        else
            up = memrchr(from, 'P', (size_t)(q - from));
        if ((at[0] | 0x20) != 's' || (at[1] | 0x20) != 't' || (at[2] | 0x20) != 'e' ||
            (at > s && oomi_isalpha((unsigned char)at[-1])))
            continue;
        if (at + j < end && (at[j] == 's' || at[j] == 'S'))
            continue; /* "steps" is a count, not a position */
        while (at + j < end && (at[j] == ' ' || at[j] == ':' || at[j] == '=' || at[j] == '#'))
            j++;
        if (at + j < end && at[j] >= '0' && at[j] <= '9') {
            long v = 0;
            while (at + j < end && at[j] >= '0' && at[j] <= '9' && v < 1000000000L)
                v = v * 10 + (at[j++] - '0');
            l->step = v;
            return;
        }
    }
}

static void take_line(oomi_launch *l, const char *b, size_t n)
{
    parse_step(l, b, n);
    parse_recovery(l, b, n);
    oomi_rdzv_scan(l, b, n);
}

/* Whole lines b[0..n), each with its newline, as take_line() would read them one by one: the
 * steps over all of them at once; each line's first recovery key where memchr finds its 'O'. */
static void take_lines(oomi_launch *l, const char *b, size_t n)
{
    static const char key[] = "OOMLESS_RECOVERY ";
    const char *at = b, *end = b + n, *line_end = b;
    parse_step(l, b, n);
    oomi_rdzv_scan(l, b, n);
    while ((at = memchr(at, key[0], (size_t)(end - at)))) {
        if (at >= line_end && (size_t)(end - at) >= sizeof(key) - 1 &&
            !memcmp(at, key, sizeof(key) - 1)) {
            const char *start = at;
            line_end = memchr(at, '\n', (size_t)(end - at));
            while (start > b && start[-1] != '\n')
                start--;
            parse_recovery(l, start, (size_t)(line_end - start));
        }
        at++;
    }
}

/* b[0..n) for the step and recovery lines, line by line: a line longer than ls->line is taken
 * in parts of that size (once the next byte comes) */
static void take_part(oomi_lines *ls, oomi_launch *l, const char *b, size_t n)
{
    while (n > 0) {
        size_t room = sizeof(ls->line) - ls->len, take;
        const char *nl;
        if (room == 0) { /* a full part: read, and the newline after it is its end */
            take_line(l, ls->line, ls->len);
            ls->len = 0;
            if (*b == '\n')
                b++, n--;
            continue;
        }
        nl = memchr(b, '\n', n < room ? n : room);
        take = nl ? (size_t)(nl - b) : n < room ? n : room;
        memcpy(ls->line + ls->len, b, take);
        ls->len += take;
        if (nl) {
            take_line(l, ls->line, ls->len);
            ls->len = 0;
        }
        b += take + (nl != NULL);
        n -= take + (nl != NULL);
    }
}

void oomi_lines_take(oomi_lines *ls, oomi_oomscan *scan, int err, oomi_launch *l, const char *b,
                     size_t n)
{
    const char *run = NULL; /* whole lines scanned, not yet read for steps and recovery */
    while (n > 0) {
        const char *nl = memchr(b, '\n', n);
        size_t len = nl ? (size_t)(nl - b) : n, seg = nl ? len + 1 : n;
        if (nl && ls->len == 0 && len <= sizeof(ls->line) && oomi_oomscan_line(scan, err, b, len)) {
            run = run ? run : b;
        } else {
            if (run)
                take_lines(l, run, (size_t)(b - run));
            run = NULL;
            oomi_oomscan_feed(scan, err, b, seg);
            take_part(ls, l, b, seg);
        }
        b += seg;
        n -= seg;
    }
    if (run)
        take_lines(l, run, (size_t)(b - run));
}

void oomi_lines_end(oomi_lines *ls, oomi_launch *l)
{
    take_line(l, ls->line, ls->len);
    ls->len = 0;
}
