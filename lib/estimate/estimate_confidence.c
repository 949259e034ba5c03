/*
 * estimate_confidence.c - how sure an estimate is: bounds under which the real peak falls with a
 * given confidence, from the estimator's measured error per workload class (data/confidence.json,
 * made by bench/accuracy/fit_confidence.py; docs/estimate.md, "How sure the estimate is"). A
 * class's bound is the larger of its GPU measurements' part (the spread within a setup, plus the
 * bias across setups of the workload's stack: "spread") and the trace matrix's.
 */
#include "estimate/estimate.h"

#include <float.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

enum { MAX_LEVELS = OOMI_CONF_LEVELS_MAX, MAX_CLASSES = 512 };

typedef struct conf_class {
    char key[OOMI_CONF_KEY_MAX];
    char errors_of[2 * OOMI_CONF_KEY_MAX]; /* the classes whose errors it takes, per kind */
    oomi_conf_basis basis;
    double under[MAX_LEVELS];  /* the bound with the cross-stack spread */
    double within[MAX_LEVELS]; /* the GPU measurements' spread within a setup (has_within) */
    double trace[MAX_LEVELS];  /* the trace matrix's (has_trace) */
    bool has_within, has_trace;
    long cases;
} conf_class;

/* the bias a new setup may have, per level: over a stack's own sources or over all of them */
typedef struct conf_spread {
    bool own;           /* its own sources (else the cross-stack spread) */
    long sources;       /* the sources it is taken over */
    long stack_sources; /* the stack's own sources in the data */
    double under[MAX_LEVELS];
} conf_spread;

static struct {
    double levels[MAX_LEVELS];
    size_t nlevels;
    double ctx; /* context uncertainty, bytes */
    conf_class cls[MAX_CLASSES];
    size_t ncls;
    size_t widest;
    bool has_spread; /* data with "spread" (else each class's `under` is its bound) */
    conf_spread cross, stacks[OOMI_STACKS];
} conf;
static bool conf_loaded;
static pthread_mutex_t conf_lock = PTHREAD_MUTEX_INITIALIZER;

static int bad(const char *path, const char *what)
{
    return oomi_fail(OOM_EPARSE, "confidence data '%s': %s", path, what);
}

/* a JSON array of numbers into out[], at most MAX_LEVELS; its length must be n when n > 0 */
static int numbers(double *out, size_t *count, json_object *arr, size_t n, const char *path,
                   const char *key)
{
    size_t i, len;
    if (!json_object_is_type(arr, json_type_array) ||
        (len = json_object_array_length(arr)) > MAX_LEVELS || !len || (n && len != n))
        return oomi_fail(OOM_EPARSE, "confidence data '%s': '%s' is not a list of %zu numbers",
                         path, key, n ? n : (size_t)MAX_LEVELS);
    for (i = 0; i < len; i++) {
        json_object *v = json_object_array_get_idx(arr, i);
        if (!oomi_json_is_number(v))
            return oomi_fail(OOM_EPARSE, "confidence data '%s': '%s' item %zu is not a number",
                             path, key, i);
        out[i] = json_object_get_double(v);
    }
    *count = len;
    return OOM_OK;
}

static int read_class(conf_class *c, const char *key, json_object *o, const char *path)
{
    const char *basis = json_object_get_string(oomi_json_get(o, "basis"));
    char where[PATH_MAX + OOMI_CONF_KEY_MAX + 32];
    int64_t cases = 0;
    size_t n;
    int err;

    if (strlen(key) >= sizeof(c->key))
        return oomi_fail(OOM_EPARSE, "confidence data '%s': class '%s' is too long", path, key);
    memcpy(c->key, key, strlen(key) + 1);
    oomi_snprintf(where, sizeof(where), "confidence data '%s': %s.", path, key);
    if ((err = oomi_json_int(&cases, NULL, o, "cases", 0, LONG_MAX, where)))
        return err;
    c->cases = (long)cases;
    c->basis = !basis                       ? OOMI_CONF_NONE
               : !strcmp(basis, "measured") ? OOMI_CONF_MEASURED
               : !strcmp(basis, "fallback") ? OOMI_CONF_FALLBACK
                                            : OOMI_CONF_NONE;
    if (c->basis == OOMI_CONF_NONE)
        return OOM_OK;
    oomi_snprintf(c->errors_of, sizeof(c->errors_of), "%s",
                  json_object_get_string(oomi_json_get(o, "errors_of"))
                      ? json_object_get_string(oomi_json_get(o, "errors_of"))
                      : key);
    c->has_within = oomi_json_get(o, "gpu_within") != NULL;
    c->has_trace = oomi_json_get(o, "trace") != NULL;
    if ((c->has_within && (err = numbers(c->within, &n, oomi_json_get(o, "gpu_within"),
                                         conf.nlevels, path, "gpu_within"))) ||
        (c->has_trace &&
         (err = numbers(c->trace, &n, oomi_json_get(o, "trace"), conf.nlevels, path, "trace"))))
        return err;
    return numbers(c->under, &n, oomi_json_get(o, "under"), conf.nlevels, path, key);
}

