/*
 * oomless_web.c - the API the web page calls: what `oomless estimate --json`, `oomless plan --json`
 * and `oomless table --format json` print, made by the same library calls in the same order as
 * cli/cmd_estimate.c, cli/cmd_plan.c and cli/cmd_table.c, so the page's numbers are the CLI's byte
 * for byte.
 *
 * Every command takes its options as one JSON object of strings, keyed by the CLI's option names
 * without dashes ({"model": "llama-3.1-8b", "method": "lora", "gpu": "rtx-4090"}), applied in the
 * object's order as the CLI applies its arguments. It returns the exit status the CLI would
 * (0 ok/fits, 1 does not fit, 2 bad option or value, 3 environment); oomw_output() then holds what
 * the CLI would print on stdout and oomw_error() its message on stderr ("" when none). Both stay
 * valid until the next call.
 */
#include "oomless.h"

#include <emscripten.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_OK = 0, EXIT_NOFIT = 1, EXIT_USAGE = 2, EXIT_ENV = 3 };

/* The most the page may hand over: an option's value, the whole options object, a config.json
 * and its file name (app.js reads them from oomw_limits(); this is the one place they are set).
 * No entry point trusts the length of what it is given: a crafted link gets a message, never a
 * trap. 1024 characters hold any real value (a preset name, a size, a table's list of every
 * catalog GPU: 268 for the 31 of today); a model's config.json is a few KiB. */
enum {
    OOMW_VALUE_MAX = 1024,
    OOMW_OPTIONS_MAX = 16384,
    OOMW_NAME_MAX = 100,
    OOMW_FILE_MAX = 1 << 20
};

static char *out_text; /* what the CLI prints on stdout (malloc'd) */
static char err_text[1024];
static char *curve_text; /* the last plan's memory-vs-batch curve (malloc'd) */

static void set_output(const char *text, int add_newline)
{
    size_t n = strlen(text);
    free(out_text);
    out_text = malloc(n + 2);
    if (!out_text)
        return;
    memcpy(out_text, text, n + 1);
    if (add_newline && (n == 0 || text[n - 1] != '\n')) /* cli_print_json() */
        memcpy(out_text + n, "\n", 2);
}

static void reset(void)
{
    free(out_text);
    out_text = NULL;
    err_text[0] = '\0';
}

/* cli_exit_code() */
static int exit_code(int err)
{
    switch (err) {
    case OOM_OK:
        return EXIT_OK;
    case OOM_ENOFIT:
    case OOM_EJOB:
    case OOM_EREFUSED:
        return EXIT_NOFIT;
    case OOM_EINVAL:
    case OOM_EPARSE:
    case OOM_ENOTFOUND:
    case OOM_EUNSUPPORTED:
        return EXIT_USAGE;
    default:
        return EXIT_ENV;
    }
}

/* cli_fail(): the library's message, as "oomless CMD: message" */
static int fail(const char *cmd, int err)
{
    const char *msg = oom_last_message();
    snprintf(err_text, sizeof(err_text), "oomless %s: %s", cmd, *msg ? msg : oom_strerror(err));
    return exit_code(err);
}

static int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(err_text, sizeof(err_text), "oomless %s: ", cmd);
    va_start(ap, fmt);
    vsnprintf(err_text + n, sizeof(err_text) - (size_t)n, fmt, ap);
    va_end(ap);
    return EXIT_USAGE;
}

/* The options object; NULL (with the error set) when it is not an object of scalars, or longer
 * than the limits (looked at without reading past them). */
static json_object *parse_options(const char *cmd, const char *text)
{
    json_object *o;
    if (text && strnlen(text, OOMW_OPTIONS_MAX + 1) > OOMW_OPTIONS_MAX) {
        usage_error(cmd, "the options are longer than %d bytes", OOMW_OPTIONS_MAX);
        return NULL;
    }
    o = json_tokener_parse(text ? text : "{}");
    if (!o || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        usage_error(cmd, "the options are not a JSON object");
        return NULL;
    }
    json_object_object_foreach(o, key, val)
    {
        if (!val || json_object_is_type(val, json_type_object) ||
            json_object_is_type(val, json_type_array)) {
            usage_error(cmd, "option '--%s' needs a text value", key);
            json_object_put(o);
            return NULL;
        }
        if (json_object_get_string_len(val) > OOMW_VALUE_MAX) {
            usage_error(cmd, "option '--%s' is %d characters long: at most %d", key,
                        json_object_get_string_len(val), OOMW_VALUE_MAX);
            json_object_put(o);
            return NULL;
        }
    }
    return o;
}

static bool in_table(const oom_option *const *t, size_t n, const char *name)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!strcmp(t[i]->name, name))
            return true;
    return false;
}

EMSCRIPTEN_KEEPALIVE const char *oomw_output(void)
{
    return out_text ? out_text : "";
}

