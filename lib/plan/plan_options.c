/* plan_options.c - plans from text options (the CLI, the Python package and workload files). */
#include "plan/plan.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct oom_plan_options {
    oom_workload *w;
    bool has_model, has_line, fixed_ck;
    long fixed_batch, fixed_accum, fixed_seq, gpus;
    long fixed_tokens; /* --tokens-per-batch: packed tokens per micro-batch (packs of seq) */
    long target_eff, seq_min, seq_max, max_batch, max_auto, nodes, per_node, workers;
    unsigned allow, downscale;
    int inexact;
    char *gpu, *vram, *margin, *config;
    double fit_conf; /* 0: not set (the config's default, else the margin) */
    char *calib_path, *calib_command, *calib_workload; /* a probe's calibration record */
    oom_measured_line line;
    double n_pos, n_neg;
    bool mult_set;
    bool seq_auto; /* --seq auto: the longest sequence vLLM's KV cache holds */
};

int oom_plan_options_create(oom_plan_options **out)
{
    oom_plan_options *o;
    int err;
    *out = NULL;
    if (!(o = oomi_calloc(1, sizeof(*o))))
        return oomi_nomem();
    if ((err = oom_workload_create(&o->w))) {
        oomi_free(o);
        return err;
    }
    o->allow = OOM_ALLOW_DEFAULT;
    o->downscale = OOM_DOWNSCALE_DEFAULT;
    o->line.version = OOM_MEASURED_LINE_VERSION;
    *out = o;
    return OOM_OK;
}

void oom_plan_options_free(oom_plan_options *o)
{
    if (!o)
        return;
    oom_workload_free(o->w);
    oomi_free(o->gpu), oomi_free(o->vram), oomi_free(o->margin), oomi_free(o->config);
    oomi_free(o->calib_path), oomi_free(o->calib_command), oomi_free(o->calib_workload);
    oomi_free(o);
}

static int count(long *out, const char *v, const char *key)
{
    long long x;
    int err = oomi_parse_long(&x, v, 1, 1L << 30, key);
    if (!err)
        *out = (long)x;
    return err;
}

/* the option's yes or no (its values), or YAML's spellings of a boolean in a workload file */
static int yes_no(int *out, const char *v, const char *key)
{
    unsigned i;
    if (!oomi_option_parse(&i, oom_option_lookup(key), v))
        return *out = i == 0, OOM_OK;
    if (!oomi_name_cmp(v, "true") || !strcmp(v, "1"))
        return *out = 1, OOM_OK;
    if (!oomi_name_cmp(v, "false") || !strcmp(v, "0"))
        return *out = 0, OOM_OK;
    return OOM_EINVAL; /* the message names the option's values */
}

static int set_str(char **dst, const char *v)
{
    char *c = oomi_strdup(v);
    if (!c)
        return oomi_nomem();
    oomi_free(*dst);
    *dst = c;
    return OOM_OK;
}

static int set_range(oom_plan_options *o, const char *v)
{
    const char *colon = strchr(v, ':');
    char lo[32];
    int err;
    if (!colon || colon - v >= (long)sizeof(lo))
        return oomi_fail(OOM_EINVAL, "option 'seq-range': '%s' is not MIN:MAX", v);
    oomi_snprintf(lo, sizeof(lo), "%.*s", (int)(colon - v), v);
    if ((err = count(&o->seq_min, lo, "seq-range")) ||
        (err = count(&o->seq_max, colon + 1, "seq-range")))
        return err;
    if (o->seq_min > o->seq_max)
        return oomi_fail(OOM_EINVAL, "option 'seq-range': %ld is above %ld", o->seq_min,
                         o->seq_max);
    return OOM_OK;
}

