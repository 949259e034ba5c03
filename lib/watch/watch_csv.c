/*
 * watch_csv.c - a watch snapshot as CSV rows (`oomless watch --log`): one row per GPU, then one
 * per process on it; text fields escaped (oomi_sb_put_shown), guarded against spreadsheet
 * formulas and quoted as RFC 4180 says.
 */
#include "watch/watch.h"

#include <string.h>

const char *oom_watch_csv_header(void)
{
    return "timestamp,kind,gpu_index,gpu_name,pid,command,user,used_bytes,total_bytes,"
           "utilization_gpu,temperature_c,band,lost,batch_size,grad_accum,reserved_bytes\n";
}

/* A text field of at most `max` bytes (the array it lives in: never read past it), its control
 * characters escaped (oomi_sb_put_shown: no tab or line break is left). A field that a
 * spreadsheet would take for a formula (starting with =, +, -, @: OWASP's CSV injection list)
 * gets a leading single quote, so that it shows as text; a field holding a comma or a quote is
 * quoted, with its quotes doubled (RFC 4180). */
static void csv_str(oomi_sb *sb, const char *text, size_t max)
{
    oomi_sb t = OOMI_SB_INIT;
    size_t n, i;
    int formula, quote;
    const char *s;

    oomi_sb_put_shown(&t, text ? text : "", text ? strnlen(text, max) : 0);
    sb->failed |= t.failed;
    s = t.buf && !t.failed ? t.buf : "";
    n = t.buf && !t.failed ? t.len : 0;
    formula = n > 0 && strchr("=+-@", s[0]) != NULL;
    quote = memchr(s, ',', n) || memchr(s, '"', n);
    oomi_sb_putc(sb, ',');
    if (quote)
        oomi_sb_putc(sb, '"');
    if (formula)
        oomi_sb_putc(sb, '\'');
    for (i = 0; i < n; i++) {
        if (s[i] == '"')
            oomi_sb_putc(sb, '"');
        oomi_sb_putc(sb, s[i]);
    }
    if (quote)
        oomi_sb_putc(sb, '"');
    oomi_sb_free(&t);
}

static void csv_u64(oomi_sb *sb, uint64_t v, int known)
{
    if (known && v != OOM_UNKNOWN)
        oomi_sb_printf(sb, ",%llu", (unsigned long long)v);
    else
        oomi_sb_putc(sb, ',');
}

static void csv_i64(oomi_sb *sb, int64_t v)
{
    if (v >= 0)
        oomi_sb_printf(sb, ",%lld", (long long)v);
    else
        oomi_sb_putc(sb, ',');
}

static void csv_gpu(oomi_sb *sb, const char *ts, const oom_watch_gpu *wg)
{
    const oom_gpu_info *g = wg->info;
    oomi_sb_printf(sb, "%s,gpu,%d", ts, g->index);
    csv_str(sb, g->name, sizeof(g->name));
    oomi_sb_puts(sb, ",,,"); /* pid, command, user */
    csv_u64(sb, g->used_bytes, !g->lost);
    csv_u64(sb, g->total_bytes, !g->lost);
    csv_u64(sb, g->utilization_gpu, !g->lost && g->has_utilization);
    csv_u64(sb, g->temperature_c, !g->lost && g->has_temperature);
    oomi_sb_printf(sb, ",%s,%d,,", oom_band_name(wg->band), g->lost ? 1 : 0);
    csv_u64(sb, oom_gpu_reserved_bytes(g),
            !g->lost && g->used_bytes != OOM_UNKNOWN && g->free_bytes != OOM_UNKNOWN);
    oomi_sb_putc(sb, '\n');
}

static void csv_process(oomi_sb *sb, const char *ts, const oom_watch_gpu *wg,
                        const oom_watch_process *p)
{
    oomi_sb_printf(sb, "%s,process,%d", ts, wg->info->index);
    csv_str(sb, wg->info->name, sizeof(wg->info->name));
    oomi_sb_printf(sb, ",%u", (unsigned)p->pid);
    csv_str(sb, p->command, p->command ? strlen(p->command) : 0);
    csv_str(sb, p->user, p->user ? strlen(p->user) : 0);
    csv_u64(sb, p->used_bytes, 1);
    oomi_sb_puts(sb, ",,,,,"); /* total, utilization, temperature, band, lost */
    csv_i64(sb, p->batch_size);
    csv_i64(sb, p->grad_accum);
    oomi_sb_puts(sb, ",\n"); /* reserved */
}

int oom_watch_to_csv(char **out, const oom_watch_snapshot *s)
{
    oomi_sb sb = OOMI_SB_INIT;
    char ts[32];
    size_t i, j;
    int err;

    if (!out || !s)
        return oomi_fail(OOM_EINVAL, "watch csv: no snapshot");
    if ((err = oomi_check_version(s->version, OOM_WATCH_SNAPSHOT_VERSION, "oom_watch_snapshot")))
        return err;
    *out = NULL;
    oomi_snprintf(ts, sizeof(ts), "%.3f", s->time);
    for (i = 0; i < s->gpu_count; i++) {
        csv_gpu(&sb, ts, s->gpus[i]);
        for (j = 0; j < s->gpus[i]->process_count; j++)
            csv_process(&sb, ts, s->gpus[i], s->gpus[i]->processes[j]);
    }
    return oomi_sb_finish(&sb, out);
}
