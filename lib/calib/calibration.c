/*
 * calibration.c - measured lines saved by `probe` (JSONL, one record per line, appended) and
 * looked up by GPU name + command template + workload, so that `run`, `plan` and `estimate` can
 * use what was measured on this machine.
 */
#include "calib/calib.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the store only grows (one line a probe or relaunch): read far more than a document */
#define STORE_READ_MAX ((size_t)1024 * 1024 * 1024)

/* The default store, and the length of its leading $HOME (0 under $XDG_CACHE_HOME): oomless
 * creates the directories below $HOME, never $HOME itself. */
static int default_store(char **out, size_t *home_len)
{
    char *base = NULL;
    int err;

    *out = NULL;
    if ((err = oomi_xdg_base(&base, home_len, "XDG_CACHE_HOME", ".cache")))
        return err;
    if (!base)
        return oomi_fail(OOM_ENOTFOUND, "calibration: neither $XDG_CACHE_HOME (an absolute path) "
                                        "nor $HOME is set");
    *out = oomi_asprintf("%s/oomless/calibration.jsonl", base);
    oomi_free(base);
    return *out ? OOM_OK : oomi_nomem();
}

int oom_calibration_default_path(char **out)
{
    if (!out)
        return oomi_fail(OOM_EINVAL, "calibration path: no output");
    return default_store(out, NULL);
}

int oom_calibration_command_key(char **out, const char *const *argv)
{
    json_object *a;
    const char *s;
    size_t i;

    if (!out || !argv)
        return oomi_fail(OOM_EINVAL, "calibration: no command");
    *out = NULL;
    if (!(a = json_object_new_array()))
        return oomi_nomem();
    for (i = 0; argv[i]; i++)
        json_object_array_add(a, json_object_new_string(argv[i]));
    s = json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    *out = s ? oomi_strdup(s) : NULL;
    json_object_put(a);
    return *out ? OOM_OK : oomi_nomem();
}

/* mkdir -p of the directory part of path, with `mode`; the first home_len bytes ($HOME) must be
 * a directory already: a missing $HOME is not created. */
static int make_parents(const char *path, size_t home_len, unsigned mode)
{
    char *dir = oomi_strdup(path), *p;
    struct stat st;
    int err = OOM_OK;

    if (!dir)
        return oomi_nomem();
    if (home_len) {
        dir[home_len] = '\0';
        int found = stat(dir, &st) == 0;
        if (!found || !S_ISDIR(st.st_mode)) {
            err = oomi_fail(OOM_EIO,
                            "calibration: $HOME '%s' %s; not creating it (set XDG_CACHE_HOME to "
                            "an absolute path, or name the calibration file)",
                            dir, found ? "is not a directory" : "does not exist");
            oomi_free(dir);
            return err;
        }
        dir[home_len] = path[home_len];
    }
    for (p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, (mode_t)mode) != 0 && errno != EEXIST) {
            err = oomi_fail(OOM_EIO, "cannot create '%s': %s", dir, strerror(errno));
            break;
        }
        *p = '/';
    }
    oomi_free(dir);
    return err;
}

/* No GPU holds this much (1 PiB; the largest, NVIDIA's B200, has 192 GB): a size above it is a
 * damaged record, not a measurement. */
#define ABSURD_BYTES 1125899906842624.0

/* Why a fitted line cannot describe memory (NULL when it can): a value that is not finite, fixed
 * memory or curvature below zero, or a peak that goes below zero at some batch >= 1. */
static const char *fit_damage(double fixed, double per, double per2)
{
    double b;
    if (!isfinite(fixed) || !isfinite(per) || !isfinite(per2))
        return "a value that is not a finite number";
    if (fixed < 0 || per2 < 0)
        return "negative fixed memory or curvature";
    if (fabs(fixed) > ABSURD_BYTES || fabs(per) > ABSURD_BYTES || per2 > ABSURD_BYTES)
        return "a size of more than 1 PiB";
    if (per2 == 0 && per < 0)
        return "a peak that falls below zero as the batch grows";
    b = per2 > 0 ? -per / (2 * per2) : 1; /* the lowest point of the curve at a batch >= 1 */
    b = b < 1 ? 1 : b;
    if (fixed + per * b + per2 * b * b < 0)
        return "a peak below zero";
    return NULL;
}