static int set_line(oom_plan_options *o, const char *k, const char *v)
{
    uint64_t size;
    double d;
    int err;
    o->has_line = true;
    if (!strcmp(k, "fixed-bytes") || !strcmp(k, "bytes-per-sample") ||
        !strcmp(k, "bytes-per-token")) {
        if ((err = oom_parse_size(&size, v, OOM_UNIT_MIB)))
            return oomi_fail_prefix(err, "option '%s': ", k);
        *(k[0] == 'f'    ? &o->line.fixed_bytes
          : k[10] == 's' ? &o->line.bytes_per_sample
                         : &o->line.bytes_per_token) = size;
        return OOM_OK;
    }
    if ((err = oomi_parse_double(&d, v, k)))
        return err;
    if (d < 0 || (!strcmp(k, "sample-multiplier") && d < 1))
        return oomi_fail(OOM_EINVAL, "option '%s': %s is out of range", k, v);
    if (!strcmp(k, "sample-multiplier"))
        o->line.sample_multiplier = d, o->mult_set = true;
    else if (!strcmp(k, "n-positives"))
        o->n_pos = d;
    else if (!strcmp(k, "n-negatives"))
        o->n_neg = d;
    else
        o->line.flops_per_sample = d;
    return OOM_OK;
}

static int set_plan(oom_plan_options *o, const char *k, const char *v)
{
    if (!strcmp(k, "target-effective-batch"))
        return count(&o->target_eff, v, k);
    if (!strcmp(k, "seq-range"))
        return set_range(o, v);
    if (!strcmp(k, "max-batch-size"))
        return count(&o->max_batch, v, k);
    if (!strcmp(k, "max-auto-batch-size"))
        return count(&o->max_auto, v, k);
    if (!strcmp(k, "allow"))
        return oomi_plan_list_bits(&o->allow, k, v);
    if (!strcmp(k, "allow-inexact"))
        return yes_no(&o->inexact, v, k);
    if (!strcmp(k, "checkpointing-variants"))
        return oomi_ckvar_parse(&o->w->ckpt.search, v);
    if (!strcmp(k, "allow-downscale"))
        return oomi_plan_list_bits(&o->downscale, k, v);
    if (!strcmp(k, "nodes"))
        return count(&o->nodes, v, k);
    if (!strcmp(k, "gpus-per-node"))
        return count(&o->per_node, v, k);
    if (!strcmp(k, "workers")) {
        if (!oomi_name_cmp(v, "auto"))
            return o->workers = -1, OOM_OK;
        return count(&o->workers, v, k);
    }
    if (!strcmp(k, "gpu"))
        return set_str(&o->gpu, v);
    if (!strcmp(k, "vram"))
        return set_str(&o->vram, v);
    if (!strcmp(k, "vram-safety-margin"))
        return set_str(&o->margin, v);
    if (!strcmp(k, "fit-confidence"))
        return oomi_parse_confidence(&o->fit_conf, v, k);
    if (!strcmp(k, "config"))
        return set_str(&o->config, v);
    if (!strcmp(k, "workload"))
        return oom_plan_options_load(o, v);
    if (!strcmp(k, "calibration"))
        return set_str(&o->calib_path, v);
    if (!strcmp(k, "calibration-command"))
        return set_str(&o->calib_command, v);
    if (!strcmp(k, "calibration-workload"))
        return set_str(&o->calib_workload, v);
    return set_line(o, k, v);
}

/* workload options the user fixes (never raised by the planner) */
static int set_fixed(oom_plan_options *o, const char *k, const char *v)
{
    const char *wk = !strcmp(k, "batch-size") ? "batch" : k;
    long n = 0;
    int err;
    if (strcmp(k, "checkpointing") && (err = count(&n, v, k)))
        return err;
    if ((err = oom_workload_set(o->w, wk, v)))
        return err;
    if (!strcmp(wk, "batch"))
        o->fixed_batch = n;
    else if (!strcmp(wk, "grad-accum"))
        o->fixed_accum = n;
    else if (!strcmp(wk, "seq"))
        o->fixed_seq = n;
    else if (!strcmp(wk, "gpus"))
        o->gpus = n;
    else
        o->fixed_ck = true;
    return OOM_OK;
}