EMSCRIPTEN_KEEPALIVE const char *oomw_error(void)
{
    return err_text;
}

EMSCRIPTEN_KEEPALIVE const char *oomw_version(void)
{
    return oom_version();
}

/* The limits of what the entry points take, as JSON ({"value_max", "options_max", "name_max",
 * "file_max"}) in oomw_output(): the page bounds its fields and files with them. */
EMSCRIPTEN_KEEPALIVE int oomw_limits(void)
{
    char buf[160];
    reset();
    snprintf(buf, sizeof(buf),
             "{\"value_max\": %d, \"options_max\": %d, \"name_max\": %d, \"file_max\": %d}",
             OOMW_VALUE_MAX, OOMW_OPTIONS_MAX, OOMW_NAME_MAX, OOMW_FILE_MAX);
    set_output(buf, 1);
    return out_text ? EXIT_OK : EXIT_ENV;
}

/* oom_format_size(): "23.99 GiB", as the CLI's text output writes sizes. `bytes` is a double (a
 * JavaScript number: exact up to 2^53 bytes); negative or beyond 2^63 gives "". */
EMSCRIPTEN_KEEPALIVE const char *oomw_format_size(double bytes)
{
    static char buf[32];
    buf[0] = '\0';
    if (bytes >= 0 && bytes < 9.2e18)
        oom_format_size(buf, sizeof(buf), (uint64_t)bytes);
    return buf;
}

/* the names of the commands of an OOM_COMMAND_* mask, as a JSON array */
static json_object *commands_json(unsigned mask)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"estimate", OOM_COMMAND_ESTIMATE},
                 {"plan", OOM_COMMAND_PLAN},
                 {"table", OOM_COMMAND_TABLE}};
    json_object *a = json_object_new_array();
    size_t i;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (mask & names[i].bit)
            json_object_array_add(a, json_object_new_string(names[i].name));
    return a;
}

static json_object *option_json(const oom_option *o)
{
    json_object *j = json_object_new_object(), *values = json_object_new_array();
    char *help = NULL;
    size_t i;
    json_object_object_add(j, "name", json_object_new_string(o->name));
    json_object_object_add(j, "metavar", json_object_new_string(o->metavar));
    json_object_object_add(j, "help",
                           json_object_new_string(oom_option_help(&help, o) ? o->help : help));
    oom_free(help);
    json_object_object_add(j, "default",
                           o->default_value ? json_object_new_string(o->default_value) : NULL);
    json_object_object_add(j, "commands", commands_json(o->commands));
    for (i = 0; i < o->n_values; i++) {
        const oom_option_value *v = o->values[i];
        json_object *jv = json_object_new_object();
        json_object_object_add(jv, "name", json_object_new_string(v->name));
        json_object_object_add(jv, "help", json_object_new_string(v->help));
        json_object_object_add(jv, "form", json_object_new_boolean(v->form));
        json_object_object_add(jv, "commands", commands_json(v->commands));
        json_object_array_add(values, jv);
    }
    json_object_object_add(j, "values", values);
    return j;
}

/* The options of estimate, plan and table as JSON, from the library's tables (the workload's,
 * then the plan's): [{"name", "metavar", "help" (with the default, as --help prints it),
 * "default" (null: the library works it out), "commands", "values": [{"name", "help", "form",
 * "commands"}...]}...]. The page's selects offer the values and start at the defaults, so a
 * value the library adds appears on the page without an edit there. */
EMSCRIPTEN_KEEPALIVE int oomw_options(void)
{
    size_t n, i, t;
    json_object *a = json_object_new_array();
    reset();
    for (t = 0; t < 2; t++) {
        const oom_option *const *o = t ? oom_plan_option_table(&n) : oom_workload_options(&n);
        for (i = 0; i < n; i++)
            if (o[i]->commands & (OOM_COMMAND_ESTIMATE | OOM_COMMAND_PLAN | OOM_COMMAND_TABLE))
                json_object_array_add(a, option_json(o[i]));
    }
    set_output(json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN), 1);
    json_object_put(a);
    return out_text ? EXIT_OK : EXIT_ENV;
}

/* `oomless estimate --list-models --json` */
EMSCRIPTEN_KEEPALIVE int oomw_presets(void)
{
    char *text = NULL;
    int err;
    reset();
    if ((err = oom_model_presets_json(&text)))
        return fail("estimate", err);
    set_output(text, 1);
    oom_free(text);
    return EXIT_OK;
}

/* `oomless gpus --catalog --json` (no user config in a browser: the built-in catalog) */
EMSCRIPTEN_KEEPALIVE int oomw_catalog(void)
{
    oom_catalog *c = NULL;
    char *text = NULL;
    int err;
    reset();
    if ((err = oom_catalog_load(&c, NULL)) || (err = oom_catalog_to_json(&text, c))) {
        oom_catalog_free(c);
        return fail("gpus", err);
    }
    set_output(text, 1);
    oom_free(text);
    oom_catalog_free(c);
    return EXIT_OK;
}