/* The members of the record the store knows, in this order; a record's other members are its
 * `extra` (version 2). */
static const char *const known[] = {"time",
                                    "gpu",
                                    "command",
                                    "workload",
                                    "fixed_bytes",
                                    "per_sample_bytes",
                                    "per_sample2_bytes",
                                    "recommended_batch",
                                    "max_batch",
                                    "usable_bytes",
                                    "traced"};

/* extra's members appended to o; OOM_EPARSE when it is not one JSON object, or names a member
 * the store writes itself */
static int add_extra(json_object *o, const char *extra)
{
    json_object *x = json_tokener_parse(extra);
    size_t i;
    int err = OOM_OK;
    if (!x || !json_object_is_type(x, json_type_object)) {
        json_object_put(x);
        return oomi_fail(OOM_EPARSE, "calibration: extra members '%s' are not a JSON object",
                         extra);
    }
    json_object_object_foreach(x, key, val)
    {
        for (i = 0; i < OOMI_ARRAY_LEN(known) && strcmp(known[i], key); i++)
            ;
        if (i < OOMI_ARRAY_LEN(known)) {
            err = oomi_fail(OOM_EPARSE, "calibration: extra member '%s' is one of the record's own",
                            key);
            break;
        }
        oomi_json_put(o, key, json_object_get(val));
    }
    json_object_put(x);
    return err;
}

/* The shortest decimal form that reads back as v (Python's repr of a float: 0.1, not
 * 0.10000000000000001), so that a line does not depend on which writer wrote it */
static json_object *shortest_double(double v)
{
    char buf[40];
    int prec;
    for (prec = 15; prec < 17; prec++) {
        oomi_snprintf(buf, sizeof(buf), "%.*g", prec, v);
        if (oomi_strtod(buf, NULL) == v)
            break;
    }
    if (prec == 17)
        oomi_snprintf(buf, sizeof(buf), "%.17g", v);
    if (!strpbrk(buf, ".eEni"))
        strcat(buf, ".0");
    return json_object_new_double_s(v, buf);
}

static json_object *record_json(const oom_calibration *c)
{
    json_object *o = json_object_new_object(), *cmd = NULL;
    if (!o)
        return NULL;
    if (c->command)
        cmd = json_tokener_parse(c->command);
    oomi_json_put(o, "time", oomi_json_number(c->time, 3));
    oomi_json_put(o, "gpu", json_object_new_string(c->gpu ? c->gpu : ""));
    oomi_json_put(o, "command", cmd ? cmd : json_object_new_string(c->command ? c->command : ""));
    oomi_json_put(o, "workload", json_object_new_string(c->workload ? c->workload : ""));
    oomi_json_put(o, "fixed_bytes", json_object_new_int64(llround(c->fit.fixed_bytes)));
    oomi_json_put(o, "per_sample_bytes", json_object_new_int64(llround(c->fit.per_sample_bytes)));
    oomi_json_put(o, "per_sample2_bytes", shortest_double(c->fit.per_sample2_bytes));
    oomi_json_put(o, "recommended_batch", json_object_new_int(c->recommended_batch));
    oomi_json_put(o, "max_batch", json_object_new_int(c->max_batch));
    oomi_json_put(o, "usable_bytes", json_object_new_int64((int64_t)c->usable_bytes));
    if (c->traced)
        oomi_json_put(o, "traced", json_object_new_boolean(1));
    return o;
}