int oom_plan_options_set(oom_plan_options *o, const char *key, const char *value)
{
    char k[40];
    size_t i, n;
    const oom_option *const *t = oom_plan_option_table(&n);

    if (!o || !key || strlen(key) >= sizeof(k))
        return oomi_fail(OOM_ENOTFOUND, "unknown plan option '%s'", key ? key : "(null)");
    if (!value)
        return oomi_fail(OOM_EINVAL, "option '%s' needs a value", key);
    for (i = 0; key[i]; i++)
        k[i] = key[i] == '_' ? '-' : key[i];
    k[i] = 0;
    if (!strcmp(k, "seq") && !oomi_name_cmp(value, "auto")) {
        o->seq_auto = true;
        o->fixed_seq = 0;
        return OOM_OK;
    }
    if (!strcmp(k, "seq"))
        o->seq_auto = false;
    if (!strcmp(k, "batch") || !strcmp(k, "batch-size") || !strcmp(k, "grad-accum") ||
        !strcmp(k, "seq") || !strcmp(k, "checkpointing") || !strcmp(k, "gpus"))
        return set_fixed(o, k, value);
    if (!strcmp(k, "tokens-per-batch")) /* the plan's micro-batch in packs: fixed_packs() */
        return count(&o->fixed_tokens, value, k);
    for (i = 0; i < n; i++)
        if (!strcmp(k, t[i]->name))
            return set_plan(o, k, value);
    if (!strcmp(k, "model")) {
        int err = oom_workload_set(o->w, k, value);
        o->has_model |= !err;
        return err;
    }
    return oom_workload_set(o->w, k, value);
}

/* scalar YAML values as the text an option takes */
static int set_json_value(oom_plan_options *o, const char *key, json_object *v)
{
    if (!v || json_object_is_type(v, json_type_object) || json_object_is_type(v, json_type_array))
        return oomi_fail(OOM_EINVAL, "workload key '%s' needs a single value", key);
    if (json_object_is_type(v, json_type_boolean))
        return oom_plan_options_set(o, key, json_object_get_boolean(v) ? "yes" : "no");
    return oom_plan_options_set(o, key, json_object_get_string(v));
}

/* every key of a YAML/JSON mapping as an option */
static int set_mapping(oom_plan_options *o, json_object *map, const char *what)
{
    int err = OOM_OK;
    if (!json_object_is_type(map, json_type_object))
        return oomi_fail(OOM_EINVAL, "%s: expected a mapping of option: value", what);
    json_object_object_foreach(map, key, val)
    {
        if (!strcmp(key, "workload"))
            return oomi_fail(OOM_EINVAL, "%s: a workload file cannot include another", what);
        if ((err = set_json_value(o, key, val)))
            return oomi_fail_prefix(err, "%s: ", what);
    }
    return OOM_OK;
}

int oom_plan_options_load(oom_plan_options *o, const char *path)
{
    json_object *root = NULL;
    int err;
    if ((err = oomi_yaml_load_file(&root, path)))
        return err;
    if (!root)
        return oomi_fail(OOM_EINVAL, "workload file '%s' is empty", path);
    err = set_mapping(o, root, path);
    json_object_put(root);
    return err;
}

