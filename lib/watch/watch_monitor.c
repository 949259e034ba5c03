/*
 * watch_monitor.c - the monitor behind `oomless watch`: samples every GPU with its processes,
 * enriches each process from /proc (command, user, whether the PID exists here, the batch size
 * `oomless run` put in its environment), classifies bands, fits trends over a window, and turns
 * a snapshot into JSON (its CSV rows: watch_csv.c).
 *
 * Cost: /proc is read once per new PID and again only every PROC_REFRESH_S seconds; a sample
 * is otherwise one NVML pass plus a least-squares fit per GPU and per process.
 */
#include "watch/watch.h"

#include <json-c/json.h>

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROC_REFRESH_S 5.0
#define HIST_CAP       1024 /* samples kept per series (the window is also bounded in time) */
#define MAX_BUDGETS    64
#define ENVIRON_MAX    (1u << 20)

/* a ring of (monotonic time, bytes) */
struct series {
    double t[HIST_CAP];
    uint64_t v[HIST_CAP];
    size_t head, n; /* oldest at head */
};

struct gpu_state {
    char name[96], uuid[96];
    oom_budget budget;
    struct series hist;
};

struct proc_state {
    uint32_t pid;
    int gpu; /* NVML index */
    unsigned generation;
    double read_at; /* monotonic time of the last /proc read */
    oom_watch_process info;
    struct series hist;
};

struct oom_monitor {
    oom_gpu_session *session;
    double window_s;
    uint64_t plan_peak;
    char *margin; /* NULL: OOM_DEFAULT_SAFETY_MARGIN */
    oom_budget all_budget, budgets[MAX_BUDGETS];
    int has_all_budget, has_budget[MAX_BUDGETS];
    struct gpu_state *gpus;
    size_t gpu_cap;
    struct proc_state **procs;
    size_t proc_count, proc_cap;
    unsigned generation;
    double scratch_t[HIST_CAP];
    uint64_t scratch_v[HIST_CAP];
    int have_snapshot;
    oom_watch_snapshot snap;
};

static double now_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- history ------------------------------------------------------------------------------- */

static void series_add(struct series *s, double t, uint64_t v, double window)
{
    while (s->n && (s->n == HIST_CAP || s->t[s->head] < t - window)) {
        s->head = (s->head + 1) % HIST_CAP;
        s->n--;
    }
    s->t[(s->head + s->n) % HIST_CAP] = t;
    s->v[(s->head + s->n) % HIST_CAP] = v;
    s->n++;
}

static void series_fit(oom_monitor *m, oom_trend *out, const struct series *s, uint64_t current,
                       uint64_t limit)
{
    size_t i;
    for (i = 0; i < s->n; i++) {
        m->scratch_t[i] = s->t[(s->head + i) % HIST_CAP];
        m->scratch_v[i] = s->v[(s->head + i) % HIST_CAP];
    }
    oom_trend_fit(out, m->scratch_t, m->scratch_v, s->n, current, limit);
}

/* ---- /proc --------------------------------------------------------------------------------- */

/* Reads a whole /proc file into *out (NUL-terminated; *out NULL when it cannot be read). The
 * kernel bounds these files (a command line by the argument space of exec, ARG_MAX), so
 * nothing is cut. OOM_ENOMEM only. */
static int read_whole(char **out, ssize_t *len, const char *path)
{
    size_t cap = 4096;
    char *buf = NULL;
    *out = NULL;
    *len = -1;
    for (;;) {
        char *nb = oomi_realloc(buf, cap);
        if (!nb) {
            oomi_free(buf);
            return oomi_nomem();
        }
        buf = nb;
        if ((*len = oomi_read_prefix(path, buf, cap)) < 0 || (size_t)*len + 1 < cap)
            break;
        cap *= 2;
    }
    if (*len < 0) {
        oomi_free(buf);
        return OOM_OK;
    }
    *out = buf;
    return OOM_OK;
}

/* The command line, arguments joined by spaces; a zombie or kernel thread: "[its name]"; ""
 * when neither can be read. */
