/*
 * watch_events.c - what `oomless watch` computes besides sampling: memory bands, the
 * least-squares trend, the device peak of a plan file, and the events file `oomless run` writes.
 */
#include "watch/watch.h"

#include <json-c/json.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- bands --------------------------------------------------------------------------------- */

oom_band oom_band_classify(uint64_t used, const oom_budget *budget, uint64_t plan_peak)
{
    double warn;

    if (used == OOM_UNKNOWN || !budget || budget->usable_bytes == 0 ||
        oomi_check_version(budget->version, OOM_BUDGET_VERSION, "oom_budget"))
        return OOM_BAND_UNKNOWN;
    if (used > budget->usable_bytes)
        return OOM_BAND_CRITICAL;
    warn = (double)budget->usable_bytes * OOM_BAND_WARNING_FRACTION;
    if ((double)used > warn)
        return OOM_BAND_WARNING;
    if (plan_peak != OOM_UNKNOWN && used > plan_peak)
        return OOM_BAND_ELEVATED;
    return OOM_BAND_SAFE;
}

const char *oom_band_name(oom_band band)
{
    switch (band) {
    case OOM_BAND_SAFE:
        return "safe";
    case OOM_BAND_ELEVATED:
        return "elevated";
    case OOM_BAND_WARNING:
        return "warning";
    case OOM_BAND_CRITICAL:
        return "critical";
    default:
        return "unknown";
    }
}

/* ---- trend --------------------------------------------------------------------------------- */

int oom_trend_fit(oom_trend *out, const double *t, const uint64_t *used, size_t n, uint64_t current,
                  uint64_t limit)
{
    double tm = 0, ym = 0, sxx = 0, sxy = 0, syy = 0, span, fitted_last, cur;
    size_t i;
    int err;

    if (!out)
        return oomi_fail(OOM_EINVAL, "trend: missing argument");
    if ((err = oomi_check_version(out->version, OOM_TREND_VERSION, "oom_trend")))
        return err;
    *out = (oom_trend){.version = out->version};
    if (!t || !used || n < 2)
        return OOM_OK;
    for (i = 0; i < n; i++) {
        tm += t[i];
        ym += (double)used[i];
    }
    tm /= (double)n;
    ym /= (double)n;
    for (i = 0; i < n; i++) {
        double dt = t[i] - tm, dy = (double)used[i] - ym;
        sxx += dt * dt;
        sxy += dt * dy;
        syy += dy * dy;
    }
    if (!(sxx > 0))
        return OOM_OK;
    out->valid = 1;
    out->slope_bytes_per_s = sxy / sxx;
    out->r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
    span = t[n - 1] - t[0];
    out->growing = n >= OOM_TREND_MIN_SAMPLES && span >= OOM_TREND_MIN_SECONDS &&
                   out->slope_bytes_per_s > 0 && out->r2 >= OOM_TREND_MIN_R2 &&
                   out->slope_bytes_per_s * span >= (double)OOM_TREND_MIN_RISE;
    if (!out->growing || limit == OOM_UNKNOWN)
        return OOM_OK;
    fitted_last = ym + out->slope_bytes_per_s * (t[n - 1] - tm);
    cur = current == OOM_UNKNOWN ? fitted_last : (double)current;
    out->has_eta = 1;
    out->seconds_to_limit =
        cur >= (double)limit ? 0 : ((double)limit - cur) / out->slope_bytes_per_s;
    return OOM_OK;
}

/* ---- plan file ----------------------------------------------------------------------------- */

int oom_plan_file_peak(uint64_t *out, const char *path)
{
    oomi_plan_doc doc;
    int err;

    if (!out || !path)
        return oomi_fail(OOM_EINVAL, "plan peak: no file");
    if ((err = oomi_plan_doc_read(&doc, path, OOMI_PLAN_PEAK)) == OOM_OK)
        *out = doc.device_peak;
    return err;
}

/* ---- events -------------------------------------------------------------------------------- */

static const char *const event_names[] = {"other", "launch", "oom", "restart",
                                          "exit",  "signal", "kill"};

