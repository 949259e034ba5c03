/*
 * sync.c - the supervisors of one job spread over several nodes (each node's `oomless run`
 * around its own torchrun agent) agreeing on relaunches through a record in a shared folder.
 *
 * Each appends JSON Lines to DIR/oomless-sync-<id>.jsonl, one whole line at a time under flock
 * (oomi_append_line), and reopens the file for every look (NFS revalidates a file on open and
 * on lock; Lustre and GPFS are coherent):
 *   {"time", "job", "node", "attempt", "event": "launch", "batch", "grad_accum"}
 *   {..., "event": "oom", "failed_batch", "batch", "grad_accum", "step"}   batch null: gave up
 *   {..., "event": "end", "exit_code"}                 the attempt ended without out of memory
 *   {..., "event": "exit", "exit_code"}                the supervisor leaves the job
 *
 * What counts is the order of the lines, not the nodes' clocks. A node writes "launch" before it
 * starts torchrun, and torchrun's workers run only once every node's agent joined the
 * rendezvous; so an "oom" record of an attempt that follows this node's own "launch" of it is
 * about this run, and an older one is not (an earlier run of the same job id). The first such
 * record is the attempt's decision: every node relaunches at the batch it names. The nodes of
 * an attempt after the first are those whose "launch" follows the decision that started it; of
 * the first attempt, those whose "launch" is at most SYNC_JOIN_WINDOW_S older than this node's
 * and who did not leave before it came.
 */
#include "job/job.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYNC_READ_MAX      ((size_t)16 << 20) /* ~80,000 records: a job's whole life */
#define SYNC_JOIN_WINDOW_S 600.0              /* torchrun's default rendezvous join_timeout */
#define SYNC_STEP_MS       50

enum { EV_LAUNCH, EV_OOM, EV_END, EV_EXIT };
static const char *const event_names[] = {"launch", "oom", "end", "exit"};

struct rec {
    char *node;
    int attempt, event;
    int batch, accum, failed_batch, exit_code;
    double time;
    long off; /* where its line starts */
};

struct oomi_sync {
    char *path, *job, *node;
    double wait_s;
    int attempt;
    long floor, prev_floor; /* the decisions that began this attempt and the one before; -1 */
    long decision_off;      /* the current attempt's decision, -1 */
    struct rec *recs;
    size_t nrec;
    long long seen_size; /* the file's size when last read, -1: read again */
    size_t damaged;
    oomi_sync_look last;
};

static void recs_free(oomi_sync *s)
{
    size_t i;
    for (i = 0; i < s->nrec; i++)
        oomi_free(s->recs[i].node);
    oomi_free(s->recs);
    s->recs = NULL;
    s->nrec = 0;
}

void oomi_sync_free(oomi_sync *s)
{
    if (!s)
        return;
    recs_free(s);
    oomi_free(s->path);
    oomi_free(s->job);
    oomi_free(s->node);
    oomi_free(s);
}

const char *oomi_sync_path(const oomi_sync *s)
{
    return s->path;
}

const char *oomi_sync_job(const oomi_sync *s)
{
    return s->job;
}

const char *oomi_sync_node(const oomi_sync *s)
{
    return s->node;
}

void oomi_sync_set_node(oomi_sync *s, const char *node)
{
    char *copy = oomi_strdup(node);
    if (copy) {
        oomi_free(s->node);
        s->node = copy;
    }
}

/* "oomless-sync-<id>.jsonl", the id's characters other than [A-Za-z0-9._-] as '_' (the records
 * carry the id itself: two ids that read the same here share the file, not their records) */
static char *file_name(const char *dir, const char *id)
{
    char safe[121];
    size_t i;
    for (i = 0; id[i] && i + 1 < sizeof(safe); i++)
        safe[i] = oomi_isalnum((unsigned char)id[i]) || strchr("._-", id[i]) ? id[i] : '_';
    safe[i] = '\0';
    return oomi_asprintf("%s/oomless-sync-%s.jsonl", dir, safe);
}