static int read_command(oom_watch_process *p, const char *dir)
{
    char path[64], *buf;
    ssize_t n, i;
    int err;

    oomi_snprintf(path, sizeof(path), "%s/cmdline", dir);
    if ((err = read_whole(&buf, &n, path)))
        return err;
    while (n > 0 && buf[n - 1] == '\0')
        n--;
    if (n > 0) {
        for (i = 0; i < n; i++)
            if (buf[i] == '\0' || buf[i] == '\n' || buf[i] == '\t')
                buf[i] = ' ';
        buf[n] = '\0';
        p->command = buf;
        return OOM_OK;
    }
    oomi_free(buf);
    oomi_snprintf(path, sizeof(path), "%s/comm", dir);
    if ((err = read_whole(&buf, &n, path)))
        return err;
    while (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    p->command = n > 0 ? oomi_asprintf("[%s]", buf) : oomi_strdup("");
    oomi_free(buf);
    return p->command ? OOM_OK : oomi_nomem();
}

static int read_user(oom_watch_process *p, uid_t uid)
{
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res && res->pw_name)
        p->user = oomi_strdup(res->pw_name);
    else
        p->user = oomi_asprintf("%u", (unsigned)uid);
    return p->user ? OOM_OK : oomi_nomem();
}

static int64_t env_int(const char *entry, const char *name)
{
    size_t n = strlen(name);
    char *end;
    long long v;
    if (strncmp(entry, name, n) || entry[n] != '=' || !entry[n + 1])
        return -1;
    errno = 0;
    v = strtoll(entry + n + 1, &end, 10);
    return *end || errno || v < 0 ? -1 : (int64_t)v;
}

/* OOMLESS_BATCH_SIZE / OOMLESS_GRAD_ACCUM from /proc/<pid>/environ, when readable */
static void read_environ(oom_watch_process *p, const char *dir)
{
    char path[64], *buf = NULL, *e, *end;
    size_t cap = 16384;
    ssize_t n = -1;

    oomi_snprintf(path, sizeof(path), "%s/environ", dir);
    for (;;) {
        char *nb = oomi_realloc(buf, cap);
        if (!nb)
            break;
        buf = nb;
        if ((n = oomi_read_prefix(path, buf, cap)) < 0 || (size_t)n + 1 < cap || cap >= ENVIRON_MAX)
            break;
        cap *= 2;
    }
    if (!buf || n <= 0) {
        oomi_free(buf);
        return;
    }
    for (e = buf, end = buf + n; e < end; e += strlen(e) + 1) {
        int64_t v;
        if ((v = env_int(e, "OOMLESS_BATCH_SIZE")) >= 0)
            p->batch_size = v;
        else if ((v = env_int(e, "OOMLESS_GRAD_ACCUM")) >= 0)
            p->grad_accum = v;
    }
    oomi_free(buf);
}

static void proc_strings_free(oom_watch_process *p)
{
    oomi_free(p->command);
    oomi_free(p->user);
    p->command = p->user = NULL;
}

/* Fills p from /proc; its strings are never NULL afterwards. OOM_ENOMEM only. */
static int read_proc(oom_watch_process *p)
{
    char dir[32];
    struct stat st;
    int err;

    proc_strings_free(p);
    p->batch_size = p->grad_accum = -1;
    oomi_snprintf(dir, sizeof(dir), "/proc/%u", (unsigned)p->pid);
    p->local = p->pid > 0 && stat(dir, &st) == 0;
    if (!p->local) { /* another PID namespace: say nothing rather than something wrong */
        p->command = oomi_strdup("");
        p->user = oomi_strdup("");
        return p->command && p->user ? OOM_OK : oomi_nomem();
    }
    if ((err = read_command(p, dir)) || (err = read_user(p, st.st_uid)))
        return err;
    read_environ(p, dir);
    return OOM_OK;
}

static void proc_state_free(struct proc_state *ps)
{
    proc_strings_free(&ps->info);
    oomi_free(ps);
}

/* ---- per-process state --------------------------------------------------------------------- */

static struct proc_state *proc_find(oom_monitor *m, uint32_t pid, int gpu)
{
    size_t i;
    struct proc_state *ps, **np;

    for (i = 0; i < m->proc_count; i++)
        if (m->procs[i]->pid == pid && m->procs[i]->gpu == gpu)
            return m->procs[i];
    if (m->proc_count == m->proc_cap) {
        size_t cap = m->proc_cap ? m->proc_cap * 2 : 16;
        if (!(np = oomi_reallocarray(m->procs, cap, sizeof(*np))))
            return NULL;
        m->procs = np;
        m->proc_cap = cap;
    }
    if (!(ps = oomi_calloc(1, sizeof(*ps))))
        return NULL;
    ps->pid = pid;
    ps->gpu = gpu;
    ps->info.version = OOM_WATCH_PROCESS_VERSION;
    ps->info.trend.version = OOM_TREND_VERSION;
    ps->read_at = -1e300;
    m->procs[m->proc_count++] = ps;
    return ps;
}