int oom_table_workloads_load(oom_plan_options ***options, char ***names, size_t *count_out,
                             const char *path)
{
    json_object *root = NULL, *list;
    oom_plan_options **opts = NULL;
    char **nm = NULL;
    size_t n = 0, cap;
    int err;

    *options = NULL, *names = NULL, *count_out = 0;
    if ((err = oomi_yaml_load_file(&root, path)))
        return err;
    if (!json_object_is_type(list = oomi_json_get(root, "workloads"), json_type_object) ||
        !json_object_object_length(list)) {
        json_object_put(root);
        return oomi_fail(OOM_EINVAL, "'%s' has no 'workloads:' mapping of NAME: {options}", path);
    }
    cap = (size_t)json_object_object_length(list);
    opts = oomi_calloc(cap, sizeof(*opts)), nm = oomi_calloc(cap, sizeof(*nm));
    if (!opts || !nm)
        err = oomi_nomem();
    json_object_object_foreach(list, key, val)
    {
        if (err)
            break;
        if (!(nm[n] = oomi_strdup(key)) || (err = oom_plan_options_create(&opts[n]))) {
            err = err ? err : oomi_nomem();
            n += nm[n] != NULL;
            break;
        }
        n++;
        if ((err = set_mapping(opts[n - 1], val, key)))
            err = oomi_fail_prefix(err, "%s: ", path);
    }
    json_object_put(root);
    if (err) {
        oom_table_workloads_free(opts, nm, cap);
        return err;
    }
    *options = opts, *names = nm, *count_out = n;
    return OOM_OK;
}

void oom_table_workloads_free(oom_plan_options **options, char **names, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if (options)
            oom_plan_options_free(options[i]);
        if (names)
            oomi_free(names[i]);
    }
    oomi_free(options);
    oomi_free(names);
}

/* --tokens-per-batch in a plan: the micro-batch fixed at that many packed tokens, in packs of
 * --seq (TRL's per_device_train_batch_size examples of max_length, torchtune's batch_size packs
 * of max_seq_len); without it the planner searches the packs per micro-batch */
static int fixed_packs(const oom_plan_options *o, oom_workload *w, long *packs)
{
    char n[32];
    *packs = 0;
    if (!o->fixed_tokens)
        return OOM_OK;
    if (w->packing.mode == OOMI_PACKING_NONE)
        return oomi_fail(OOM_EINVAL,
                         "tokens-per-batch '%ld' counts packed tokens: it needs "
                         "--packing padding-free or block-mask",
                         o->fixed_tokens);
    if (o->fixed_batch)
        return oomi_fail(OOM_EINVAL, "give --tokens-per-batch or --batch, not both (the plan's "
                                     "micro-batch is --batch packs of --seq tokens)");
    if (o->fixed_tokens % w->k.seq_len)
        return oomi_fail(OOM_EINVAL,
                         "tokens-per-batch '%ld' is not a whole number of packs of --seq %ld",
                         o->fixed_tokens, w->k.seq_len);
    *packs = o->fixed_tokens / w->k.seq_len;
    oomi_snprintf(n, sizeof n, "%ld", *packs);
    return oom_workload_set(w, "batch", n);
}

/* the request from the options; w is the workload clone with the GPU set (or NULL) */
static int build_request(oom_plan_request *r, const oom_plan_options *o, oom_workload *w,
                         const oom_target *t, bool calibrated)
{
    const char *env = getenv("OOMLESS_BATCH_SIZE");
    bool has_line = o->has_line || calibrated;
    long packs;
    int err;

    oom_plan_request_init(r, OOM_PLAN_REQUEST_VERSION);
    r->workload = o->has_model ? w : NULL;
    r->line = has_line ? &o->line : NULL;
    if (o->has_model && has_line)
        return oomi_fail(OOM_EINVAL, "give either a model or a measured line (--fixed-bytes, "
                                     "--bytes-per-sample, or a probed command), not both");
    if (!o->has_model && !has_line)
        return oomi_fail(OOM_EINVAL, "no workload: give --model NAME|PATH, a measured line "
                                     "(--fixed-bytes, --bytes-per-sample) or --workload FILE");
    r->budget = t->budget;
    r->gpu = &t->profile;
    r->nodes = o->nodes ? o->nodes : 1;
    r->gpus_per_node = o->per_node ? o->per_node : o->gpus ? o->gpus / r->nodes : 1;
    if (r->gpus_per_node < 1 || (o->gpus && o->gpus != r->nodes * r->gpus_per_node))
        return oomi_fail(OOM_EINVAL, "--gpus %ld is not --nodes %ld x --gpus-per-node %ld", o->gpus,
                         r->nodes, o->per_node);
    r->target_effective_batch = o->target_eff;
    if ((err = fixed_packs(o, w, &packs)))
        return err;
    r->fixed_batch = o->fixed_batch ? o->fixed_batch : packs;
    if (!r->fixed_batch && env && *env) {
        if ((err = count(&r->fixed_batch, env, "OOMLESS_BATCH_SIZE")) ||
            (err = oom_workload_set(w, "batch", env)))
            return err;
    }
    r->fixed_grad_accum = o->fixed_accum, r->fixed_seq = o->fixed_seq;
    r->fixed_checkpointing = o->fixed_ck;
    r->seq_min = o->seq_min, r->seq_max = o->seq_max;
    if (r->seq_max && r->fixed_seq)
        return oomi_fail(OOM_EINVAL, "give --seq or --seq-range, not both");
    r->max_batch = o->max_batch, r->max_auto_batch = o->max_auto;
    r->allow = o->allow, r->downscale = o->downscale, r->allow_inexact = o->inexact;
    r->workers = o->workers;
    return OOM_OK;
}