const char *oom_run_event_kind_name(oom_run_event_kind kind)
{
    return (unsigned)kind < OOMI_ARRAY_LEN(event_names) ? event_names[kind] : "other";
}

/* an optional integer field: -1 when absent, null or not a number */
static int64_t int_field(json_object *o, const char *key)
{
    json_object *v = oomi_json_get(o, key);
    if (json_object_is_type(v, json_type_int))
        return json_object_get_int64(v);
    return oomi_json_is_number(v) ? (int64_t)json_object_get_double(v) : -1;
}

/* "3.10 GiB" for an integer field in bytes; 0 when absent */
static int size_field(char *buf, size_t size, json_object *o, const char *key)
{
    int64_t v = int_field(o, key);
    if (v < 0)
        return 0;
    oom_format_size(buf, size, (uint64_t)v);
    return 1;
}

/* The line of an "oom_snapshot" event (the job's summary of the allocator's snapshot when it ran
 * out of memory, bindings/python/oomless/_oom_snapshot.py): "largest: 3.10 GiB (lm_head)
 * model.py:88 forward `logits = self.lm_head(h)`, ...; allocated A of R reserved, S inactive split;
 * tried T; rank 1; step 3". The origins (live bytes by allocating line) when stacks were recorded,
 * else the largest blocks. */
static char *snapshot_text(json_object *o)
{
    json_object *origins = oomi_json_get(o, "origins"), *largest = oomi_json_get(o, "largest");
    int frames = json_object_get_boolean(oomi_json_get(o, "frames"));
    json_object *list = json_object_is_type(origins, json_type_array) &&
                                (frames || json_object_get_boolean(oomi_json_get(o, "tagged")))
                            ? origins
                            : largest;
    oomi_sb sb = OOMI_SB_INIT;
    char a[16], b[16];
    size_t i, n = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
    char *out = NULL;

    oomi_sb_puts(&sb, list == origins ? "largest: " : "largest blocks: ");
    for (i = 0; i < n && i < 3; i++) {
        json_object *e = json_object_array_get_idx(list, i);
        json_object *where = oomi_json_get(e, "where"), *code = oomi_json_get(e, "code");
        json_object *module = oomi_json_get(e, "module");
        if (!size_field(a, sizeof(a), e, "bytes"))
            continue;
        oomi_sb_printf(&sb, "%s%s", i ? ", " : "", a);
        if (json_object_is_type(module, json_type_string))
            oomi_sb_printf(&sb, " (%s)", json_object_get_string(module));
        if (json_object_is_type(where, json_type_string))
            oomi_sb_printf(&sb, " %s", json_object_get_string(where));
        if (json_object_is_type(code, json_type_string))
            oomi_sb_printf(&sb, " `%s`", json_object_get_string(code));
        if (int_field(e, "count") > 1)
            oomi_sb_printf(&sb, " (%lld tensors)", (long long)int_field(e, "count"));
    }
    if (!n)
        oomi_sb_puts(&sb, "none");
    if (size_field(a, sizeof(a), o, "allocated_bytes") &&
        size_field(b, sizeof(b), o, "reserved_bytes"))
        oomi_sb_printf(&sb, "; allocated %s of %s reserved", a, b);
    if (size_field(a, sizeof(a), o, "inactive_split_bytes"))
        oomi_sb_printf(&sb, ", %s inactive split", a);
    if (size_field(a, sizeof(a), o, "tried_bytes"))
        oomi_sb_printf(&sb, "; tried %s", a);
    if (!frames)
        oomi_sb_puts(&sb, " (no allocation stacks: run --memory-history N records them)");
    if (int_field(o, "rank") >= 0)
        oomi_sb_printf(&sb, "; rank %lld", (long long)int_field(o, "rank"));
    if (int_field(o, "step") >= 0)
        oomi_sb_printf(&sb, "; step %lld", (long long)int_field(o, "step"));
    if (oomi_sb_finish(&sb, &out) != OOM_OK)
        return NULL;
    return out;
}