/* forgets processes not seen in the latest sample */
static void proc_sweep(oom_monitor *m)
{
    size_t i = 0;
    while (i < m->proc_count) {
        if (m->procs[i]->generation == m->generation) {
            i++;
            continue;
        }
        proc_state_free(m->procs[i]);
        m->procs[i] = m->procs[--m->proc_count];
    }
}

/* ---- the monitor --------------------------------------------------------------------------- */

int oom_monitor_create(oom_monitor **out, oom_gpu_session *session)
{
    oom_monitor *m;
    if (!out || !session)
        return oomi_fail(OOM_EINVAL, "monitor: no GPU session");
    *out = NULL;
    if (!(m = oomi_calloc(1, sizeof(*m))))
        return oomi_nomem();
    m->session = session;
    m->window_s = 60;
    m->plan_peak = OOM_UNKNOWN;
    m->snap.plan_peak_bytes = OOM_UNKNOWN;
    *out = m;
    return OOM_OK;
}

static void snapshot_clear(oom_monitor *m)
{
    size_t i, j;
    for (i = 0; m->snap.gpus && i < m->snap.gpu_count; i++) {
        oom_watch_gpu *wg = m->snap.gpus[i];
        for (j = 0; wg && j < wg->process_count; j++)
            oomi_free(wg->processes[j]);
        if (wg)
            oomi_free(wg->processes);
        oomi_free(wg);
    }
    oomi_free(m->snap.gpus);
    oom_gpu_list_free((oom_gpu_list *)m->snap.list);
    memset(&m->snap, 0, sizeof(m->snap));
    m->have_snapshot = 0;
}

void oom_monitor_free(oom_monitor *m)
{
    size_t i;
    if (!m)
        return;
    snapshot_clear(m);
    for (i = 0; i < m->proc_count; i++)
        proc_state_free(m->procs[i]);
    oomi_free(m->procs);
    oomi_free(m->gpus);
    oomi_free(m->margin);
    oomi_free(m);
}

int oom_monitor_set_budget(oom_monitor *m, int index, const oom_budget *b)
{
    int err;
    if (!m || !b)
        return oomi_fail(OOM_EINVAL, "monitor budget: no monitor or budget");
    if ((err = oomi_check_version(b->version, OOM_BUDGET_VERSION, "oom_budget")))
        return err;
    if (index < -1 || index >= MAX_BUDGETS)
        return oomi_fail(OOM_EINVAL, "monitor budget: GPU index %d out of range [-1, %d]", index,
                         MAX_BUDGETS - 1);
    if (index < 0) {
        m->all_budget = *b;
        m->has_all_budget = 1;
    } else {
        m->budgets[index] = *b;
        m->has_budget[index] = 1;
    }
    return OOM_OK;
}

int oom_monitor_set_margin(oom_monitor *m, const char *margin)
{
    uint64_t probe;
    char *copy = NULL;
    int err;

    if (!m)
        return oomi_fail(OOM_EINVAL, "monitor margin: no monitor");
    if (margin && *margin) {
        /* validate now, against a large target, so that a typo fails before sampling */
        if ((err = oom_parse_margin(&probe, margin, (uint64_t)1 << 50)))
            return err;
        if (!(copy = oomi_strdup(margin)))
            return oomi_nomem();
    }
    oomi_free(m->margin);
    m->margin = copy;
    return OOM_OK;
}

void oom_monitor_set_plan_peak(oom_monitor *m, uint64_t peak)
{
    if (m)
        m->plan_peak = peak;
}

void oom_monitor_set_window(oom_monitor *m, double seconds)
{
    if (m && seconds > 0)
        m->window_s = seconds;
}

const oom_watch_snapshot *oom_monitor_snapshot(const oom_monitor *m)
{
    return m && m->have_snapshot ? &m->snap : NULL;
}