/* a positive count at the start of v (up to a ',' or space), or 0 */
static long leading_count(const char *v)
{
    char *end;
    long n = strtol(v, &end, 10);
    return end != v && (*end == '\0' || *end == ',' || *end == ' ') && n > 0 ? n : 0;
}

/* The sequence length a calibration record was measured at, where it says: its workload's
 * "seq=N", else the command's --seq / --max-seq-len / --max_seq_length N (or =N); 0 if neither */
static long record_seq(const oom_calibration *rec)
{
    static const char *const flags[] = {"--seq", "--seq-len", "--max-seq-len", "--max_seq_length",
                                        "--max_seq_len"};
    const char *p = rec->workload ? strstr(rec->workload, "seq=") : NULL;
    json_object *argv;
    long n = 0;
    size_t i, j, len;
    if (p && (p == rec->workload || p[-1] == ',' || p[-1] == ' '))
        return leading_count(p + 4);
    if (!rec->command || !(argv = json_tokener_parse(rec->command)))
        return 0;
    len = json_object_is_type(argv, json_type_array) ? json_object_array_length(argv) : 0;
    for (i = 0; i < len && !n; i++) {
        const char *a = json_object_get_string(json_object_array_get_idx(argv, i));
        for (j = 0; a && j < OOMI_ARRAY_LEN(flags) && !n; j++) {
            size_t fl = strlen(flags[j]);
            if (strncmp(a, flags[j], fl))
                continue;
            if (a[fl] == '=')
                n = leading_count(a + fl + 1);
            else if (!a[fl] && i + 1 < len)
                n = leading_count(json_object_get_string(json_object_array_get_idx(argv, i + 1)));
        }
    }
    json_object_put(argv);
    return n;
}

/* The line `oomless probe` measured for this command on this GPU. A quadratic record becomes
 * the chord through the largest batch it ran: above the line in between, exact there; the plan
 * is capped at that batch, where nothing was measured beyond. */
