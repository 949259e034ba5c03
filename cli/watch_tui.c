/*
 * watch_tui.c - the interactive view of `oomless watch` (ncursesw).
 *
 *   header        interval, paused, keys
 *   GPU panels    two lines each: name, utilisation, temperature, band; a bar coloured by band
 *   trend         the selected GPU's (or its fastest-growing process's) time to the budget
 *   history       used memory of the selected GPU, one column per sample, newest on the right;
 *                 a row of event marks below (X oom, R restart, K kill, B batch change, L launch,
 *                 E exit)
 *   processes     of the selected GPU
 *   events        the last ones from --events
 *
 * Signals only set watch_stop_signal; SIGWINCH is ncurses's (KEY_RESIZE). The loop ends on q, a
 * signal, --count or an error, and every path goes through endwin().
 */
#include "cli.h"
#include "watch_tui.h"

#include <curses.h>
#include <langinfo.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <term.h>

#define HIST_COLS   1024
#define WAIT_MAX_MS 250 /* longest getch wait, so that signals are seen promptly */

enum { PAIR_SAFE = 1, PAIR_ELEVATED, PAIR_WARNING, PAIR_CRITICAL, PAIR_TITLE, PAIR_DIM };

struct column {
    double time; /* Unix seconds */
    uint64_t used, total;
    oom_band band;
    int lost;
    char mark;
};

struct history {
    struct column col[HIST_COLS];
    size_t head, n;
};

struct tui {
    struct watch_ctx *w;
    SCREEN *screen;
    struct history *hist;
    size_t nhist;
    int selected, utf8, colors;
};

static const double intervals[] = {0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60};

int watch_tui_available(void)
{
    const char *term = getenv("TERM");
    char *cup;
    int err = 0, ok;

    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO) || !term || !*term)
        return 0;
    if (setupterm(NULL, STDOUT_FILENO, &err) != OK || err != 1)
        return 0;
    cup = tigetstr("cup");
    ok = cup && cup != (char *)-1;
    del_curterm(cur_term);
    return ok;
}

/* ---- history ------------------------------------------------------------------------------- */

static struct column *hist_at(struct history *h, size_t i)
{
    return &h->col[(h->head + i) % HIST_COLS];
}

static void hist_push(struct history *h, const struct column *c)
{
    if (h->n == HIST_COLS) {
        h->head = (h->head + 1) % HIST_COLS;
        h->n--;
    }
    *hist_at(h, h->n++) = *c;
}

static int mark_rank(char m)
{
    const char *order = "ELBRKX"; /* later = more important */
    const char *p = m ? strchr(order, m) : NULL;
    return p ? (int)(p - order) + 1 : 0;
}

static char event_mark(const oom_run_event *e)
{
    switch (e->kind) {
    case OOM_RUN_EVENT_OOM:
        return 'X';
    case OOM_RUN_EVENT_RESTART:
        return 'R';
    case OOM_RUN_EVENT_EXIT:
        return 'E';
    case OOM_RUN_EVENT_KILL:
        return 'K';
    case OOM_RUN_EVENT_LAUNCH:
        return e->batch_changed ? 'B' : 'L';
    default:
        return e->batch_changed ? 'B' : 0;
    }
}

/* marks the column of each new event (the first sample at or after it) on every GPU */
static void mark_events(struct tui *t)
{
    size_t count = oom_event_log_count(t->w->events), k, g, i;
    for (k = count - t->w->events_added; k < count; k++) {
        const oom_run_event *e = oom_event_log_at(t->w->events, k);
        char m = event_mark(e);
        for (g = 0; m && g < t->nhist; g++) {
            struct history *h = &t->hist[g];
            if (!h->n || e->time < hist_at(h, 0)->time - t->w->interval)
                continue; /* older than the graph: listed, not marked */
            for (i = 0; i + 1 < h->n && hist_at(h, i)->time + 0.001 < e->time; i++)
                ;
            if (mark_rank(m) > mark_rank(hist_at(h, i)->mark))
                hist_at(h, i)->mark = m;
        }
    }
}