static struct gpu_state *gpu_state(oom_monitor *m, int nvml_index)
{
    if (nvml_index < 0 || nvml_index >= 1024)
        return NULL;
    if ((size_t)nvml_index >= m->gpu_cap) {
        size_t cap = (size_t)nvml_index + 1;
        struct gpu_state *g = oomi_reallocarray(m->gpus, cap, sizeof(*g));
        if (!g)
            return NULL;
        memset(g + m->gpu_cap, 0, (cap - m->gpu_cap) * sizeof(*g));
        m->gpus = g;
        m->gpu_cap = cap;
    }
    return &m->gpus[nvml_index];
}

/* the budget of a GPU that answered: an explicit one, else its capacity (total less what the
 * driver reserves) minus the margin */
static void gpu_budget(oom_monitor *m, struct gpu_state *st, const oom_gpu_info *g)
{
    uint64_t margin = OOM_DEFAULT_SAFETY_MARGIN;
    uint64_t capacity = g->total_bytes - oom_gpu_reserved_bytes(g);
    if (g->index >= 0 && g->index < MAX_BUDGETS && m->has_budget[g->index]) {
        st->budget = m->budgets[g->index];
        return;
    }
    if (m->has_all_budget) {
        st->budget = m->all_budget;
        return;
    }
    if (m->margin && oom_parse_margin(&margin, m->margin, capacity) != OOM_OK)
        margin = OOM_DEFAULT_SAFETY_MARGIN;
    st->budget = (oom_budget){.version = OOM_BUDGET_VERSION};
    if (oom_budget_make(&st->budget, capacity, margin) != OOM_OK)
        st->budget = (oom_budget){.version = OOM_BUDGET_VERSION}; /* smaller than the margin */
}