static int calibrated_line(oom_measured_line *line, long *cap, long *seq, const oom_plan_options *o,
                           const oom_target *t)
{
    oom_calibration *rec = NULL;
    const char *path = o->calib_path;
    int err, top;

    if ((err = oom_calibration_lookup(&rec, path, t->profile.name, o->calib_command,
                                      o->calib_workload ? o->calib_workload : "")))
        return err == OOM_ENOTFOUND
                   ? oomi_fail(OOM_ENOTFOUND,
                               "no calibration record for this command on '%s'%s%s%s: run "
                               "'oomless probe -- CMD...' on that GPU first",
                               t->profile.name, o->calib_workload ? " (workload '" : "",
                               o->calib_workload ? o->calib_workload : "",
                               o->calib_workload ? "')" : "")
                   : err;
    if (rec->traced &&
        (err = oomi_traced_to_device(&rec->fit, t->profile.cc_major, t->profile.cc_minor))) {
        oom_calibration_free(rec);
        return err;
    }
    oom_measured_line_init(line, OOM_MEASURED_LINE_VERSION);
    line->fixed_bytes = rec->fit.fixed_bytes > 0 ? (uint64_t)rec->fit.fixed_bytes : 0;
    line->bytes_per_sample =
        rec->fit.per_sample_bytes > 0 ? (uint64_t)rec->fit.per_sample_bytes : 0;
    line->sample_multiplier = 1;
    *cap = 0;
    *seq = record_seq(rec);
    if (rec->fit.quadratic) {
        /* linearised at the largest batch it vouches for: a probe's the largest that ran; a
         * trace ran no GPU, its curve holds for any batch, so the largest the curve puts under
         * this budget (exact there, above the curve below it) */
        top = rec->max_batch > 0 ? rec->max_batch : 1;
        if (rec->traced) {
            int fit_top = oom_probe_fit_max_batch(&rec->fit, t->budget.usable_bytes, 1 << 20);
            top = fit_top > 0 ? fit_top : 1;
        }
        line->bytes_per_sample =
            (uint64_t)((oom_probe_fit_peak(&rec->fit, top) - (double)line->fixed_bytes) / top);
        *cap = top;
    }
    oom_calibration_free(rec);
    return OOM_OK;
}

int oom_calibration_max_batch(int *out, const oom_calibration *record, uint64_t usable_bytes,
                              int cc_major, int cc_minor)
{
    oom_probe_fit fit;
    int b, err;

    if (!out || !record)
        return oomi_fail(OOM_EINVAL, "calibration max batch: missing argument");
    if ((err = oomi_check_version(record->version, OOM_CALIBRATION_VERSION, "oom_calibration")))
        return err;
    *out = 0;
    fit = record->fit;
    if (record->traced) {
        /* allocated bytes on the meta device: the device's bytes as plan makes them, for any
         * batch (the trace ran no GPU; its batches say nothing of where memory runs out) */
        if ((err = oomi_traced_to_device(&fit, cc_major, cc_minor)))
            return err;
        *out = oom_probe_fit_max_batch(&fit, usable_bytes, INT_MAX / 2);
        return OOM_OK;
    }
    b = oom_probe_fit_max_batch(&fit, usable_bytes, INT_MAX / 2);
    /* the recommended batch ran under the record's budget: a fit that is a bound above the
     * trials (irregular peaks) may put fewer under the same or a larger budget */
    if (record->recommended_batch > b && record->usable_bytes > 0 &&
        usable_bytes >= record->usable_bytes)
        b = record->recommended_batch;
    if (record->max_batch > 0 && b > record->max_batch)
        b = record->max_batch; /* never beyond what was seen to run */
    *out = b > 0 ? b : 0;
    return OOM_OK;
}