int oom_calibration_save(const char *path, const oom_calibration *c)
{
    char *def = NULL, *line = NULL;
    json_object *o = NULL;
    const char *s;
    const char *bad;
    size_t home_len = 0;
    int err, e, fd = -1;

    if (c && (err = oomi_check_version(c->version, OOM_CALIBRATION_VERSION, "oom_calibration")))
        return err;
    if (!c || !c->fit.valid)
        return oomi_fail(OOM_EINVAL, "calibration: no measured line to save");
    if ((bad = fit_damage(c->fit.fixed_bytes, c->fit.per_sample_bytes, c->fit.per_sample2_bytes)))
        return oomi_fail(OOM_EINVAL,
                         "calibration: the measured line (%g + %g x batch + %g x batch^2) has "
                         "%s; not saved",
                         c->fit.fixed_bytes, c->fit.per_sample_bytes, c->fit.per_sample2_bytes,
                         bad);
    if (!path && (err = default_store(&def, &home_len)))
        return err;
    if (!(o = record_json(c))) {
        err = oomi_nomem();
        goto done;
    }
    if (c->version >= 2 && c->extra && (err = add_extra(o, c->extra)))
        goto done;
    if (!(s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE)) ||
        !(line = oomi_asprintf("%s\n", s))) {
        err = oomi_nomem();
        goto done;
    }
    /* the default location is a private cache (0700, as the XDG spec says); a named file's
     * folders are made as `mkdir -p` would */
    if ((err = make_parents(def ? def : path, home_len, def ? 0700 : 0755)))
        goto done;
    path = def ? def : path;
    if ((err = oomi_open_regular(&fd, path, O_RDWR | O_CREAT | O_APPEND | O_NOFOLLOW,
                                 "calibration file")))
        goto done;
    if ((e = oomi_append_line(fd, line, strlen(line))))
        err = e == ENOMEM ? oomi_nomem()
                          : oomi_fail(OOM_EIO,
                                      "cannot save the calibration record to '%s': %s (nothing "
                                      "was saved)",
                                      path, strerror(e));
done:
    if (fd >= 0)
        close(fd);
    json_object_put(o);
    oomi_free(line);
    oomi_free(def);
    return err;
}

void oom_calibration_free(oom_calibration *c)
{
    if (!c)
        return;
    oomi_free(c->gpu);
    oomi_free(c->command);
    oomi_free(c->workload);
    oomi_free(c->extra);
    oomi_free(c);
}