static int by_memory(const void *a, const void *b)
{
    const oom_watch_process *x = *(oom_watch_process *const *)a;
    const oom_watch_process *y = *(oom_watch_process *const *)b;
    uint64_t ux = x->used_bytes == OOM_UNKNOWN ? 0 : x->used_bytes;
    uint64_t uy = y->used_bytes == OOM_UNKNOWN ? 0 : y->used_bytes;
    if (ux != uy)
        return ux < uy ? 1 : -1;
    return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static int fill_processes(oom_monitor *m, oom_watch_gpu *wg, oom_gpu_info *g, double mono)
{
    size_t i;
    int err;
    uint64_t current = g->lost ? OOM_UNKNOWN : g->used_bytes;
    uint64_t limit = wg->budget.usable_bytes ? wg->budget.usable_bytes : OOM_UNKNOWN;

    if (!g->process_count)
        return OOM_OK;
    if (!(wg->processes = oomi_calloc(g->process_count, sizeof(*wg->processes))))
        return oomi_nomem();
    for (i = 0; i < g->process_count; i++) {
        const oom_gpu_process *gp = g->processes[i];
        struct proc_state *ps = proc_find(m, gp->pid, g->nvml_index);
        if (!ps)
            return oomi_nomem();
        ps->generation = m->generation;
        if (mono - ps->read_at >= PROC_REFRESH_S || !ps->info.command) {
            ps->info.pid = gp->pid;
            if ((err = read_proc(&ps->info)))
                return err;
            ps->read_at = mono;
        }
        ps->info.used_bytes = gp->used_bytes;
        ps->info.is_graphics = gp->is_graphics;
        if (gp->used_bytes != OOM_UNKNOWN) {
            series_add(&ps->hist, mono, gp->used_bytes, m->window_s);
            series_fit(m, &ps->info.trend, &ps->hist, current, limit);
        }
        /* a copy whose strings stay the process cache's: a snapshot lives until the next sample,
         * which clears it before the cache is refreshed or swept */
        if (!(wg->processes[wg->process_count] = oomi_malloc(sizeof(ps->info))))
            return oomi_nomem();
        *wg->processes[wg->process_count++] = ps->info;
        if (!ps->info.local)
            m->snap.foreign_pids++;
    }
    qsort(wg->processes, wg->process_count, sizeof(*wg->processes), by_memory);
    return OOM_OK;
}

static int fill_gpu(oom_monitor *m, oom_watch_gpu *wg, oom_gpu_info *g, double mono)
{
    struct gpu_state *st = gpu_state(m, g->nvml_index);

    if (!st)
        return oomi_nomem();
    wg->version = OOM_WATCH_GPU_VERSION;
    wg->trend.version = OOM_TREND_VERSION;
    wg->info = g;
    if (g->lost) {
        if (!g->name[0] || st->name[0]) /* the device may answer with garbage once lost */
            oomi_snprintf(g->name, sizeof(g->name), "%s", st->name[0] ? st->name : "unknown GPU");
        if (!g->uuid[0])
            oomi_snprintf(g->uuid, sizeof(g->uuid), "%s", st->uuid);
        wg->budget = st->budget;
        wg->band = OOM_BAND_UNKNOWN;
        return fill_processes(m, wg, g, mono);
    }
    oomi_snprintf(st->name, sizeof(st->name), "%s", g->name);
    oomi_snprintf(st->uuid, sizeof(st->uuid), "%s", g->uuid);
    gpu_budget(m, st, g);
    wg->budget = st->budget;
    wg->band = oom_band_classify(g->used_bytes, &wg->budget, m->plan_peak);
    series_add(&st->hist, mono, g->used_bytes, m->window_s);
    series_fit(m, &wg->trend, &st->hist, g->used_bytes,
               wg->budget.usable_bytes ? wg->budget.usable_bytes : OOM_UNKNOWN);
    return fill_processes(m, wg, g, mono);
}

int oom_monitor_sample(oom_monitor *m)
{
    oom_gpu_list *list = NULL;
    double mono;
    size_t i;
    int err;

    if (!m)
        return oomi_fail(OOM_EINVAL, "monitor: none");
    if ((err = oom_gpu_sample(&list, m->session, OOM_SAMPLE_PROCESSES | OOM_SAMPLE_ALL_GPUS)))
        return err;
    snapshot_clear(m);
    mono = now_s(CLOCK_MONOTONIC);
    m->generation++;
    m->snap.version = OOM_WATCH_SNAPSHOT_VERSION;
    m->snap.list = list;
    m->snap.time = now_s(CLOCK_REALTIME);
    m->snap.plan_peak_bytes = m->plan_peak;
    if (list->count && !(m->snap.gpus = oomi_calloc(list->count, sizeof(*m->snap.gpus)))) {
        err = oomi_nomem();
        goto done;
    }
    for (i = 0; i < list->count; i++) {
        if (!(m->snap.gpus[i] = oomi_calloc(1, sizeof(*m->snap.gpus[i])))) {
            err = oomi_nomem();
            goto done;
        }
        m->snap.gpu_count++;
        if ((err = fill_gpu(m, m->snap.gpus[i], list->gpus[i], mono)))
            goto done;
    }
    proc_sweep(m);
done:
    if (err)
        snapshot_clear(m);
    else
        m->have_snapshot = 1;
    return err;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static json_object *i64(int64_t v)
{
    return v < 0 ? NULL : json_object_new_int64(v);
}

static json_object *eta_json(const oom_trend *t)
{
    return t->has_eta ? json_object_new_double(t->seconds_to_limit) : NULL;
}

static json_object *process_json(const oom_watch_process *p)
{
    json_object *o = json_object_new_object();
    int e = !o;
    if (e)
        return NULL;
    e |= oomi_json_put(o, "pid", json_object_new_int64(p->pid));
    e |= oomi_json_put(o, "used_bytes", oomi_json_bytes(p->used_bytes));
    e |= oomi_json_put(o, "command", oomi_json_text(p->command));
    e |= oomi_json_put(o, "user", oomi_json_text(p->user));
    e |= oomi_json_put(o, "local", json_object_new_boolean(p->local));
    e |= oomi_json_put(o, "is_graphics", json_object_new_boolean(p->is_graphics));
    e |= oomi_json_put(o, "batch_size", i64(p->batch_size));
    e |= oomi_json_put(o, "grad_accum", i64(p->grad_accum));
    e |= oomi_json_put(o, "growth_bytes_per_s",
                       p->trend.valid ? json_object_new_double(p->trend.slope_bytes_per_s) : NULL);
    e |= oomi_json_put(o, "seconds_to_budget", eta_json(&p->trend));
    if (e) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

static int gpu_budget_trend_json(json_object *o, const oom_watch_gpu *wg)
{
    json_object *b = json_object_new_object(), *t = json_object_new_object();
    int e = 0;
    if (!b || !t) {
        json_object_put(b);
        json_object_put(t);
        return 1;
    }
    e |= oomi_json_put(o, "budget", b);
    e |= oomi_json_put(b, "target_bytes", json_object_new_int64((int64_t)wg->budget.target_bytes));
    e |= oomi_json_put(b, "safety_margin_bytes",
                       json_object_new_int64((int64_t)wg->budget.safety_margin_bytes));
    e |= oomi_json_put(b, "usable_bytes", json_object_new_int64((int64_t)wg->budget.usable_bytes));
    e |= oomi_json_put(o, "trend", t);
    e |=
        oomi_json_put(t, "slope_bytes_per_s",
                      wg->trend.valid ? json_object_new_double(wg->trend.slope_bytes_per_s) : NULL);
    e |= oomi_json_put(t, "growing", json_object_new_boolean(wg->trend.growing));
    e |= oomi_json_put(t, "seconds_to_budget", eta_json(&wg->trend));
    return e;
}

static json_object *gpu_json(const oom_watch_gpu *wg)
{
    const oom_gpu_info *g = wg->info;
    json_object *o = json_object_new_object(), *arr = json_object_new_array();
    size_t i;
    int e = !o || !arr;

    if (e) {
        json_object_put(o);
        json_object_put(arr);
        return NULL;
    }
    e |= oomi_json_put(o, "index", json_object_new_int(g->index));
    e |= oomi_json_put(o, "nvml_index", json_object_new_int(g->nvml_index));
    e |= oomi_json_put(o, "name", json_object_new_string(g->name));
    e |= oomi_json_put(o, "uuid", oomi_json_string_or_null(g->uuid));
    e |= oomi_json_put(o, "used_bytes", g->lost ? NULL : oomi_json_bytes(g->used_bytes));
    e |= oomi_json_put(o, "total_bytes", g->lost ? NULL : oomi_json_bytes(g->total_bytes));
    e |= oomi_json_put(o, "reserved_bytes",
                       g->lost ? NULL : oomi_json_bytes(oom_gpu_reserved_bytes(g)));
    e |= oomi_json_put(o, "utilization",
                       !g->lost && g->has_utilization ? json_object_new_int((int)g->utilization_gpu)
                                                      : NULL);
    e |= oomi_json_put(o, "temperature_c",
                       !g->lost && g->has_temperature ? json_object_new_int((int)g->temperature_c)
                                                      : NULL);
    e |= oomi_json_put(o, "lost", json_object_new_boolean(g->lost));
    e |= oomi_json_put(o, "band", json_object_new_string(oom_band_name(wg->band)));
    e |= gpu_budget_trend_json(o, wg);
    e |= oomi_json_put(o, "processes", arr);
    for (i = 0; !e && i < wg->process_count; i++) {
        json_object *p = process_json(wg->processes[i]);
        if (!p || json_object_array_add(arr, p)) {
            json_object_put(p);
            e = 1;
        }
    }
    if (e) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

int oom_watch_to_json(char **out, const oom_watch_snapshot *s, int pretty)
{
    json_object *root, *arr;
    const char *text;
    size_t i;
    int e;

    if (!out || !s)
        return oomi_fail(OOM_EINVAL, "watch json: no snapshot");
    if ((e = oomi_check_version(s->version, OOM_WATCH_SNAPSHOT_VERSION, "oom_watch_snapshot")))
        return e;
    *out = NULL;
    root = json_object_new_object();
    arr = json_object_new_array();
    e = !root || !arr;
    if (e) {
        json_object_put(arr);
        json_object_put(root);
        return oomi_nomem();
    }
    e |= oomi_json_put(root, "time", json_object_new_double(s->time));
    e |= oomi_json_put(root, "plan_peak_bytes", oomi_json_bytes(s->plan_peak_bytes));
    e |= oomi_json_put(root, "foreign_pids", json_object_new_int64((int64_t)s->foreign_pids));
    e |= oomi_json_put(root, "gpus", arr);
    for (i = 0; !e && i < s->gpu_count; i++) {
        json_object *g = gpu_json(s->gpus[i]);
        if (!g || json_object_array_add(arr, g)) {
            json_object_put(g);
            e = 1;
        }
    }
    text = e ? NULL
             : json_object_to_json_string_ext(
                   root, (pretty ? JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED
                                 : JSON_C_TO_STRING_PLAIN) |
                             JSON_C_TO_STRING_NOSLASHESCAPE);
    if (text)
        *out = oomi_strdup(text);
    json_object_put(root);
    return *out ? OOM_OK : oomi_nomem();
}