int oomi_plan_options_run_gpu(oom_plan_result **out, const oom_plan_options *o, const char *gpu)
{
    long cap = 0, seq = 0;
    double conf = 0;
    bool calibrated;
    oom_config *cfg = NULL;
    oom_catalog *cat = NULL;
    oom_workload *w = NULL;
    oom_target t = OOM_TARGET_INIT;
    oom_target_request tr;
    oom_plan_request r;
    oom_measured_line line;
    struct oomi_plan_consts consts;
    bool have_target = false;
    int err;

    *out = NULL;
    if (o->seq_auto)
        return oomi_fail(OOM_EINVAL, "--seq auto is for plan (one GPU); give --seq N");
    if ((err = oom_config_load(&cfg, o->config)) || (err = oom_catalog_load(&cat, cfg)))
        goto done;
    tr = (oom_target_request){OOM_TARGET_REQUEST_VERSION, gpu ? gpu : o->gpu, o->vram, o->margin,
                              cfg};
    if ((err = oom_target_resolve(&t, &tr, cat)))
        goto done;
    have_target = true;
    calibrated = o->calib_command && (!o->calib_path || strcmp(o->calib_path, "off"));
    if ((err = oom_workload_clone(&w, o->w)) || (err = oom_workload_set_gpu(w, &t.profile)) ||
        (err = build_request(&r, o, w, &t, calibrated)))
        goto done;
    line = o->line;
    if (calibrated) {
        if (o->has_line) {
            err =
                oomi_fail(OOM_EINVAL, "give either a measured line or a probed command, not both");
            goto done;
        }
        if ((err = calibrated_line(&line, &cap, &seq, o, &t)))
            goto done;
        if (!r.fixed_seq && !r.seq_max) /* the seq it was measured at */
            r.fixed_seq = seq;
        if (cap && (!r.max_batch || cap < r.max_batch))
            r.max_batch = cap;
    }
    if (!o->mult_set && (o->n_pos > 0 || o->n_neg > 0))
        line.sample_multiplier = 1 + o->n_pos + o->n_neg;
    if (r.line || calibrated)
        r.line = &line;
    if ((err = oomi_catalog_plan_consts(&consts, cat, t.profile.id)))
        goto done;
    if (!o->fit_conf && oomi_config_fit_confidence(cfg) &&
        (err = oomi_parse_confidence(&conf, oomi_config_fit_confidence(cfg), "fit_confidence")))
        goto done;
    err = oomi_plan_run(out, &r, &consts, o->fit_conf ? o->fit_conf : conf);
    if (*out) {
        (*out)->target_fallback = t.fallback;
        (*out)->others_bytes = t.others_bytes;
        if ((t.reason && !((*out)->target_reason = oomi_strdup(t.reason))) ||
            (t.others && !((*out)->others = oomi_strdup(t.others)))) {
            oom_plan_free(*out);
            *out = NULL;
            err = oomi_nomem();
        }
    }
done:
    if (have_target)
        oom_target_dispose(&t);
    oom_workload_free(w);
    oom_catalog_free(cat);
    oom_config_free(cfg);
    return err;
}

/* the plan of o at a fixed sequence length */
static int plan_at_seq(oom_plan_result **out, const oom_plan_options *o, long seq)
{
    oom_plan_options c = *o;
    char v[24];
    int err;
    c.seq_auto = false;
    c.fixed_seq = seq;
    oomi_snprintf(v, sizeof(v), "%ld", seq);
    if ((err = oom_workload_clone(&c.w, o->w)))
        return err;
    if (!(err = oom_workload_set(c.w, "seq", v)))
        err = oomi_plan_options_run_gpu(out, &c, NULL);
    oom_workload_free(c.w);
    return err;
}

/* --seq auto for an inference plan: the longest max_model_len whose one sequence the KV cache
 * vLLM will find holds, up to the model's positions. vLLM's own auto-fit searches the same way
 * after its profile run (vllm/v1/core/kv_cache_utils.py, estimate_max_model_len: a binary search
 * over 1 .. max_model_len for the longest length whose max_memory_usage_bytes, cdiv(length,
 * block_size) pages per full-attention layer, is within the available KV-cache memory); here
 * before launch, every length planned again (its profile run and batch follow the length). The
 * holding test falls as the length grows (more KV per sequence, a larger profile run), so a
 * binary search finds the longest. */