static int read_spread(conf_spread *sp, json_object *o, const char *path, const char *name)
{
    const char *basis = json_object_get_string(oomi_json_get(o, "basis"));
    char where[PATH_MAX + 64];
    int64_t sources = 0;
    size_t n;
    int err;

    if (!json_object_is_type(o, json_type_object))
        return oomi_fail(OOM_EPARSE, "confidence data '%s': spread '%s' is not an object", path,
                         name);
    oomi_snprintf(where, sizeof(where), "confidence data '%s': spread %s.", path, name);
    if ((err = oomi_json_int(&sources, NULL, o, "sources", 0, LONG_MAX, where)))
        return err;
    sp->sources = sp->stack_sources = (long)sources;
    sp->own = basis && !strcmp(basis, "stack");
    return numbers(sp->under, &n, oomi_json_get(o, "under"), conf.nlevels, path, name);
}

/* "spread": the cross-stack term and each stack's; a stack the data does not name takes the
 * cross-stack one */
static int read_spreads(json_object *spread, const char *path)
{
    json_object *stacks = oomi_json_get(spread, "stacks");
    size_t i;
    int err;

    conf.has_spread = spread != NULL;
    if (!spread)
        return OOM_OK;
    if ((err = read_spread(&conf.cross, oomi_json_get(spread, "cross_stack"), path, "cross_stack")))
        return err;
    for (i = 0; i < OOMI_STACKS; i++) {
        json_object *st = oomi_json_get(stacks, oomi_stack_values[i]->name);
        conf.stacks[i] = conf.cross;
        conf.stacks[i].own = false, conf.stacks[i].stack_sources = 0;
        if (st && (err = read_spread(&conf.stacks[i], st, path, oomi_stack_values[i]->name)))
            return err;
        if (!conf.stacks[i].own) { /* too few sources of its own: the cross-stack spread */
            memcpy(conf.stacks[i].under, conf.cross.under, sizeof(conf.cross.under));
            conf.stacks[i].sources = conf.cross.sources;
        }
    }
    return OOM_OK;
}

static int parse(json_object *root, const char *path)
{
    json_object *classes = oomi_json_get(root, "classes");
    const char *widest = json_object_get_string(oomi_json_get(root, "widest"));
    char where[PATH_MAX + 32];
    size_t i;
    int err;

    oomi_snprintf(where, sizeof(where), "confidence data '%s': ", path);
    if ((err = numbers(conf.levels, &conf.nlevels, oomi_json_get(root, "levels"), 0, path,
                       "levels")) ||
        (err =
             oomi_json_double(&conf.ctx, NULL, root, "context_uncertainty_bytes", 0, 1e12, where)))
        return err;
    for (i = 1; i < conf.nlevels; i++)
        if (!(conf.levels[i] > conf.levels[i - 1]) || conf.levels[0] <= 0 || conf.levels[i] >= 1)
            return bad(path, "'levels' must rise strictly between 0 and 1");
    if (!json_object_is_type(classes, json_type_object) || !widest)
        return bad(path, "'classes' and 'widest' are missing");
    if ((err = read_spreads(oomi_json_get(root, "spread"), path)))
        return err;
    conf.ncls = 0, conf.widest = SIZE_MAX;
    json_object_object_foreach(classes, key, val)
    {
        if (conf.ncls == MAX_CLASSES)
            return bad(path, "more classes than this library reads");
        if ((err = read_class(&conf.cls[conf.ncls], key, val, path)))
            return err;
        if (!strcmp(key, widest) && conf.cls[conf.ncls].basis == OOMI_CONF_MEASURED)
            conf.widest = conf.ncls;
        conf.ncls++;
    }
    return conf.widest == SIZE_MAX ? bad(path, "'widest' is not a measured class") : OOM_OK;
}