static int fill_event(oom_run_event *ev, json_object *o)
{
    json_object *t = oomi_json_get(o, "time"), *name = oomi_json_get(o, "event");
    size_t i;
    int64_t peak;
    char *copy, *detail = NULL;
    unsigned int version;

    if (!oomi_json_is_number(t) || !json_object_is_type(name, json_type_string))
        return OOM_EPARSE;
    if (!(copy = oomi_strdup(json_object_get_string(name))))
        return OOM_ENOMEM;
    if (ev->version >= 2 && !strcmp(copy, "oom_snapshot") && !(detail = snapshot_text(o))) {
        oomi_free(copy);
        return OOM_ENOMEM;
    }
    oom_run_event_dispose(ev);
    version = ev->version;
    /* a version-1 caller's struct ends before `detail` */
    memset(ev, 0, version >= 2 ? sizeof(*ev) : offsetof(oom_run_event, detail));
    ev->version = version;
    ev->name = copy;
    if (ev->version >= 2)
        ev->detail = detail;
    ev->time = json_object_get_double(t);
    for (i = 1; i < OOMI_ARRAY_LEN(event_names); i++)
        if (!strcmp(ev->name, event_names[i]))
            ev->kind = (oom_run_event_kind)i;
    ev->pid = int_field(o, "pid");
    ev->attempt = int_field(o, "attempt");
    ev->batch = int_field(o, "batch");
    ev->grad_accum = int_field(o, "grad_accum");
    ev->exit_code = int_field(o, "exit_code");
    peak = int_field(o, "peak_bytes");
    ev->peak_bytes = peak < 0 ? OOM_UNKNOWN : (uint64_t)peak;
    return OOM_OK;
}

int oom_run_event_parse(oom_run_event *out, const char *line, size_t len)
{
    json_tokener *tok;
    json_object *o;
    int err;

    if (!out || !line)
        return oomi_fail(OOM_EINVAL, "event: no line");
    if ((err = oomi_check_version(out->version, OOM_RUN_EVENT_VERSION, "oom_run_event")))
        return err;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    if (len > INT32_MAX || !(tok = json_tokener_new()))
        return oomi_nomem();
    o = json_tokener_parse_ex(tok, line, (int)len);
    if (!o || json_tokener_get_error(tok) != json_tokener_success ||
        json_tokener_get_parse_end(tok) != len)
        err = OOM_EPARSE;
    else
        err = fill_event(out, o);
    json_object_put(o);
    json_tokener_free(tok);
    if (err == OOM_ENOMEM)
        return oomi_nomem();
    if (err)
        return oomi_fail(err, "event line '%.*s' is not a JSON object with \"time\" and \"event\"",
                         (int)(len < 60 ? len : 60), line);
    return OOM_OK;
}

struct oom_event_log {
    char *path;
    off_t offset; /* bytes consumed: everything up to the last complete line */
    dev_t dev;    /* the file read so far; another one (renamed over it) starts over */
    ino_t ino;
    int64_t last_batch;
    size_t count, skipped;
    oom_run_event events[OOM_EVENTS_KEPT];
};

int oom_event_log_open(oom_event_log **out, const char *path)
{
    oom_event_log *log;

    if (!out || !path || !*path)
        return oomi_fail(OOM_EINVAL, "events: no file name");
    *out = NULL;
    if (!(log = oomi_calloc(1, sizeof(*log))) || !(log->path = oomi_strdup(path))) {
        oomi_free(log);
        return oomi_nomem();
    }
    log->last_batch = -1;
    *out = log;
    return OOM_OK;
}

void oom_run_event_dispose(oom_run_event *ev)
{
    if (!ev)
        return;
    oomi_free(ev->name);
    ev->name = NULL;
    if (ev->version >= 2) {
        oomi_free(ev->detail);
        ev->detail = NULL;
    }
}

static void forget_events(oom_event_log *log)
{
    size_t i;
    for (i = 0; i < log->count; i++)
        oom_run_event_dispose(&log->events[i]);
    log->count = 0;
}

void oom_event_log_free(oom_event_log *log)
{
    if (!log)
        return;
    forget_events(log);
    oomi_free(log->path);
    oomi_free(log);
}

