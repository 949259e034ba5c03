/* table.c - `oomless table`: one plan per GPU profile, per workload, as text, Markdown, CSV or
 * JSON. */
#include "plan/plan.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

typedef enum { FMT_TEXT, FMT_MARKDOWN, FMT_CSV, FMT_JSON } fmt;

static void cell_plan(char *batch, char *accum, char *seq, char *ck, char *peak, char *util,
                      char *tput, const oom_plan_result *r)
{
    const oom_plan_choice *c = r->best;
    char sz[16];
    if (!r->found) {
        strcpy(batch, "-"), strcpy(accum, "-"), strcpy(seq, "-"), strcpy(ck, "-");
        oomi_snprintf(peak, 24, ">%s", OOMI_SZ(sz, r->smallest->estimate.device_peak));
        strcpy(util, "no fit"), strcpy(tput, "-");
        return;
    }
    oomi_snprintf(batch, 16, "%ld", c->knobs.batch);
    oomi_snprintf(accum, 16, r->inference ? "-" : "%ld", c->knobs.grad_accum);
    oomi_snprintf(seq, 16, "%ld", c->knobs.seq_len);
    oomi_snprintf(ck, 16, "%s", r->measured ? "-" : oomi_plan_ck(c));
    oomi_snprintf(peak, 24, "%s", OOMI_SZ(sz, c->estimate.device_peak));
    oomi_snprintf(util, 16, "%.0f%%",
                  100.0 * (double)c->estimate.device_peak / (double)r->budget.usable_bytes);
    if (c->has_throughput)
        oomi_snprintf(tput, 24, "%.0f", c->tokens_per_s);
    else
        strcpy(tput, "-");
}

static void row_text(oomi_sb *sb, fmt f, const char *name, const char *gpu,
                     const oom_plan_result *r)
{
    char usable[16], batch[16], accum[16], seq[16], ck[16], peak[24], util[16], tput[24];
    OOMI_SZ(usable, r->budget.usable_bytes);
    cell_plan(batch, accum, seq, ck, peak, util, tput, r);
    if (f == FMT_TEXT)
        oomi_sb_printf(sb, "%-14s %10s %6s %6s %6s %-10s %11s %7s %10s\n", gpu, usable, batch,
                       accum, seq, ck, peak, util, tput);
    else if (f == FMT_MARKDOWN)
        oomi_sb_printf(sb, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", gpu, usable, batch,
                       accum, seq, ck, peak, util, tput);
    else
        oomi_sb_printf(
            sb, "%s,%s,%llu,%d,%s,%s,%s,%s,%llu,%.4f,%s\n", name, gpu,
            (unsigned long long)r->budget.usable_bytes, r->found, r->found ? batch : "",
            r->found && !r->inference ? accum : "", r->found ? seq : "",
            r->found && !r->measured ? ck : "",
            (unsigned long long)(r->found ? r->best->estimate.device_peak
                                          : r->smallest->estimate.device_peak),
            r->found ? (double)r->best->estimate.device_peak / (double)r->budget.usable_bytes : 0.0,
            r->found && r->best->has_throughput ? tput : "");
}

static void heading(oomi_sb *sb, fmt f, const char *name, const oom_plan_result *r)
{
    if (f == FMT_TEXT)
        oomi_sb_printf(sb, "== %s (%s) ==\n%-14s %10s %6s %6s %6s %-10s %11s %7s %10s\n", name,
                       r->model, "GPU", "USABLE", r->inference ? "MAXB" : "BATCH", "ACCUM", "SEQ",
                       "CKPT", "PEAK", "UTIL", "TOKENS/S");
    else if (f == FMT_MARKDOWN)
        oomi_sb_printf(sb,
                       "### %s (%s)\n\n| GPU | usable | %s | accumulation | seq | checkpointing "
                       "| peak | budget used | tokens/s |\n|---|---:|---:|---:|---:|---|---:|---:|"
                       "---:|\n",
                       name, r->model, r->inference ? "max batch" : "batch");
}

static json_object *row_json(const char *gpu, const oom_plan_result *r)
{
    char *text = NULL;
    json_object *o = NULL;
    if (oom_plan_to_json(&text, r))
        return NULL;
    o = json_tokener_parse(text);
    oomi_free(text);
    if (o)
        oomi_json_put(o, "gpu", json_object_new_string(gpu));
    return o;
}

static int one_workload(oomi_sb *sb, json_object *jarr, fmt f, const oom_plan_options *o,
                        const char *name, const char *const *gpus, size_t n_gpus)
{
    json_object *rows = NULL, *t = NULL;
    size_t g;
    int err = OOM_OK;
    if (f == FMT_JSON) {
        if (!(t = json_object_new_object()) || !(rows = json_object_new_array())) {
            json_object_put(t);
            return oomi_nomem();
        }
        oomi_json_put(t, "workload", json_object_new_string(name));
        oomi_json_put(t, "rows", rows);
        json_object_array_add(jarr, t);
    }
    for (g = 0; g < n_gpus && !err; g++) {
        oom_plan_result *r = NULL;
        err = oomi_plan_options_run_gpu(&r, o, gpus[g]);
        if (err == OOM_ENOFIT)
            err = OOM_OK, oomi_clear_error();
        if (err)
            return oomi_fail_prefix(err, "workload '%s' on '%s': ", name, gpus[g]);
        if (g == 0)
            heading(sb, f, name, r);
        if (f == FMT_JSON)
            json_object_array_add(rows, row_json(gpus[g], r));
        else
            row_text(sb, f, name, gpus[g], r);
        oom_plan_free(r);
    }
    if (f == FMT_TEXT || f == FMT_MARKDOWN)
        oomi_sb_putc(sb, '\n');
    return err;
}

int oom_table(char **out, const oom_plan_options *const *workloads, const char *const *names,
              size_t n_workloads, const char *const *gpus, size_t n_gpus, const char *format)
{
    const char *name = format ? format : "text";
    oomi_sb sb = OOMI_SB_INIT;
    json_object *arr = NULL;
    size_t i;
    fmt f;
    int err = OOM_OK;

    if (!out || !workloads || !gpus || !n_gpus || !n_workloads)
        return oomi_fail(OOM_EINVAL, "table: give at least one workload and one GPU");
    *out = NULL;
    if (!oomi_format_find(name, OOM_COMMAND_TABLE)) /* the format table (plan_output.c) */
        return oomi_format_unknown("table", name, OOM_COMMAND_TABLE);
    f = !strcmp(name, "markdown") ? FMT_MARKDOWN
        : !strcmp(name, "csv")    ? FMT_CSV
        : !strcmp(name, "json")   ? FMT_JSON
                                  : FMT_TEXT;
    if (f == FMT_JSON && !(arr = json_object_new_array()))
        return oomi_nomem();
    if (f == FMT_CSV)
        oomi_sb_puts(&sb, "workload,gpu,usable_bytes,fits,batch_size,grad_accum,seq_len,"
                          "checkpointing,device_peak_bytes,budget_used,tokens_per_s\n");
    for (i = 0; i < n_workloads && !err; i++)
        err = one_workload(&sb, arr, f, workloads[i], names ? names[i] : "workload", gpus, n_gpus);
    if (!err && f == FMT_JSON) {
        const char *text =
            json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE);
        oomi_sb_puts(&sb, "{\"tables\": ");
        oomi_sb_puts(&sb, text ? text : "[]");
        oomi_sb_puts(&sb, "}\n");
    }
    json_object_put(arr);
    if (err) {
        oomi_sb_free(&sb);
        return err;
    }
    return oomi_sb_finish(&sb, out);
}