static int record(struct tui *t)
{
    const oom_watch_snapshot *s = oom_monitor_snapshot(t->w->monitor);
    size_t i;

    if (s->gpu_count > t->nhist) {
        struct history *h = realloc(t->hist, s->gpu_count * sizeof(*h));
        if (!h)
            return -1;
        memset(h + t->nhist, 0, (s->gpu_count - t->nhist) * sizeof(*h));
        t->hist = h;
        t->nhist = s->gpu_count;
    }
    for (i = 0; i < s->gpu_count; i++) {
        const oom_gpu_info *g = s->gpus[i]->info;
        struct column c = {s->time, g->used_bytes, g->total_bytes, s->gpus[i]->band, g->lost, 0};
        hist_push(&t->hist[i], &c);
    }
    if (t->w->events && t->w->events_added)
        mark_events(t);
    return 0;
}

/* ---- drawing helpers ----------------------------------------------------------------------- */

static int band_pair(oom_band b)
{
    switch (b) {
    case OOM_BAND_SAFE:
        return PAIR_SAFE;
    case OOM_BAND_ELEVATED:
        return PAIR_ELEVATED;
    case OOM_BAND_WARNING:
        return PAIR_WARNING;
    case OOM_BAND_CRITICAL:
        return PAIR_CRITICAL;
    default:
        return PAIR_DIM;
    }
}

static void use_attr(const struct tui *t, int pair, attr_t extra)
{
    attrset((t->colors && pair ? COLOR_PAIR(pair) : A_NORMAL) | extra);
}