static int plan_seq_auto(oom_plan_result **out, const oom_plan_options *o)
{
    oom_plan_result *r = NULL, *best = NULL;
    long lo = 1, hi, len = 0;
    int err = OOM_OK;

    if (!o->has_model || o->w->k.method != OOM_METHOD_INFERENCE)
        return oomi_fail(OOM_EINVAL, "--seq auto is for --method inference of a model (vLLM's "
                                     "max_model_len); give --seq N");
    if (o->seq_max)
        return oomi_fail(OOM_EINVAL, "give --seq auto or --seq-range, not both");
    hi = o->w->shape.max_positions ? o->w->shape.max_positions : o->w->model->max_pos;
    if (hi <= 0)
        return oomi_fail(OOM_EINVAL, "--seq auto: the model gives no maximum positions; give "
                                     "--max-positions N or --seq N");
    while (lo <= hi) {
        long mid = lo + (hi - lo) / 2;
        if ((err = plan_at_seq(&r, o, mid)) && err != OOM_ENOFIT)
            break;
        err = OOM_OK;
        if (oomi_plan_vllm_holds(r, mid)) {
            oom_plan_free(best);
            best = r, len = mid, lo = mid + 1;
        } else {
            oom_plan_free(r);
            hi = mid - 1;
        }
        r = NULL;
    }
    if (err) {
        oom_plan_free(best);
        return err;
    }
    if (!best) { /* not one token: the plan at the shortest length says why */
        if ((err = plan_at_seq(out, o, 1)) && err != OOM_ENOFIT)
            return err;
        if (*out)
            (*out)->found = false;
        return oomi_fail(OOM_ENOFIT, "--seq auto: vLLM's KV cache would not hold one sequence "
                                     "of any length");
    }
    {
        oomi_plan_vllm_kv v;
        long max = o->w->shape.max_positions ? o->w->shape.max_positions : o->w->model->max_pos;
        const char *why = "the model's positions";
        if (len < max) { /* what stops the next length: the plan itself, or vLLM's KV cache */
            err = plan_at_seq(&r, o, len + 1);
            why = r && r->found ? "the KV cache vLLM finds holds no longer sequence"
                                : "a longer prefill does not fit";
            oom_plan_free(r);
            if (err && err != OOM_ENOFIT) {
                oom_plan_free(best);
                return err;
            }
        }
        oomi_plan_vllm(&v, best);
        err = oomi_plan_note(best,
                             "--seq auto: --max-model-len %ld of the model's %ld positions (%s); "
                             "sequences of that length at once: %ld",
                             len, max, why, v.tokens / len);
    }
    if (err) {
        oom_plan_free(best);
        return err;
    }
    *out = best;
    return OOM_OK;
}

int oom_plan_options_run(oom_plan_result **out, const oom_plan_options *o)
{
    if (!out || !o)
        return oomi_fail(OOM_EINVAL, "plan: missing argument");
    if (o->seq_auto)
        return plan_seq_auto(out, o);
    return oomi_plan_options_run_gpu(out, o, NULL);
}

int oom_plan_json(char **out, const char *const *keys, const char *const *values, size_t n)
{
    oom_plan_options *o = NULL;
    oom_plan_result *res = NULL;
    size_t i;
    int err, jerr;

    if (!out)
        return oomi_fail(OOM_EINVAL, "plan: missing argument");
    *out = NULL;
    if ((err = oom_plan_options_create(&o)))
        return err;
    for (i = 0; i < n && !err; i++)
        err = oom_plan_options_set(o, keys[i], values[i]);
    if (!err)
        err = oom_plan_options_run(&res, o);
    if (res && (jerr = oom_plan_to_json(out, res)))
        err = jerr;
    oom_plan_free(res);
    oom_plan_options_free(o);
    return err;
}

int oom_plan_options_format(char **out, const char **written, const char *const *keys,
                            const char *const *values, size_t n, const char *format,
                            const char *version)
{
    oom_plan_options *o = NULL;
    oom_plan_result *res = NULL;
    size_t i;
    int err;

    if (written)
        *written = NULL;
    if (!out || !format)
        return oomi_fail(OOM_EINVAL, "plan: missing argument");
    *out = NULL;
    /* the format and its version first: a wrong one is said before the search runs */
    if ((err = oom_plan_format_pick(NULL, format, version)) || (err = oom_plan_options_create(&o)))
        return err;
    for (i = 0; i < n && !err; i++)
        err = oom_plan_options_set(o, keys[i], values[i]);
    if (!err)
        err = oom_plan_options_run(&res, o);
    if (!err)
        err = oom_plan_format_version(out, written, res, format, version);
    oom_plan_free(res);
    oom_plan_options_free(o);
    return err;
}