static int load(void)
{
    char *path = oomi_data_path("confidence.json");
    json_object *root = NULL;
    int err;

    if (!path)
        return oomi_nomem();
    if (!(err = oomi_json_load_file(&root, path, "confidence data")))
        err = parse(root, path);
    json_object_put(root);
    oomi_free(path);
    return err;
}

static int get(void)
{
    int err = OOM_OK;
    pthread_mutex_lock(&conf_lock);
    if (!conf_loaded && !(err = load()))
        conf_loaded = true;
    pthread_mutex_unlock(&conf_lock);
    return err;
}

/* The class dimensions of fit_confidence.py's classify(): method, attention, checkpointing,
 * quantization, sharding ("ddp"/"tp" for plain data / tensor parallel, "+offload"). */
static void dims(char d[5][32], const oom_knobs *k, long tp)
{
    const char *sh = oom_sharding_name(k->sharding);
    oomi_snprintf(d[0], 32, "%s", oom_method_name(k->method));
    oomi_snprintf(d[1], 32, "%s", oom_attention_name(k->attention));
    oomi_snprintf(d[2], 32, "%s", oom_checkpointing_name(k->checkpointing));
    oomi_snprintf(d[3], 32, "%s",
                  k->precision == OOM_PRECISION_4BIT   ? "4bit"
                  : k->precision == OOM_PRECISION_INT8 ? "int8"
                                                       : "none");
    if (k->sharding == OOM_SHARDING_NONE && (k->gpus > 1 || tp > 1))
        sh = k->gpus > 1 ? "ddp" : "tp";
    oomi_snprintf(d[4], 32, "%s%s", sh, k->offload != OOM_OFFLOAD_NONE ? "+offload" : "");
}

/* the chain of fit_confidence.py's FALLBACK, without "all": the dimensions left out per level */
static const unsigned char dropped[5] = {0x0, 0x2, 0x6, 0xe, 0xf};

/* The workload's class into key; the entry of the first class of its chain the data has (NULL:
 * none, the kind of workload was never measured). */
static const conf_class *find(char *key, size_t size, const oom_knobs *k, long tp)
{
    char d[5][32], try[OOMI_CONF_KEY_MAX];
    size_t lv, i;
    dims(d, k, tp);
    oomi_snprintf(key, size, "%s/%s/%s/%s/%s", d[0], d[1], d[2], d[3], d[4]);
    for (lv = 0; lv < OOMI_ARRAY_LEN(dropped); lv++) {
        oomi_snprintf(try, sizeof(try), "%s/%s/%s/%s/%s", dropped[lv] & 1 ? "*" : d[0],
                      dropped[lv] & 2 ? "*" : d[1], dropped[lv] & 4 ? "*" : d[2],
                      dropped[lv] & 8 ? "*" : d[3], d[4]);
        for (i = 0; i < conf.ncls; i++)
            if (!strcmp(conf.cls[i].key, try) && conf.cls[i].basis != OOMI_CONF_NONE)
                return &conf.cls[i];
    }
    return NULL;
}

/* u[] (one per stored level) at `level`, linear between stored levels, at least 0 */
static double under_at(const double *u, double level)
{
    size_t i;
    if (level <= conf.levels[0])
        return fmax(u[0], 0);
    for (i = 1; i < conf.nlevels; i++)
        if (level <= conf.levels[i]) {
            double t = (level - conf.levels[i - 1]) / (conf.levels[i] - conf.levels[i - 1]);
            double a = fmax(u[i - 1], 0), b = fmax(u[i], 0);
            return a + t * (b - a);
        }
    return fmax(u[conf.nlevels - 1], 0);
}

/* u[] at `level`, linear between stored levels (the spread's bias may be below 0) */
static double interp(const double *u, double level)
{
    size_t i;
    if (level <= conf.levels[0])
        return u[0];
    for (i = 1; i < conf.nlevels; i++)
        if (level <= conf.levels[i])
            return u[i - 1] + (level - conf.levels[i - 1]) / (conf.levels[i] - conf.levels[i - 1]) *
                                  (u[i] - u[i - 1]);
    return u[conf.nlevels - 1];
}

/* rounded up to 4 decimals, as fit_confidence.py's up4() (a stored bound stays a bound) */
static double up4(double x)
{
    return ceil(round(x * 1e10) / 1e6) / 1e4;
}