static void put(int y, int x, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(int y, int x, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    if (y < 0 || y >= LINES || x >= COLS)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    mvaddnstr(y, x, buf, COLS - x);
}

static void draw_header(const struct tui *t)
{
    char iv[32];
    snprintf(iv, sizeof(iv), "%g s", t->w->interval);
    use_attr(t, PAIR_TITLE, A_REVERSE | A_BOLD);
    mvhline(0, 0, ' ', COLS);
    put(0, 0, " oomless watch   every %s%s%s   q quit  p pause  +/- interval  %s select GPU", iv,
        t->w->paused ? "   [PAUSED]" : "",
        t->w->log && t->w->log->failing ? "   [LOG NOT WRITTEN]" : "",
        t->utf8 ? "\xe2\x86\x90\xe2\x86\x92" : "<- ->");
    use_attr(t, 0, A_NORMAL);
}

static void draw_bar(const struct tui *t, int y, int x, int width, const oom_watch_gpu *wg)
{
    const oom_gpu_info *g = wg->info;
    int fill, i, budget_at = -1;

    if (width < 3)
        return;
    fill = g->total_bytes ? (int)((double)g->used_bytes / (double)g->total_bytes * width + 0.5) : 0;
    if (fill > width)
        fill = width;
    if (wg->budget.usable_bytes && g->total_bytes)
        budget_at = (int)((double)wg->budget.usable_bytes / (double)g->total_bytes * width);
    put(y, x, "[");
    for (i = 0; i < width; i++) {
        use_attr(t, i < fill ? band_pair(wg->band) : PAIR_DIM, i < fill ? A_BOLD : A_NORMAL);
        mvaddch(y, x + 1 + i, i < fill ? '|' : i == budget_at ? ':' : ' ');
    }
    use_attr(t, 0, A_NORMAL);
    put(y, x + 1 + width, "]");
}

static void draw_panel(const struct tui *t, int y, const oom_watch_gpu *wg, int selected)
{
    const oom_gpu_info *g = wg->info;
    char used[16], total[16], extra[64] = "";
    int n = 0, bar;

    use_attr(t, 0, selected ? A_BOLD : A_NORMAL);
    put(y, 0, "%s GPU %d  %.40s", selected ? ">" : " ", g->index, g->name);
    if (g->lost) {
        use_attr(t, PAIR_CRITICAL, A_BOLD);
        put(y + 1, 2, "lost: the device stopped answering");
        use_attr(t, 0, A_NORMAL);
        return;
    }
    if (g->has_utilization)
        n += snprintf(extra + n, sizeof(extra) - (size_t)n, "util %3u%%   ", g->utilization_gpu);
    if (g->has_temperature)
        snprintf(extra + n, sizeof(extra) - (size_t)n, "%u%s   ", g->temperature_c,
                 t->utf8 ? "\xc2\xb0"
                           "C"
                         : " C");
    put(y, 52 < COLS ? 52 : COLS, "%s", extra);
    use_attr(t, band_pair(wg->band), A_BOLD);
    put(y, COLS - 10 > 0 ? COLS - 10 : 0, "%9s", oom_band_name(wg->band));
    use_attr(t, 0, A_NORMAL);
    oom_format_size(used, sizeof(used), g->used_bytes);
    oom_format_size(total, sizeof(total), g->total_bytes);
    bar = COLS - 30;
    draw_bar(t, y + 1, 2, bar, wg);
    put(y + 1, bar + 5, "%s / %s", used, total);
}

/* the trend of the selected GPU, or of its fastest-growing process */
static void draw_trend(const struct tui *t, int y, const oom_watch_gpu *wg)
{
    const oom_trend *best = wg->trend.growing ? &wg->trend : NULL;
    char rate[16], when[16], who[32] = "GPU memory";
    size_t i;

    for (i = 0; i < wg->process_count; i++) {
        const oom_trend *p = &wg->processes[i]->trend;
        if (p->growing && (!best || p->slope_bytes_per_s > best->slope_bytes_per_s)) {
            best = p;
            snprintf(who, sizeof(who), "pid %u", (unsigned)wg->processes[i]->pid);
        }
    }
    if (!best)
        return;
    use_attr(t, best->has_eta && best->seconds_to_limit < 600 ? PAIR_CRITICAL : PAIR_WARNING,
             A_BOLD);
    oom_format_size(rate, sizeof(rate), (uint64_t)best->slope_bytes_per_s);
    if (best->has_eta && best->seconds_to_limit > 0)
        put(y, 0, " ! %s growing %s/s: budget crossed in ~%s", who, rate,
            watch_format_duration(when, sizeof(when), best->seconds_to_limit));
    else
        put(y, 0, " ! %s growing %s/s%s", who, rate, best->has_eta ? ": over budget" : "");
    use_attr(t, 0, A_NORMAL);
}

/* ---- the history graph --------------------------------------------------------------------- */

static const char *const eighths[] = {" ",
                                      "\xe2\x96\x81",
                                      "\xe2\x96\x82",
                                      "\xe2\x96\x83",
                                      "\xe2\x96\x84",
                                      "\xe2\x96\x85",
                                      "\xe2\x96\x86",
                                      "\xe2\x96\x87",
                                      "\xe2\x96\x88"};

/* one cell of a column whose height is `level` eighths of a row, at row `r` from the bottom */
static void graph_cell(const struct tui *t, int y, int x, int level, int r, int on_budget)
{
    int part = level - r * 8;
    if (part <= 0) {
        use_attr(t, PAIR_DIM, A_NORMAL);
        mvaddstr(y, x, on_budget ? "-" : " ");
        return;
    }
    if (t->utf8)
        mvaddstr(y, x, eighths[part > 8 ? 8 : part]);
    else
        mvaddch(y, x, part >= 4 ? '#' : '.');
}

static void draw_graph(const struct tui *t, int y, int height, const oom_watch_gpu *wg)
{
    const struct history *h = &t->hist[t->selected];
    int width = COLS - 8, x, r, budget_row = -1;
    uint64_t scale = wg->info->total_bytes;
    size_t shown, i;
    char top[16];

    if (height < 2 || width < 10 || !h->n)
        return;
    for (i = 0; !scale && i < h->n; i++)
        scale = h->col[(h->head + i) % HIST_COLS].total;
    if (!scale)
        return;
    if (wg->budget.usable_bytes)
        budget_row = (int)((double)wg->budget.usable_bytes / (double)scale * height * 8) / 8;
    use_attr(t, 0, A_BOLD);
    put(y, 0, " memory of GPU %d, one column per sample; - budget, X oom, R restart, B batch",
        wg->info->index);
    use_attr(t, PAIR_DIM, A_NORMAL);
    if (scale >= OOM_GiB)
        snprintf(top, sizeof(top), "%.0fG", (double)scale / (double)OOM_GiB);
    else
        snprintf(top, sizeof(top), "%.0fM", (double)scale / (double)OOM_MiB);
    put(y + 1, 0, "%6s", top);
    put(y + height, 0, "%6s", "0");
    shown = h->n < (size_t)width ? h->n : (size_t)width;
    for (x = 0; x < width; x++) {
        const struct column *c = NULL;
        int level = 0, col_x = 7 + x;
        if ((size_t)x >= (size_t)width - shown)
            c = &h->col[(h->head + h->n - shown + (size_t)(x - (width - (int)shown))) % HIST_COLS];
        if (c && !c->lost)
            level = (int)((double)c->used / (double)scale * height * 8 + 0.5);
        use_attr(t, c ? band_pair(c->band) : PAIR_DIM, A_NORMAL);
        for (r = 0; r < height; r++)
            graph_cell(t, y + height - r, col_x, level, r, r == budget_row);
        use_attr(t, PAIR_CRITICAL, A_BOLD);
        mvaddch(y + height + 1, col_x, c && c->mark ? (chtype)c->mark : (chtype)' ');
    }
    use_attr(t, 0, A_NORMAL);
}

/* ---- processes and events ------------------------------------------------------------------ */

static int draw_processes(const struct tui *t, int y, int rows, const oom_watch_gpu *wg)
{
    size_t i;
    int shown = 0;

    use_attr(t, PAIR_TITLE, A_BOLD);
    put(y, 0, " %-8s %-10s %11s %7s  %s", "PID", "USER", "MEMORY", "BATCH", "COMMAND");
    use_attr(t, 0, A_NORMAL);
    if (!wg->process_count)
        put(y + 1, 1, "(no processes)");
    for (i = 0; i < wg->process_count && shown < rows - 1; i++, shown++) {
        const oom_watch_process *p = wg->processes[i];
        struct watch_process_row row;
        watch_process_row(&row, p);
        put(y + 1 + shown, 0, " %-8u %-10.10s %11s %7s  %s", (unsigned)p->pid, row.user, row.mem,
            row.batch, row.command);
        watch_process_row_done(&row);
    }
    return 1 + (wg->process_count ? shown : 1);
}

static void draw_events(const struct tui *t, int y, int rows)
{
    size_t count = oom_event_log_count(t->w->events), i, first;
    int line = 1;

    use_attr(t, PAIR_TITLE, A_BOLD);
    put(y, 0, " events");
    use_attr(t, 0, A_NORMAL);
    if (!count)
        put(y + 1, 1, "(none yet)");
    first = count > (size_t)(rows - 1) ? count - (size_t)(rows - 1) : 0;
    for (i = first; i < count; i++, line++) {
        const oom_run_event *e = oom_event_log_at(t->w->events, i);
        char text[256];
        use_attr(t, e->kind == OOM_RUN_EVENT_OOM ? PAIR_CRITICAL : 0, A_NORMAL);
        put(y + line, 1, "%s", watch_format_event(text, sizeof(text), e));
    }
    use_attr(t, 0, A_NORMAL);
}

/* ---- layout -------------------------------------------------------------------------------- */

static void draw(struct tui *t)
{
    const oom_watch_snapshot *s = oom_monitor_snapshot(t->w->monitor);
    const oom_watch_gpu *wg;
    int y = 1, panels, first = 0, i, rest, ev_rows, proc_rows, graph_h;

    erase();
    draw_header(t);
    if (!s || !s->gpu_count) {
        put(2, 1, s ? "No GPU found." : "Sampling...");
        refresh();
        return;
    }
    if (t->selected >= (int)s->gpu_count)
        t->selected = (int)s->gpu_count - 1;
    panels = (LINES - 6) / 2;
    if (panels < 1)
        panels = 1;
    if (panels > (int)s->gpu_count)
        panels = (int)s->gpu_count;
    if (t->selected >= panels)
        first = t->selected - panels + 1;
    for (i = first; i < first + panels; i++, y += 2)
        draw_panel(t, y, s->gpus[i], i == t->selected);
    wg = s->gpus[t->selected];
    draw_trend(t, y++, wg);
    rest = LINES - y;
    ev_rows = t->w->events ? 5 : 0;
    proc_rows = 1 + (wg->process_count ? (int)wg->process_count : 1);
    if (proc_rows > 7)
        proc_rows = 7;
    if (s->foreign_pids)
        rest--;
    graph_h = rest - ev_rows - proc_rows - 2;
    if (graph_h > 12)
        graph_h = 12;
    if (graph_h >= 2 && t->nhist > (size_t)t->selected) {
        draw_graph(t, y, graph_h, wg);
        y += graph_h + 2;
    }
    y += draw_processes(t, y, LINES - y - ev_rows - (s->foreign_pids ? 1 : 0), wg);
    if (s->foreign_pids) {
        use_attr(t, PAIR_WARNING, A_NORMAL);
        put(y++, 1, "%zu process(es) not in this PID namespace (container?): commands unknown",
            s->foreign_pids);
        use_attr(t, 0, A_NORMAL);
    }
    if (ev_rows && LINES - y >= 2) /* the events take what is left, up to 10 lines */
        draw_events(t, y, LINES - y < 11 ? LINES - y : 11);
    refresh();
}

/* ---- keys and the loop --------------------------------------------------------------------- */

static void change_interval(struct watch_ctx *w, int faster)
{
    size_t i, n = sizeof(intervals) / sizeof(intervals[0]);
    if (faster) {
        for (i = n; i-- > 0;)
            if (intervals[i] < w->interval - 1e-9) {
                w->interval = intervals[i];
                return;
            }
    } else {
        for (i = 0; i < n; i++)
            if (intervals[i] > w->interval + 1e-9) {
                w->interval = intervals[i];
                return;
            }
    }
}

/* returns 1 to quit */
static int handle_key(struct tui *t, int ch, double *next)
{
    const oom_watch_snapshot *s = oom_monitor_snapshot(t->w->monitor);
    int n = s ? (int)s->gpu_count : 0;

    switch (ch) {
    case 'q':
    case 'Q':
        return 1;
    case 'p':
    case 'P':
    case ' ':
        t->w->paused = !t->w->paused;
        *next = watch_now();
        break;
    case '+':
    case '=':
        change_interval(t->w, 0);
        break;
    case '-':
    case '_':
        change_interval(t->w, 1);
        *next = watch_now() + t->w->interval;
        break;
    case KEY_LEFT:
    case KEY_UP:
        if (t->selected > 0)
            t->selected--;
        break;
    case KEY_RIGHT:
    case KEY_DOWN:
        if (t->selected + 1 < n)
            t->selected++;
        break;
    case KEY_RESIZE:
        break;
    default:
        return 0;
    }
    draw(t);
    return 0;
}

static int tui_begin(struct tui *t)
{
    if (!(t->screen = newterm(NULL, stdout, stdin)))
        return -1;
    set_term(t->screen);
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    t->utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
    if (has_colors() && start_color() == OK) {
        use_default_colors();
        t->colors = 1;
        init_pair(PAIR_SAFE, COLOR_GREEN, -1);
        init_pair(PAIR_ELEVATED, COLOR_CYAN, -1);
        init_pair(PAIR_WARNING, COLOR_YELLOW, -1);
        init_pair(PAIR_CRITICAL, COLOR_RED, -1);
        init_pair(PAIR_TITLE, COLOR_CYAN, -1);
        init_pair(PAIR_DIM, COLOR_BLUE, -1);
    }
    return 0;
}

static void tui_end(struct tui *t)
{
    if (!t->screen)
        return;
    curs_set(1);
    endwin();
    delscreen(t->screen);
    t->screen = NULL;
    free(t->hist);
    t->hist = NULL;
}

static int tui_loop(struct tui *t)
{
    double next = watch_now(), now;
    int rc = EXIT_OK, ch, wait_ms;

    while (!watch_stop_signal) {
        now = watch_now();
        if (!t->w->paused && now >= next) {
            if ((rc = watch_step(t->w)) != EXIT_OK)
                break;
            if (record(t)) {
                snprintf(t->w->error, sizeof(t->w->error), "out of memory");
                rc = EXIT_ENV;
                break;
            }
            draw(t);
            if (t->w->count && t->w->taken >= t->w->count)
                break;
            next += t->w->interval;
            if (next < now)
                next = now;
        }
        wait_ms = t->w->paused ? WAIT_MAX_MS : (int)((next - watch_now()) * 1000) + 1;
        timeout(wait_ms < 0 ? 0 : wait_ms > WAIT_MAX_MS ? WAIT_MAX_MS : wait_ms);
        if ((ch = getch()) != ERR && handle_key(t, ch, &next))
            break;
    }
    if (rc == EXIT_OK && watch_stop_signal)
        rc = 128 + watch_stop_signal;
    return rc;
}

int watch_tui_run(struct watch_ctx *w)
{
    struct tui t = {0};
    int rc;

    t.w = w;
    if (tui_begin(&t)) {
        snprintf(w->error, sizeof(w->error), "cannot start the interactive view (TERM?)");
        return EXIT_ENV;
    }
    draw(&t);
    rc = tui_loop(&t);
    tui_end(&t);
    return rc;
}
