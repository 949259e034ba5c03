/* oommatch.c - recognising an out-of-memory death: exit status + the error that ended the job,
 * read line by line from its whole output, against patterns. */
#include "job/job.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

/* The patterns, and an index to find whether any occurs in a line without looking at every byte
 * (Wu and Manber's multi-pattern search, "A fast algorithm for multi-pattern searching", 1994,
 * with blocks of three bytes): the window of `shortest` bytes ending at a position can hold the
 * start of a pattern only where its last three bytes, case folded, are three consecutive bytes
 * of one of the patterns' first `shortest`; shift[block] is the least distance from such bytes
 * to the end of a pattern's first `shortest` (blocks hashed to 16 bits: a collision only makes
 * a shift smaller), so the search moves on by up to shortest - 2 bytes per look. At a shift of 0
 * the patterns whose first `shortest` end in those bytes (key) are compared. Without an index
 * (a pattern shorter than 3 bytes): every position is tried. */
struct oom_patterns {
    size_t count;
    char **items;
    size_t shortest;
    uint8_t *shift; /* 65536 entries, NULL: no index */
    uint32_t *key;  /* per pattern: its block ending at shortest - 1 */
};

void oom_patterns_free(oom_patterns *p)
{
    size_t i;
    if (!p)
        return;
    for (i = 0; i < p->count; i++)
        oomi_free(p->items[i]);
    oomi_free(p->items);
    oomi_free(p->shift);
    oomi_free(p->key);
    oomi_free(p);
}