/* `oomless estimate --json [OPTIONS]` (cli/cmd_estimate.c: parse, resolve_budget, run, print) */
EMSCRIPTEN_KEEPALIVE int oomw_estimate(const char *options)
{
    static const char *const CMD = "estimate";
    oom_workload *w = NULL;
    oom_config *cfg = NULL;
    oom_target_request req = {OOM_TARGET_REQUEST_VERSION, NULL, NULL, NULL, NULL};
    oom_estimate e = OOM_ESTIMATE_INIT;
    oom_budget b = OOM_BUDGET_INIT;
    json_object *opts;
    char *json = NULL;
    size_t n;
    const oom_option *const *table = oom_workload_options(&n);
    int err, rc = EXIT_OK, have = 0;

    reset();
    if (!(opts = parse_options(CMD, options)))
        return EXIT_USAGE;
    if ((err = oom_workload_create(&w))) {
        json_object_put(opts);
        return fail(CMD, err);
    }
    json_object_object_foreach(opts, key, val)
    {
        const char *v = json_object_get_string(val);
        if (!strcmp(key, "gpu"))
            req.gpu = v;
        else if (!strcmp(key, "vram"))
            req.vram = v;
        else if (!strcmp(key, "vram-safety-margin"))
            req.margin = v;
        else if (!in_table(table, n, key))
            rc = usage_error(CMD, "unknown option '--%s'", key);
        else if ((err = oom_workload_set(w, key, v)))
            rc = fail(CMD, err);
        if (rc)
            goto done;
    }
    if ((req.gpu || req.vram) && (err = oom_config_load(&cfg, NULL))) {
        rc = fail(CMD, err);
        goto done;
    }
    req.config = cfg;
    if ((err = oom_estimate_budget(&b, &have, NULL, w, &req))) {
        rc = fail(CMD, err);
        goto done;
    }
    if ((err = oom_estimate_run(&e, w)) ||
        (err = oom_estimate_to_json_budget(&json, w, &e, have ? &b : NULL))) {
        rc = fail(CMD, err);
        goto done;
    }
    set_output(json, 1);
    if (have && e.device_peak > b.usable_bytes)
        rc = EXIT_NOFIT;
done:
    oom_free(json);
    oom_config_free(cfg);
    oom_workload_free(w);
    json_object_put(opts);
    return rc;
}

/* The curve oom_plan_svg() draws: device peak against micro-batch for the chosen knobs, without
 * and with full checkpointing (null where the estimator refused). */
static void keep_curve(const oom_plan_result *r)
{
    json_object *c = json_object_new_object(), *b = json_object_new_array(),
                *none = json_object_new_array(), *full = json_object_new_array();
    size_t i;
    for (i = 0; i < r->n_curve; i++) {
        json_object_array_add(b, json_object_new_int64(r->curve_batch[i]));
        json_object_array_add(none, r->curve_peak_none[i] == UINT64_MAX
                                        ? NULL
                                        : json_object_new_int64((int64_t)r->curve_peak_none[i]));
        json_object_array_add(full, r->curve_peak_full[i] == UINT64_MAX
                                        ? NULL
                                        : json_object_new_int64((int64_t)r->curve_peak_full[i]));
    }
    json_object_object_add(c, "batch", b);
    json_object_object_add(c, "peak_none", none);
    json_object_object_add(c, "peak_full", full);
    json_object_object_add(c, "usable_bytes",
                           json_object_new_int64((int64_t)r->budget.usable_bytes));
    free(curve_text);
    curve_text = strdup(json_object_to_json_string_ext(c, JSON_C_TO_STRING_PLAIN));
    json_object_put(c);
}

