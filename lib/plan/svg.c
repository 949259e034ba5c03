/* svg.c - plain SVG pictures of an estimate or a plan: a stacked bar of the memory breakdown
 * against the budget line, and device peak versus micro-batch with the budget and the choice. */
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define W      760
#define H      380
#define TOP    50
#define BOTTOM 320 /* y of the zero line */

static const char *const colours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f"};

static double gib(uint64_t b)
{
    return (double)b / (double)OOM_GiB;
}

static double ypos(double v, double vmax)
{
    return BOTTOM - (BOTTOM - TOP) * (vmax > 0 ? v / vmax : 0);
}

static void header(oomi_sb *sb, const char *title)
{
    oomi_sb_printf(sb,
                   "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                   "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
                   "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n"
                   "<text x=\"20\" y=\"26\" font-size=\"16\" font-weight=\"bold\">",
                   W, H, W, H, W, H);
    for (; *title; title++) /* escape for XML */
        if (*title == '<' || *title == '>' || *title == '&')
            oomi_sb_puts(sb, *title == '<' ? "&lt;" : *title == '>' ? "&gt;" : "&amp;");
        else
            oomi_sb_putc(sb, *title);
    oomi_sb_puts(sb, "</text>\n");
}

/* a dashed budget line from x0 to x1, labelled just after x1 */
static void hline(oomi_sb *sb, double x0, double x1, double y, const char *colour,
                  const char *label, double dy)
{
    oomi_sb_printf(sb,
                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n"
                   "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n",
                   x0, y, x1, y, colour, x1 + 4, y + dy, colour, label);
}

static void axis(oomi_sb *sb, double x0, double x1, double vmax)
{
    static const double steps[] = {1, 2, 4, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000};
    double step = 2000, v;
    size_t i;
    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        if (vmax / steps[i] <= 8) {
            step = steps[i];
            break;
        }
    oomi_sb_printf(sb, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>\n", x0,
                   BOTTOM, x1, BOTTOM);
    for (v = 0; v <= vmax + 1e-9; v += step)
        oomi_sb_printf(sb,
                       "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g GiB</text>\n",
                       x0, ypos(v, vmax), x1, ypos(v, vmax), x0 - 4, ypos(v, vmax) + 4, v);
}

/* the stacked bar at x..x+60, its legend at lx */
static void bar(oomi_sb *sb, const oom_estimate *e, double x, double lx, double vmax)
{
    const char *names[] = {"weights",  "gradients",   "optimizer",       "activations", "logits",
                           "KV cache", "temporaries", "allocator cache", "CUDA context"};
    uint64_t parts[9] = {
        e->weights, e->gradients, e->optimizer,   e->activations,
        e->logits,  e->kv_cache,  e->temporaries, e->reserved_peak - e->allocated_peak,
        e->overhead};
    double acc = 0;
    int i, legend = 0;
    for (i = 0; i < 9; i++) {
        double v = gib(parts[i]);
        if (parts[i] == 0)
            continue;
        oomi_sb_printf(sb,
                       "<rect x=\"%.1f\" y=\"%.1f\" width=\"60\" height=\"%.1f\" fill=\"%s\">"
                       "<title>%s: %.2f GiB</title></rect>\n",
                       x, ypos(acc + v, vmax), ypos(acc, vmax) - ypos(acc + v, vmax), colours[i],
                       names[i], v);
        acc += v;
        oomi_sb_printf(sb,
                       "<rect x=\"%.1f\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                       "<text x=\"%.1f\" y=\"%d\">%s %.2f GiB</text>\n",
                       lx, TOP + 16 * legend, colours[i], lx + 14, TOP + 9 + 16 * legend, names[i],
                       v);
        legend++;
    }
    oomi_sb_printf(sb, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">peak %.2f GiB</text>\n",
                   x + 30, BOTTOM + 16, gib(e->device_peak));
}

static double scale_max(double v)
{
    return ceil(v * 1.1 / 2) * 2;
}

static int finish(char **out, oomi_sb *sb)
{
    oomi_sb_puts(sb, "</svg>\n");
    return oomi_sb_finish(sb, out);
}

int oom_estimate_svg(char **out, const oom_workload *w, const oom_estimate *e, const oom_budget *b)
{
    oomi_sb sb = OOMI_SB_INIT;
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    char *title;
    double top;
    int err;
    if (!out || !w || !e)
        return oomi_fail(OOM_EINVAL, "estimate svg: missing argument");
    if ((err = oomi_check_version(e->version, OOM_ESTIMATE_VERSION, "oom_estimate")) ||
        (b && (err = oomi_check_version(b->version, OOM_BUDGET_VERSION, "oom_budget"))))
        return err;
    top = gib(e->device_peak);
    if (b && gib(b->target_bytes) > top)
        top = gib(b->target_bytes);
    top = scale_max(top);
    title = oomi_asprintf("Memory estimate: %s", oom_workload_model(&mi, w) ? "?" : mi.name);
    oomi_clear_error();
    if (!title)
        return oomi_nomem();
    header(&sb, title);
    oomi_free(title);
    axis(&sb, 90, 230, top);
    bar(&sb, e, 130, 330, top);
    if (b) {
        hline(&sb, 90, 230, ypos(gib(b->usable_bytes), top), "#c00", "usable", 12);
        hline(&sb, 90, 230, ypos(gib(b->target_bytes), top), "#888", "VRAM", -3);
    }
    return finish(out, &sb);
}