/* a string field, NULL when absent or not a string */
static const char *get_str(json_object *o, const char *key)
{
    json_object *v = oomi_json_get(o, key);
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* a number field, 0 when absent or not a number (a damaged record is skipped, not refused) */
static double get_num(json_object *o, const char *key)
{
    json_object *v = oomi_json_get(o, key);
    return oomi_json_is_number(v) ? json_object_get_double(v) : 0;
}

/* A record `oomless trace --calibrate` wrote: allocated bytes, valid on any GPU. */
static int is_traced(json_object *o)
{
    return json_object_get_boolean(oomi_json_get(o, "traced"));
}

/* Why a record cannot be used (a value no probe, run or trace writes: not a number, NaN,
 * infinite, negative, not whole where a batch is, absurdly large), written to why; 0 when it
 * can be. A field that is absent reads as 0, as before. */
static int record_damage(json_object *o, char *why, size_t n)
{
    static const struct {
        const char *key;
        double max;
        int whole; /* a batch: a whole number */
    } fields[] = {{"fixed_bytes", ABSURD_BYTES, 0},
                  {"per_sample_bytes", ABSURD_BYTES, 0},
                  {"per_sample2_bytes", ABSURD_BYTES, 0},
                  {"usable_bytes", ABSURD_BYTES, 0},
                  {"recommended_batch", INT_MAX, 1},
                  {"max_batch", INT_MAX, 1},
                  {"time", 1e12, 0}};
    const char *bad;
    size_t i;
    for (i = 0; i < OOMI_ARRAY_LEN(fields); i++) {
        json_object *v = oomi_json_get(o, fields[i].key);
        double x;
        if (!v)
            continue;
        if (!oomi_json_is_number(v)) {
            oomi_snprintf(why, n, "'%s' is not a number", fields[i].key);
            return 1;
        }
        x = json_object_get_double(v);
        if (!isfinite(x) || x > fields[i].max ||
            (x < 0 && strcmp(fields[i].key, "per_sample_bytes")) || x < -fields[i].max ||
            (fields[i].whole && x != floor(x))) {
            oomi_snprintf(why, n, "'%s' is %s", fields[i].key,
                          json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
            return 1;
        }
    }
    if ((bad = fit_damage(get_num(o, "fixed_bytes"), get_num(o, "per_sample_bytes"),
                          get_num(o, "per_sample2_bytes")))) {
        oomi_snprintf(why, n, "its line has %s", bad);
        return 1;
    }
    return 0;
}

/* Whether a line's record is for this key (a traced record, gpu "", is for every GPU). */
static int matches(json_object *o, const char *gpu, const char *command, const char *workload)
{
    json_object *cmd;
    const char *g = get_str(o, "gpu"), *w = get_str(o, "workload"), *cs;
    if (!g || (strcmp(g, gpu ? gpu : "") && !(is_traced(o) && !*g)) ||
        strcmp(w ? w : "", workload ? workload : ""))
        return 0;
    if (!json_object_object_get_ex(o, "command", &cmd))
        return 0;
    cs = json_object_to_json_string_ext(cmd,
                                        JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    return cs && !strcmp(cs, command ? command : "");
}

/* the record's members the store does not know, as c->extra (NULL when none) */
static int fill_extra(oom_calibration *c, json_object *o)
{
    json_object *x = json_object_new_object();
    const char *s;
    size_t i;
    if (!x)
        return -1;
    json_object_object_foreach(o, key, val)
    {
        for (i = 0; i < OOMI_ARRAY_LEN(known) && strcmp(known[i], key); i++)
            ;
        if (i == OOMI_ARRAY_LEN(known))
            oomi_json_put(x, key, json_object_get(val));
    }
    s = json_object_object_length(x)
            ? json_object_to_json_string_ext(x, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE)
            : NULL;
    c->extra = s ? oomi_strdup(s) : NULL;
    json_object_put(x);
    return s && !c->extra ? -1 : 0;
}

static int to_record(oom_calibration **out, json_object *o, const char *command)
{
    oom_calibration *c = oomi_calloc(1, sizeof(*c));
    if (c) {
        c->version = OOM_CALIBRATION_VERSION;
        c->fit.version = OOM_PROBE_FIT_VERSION;
    }
    if (!c || !(c->gpu = oomi_strdup(get_str(o, "gpu"))) || !(c->command = oomi_strdup(command)) ||
        !(c->workload = oomi_strdup(get_str(o, "workload") ? get_str(o, "workload") : ""))) {
        oom_calibration_free(c);
        return oomi_nomem();
    }
    c->fit.valid = 1;
    c->fit.fixed_bytes = get_num(o, "fixed_bytes");
    c->fit.per_sample_bytes = get_num(o, "per_sample_bytes");
    c->fit.per_sample2_bytes = get_num(o, "per_sample2_bytes");
    c->fit.quadratic = c->fit.per_sample2_bytes != 0;
    c->recommended_batch = (int)get_num(o, "recommended_batch");
    c->max_batch = (int)get_num(o, "max_batch");
    c->usable_bytes = (uint64_t)get_num(o, "usable_bytes");
    c->time = get_num(o, "time");
    c->traced = is_traced(o);
    if (fill_extra(c, o)) {
        oom_calibration_free(c);
        return oomi_nomem();
    }
    *out = c;
    return OOM_OK;
}

/* One piece of a line, parsed by its length: the object, or NULL when it is not exactly one
 * JSON object (a record cut short, two glued together, garbage). */
static json_object *parse_piece(json_tokener *tok, const char *s, size_t n)
{
    json_object *o;
    while (n && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n > INT32_MAX)
        return NULL;
    json_tokener_reset(tok);
    o = json_tokener_parse_ex(tok, s, (int)n);
    if (o && json_tokener_get_error(tok) == json_tokener_success &&
        json_tokener_get_parse_end(tok) == n && json_object_is_type(o, json_type_object))
        return o;
    json_object_put(o);
    return NULL;
}

static bool blank(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t' || *s == '\r')) {
        s++;
        n--;
    }
    return !n;
}

struct scan {
    const char *gpu, *command, *workload;
    json_object *best;         /* the newest match */
    size_t damaged, first_bad; /* damaged lines, and the number of the first */
    char why[160];             /* what was wrong with the first */
};

#define CUT_OR_NUL "a record cut short or NUL bytes, as a full disk or a crash leaves"

static void consider(struct scan *sc, json_object *o)
{
    /* the newest match wins, but a traced record never replaces a measured one */
    if (matches(o, sc->gpu, sc->command, sc->workload) &&
        !(sc->best && !is_traced(sc->best) && is_traced(o))) {
        json_object_put(sc->best);
        sc->best = o;
    } else {
        json_object_put(o);
    }
}

/* Lines end at '\n'. A run of NUL bytes (what a crash can leave in place of what was written)
 * also ends a piece, so that a record written after it is still read; the line is damaged. */
static void scan_text(struct scan *sc, json_tokener *tok, const char *text, size_t len)
{
    size_t i, start = 0, line = 1;
    bool bad = false;
    char why[sizeof(sc->why)] = "";

    for (i = 0; i <= len; i++) {
        char c = i < len ? text[i] : '\n';
        if (c != '\n' && c != '\0')
            continue;
        if (!blank(text + start, i - start)) {
            json_object *o = parse_piece(tok, text + start, i - start);
            if (o && !record_damage(o, why, sizeof(why))) {
                consider(sc, o);
            } else {
                if (!o)
                    oomi_snprintf(why, sizeof(why), CUT_OR_NUL);
                json_object_put(o);
                bad = true;
            }
        }
        if (c == '\0') {
            oomi_snprintf(why, sizeof(why), CUT_OR_NUL);
            bad = true;
        }
        if (c == '\n') {
            if (bad && !sc->damaged++) {
                sc->first_bad = line;
                oomi_snprintf(sc->why, sizeof(sc->why), "%s", why);
            }
            bad = false;
            line++;
        }
        start = i + 1;
    }
}

int oom_calibration_lookup(oom_calibration **out, const char *path, const char *gpu,
                           const char *command, const char *workload)
{
    struct scan sc = {gpu, command, workload, NULL, 0, 0, ""};
    json_tokener *tok = NULL;
    char *def = NULL, *text = NULL;
    size_t len, bom;
    int err;

    if (!out || !command)
        return oomi_fail(OOM_EINVAL, "calibration lookup: missing argument");
    *out = NULL;
    if (!path && (err = default_store(&def, NULL)))
        return err;
    path = path ? path : def;
    if ((err = oomi_read_regular(&text, &len, path, "calibration file", STORE_READ_MAX))) {
        if (err == OOM_ENOTFOUND)
            err = oomi_fail(OOM_ENOTFOUND, "no calibration file '%s'", path);
        goto done;
    }
    if (!(tok = json_tokener_new())) {
        err = oomi_nomem();
        goto done;
    }
    bom = oomi_bom_len(text, len); /* a store edited by hand in a Windows editor */
    scan_text(&sc, tok, text + bom, len - bom);
    if (sc.damaged)
        oomi_notice("calibration file '%s': skipped %zu damaged line%s (the first is line %zu: %s)",
                    path, sc.damaged, sc.damaged == 1 ? "" : "s", sc.first_bad, sc.why);
    if (!sc.best)
        err = oomi_fail(OOM_ENOTFOUND, "no calibration record in '%s' for GPU '%s', command %s%s%s",
                        path, gpu ? gpu : "", command, workload && *workload ? ", workload " : "",
                        workload ? workload : "");
    else
        err = to_record(out, sc.best, command);
done:
    if (tok)
        json_tokener_free(tok);
    json_object_put(sc.best);
    oomi_free(text);
    oomi_free(def);
    return err;
}