/* `oomless plan --json [OPTIONS]` (cli/cmd_plan.c). Flags take "yes"/"no" as values. */
EMSCRIPTEN_KEEPALIVE int oomw_plan(const char *options)
{
    static const char *const CMD = "plan";
    oom_plan_options *o = NULL;
    oom_plan_result *r = NULL;
    json_object *opts;
    char *text = NULL;
    size_t nw, np;
    const oom_option *const *wt = oom_workload_options(&nw), *const *pt =
                                                                 oom_plan_option_table(&np);
    int err, rc = EXIT_OK;

    reset();
    free(curve_text);
    curve_text = NULL;
    if (!(opts = parse_options(CMD, options)))
        return EXIT_USAGE;
    if ((err = oom_plan_options_create(&o))) {
        json_object_put(opts);
        return fail(CMD, err);
    }
    json_object_object_foreach(opts, key, val)
    {
        if (!in_table(wt, nw, key) && !in_table(pt, np, key) && strcmp(key, "batch"))
            rc = usage_error(CMD, "unknown option '--%s' (see oomless plan --help)", key);
        else if ((err = oom_plan_options_set(o, key, json_object_get_string(val))))
            rc = fail(CMD, err);
        if (rc)
            goto done;
    }
    err = oom_plan_options_run(&r, o);
    if (err && err != OOM_ENOFIT) {
        rc = fail(CMD, err);
        goto done;
    }
    if (err) /* nothing fits: the message goes to stderr, the document to stdout */
        snprintf(err_text, sizeof(err_text), "oomless %s: %s", CMD, oom_last_message());
    if ((err = oom_plan_format(&text, r, "json"))) {
        rc = fail(CMD, err);
        goto done;
    }
    set_output(text, 1);
    keep_curve(r);
    rc = r->found ? EXIT_OK : EXIT_NOFIT;
done:
    oom_free(text);
    oom_plan_free(r);
    oom_plan_options_free(o);
    json_object_put(opts);
    return rc;
}

/* The last successful oomw_plan()'s curve as JSON ({"batch", "peak_none", "peak_full",
 * "usable_bytes"}), or "" when there is none. */
EMSCRIPTEN_KEEPALIVE const char *oomw_curve(void)
{
    return curve_text ? curve_text : "";
}

/* `oomless table --format json --gpus LIST [OPTIONS]` (cli/cmd_table.c): "gpus" is the list. */
EMSCRIPTEN_KEEPALIVE int oomw_table(const char *options)
{
    static const char *const CMD = "table";
    enum { MAX_GPUS = 64 };
    oom_plan_options *o = NULL;
    json_object *opts;
    const char *gpus[MAX_GPUS], *one_name = "workload";
    char *list = NULL, *text = NULL, *save = NULL, *p;
    size_t ng = 0;
    int err, rc = EXIT_OK;

    reset();
    if (!(opts = parse_options(CMD, options)))
        return EXIT_USAGE;
    if ((err = oom_plan_options_create(&o))) {
        json_object_put(opts);
        return fail(CMD, err);
    }
    json_object_object_foreach(opts, key, val)
    {
        const char *v = json_object_get_string(val);
        if (!strcmp(key, "gpus") || !strcmp(key, "gpu-list")) {
            free(list);
            list = strdup(v);
        } else if (!strcmp(key, "gpu"))
            rc = usage_error(CMD, "use --gpus LIST in table (one row per GPU)");
        else if ((err = oom_plan_options_set(o, key, v)))
            rc = fail(CMD, err);
        if (rc)
            goto done;
    }
    if (!list)
        list = strdup("rtx-3090,rtx-4090,a100-40gb,a100-80gb,h100-sxm");
    for (p = strtok_r(list, ",", &save); p && ng < MAX_GPUS; p = strtok_r(NULL, ",", &save))
        gpus[ng++] = p;
    if (!ng) {
        rc = usage_error(CMD, "--gpus names no GPU");
        goto done;
    }
    if ((err = oom_table(&text, (const oom_plan_options *const *)&o, &one_name, 1, gpus, ng,
                         "json"))) {
        rc = fail(CMD, err);
        goto done;
    }
    set_output(text, 0);
done:
    oom_free(text);
    free(list);
    oom_plan_options_free(o);
    json_object_put(opts);
    return rc;
}

/* Writes a file into the page's in-memory file system (a dropped config.json), so that "model"
 * can name it: a name of at most OOMW_NAME_MAX bytes, at most OOMW_FILE_MAX bytes of data.
 * Returns 0, 2 for a name or size out of bounds, or 3 with the error set. */
EMSCRIPTEN_KEEPALIVE int oomw_write_file(const char *path, const char *data, int len)
{
    FILE *f;
    reset();
    if (!path || !*path || strnlen(path, OOMW_NAME_MAX + 1) > OOMW_NAME_MAX)
        return usage_error("estimate", "a config file name of 1 to %d bytes is needed",
                           OOMW_NAME_MAX);
    if (len < 0 || len > OOMW_FILE_MAX || (len > 0 && !data))
        return usage_error("estimate",
                           "'%s' is %d bytes: a model config.json is a few KiB (at most %d)", path,
                           len, OOMW_FILE_MAX);
    if (!(f = fopen(path, "wb")) || (len > 0 && fwrite(data, 1, (size_t)len, f) != (size_t)len)) {
        if (f)
            fclose(f);
        snprintf(err_text, sizeof(err_text), "oomless: cannot write '%s'", path);
        return EXIT_ENV;
    }
    if (fclose(f)) {
        snprintf(err_text, sizeof(err_text), "oomless: cannot write '%s'", path);
        return EXIT_ENV;
    }
    return EXIT_OK;
}