/* the curve's scale: its points up to 3x the bar's scale */
static double curve_max(const oom_plan_result *r, double top)
{
    double m = top;
    size_t i;
    for (i = 0; i < r->n_curve; i++) {
        double a = r->curve_peak_none[i] == UINT64_MAX ? 0 : gib(r->curve_peak_none[i]);
        double b = r->curve_peak_full[i] == UINT64_MAX ? 0 : gib(r->curve_peak_full[i]);
        if (a > m && a <= 3 * top)
            m = a;
        if (b > m && b <= 3 * top)
            m = b;
    }
    return scale_max(m);
}

/* device peak versus micro-batch (x: log2 of the batch) */
static void curve(oomi_sb *sb, const oom_plan_result *r, double x0, double x1, double vmax)
{
    double lmax = log2((double)r->curve_batch[r->n_curve - 1]), x;
    int pass;
    size_t i;
    if (lmax <= 0)
        lmax = 1;
#define XP(b) (x0 + (x1 - x0) * log2((double)(b)) / lmax)
    for (pass = 0; pass < 2; pass++) {
        const uint64_t *p = pass ? r->curve_peak_full : r->curve_peak_none;
        bool pen = false;
        oomi_sb_printf(sb, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
                       pass ? "#59a14f" : "#4e79a7");
        for (i = 0; i < r->n_curve; i++) {
            double v = gib(p[i]);
            if (p[i] == UINT64_MAX || v > vmax)
                continue;
            oomi_sb_printf(sb, "%s%.1f,%.1f", pen ? " " : "", XP(r->curve_batch[i]), ypos(v, vmax));
            pen = true;
        }
        oomi_sb_puts(sb, "\"/>\n");
        for (i = 0; i < r->n_curve; i++)
            if (p[i] != UINT64_MAX && gib(p[i]) <= vmax)
                oomi_sb_printf(sb, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                               XP(r->curve_batch[i]), ypos(gib(p[i]), vmax),
                               pass ? "#59a14f" : "#4e79a7");
    }
    for (i = 0; i < r->n_curve; i++)
        oomi_sb_printf(sb, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%ld</text>\n",
                       XP(r->curve_batch[i]), BOTTOM + 16, r->curve_batch[i]);
    oomi_sb_printf(sb, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">micro-batch</text>\n",
                   (x0 + x1) / 2, BOTTOM + 34);
    x = XP(r->best->knobs.batch);
    oomi_sb_printf(sb,
                   "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"#e15759\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\" stroke=\"white\" "
                   "stroke-width=\"4\" paint-order=\"stroke\">chosen: %ld%s%s%s</text>\n",
                   x, ypos(gib(r->best->estimate.device_peak), vmax), x + 8,
                   ypos(gib(r->best->estimate.device_peak), vmax) + 20, r->best->knobs.batch,
                   r->inference || r->measured ? "" : " (",
                   r->inference || r->measured ? "" : oomi_plan_ck(r->best),
                   r->inference || r->measured ? "" : ")");
    oomi_sb_printf(sb, "<text x=\"%.1f\" y=\"%d\" fill=\"#4e79a7\">%s</text>\n", x0, TOP - 8,
                   r->inference || r->measured ? "device peak" : "no checkpointing");
    if (!r->inference && !r->measured)
        oomi_sb_printf(sb, "<text x=\"%.1f\" y=\"%d\" fill=\"#59a14f\">full checkpointing</text>\n",
                       x0 + 120, TOP - 8);
#undef XP
}

int oom_plan_svg(char **out, const oom_plan_result *r)
{
    oomi_sb sb = OOMI_SB_INIT;
    char *title;
    double top;
    int err;
    if (!out || !r)
        return oomi_fail(OOM_EINVAL, "plan svg: missing argument");
    if ((err = oomi_check_version(r->version, OOM_PLAN_RESULT_VERSION, "oom_plan_result")))
        return err;
    if (!r->found || !r->n_curve)
        return oomi_fail(OOM_ENOFIT, "plan svg: nothing fits, nothing to draw");
    top = scale_max(gib(r->budget.target_bytes > r->best->estimate.device_peak
                            ? r->budget.target_bytes
                            : r->best->estimate.device_peak));
    if (r->inference)
        title = oomi_asprintf("Plan: %s on %s - batch %ld, seq %ld", r->model,
                              r->gpu_name[0] ? r->gpu_name : "budget", r->best->knobs.batch,
                              r->best->knobs.seq_len);
    else
        title = oomi_asprintf("Plan: %s on %s - batch %ld x %ld, seq %ld", r->model,
                              r->gpu_name[0] ? r->gpu_name : "budget", r->best->knobs.batch,
                              r->best->knobs.grad_accum, r->best->knobs.seq_len);
    if (!title)
        return oomi_nomem();
    header(&sb, title);
    oomi_free(title);
    axis(&sb, 70, 190, top);
    bar(&sb, &r->best->estimate, 100, 250, top);
    hline(&sb, 70, 190, ypos(gib(r->budget.usable_bytes), top), "#c00", "usable", 12);
    top = curve_max(r, top);
    axis(&sb, 500, 700, top);
    curve(&sb, r, 510, 690, top);
    hline(&sb, 500, 700, ypos(gib(r->budget.usable_bytes), top), "#c00", "usable", 12);
    return finish(out, &sb);
}