/* class c's bound per level with the spread sp: the larger of its GPU part (within + the
 * spread) and its trace part; data without spread (or parts): the class's `under` */
static void unders_of(double *out, const conf_class *c, const conf_spread *sp)
{
    size_t i;
    for (i = 0; i < conf.nlevels; i++) {
        double u = -DBL_MAX;
        if (!sp || !(c->has_within || c->has_trace))
            u = c->under[i];
        if (sp && c->has_within)
            u = fmax(u, up4(c->within[i] + sp->under[i]));
        if (sp && c->has_trace)
            u = fmax(u, c->trace[i]);
        out[i] = u;
    }
}

int oomi_confidence_range(double *lo, double *hi)
{
    int err = get();
    if (!err)
        *lo = conf.levels[0], *hi = conf.levels[conf.nlevels - 1];
    return err;
}

int oomi_confidence_class(oomi_conf *out, const oom_knobs *k, long tp, bool overhead_given,
                          unsigned stack, double level)
{
    const conf_spread *sp;
    const conf_class *c;
    size_t i;
    int err;

    if ((err = get()))
        return err;
    if (!(level >= conf.levels[0] && level <= conf.levels[conf.nlevels - 1]))
        return oomi_fail(OOM_EINVAL, "confidence %g is outside %g to %g (the levels measured)",
                         level, conf.levels[0], conf.levels[conf.nlevels - 1]);
    c = find(out->key, sizeof(out->key), k, tp);
    /* measured: its own class has enough cases; fallback: a broader class's (or its own entry
     * already points to one); none: nothing on its chain */
    out->basis = !c ? OOMI_CONF_NONE : strcmp(c->key, out->key) ? OOMI_CONF_FALLBACK : c->basis;
    out->cases = c && !strcmp(c->key, out->key) ? c->cases : 0;
    for (i = 0; !out->cases && i < conf.ncls; i++) /* a class with too few cases to be used */
        if (!strcmp(conf.cls[i].key, out->key))
            out->cases = conf.cls[i].cases;
    if (!c)
        c = &conf.cls[conf.widest];
    oomi_snprintf(out->used, sizeof(out->used), "%s", c->errors_of);
    sp = !conf.has_spread ? NULL : stack < OOMI_STACKS ? &conf.stacks[stack] : &conf.cross;
    unders_of(out->unders, c, sp);
    out->spread = !sp ? "none" : sp->own ? "stack" : "cross-stack";
    out->spread_sources = sp ? sp->sources : 0;
    out->stack_sources = sp && stack < OOMI_STACKS ? sp->stack_sources : 0;
    out->spread_under = sp ? interp(sp->under, level) : 0;
    out->level = level;
    out->under = under_at(out->unders, level);
    out->ctx = overhead_given ? 0 : conf.ctx;
    return OOM_OK;
}

uint64_t oomi_confidence_bound(const oomi_conf *c, uint64_t peak, bool device)
{
    double b = (double)peak * (1 + c->under) + (device ? c->ctx : 0);
    return b >= 1.8e19 ? UINT64_MAX : (uint64_t)ceil(b);
}

double oomi_confidence_probability(const oomi_conf *c, uint64_t device_peak, uint64_t target,
                                   int *side)
{
    const double *u = c->unders;
    double need = device_peak ? ((double)target - c->ctx) / (double)device_peak - 1 : DBL_MAX;
    size_t i;

    *side = 0;
    if (fmax(u[conf.nlevels - 1], 0) <= need)
        return *side = 1, conf.levels[conf.nlevels - 1];
    if (fmax(u[0], 0) > need)
        return *side = -1, conf.levels[0];
    for (i = conf.nlevels - 1; i > 0; i--) {
        double a = fmax(u[i - 1], 0), b = fmax(u[i], 0);
        if (a <= need) /* the bound crosses the target in [levels[i-1], levels[i]] */
            return b <= a ? conf.levels[i]
                          : conf.levels[i - 1] +
                                (conf.levels[i] - conf.levels[i - 1]) * (need - a) / (b - a);
    }
    return conf.levels[0];
}

const char *oomi_conf_basis_name(oomi_conf_basis b)
{
    return b == OOMI_CONF_MEASURED ? "measured" : b == OOMI_CONF_FALLBACK ? "fallback" : "none";
}