static void keep_event(oom_event_log *log, oom_run_event *ev)
{
    if (ev->batch >= 0) {
        ev->batch_changed = log->last_batch >= 0 && ev->batch != log->last_batch;
        log->last_batch = ev->batch;
    }
    if (log->count == OOM_EVENTS_KEPT) {
        oom_run_event_dispose(&log->events[0]);
        memmove(log->events, log->events + 1, (OOM_EVENTS_KEPT - 1) * sizeof(*ev));
        log->count--;
    }
    log->events[log->count++] = *ev;
    ev->name = NULL; /* the log owns them now */
    ev->detail = NULL;
}

/* Parses the complete lines of buf[0..len); returns the bytes consumed. A run of NUL bytes (what
 * a crash can leave in place of what was written) also ends a piece of a line, so that an event
 * written after it is still read; the NULs count as one skipped piece. */
static size_t take_lines(oom_event_log *log, const char *buf, size_t len, size_t *added)
{
    size_t start = 0, end = len, i;
    oom_run_event ev = OOM_RUN_EVENT_INIT;

    while (end && buf[end - 1] != '\n') /* the last line may still be being written */
        end--;
    for (i = 0; i < end; i++) {
        if (buf[i] != '\n' && buf[i] != '\0')
            continue;
        if (buf[i] == '\0' && (i == 0 || buf[i - 1] != '\0'))
            log->skipped++;
        if (i > start && !(i == start + 1 && buf[start] == '\r')) {
            if (oom_run_event_parse(&ev, buf + start, i - start) == OOM_OK) {
                keep_event(log, &ev);
                (*added)++;
            } else {
                log->skipped++;
            }
        }
        start = i + 1;
    }
    oom_run_event_dispose(&ev);
    return end;
}

int oom_event_log_poll(oom_event_log *log, size_t *added)
{
    struct stat st;
    char *buf = NULL;
    size_t len = 0, n_added = 0;
    ssize_t r;
    int fd, err = OOM_OK;

    if (added)
        *added = 0;
    if (!log)
        return oomi_fail(OOM_EINVAL, "events: no log");
    /* a regular file only: a FIFO would block the view (and cannot be read from an offset) */
    if ((err = oomi_open_regular(&fd, log->path, O_RDONLY, "events file")))
        return err == OOM_ENOTFOUND ? (oomi_clear_error(), OOM_OK) : err;
    if (fstat(fd, &st) != 0) {
        err = oomi_fail(OOM_EIO, "cannot stat events '%s': %s", log->path, strerror(errno));
        goto done;
    }
    if (st.st_size < log->offset || st.st_dev != log->dev || st.st_ino != log->ino) {
        /* truncated, or another file now has the name: start over */
        log->dev = st.st_dev;
        log->ino = st.st_ino;
        log->offset = 0;
        forget_events(log);
        log->last_batch = -1;
    }
    if (st.st_size == log->offset)
        goto done;
    if ((uint64_t)(st.st_size - log->offset) > 64 * OOM_MiB) { /* skip to the recent part */
        log->offset = st.st_size - (off_t)(64 * OOM_MiB);
    }
    len = (size_t)(st.st_size - log->offset);
    if (!(buf = oomi_malloc(len + 1))) {
        err = oomi_nomem();
        goto done;
    }
    r = pread(fd, buf, len, log->offset);
    if (r < 0) {
        err = oomi_fail(OOM_EIO, "cannot read events '%s': %s", log->path, strerror(errno));
        goto done;
    }
    buf[r] = '\0';
    log->offset += (off_t)take_lines(log, buf, (size_t)r, &n_added);
    if (added)
        *added = n_added;
done:
    oomi_free(buf);
    close(fd);
    return err;
}

size_t oom_event_log_count(const oom_event_log *log)
{
    return log ? log->count : 0;
}

const oom_run_event *oom_event_log_at(const oom_event_log *log, size_t index)
{
    return log && index < log->count ? &log->events[index] : NULL;
}

size_t oom_event_log_skipped(const oom_event_log *log)
{
    return log ? log->skipped : 0;
}