/* a byte as oomi_tolower folds it (ASCII) */
static inline unsigned fold(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* The three bytes ending at s with bit 5 set: both cases of a letter are one (a few other bytes
 * fall together too, '_' with DEL, '@' with '`': a block of the index then stands for more, and
 * the search only moves on less far) */
static inline uint32_t block(const char *s)
{
    return ((uint32_t)(unsigned char)s[-2] << 16 | (uint32_t)(unsigned char)s[-1] << 8 |
            (unsigned char)s[0]) |
           0x202020u;
}

static inline unsigned hash(uint32_t b)
{
    return (b ^ b >> 10) & 0xffffu;
}

static int build_index(oom_patterns *p)
{
    size_t i, j, m = SIZE_MAX, top;
    for (i = 0; i < p->count; i++)
        if (strlen(p->items[i]) < m)
            m = strlen(p->items[i]);
    p->shortest = m;
    if (m < 3)
        return OOM_OK;
    if (!(p->shift = oomi_malloc(65536)) || !(p->key = oomi_calloc(p->count, sizeof(*p->key))))
        return oomi_nomem();
    top = m - 2 < 255 ? m - 2 : 255;
    memset(p->shift, (int)top, 65536);
    for (i = 0; i < p->count; i++) {
        for (j = 2; j < m; j++) {
            unsigned h = hash(block(p->items[i] + j));
            if (m - 1 - j < p->shift[h])
                p->shift[h] = (uint8_t)(m - 1 - j);
        }
        p->key[i] = block(p->items[i] + m - 1);
    }
    return OOM_OK;
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
    if (!err)
        err = build_index(p);
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
    if ((err = oomi_read_file(&text, &len, path, OOMI_READ_MAX)) == OOM_OK)
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

/* whether pattern i starts at hay[0..n) */
static int starts_here(const oom_patterns *p, size_t i, const char *hay, size_t n)
{
    const char *q = p->items[i];
    size_t j;
    for (j = 0; j < n && q[j] && fold((unsigned char)hay[j]) == fold((unsigned char)q[j]); j++)
        ;
    return !q[j];
}

/* whether any pattern occurs in text[0..len) */
static int any_pattern(const oom_patterns *p, const char *text, size_t len)
{
    size_t m = p->shortest, at, i;
    if (!p->shift) {
        for (at = 0; at < len; at++)
            for (i = 0; i < p->count; i++)
                if (starts_here(p, i, text + at, len - at))
                    return 1;
        return 0;
    }
    for (at = m - 1; at < len;) {
        uint32_t b = block(text + at);
        size_t d = p->shift[hash(b)];
        if (d) {
            at += d;
            continue;
        }
        for (i = 0; i < p->count; i++)
            if (p->key[i] == b && starts_here(p, i, text + at + 1 - m, len - (at + 1 - m)))
                return 1;
        at++;
    }
    return 0;
}

const char *oom_patterns_find(const oom_patterns *p, const char *text, size_t len)
{
    size_t i;
    if (!p || !text || !any_pattern(p, text, len))
        return NULL;
    for (i = 0; i < p->count; i++)
        if (has(text, len, p->items[i]))
            return p->items[i];
    return NULL;
}

/* ---- the error that ended the job ----------------------------------------------------------
 *
 * Each line (at most OOMI_SCAN_WINDOW bytes at a time; a longer line is read in windows that
 * overlap by OOMI_SCAN_OVERLAP, so that a pattern across a window's edge is still whole in one)
 * is either an OOM (a pattern occurs in it), another fatal error (below), or neither. The last
 * of the first two kinds decides. A Python traceback restarts the decision: its frame lines
 * (indented) are skipped, and the exception line that ends it, with the lines after it, decide.
 */

#define ERR_NONE  0
#define ERR_OOM   1
#define ERR_OTHER 2

/* Exceptions that only report that a child process failed: the child's own error, printed
 * before them, stays the cause. torch.distributed.elastic's ChildFailedError (PyTorch,
 * torch/distributed/elastic/multiprocessing/errors/__init__.py) ends torchrun's output after
 * a worker's traceback; subprocess.CalledProcessError (CPython, Lib/subprocess.py) a launcher's. */
static const char *const wrapper_errors[] = {"ChildFailedError", "CalledProcessError"};

/* Lines that report a fatal error without a Python exception line: libstdc++'s verbose
 * terminate handler (GCC, libstdc++-v3/libsupc++/vterminate.cc) and CPython's fatal_error()
 * (Python/pylifecycle.c). */
static const char *const fatal_prefixes[] = {"terminate called after throwing an instance of",
                                             "Fatal Python error:"};

static int starts(const char *s, size_t n, const char *prefix)
{
    size_t m = strlen(prefix);
    return n >= m && !memcmp(s, prefix, m);
}

/* "[rank0]: " (torchrun's per-rank prefix) or "[default0]:" (its --tee prefix): skipped, so
 * that what follows is read as the start of the line. */
static size_t tag_prefix(const char *s, size_t n)
{
    size_t i;
    if (n < 3 || s[0] != '[')
        return 0;
    for (i = 1; i < n && i < 64 && s[i] != ']'; i++)
        if (s[i] == '[' || isspace((unsigned char)s[i]))
            return 0;
    if (i + 1 >= n || s[i] != ']' || s[i + 1] != ':')
        return 0;
    i += 2;
    return i < n && s[i] == ' ' ? i + 1 : i;
}

/* A Python exception line: a dotted name ending in "Error" or "Exception", then ':' or the end
 * ("ValueError: ...", "torch.OutOfMemoryError: ..."). Returns the name's length, 0 when not. */
static size_t exception_name(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (oomi_isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.'))
        i++;
    if (i == 0 || (i < n && s[i] != ':') || isdigit((unsigned char)s[0]))
        return 0;
    if ((i >= 5 && !memcmp(s + i - 5, "Error", 5)) ||
        (i >= 9 && !memcmp(s + i - 9, "Exception", 9)))
        return i;
    return 0;
}

static int wrapper_error(const char *name, size_t len)
{
    size_t k, m;
    for (k = 0; k < OOMI_ARRAY_LEN(wrapper_errors); k++)
        if (len >= (m = strlen(wrapper_errors[k])) && !memcmp(name + len - m, wrapper_errors[k], m))
            return 1;
    return 0;
}

static int fatal_line(const char *s, size_t n)
{
    size_t k, name;
    for (k = 0; k < OOMI_ARRAY_LEN(fatal_prefixes); k++)
        if (starts(s, n, fatal_prefixes[k]))
            return 1;
    return (name = exception_name(s, n)) > 0 && !wrapper_error(s, name);
}

/* A log record at an error level: Python logging's "ERROR", "CRITICAL" (and glog-style "FATAL")
 * as an upper-case word, NCCL's "NCCL WARN" (its failures are warnings: src/include/debug.h) */
static int error_record(const char *s, size_t n)
{
    static const char *const words[] = {"ERROR", "CRITICAL", "FATAL", "NCCL WARN"};
    const char *end = s + n, *at;
    size_t k, m;
    for (k = 0; k < OOMI_ARRAY_LEN(words); k++)
        for (at = s, m = strlen(words[k]);
             (size_t)(end - at) >= m && (at = memchr(at, words[k][0], (size_t)(end - at) - m + 1));
             at++)
            if (!memcmp(at, words[k], m) && (at == s || !oomi_isalnum((unsigned char)at[-1])) &&
                (at + m == end || !oomi_isalnum((unsigned char)at[m])))
                return 1;
    return 0;
}

/* One line (or one window of a long line; `continued` for the windows after the first) of the
 * stream `out` (1: the job's stdout). Its shape, decided at its start, is kept in st->shaped:
 * a Python exception line or a fatal line, or a line of the message that follows one (until a
 * blank line: "RuntimeError: NCCL error ...\nLast error:\nCuda failure 'out of memory'",
 * libstdc++'s "  what():  ..."), or a log record at an error level (error_record). On stderr a
 * pattern anywhere makes the line an OOM; stdout also carries data (generated text, a dataset
 * sample): there only a line of that shape is one. */
static void classify(oomi_oomscan *sc, struct oomi_scanline *st, const char *s, size_t n,
                     int continued, int out)
{
    int at_start = !continued, fatal = 0, ending = 0;
    size_t name;
    if (at_start) {
        size_t skip = tag_prefix(s, n), t = 0;
        if (skip > 0) /* "[rank3]: " -> "rank3" */
            for (t = 0; t + 1 < sizeof(st->tag) && 1 + t < skip && s[1 + t] != ']'; t++)
                st->tag[t] = s[1 + t];
        st->tag[t] = '\0';
        s += skip;
        n -= skip;
    }
    if (at_start && starts(s, n, "Traceback (most recent call last):")) {
        if (!st->in_frames)
            st->before = sc->last;
        st->in_frames = 1;
        st->message = 0;
        sc->last = ERR_OTHER; /* a traceback reports an error; its exception line says which */
        return;
    }
    if (st->in_frames) {
        if (continued || n == 0 || isspace((unsigned char)s[0]))
            return; /* "  File ...", "    source line": code, not a message */
        st->in_frames = 0;
        ending = 1;
        if ((name = exception_name(s, n)) > 0 && wrapper_error(s, name))
            sc->last = st->before; /* a child's failure reported: the child's error stands */
    }
    if (at_start) {
        fatal = fatal_line(s, n);
        st->shaped = fatal || ending || (st->message && n > 0);
        st->message = fatal || ending || (st->message && n > 0);
    }
    if (sc->patterns && any_pattern(sc->patterns, s, n) &&
        (!out || st->shaped || (at_start && error_record(s, n)))) {
        size_t k = n < sizeof(sc->oom_line) - 1 ? n : sizeof(sc->oom_line) - 1;
        const char *digits = st->tag;
        sc->last = ERR_OOM;
        while (*digits && !isdigit((unsigned char)*digits))
            digits++; /* "rank3", "default3": the number */
        oomi_snprintf(sc->oom_rank, sizeof(sc->oom_rank), "%s", digits);
        memcpy(sc->oom_line, s, k);
        sc->oom_line[k] = '\0';
        while (k > 0 && (sc->oom_line[k - 1] == '\r' || sc->oom_line[k - 1] == ' '))
            sc->oom_line[--k] = '\0';
    } else if (fatal)
        sc->last = ERR_OTHER;
}

void oomi_oomscan_init(oomi_oomscan *sc, const oom_patterns *p)
{
    memset(sc, 0, sizeof(*sc));
    sc->patterns = p;
}

/* the line in st, as it stands, classified; st starts the next one (or the next window of a
 * long one: the last OOMI_SCAN_OVERLAP bytes again) */
static void classify_held(oomi_oomscan *sc, struct oomi_scanline *st, int out, int ended)
{
    classify(sc, st, st->text, st->len, st->continued, out);
    if (ended) {
        st->len = 0;
        st->continued = 0;
        return;
    }
    memmove(st->text, st->text + st->len - OOMI_SCAN_OVERLAP, OOMI_SCAN_OVERLAP);
    st->len = OOMI_SCAN_OVERLAP;
    st->continued = 1;
}

int oomi_oomscan_line(oomi_oomscan *sc, int stream, const char *s, size_t n)
{
    struct oomi_scanline *st = &sc->s[stream ? 1 : 0];
    if (st->len || n > sizeof(st->text))
        return 0;
    classify(sc, st, s, n, 0, !stream);
    return 1;
}

void oomi_oomscan_feed(oomi_oomscan *sc, int stream, const char *b, size_t n)
{
    struct oomi_scanline *st = &sc->s[stream ? 1 : 0];
    int out = !stream;
    while (n > 0) {
        const char *nl = memchr(b, '\n', n);
        size_t take = nl ? (size_t)(nl - b) : n, room = sizeof(st->text) - st->len;
        if (nl && st->len == 0 && take <= sizeof(st->text)) {
            /* a whole line of at most a window, read where it lies */
            classify(sc, st, b, take, 0, out);
            b += take + 1;
            n -= take + 1;
            continue;
        }
        if (take > room)
            take = room;
        memcpy(st->text + st->len, b, take);
        st->len += take;
        b += take;
        n -= take;
        if (n > 0 && *b == '\n') { /* the line ends */
            classify_held(sc, st, out, 1);
            b++;
            n--;
        } else if (st->len == sizeof(st->text)) { /* a window of a long line */
            classify_held(sc, st, out, 0);
        }
    }
}

int oomi_oomscan_verdict(oomi_oomscan *sc)
{
    int i;
    for (i = 0; i < 2; i++)
        if (sc->s[i].len > 0) /* an unterminated last line */
            classify_held(sc, &sc->s[i], !i, 1);
    return sc->last == ERR_OOM;
}

int oom_is_oom_exit(const oom_patterns *p, int exit_code, const char *text, size_t len)
{
    oomi_oomscan sc;
    if (exit_code == 0 || !p || !text)
        return 0;
    oomi_oomscan_init(&sc, p);
    oomi_oomscan_feed(&sc, 1, text, len); /* read as a job's stderr: every line counts */
    return oomi_oomscan_verdict(&sc);
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
    case OOM_EVENT_STOP:
        return "stop";
    case OOM_EVENT_CONTINUE:
        return "continue";
    }
    return "unknown";
}