int oomi_sync_open(oomi_sync **out, const char *dir, const char *id, const char *const *argv,
                   double wait_s)
{
    oomi_sync *s;
    struct stat st;
    char host[256];
    int fd, err;

    *out = NULL;
    if (stat(dir, &st) != 0)
        return oomi_fail(OOM_EIO, "sync folder '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return oomi_fail(OOM_EIO, "sync folder '%s' is not a folder", dir);
    if (!(s = oomi_calloc(1, sizeof(*s))))
        return oomi_nomem();
    s->job = id && *id ? oomi_strdup(id) : argv ? oomi_job_id(argv) : NULL;
    if (!s->job) {
        oomi_sync_free(s);
        return oomi_fail(OOM_EINVAL,
                         "sync folder '%s': no job id to share with the other nodes: give "
                         "--sync-id ID (or OOMLESS_SYNC_ID; torchrun's --rdzv-id, $SLURM_JOB_ID "
                         "and --rdzv-endpoint are taken when present)",
                         dir);
    }
    if (gethostname(host, sizeof(host)) != 0)
        oomi_snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    s->node = oomi_asprintf("%s:%ld", host, (long)getpid());
    s->path = file_name(dir, s->job);
    s->wait_s = wait_s;
    s->floor = s->prev_floor = s->decision_off = -1;
    s->seen_size = -1;
    if (!s->node || !s->path) {
        oomi_sync_free(s);
        return oomi_nomem();
    }
    /* made now: a folder that cannot hold it fails before the job starts */
    if ((err = oomi_open_regular(&fd, s->path, O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW,
                                 "sync file"))) {
        oomi_sync_free(s);
        return err;
    }
    close(fd);
    *out = s;
    return OOM_OK;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* A record's common members; the caller adds its own, then append(). */
static json_object *record(const oomi_sync *s, int event)
{
    json_object *o = json_object_new_object();
    oomi_json_put(o, "time", oomi_json_number(oomi_now_unix(), 6));
    oomi_json_put(o, "job", json_object_new_string(s->job));
    oomi_json_put(o, "node", json_object_new_string(s->node));
    oomi_json_put(o, "attempt", json_object_new_int(s->attempt));
    oomi_json_put(o, "event", json_object_new_string(event_names[event]));
    return o;
}

static int append(oomi_sync *s, json_object *o)
{
    const char *text;
    char *line = NULL;
    int fd, err, e;

    if (!o)
        return oomi_nomem();
    text =
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!text || !(line = oomi_asprintf("%s\n", text))) {
        json_object_put(o);
        return oomi_nomem();
    }
    json_object_put(o);
    if ((err = oomi_open_regular(&fd, s->path, O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW,
                                 "sync file"))) {
        oomi_free(line);
        return err;
    }
    e = oomi_append_line(fd, line, strlen(line));
    close(fd);
    oomi_free(line);
    s->seen_size = -1;
    if (e)
        return oomi_fail(OOM_EIO, "cannot write the sync file '%s': %s", s->path, strerror(e));
    return OOM_OK;
}

int oomi_sync_launch(oomi_sync *s, int attempt, int batch, int accum)
{
    json_object *o;
    s->attempt = attempt;
    s->decision_off = -1;
    o = record(s, EV_LAUNCH);
    oomi_json_put(o, "batch", json_object_new_int(batch));
    oomi_json_put(o, "grad_accum", json_object_new_int(accum));
    return append(s, o);
}

int oomi_sync_oom(oomi_sync *s, int failed_batch, int batch, int accum, long step)
{
    json_object *o = record(s, EV_OOM);
    oomi_json_put(o, "failed_batch", json_object_new_int(failed_batch));
    oomi_json_put(o, "batch", batch > 0 ? json_object_new_int(batch) : NULL);
    oomi_json_put(o, "grad_accum", batch > 0 ? json_object_new_int(accum) : NULL);
    oomi_json_put(o, "step", step >= 0 ? json_object_new_int64(step) : NULL);
    return append(s, o);
}

int oomi_sync_end(oomi_sync *s, int exit_code)
{
    json_object *o = record(s, EV_END);
    oomi_json_put(o, "exit_code", json_object_new_int(exit_code));
    return append(s, o);
}

int oomi_sync_exit(oomi_sync *s, int exit_code)
{
    json_object *o = record(s, EV_EXIT);
    oomi_json_put(o, "exit_code", json_object_new_int(exit_code));
    return append(s, o);
}

void oomi_sync_next(oomi_sync *s)
{
    s->prev_floor = s->floor;
    s->floor = s->decision_off;
    s->seen_size = -1;
}

/* ---- reading ------------------------------------------------------------------------------ */

static int int_member(json_object *o, const char *key, int otherwise)
{
    json_object *v = oomi_json_get(o, key);
    int64_t x;
    if (!json_object_is_type(v, json_type_int))
        return otherwise;
    x = json_object_get_int64(v);
    return x >= INT_MIN && x <= INT_MAX ? (int)x : otherwise;
}

/* One line as a record of this job; 0 when it is another job's, -1 when damaged. */
static int parse_rec(struct rec *r, const oomi_sync *s, const char *line, size_t len, long off)
{
    json_object *o, *v;
    char *text = oomi_strndup(line, len);
    size_t k;
    int rc = -1;
    if (!text)
        return -1;
    o = json_tokener_parse(text);
    oomi_free(text);
    if (!json_object_is_type(o, json_type_object))
        goto done;
    v = oomi_json_get(o, "job");
    if (!json_object_is_type(v, json_type_string))
        goto done;
    if (strcmp(json_object_get_string(v), s->job)) {
        rc = 0;
        goto done;
    }
    memset(r, 0, sizeof(*r));
    r->attempt = int_member(o, "attempt", 0);
    v = oomi_json_get(o, "event");
    r->event = -1;
    for (k = 0; json_object_is_type(v, json_type_string) && k < OOMI_ARRAY_LEN(event_names); k++)
        if (!strcmp(json_object_get_string(v), event_names[k]))
            r->event = (int)k;
    v = oomi_json_get(o, "node");
    if (r->attempt < 1 || r->event < 0 || !json_object_is_type(v, json_type_string) ||
        !(r->node = oomi_strdup(json_object_get_string(v))))
        goto done;
    r->batch = int_member(o, "batch", 0);
    r->accum = int_member(o, "grad_accum", 0);
    r->failed_batch = int_member(o, "failed_batch", 0);
    r->exit_code = int_member(o, "exit_code", 1);
    v = oomi_json_get(o, "time");
    r->time = oomi_json_is_number(v) ? json_object_get_double(v) : 0;
    r->off = off;
    rc = 1;
done:
    json_object_put(o);
    return rc;
}

/* Reads the file again when its size changed (*changed 1). */
static int reread(oomi_sync *s, int *changed)
{
    struct stat st;
    char *text = NULL, *p, *nl;
    size_t len = 0, damaged = 0;
    int fd, err, kind;

    *changed = 0;
    if ((err = oomi_open_regular(&fd, s->path, O_RDONLY, "sync file")))
        return err;
    if (fstat(fd, &st) == 0 && (long long)st.st_size == s->seen_size) {
        close(fd);
        return OOM_OK;
    }
    err = oomi_read_fd(&text, &len, fd, s->path, SYNC_READ_MAX);
    close(fd);
    if (err)
        return err;
    recs_free(s);
    for (p = text; p < text + len; p = nl + 1) {
        struct rec r, *grown;
        size_t n;
        if (!(nl = memchr(p, '\n', len - (size_t)(p - text))))
            break;                        /* a line still being written: read next time */
        n = strnlen(p, (size_t)(nl - p)); /* a run of NULs a crash left ends the line */
        if (n == 0)
            continue;
        if ((kind = parse_rec(&r, s, p, n, (long)(p - text))) <= 0) {
            damaged += kind < 0;
            continue;
        }
        if (!(grown = oomi_reallocarray(s->recs, s->nrec + 1, sizeof(*s->recs)))) {
            oomi_free(r.node);
            oomi_free(text);
            return oomi_nomem();
        }
        s->recs = grown;
        s->recs[s->nrec++] = r;
    }
    s->seen_size = (long long)len;
    oomi_free(text);
    if (damaged > s->damaged)
        oomi_notice("sync file '%s': skipped %zu damaged line(s)", s->path, damaged);
    s->damaged = damaged;
    *changed = 1;
    return OOM_OK;
}

/* This node's "launch" of `attempt` after `floor`, or NULL. */
static const struct rec *own_launch(const oomi_sync *s, int attempt, long floor)
{
    size_t i;
    for (i = 0; i < s->nrec; i++)
        if (s->recs[i].event == EV_LAUNCH && s->recs[i].attempt == attempt &&
            s->recs[i].off > floor && !strcmp(s->recs[i].node, s->node))
            return &s->recs[i];
    return NULL;
}

/* The nodes of `attempt` (each by its first "launch" of it after `floor`; `mine` is this
 * node's): of the first attempt, those launched at most SYNC_JOIN_WINDOW_S before this node and
 * still there when it launched (no "exit" between). An allocated list, *n long. */
static int members(const struct rec ***out, size_t *n, const oomi_sync *s, int attempt, long floor,
                   const struct rec *mine)
{
    const struct rec **m = NULL, **grown;
    size_t i, j;
    *out = NULL;
    *n = 0;
    for (i = 0; mine && i < s->nrec; i++) {
        const struct rec *r = &s->recs[i];
        int keep = r->event == EV_LAUNCH && r->attempt == attempt && r->off > floor &&
                   !(attempt == 1 && r->time < mine->time - SYNC_JOIN_WINDOW_S);
        for (j = 0; keep && j < *n; j++)
            keep = strcmp(m[j]->node, r->node) != 0;
        for (j = 0; keep && j < s->nrec; j++) /* left before this node came */
            keep = !(s->recs[j].event == EV_EXIT && s->recs[j].off > r->off &&
                     s->recs[j].off < mine->off && !strcmp(s->recs[j].node, r->node));
        if (!keep)
            continue;
        if (!(grown = oomi_reallocarray(m, *n + 1, sizeof(*m)))) {
            oomi_free(m);
            *n = 0;
            return oomi_nomem();
        }
        m = grown;
        m[(*n)++] = r;
    }
    *out = m;
    return OOM_OK;
}

static int in_list(const struct rec **m, size_t n, const char *node)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!strcmp(m[i]->node, node))
            return 1;
    return 0;
}

/* Whether the node of launch `l` has ended its attempt: its "oom" or "end" of it, its "exit",
 * or a later "launch". */
static int has_ended(const oomi_sync *s, const struct rec *l)
{
    size_t i;
    for (i = 0; i < s->nrec; i++) {
        const struct rec *r = &s->recs[i];
        if (r->off <= l->off || strcmp(r->node, l->node))
            continue;
        if (r->event == EV_EXIT || (r->event == EV_LAUNCH && r->attempt > l->attempt) ||
            (r->attempt == l->attempt && (r->event == EV_OOM || r->event == EV_END)))
            return 1;
    }
    return 0;
}

static int compute(oomi_sync *s, oomi_sync_look *k)
{
    const struct rec *mine = own_launch(s, s->attempt, s->floor), **now = NULL, **before = NULL;
    size_t i, n_now = 0, n_before = 0;
    long since;
    int err;

    memset(k, 0, sizeof(*k));
    if (!mine)
        return OOM_OK; /* not launched yet */
    since = s->attempt == 1 ? mine->off : s->floor;
    if ((err = members(&now, &n_now, s, s->attempt, s->floor, mine)) ||
        (s->attempt > 1 && (err = members(&before, &n_before, s, s->attempt - 1, s->prev_floor,
                                          own_launch(s, s->attempt - 1, s->prev_floor)))))
        goto done;
    for (i = 0; i < n_now; i++)
        k->pending += !has_ended(s, now[i]);
    k->ended = k->pending == 0;
    for (i = 0; i < s->nrec; i++) {
        const struct rec *r = &s->recs[i];
        if (!k->decided && r->event == EV_OOM && r->attempt == s->attempt && r->off > mine->off) {
            k->decided = 1;
            oomi_snprintf(k->by, sizeof(k->by), "%s", r->node);
            k->batch = r->batch > 0 && r->accum > 0 ? r->batch : 0;
            k->accum = k->batch ? r->accum : 0;
            k->failed_batch = r->failed_batch;
            s->decision_off = r->off;
        }
        if (!k->lost[0] && r->event == EV_EXIT && r->off > since && r->exit_code != 0 &&
            strcmp(r->node, s->node) &&
            (in_list(now, n_now, r->node) || in_list(before, n_before, r->node))) {
            oomi_snprintf(k->lost, sizeof(k->lost), "%s", r->node);
            k->lost_status = r->exit_code;
        }
    }
done:
    oomi_free(now);
    oomi_free(before);
    return err;
}

int oomi_sync_look_now(oomi_sync *s, oomi_sync_look *out)
{
    int changed, err;
    if ((err = reread(s, &changed)))
        return err;
    if (changed && (err = compute(s, &s->last))) {
        s->seen_size = -1; /* computed again next time */
        return err;
    }
    *out = s->last;
    return OOM_OK;
}

int oomi_sync_wait(oomi_sync *s, oomi_sync_look *look, oomi_sync_until done, int *timed_out,
                   const volatile sig_atomic_t *stop)
{
    double end = oomi_now_mono() + s->wait_s;
    int err;
    *timed_out = 0;
    for (;;) {
        if ((err = oomi_sync_look_now(s, look)))
            return err;
        if (done(look))
            return OOM_OK;
        if (stop && *stop)
            return oomi_fail(OOM_EINTERRUPTED,
                             "stopped by signal %d while waiting for the other nodes", (int)*stop);
        if (oomi_now_mono() >= end) {
            *timed_out = 1;
            return OOM_OK;
        }
        poll(NULL, 0, SYNC_STEP_MS);
    }
}
