/*
 * gpu/gpu.h - what the GPU layer's files share: GPU detection behind a vendor table (discover.c,
 * backend.h, gpu_nvml.c), profile entries (profile.c), the catalog (catalog.c), the user config
 * (config.c) and target resolution (target.c). Uses core.
 */
#ifndef OOMLESS_GPU_GPU_H
#define OOMLESS_GPU_GPU_H

#include "core/core.h"

struct json_object;

/* ---- the planner's constants (consts.c): defaults from data/gpus/planner.yaml, overridden
 * per GPU (catalog or config `gpus` entries) and per cluster (the config's `cluster:`) ---- */
enum oomi_pk {
    OOMI_PK_MFU_MAX,      /* fraction of peak FLOP/s a large micro-batch reaches */
    OOMI_PK_RIDGE,        /* FLOP/byte, for profiles without bandwidth or TFLOP/s */
    OOMI_PK_TFLOPS,       /* 16-bit TFLOP/s of a profile without TFLOP/s figures */
    OOMI_PK_FP32_DIVISOR, /* FP32 TFLOP/s = 16-bit TFLOP/s / this, when a profile lacks FP32 */
    OOMI_PK_INTRA,        /* GB/s all-reduce bus bandwidth inside a node */
    OOMI_PK_INTER,        /* Gb/s between nodes */
    OOMI_PK_PCIE,         /* GB/s host <-> device */
    OOMI_PK_CPU_ADAM,     /* parameters/s of a CPU Adam step */
    OOMI_PK_NF4_SPEED,    /* compute speed of a 4-bit base relative to 16-bit */
    OOMI_PK_INT8_SPEED,   /* compute speed of an int8 base relative to 16-bit */
    OOMI_PK_CHUNKED_LOSS, /* step time a chunked loss adds, as a fraction of the compute time */
    OOMI_PK_EAGER_ATTN,   /* step time eager attention adds over fused kernels, a fraction */
    OOMI_PK_COUNT
};
enum oomi_pk_origin { OOMI_PK_FROM_DEFAULT, OOMI_PK_FROM_CATALOG, OOMI_PK_FROM_CONFIG };
/* One key: its name in the data files, unit, factor to SI (bytes/s, FLOP/s, ...), upper bound
 * (values must be > 0 and <= max), and whether a GPU entry may set it. */
struct oomi_pk_info {
    const char *name, *unit;
    double si, max;
    int per_gpu;
};
extern const struct oomi_pk_info oomi_pk_table[OOMI_PK_COUNT];
/* Values as written (in each key's unit) and where each came from. */
struct oomi_plan_consts {
    double v[OOMI_PK_COUNT];
    unsigned char origin[OOMI_PK_COUNT];
};
/* A set of overrides: v[k] where bit k of `set` is on; line[k]: its line in the file (0: not
 * known). */
struct oomi_pk_over {
    double v[OOMI_PK_COUNT];
    size_t line[OOMI_PK_COUNT];
    unsigned set;
};
/* The built-in defaults (loaded once; a failure is not latched); `sources` (may be NULL): the
 * citation of each. Both stay valid for the life of the process. */
int oomi_plan_defaults(const struct oomi_plan_consts **out, const char *const **sources);
/* A value in SI units (bytes/s, FLOP/s, FLOP/byte, parameters/s, fractions). */
double oomi_pk_si(const struct oomi_plan_consts *c, enum oomi_pk k);
/* Applies the overrides in `o` with origin `origin`. */
void oomi_pk_apply(struct oomi_plan_consts *c, const struct oomi_pk_over *o,
                   enum oomi_pk_origin origin);
/* The key named `name` (OOMI_PK_COUNT when none). */
enum oomi_pk oomi_pk_find(const char *name);
/* Reads one value of key k into o (set bit on). `where` prefixes messages (file, line, section
 * and separator: "config.yaml:4: cluster."): OOM_EINVAL "WHEREKEY: 'VALUE' is not ...". */
int oomi_pk_read(struct oomi_pk_over *o, enum oomi_pk k, struct json_object *v, const char *where);
/* Fills o->line[k] for each known key k found under the top-level mapping `section` of a
 * YAML text (`index` >= 0: that item of the `section` list). */
void oomi_pk_lines(struct oomi_pk_over *o, const char *text, size_t len, const char *section,
                   long index);
/* "name" of the origin: "default", "catalog", "config". */
const char *oomi_pk_origin_name(enum oomi_pk_origin o);

/* One GPU profile as read from a catalog or config entry, with its aliases (profile.c). */
struct oomi_gpu_entry {
    oom_gpu_profile p;
    char **aliases;
    size_t alias_count;
    struct oomi_pk_over planner; /* the planner constants this GPU sets (per_gpu keys) */
};
/* Parses one entry of a `gpus` list (catalog or config format; `user`: the config's, which may
 * leave out fields); with `e` NULL it only validates. OOM_EPARSE naming source, index and key.
 * `text` (may be NULL): the file's YAML, for the lines of planner keys. */
int oomi_gpu_entry_parse(struct oomi_gpu_entry *e, struct json_object *obj, const char *source,
                         size_t index, int user, const char *text, size_t len);
void oomi_gpu_entry_clear(struct oomi_gpu_entry *e);
/* Checks a list of GPU entries (catalog or config format) without keeping them. */
int oomi_catalog_validate_entries(struct json_object *list, const char *source, const char *text,
                                  size_t len);
/* Copies a profile's strings into `dst` (strings owned by dst; free with oomi_profile_clear). */
int oomi_profile_copy(oom_gpu_profile *dst, const oom_gpu_profile *src);
void oomi_profile_clear(oom_gpu_profile *p);

/* The config's `gpus` list (borrowed), or NULL (config.c). */
struct json_object *oomi_config_gpus(const oom_config *config);
/* oom_target_resolve() for a request alone (NULL: the defaults) into *t (initialised with
 * OOM_TARGET_INIT): loads the user config when the
 * request names none, and the catalog, and releases both (the target owns its strings). On
 * success release *t with oom_target_dispose(); on failure *t is not set. */
int oomi_target_resolve_request(oom_target *t, const oom_target_request *request);
/* defaults.fit_confidence of the config as written (checked by oomi_parse_confidence), or NULL */
const char *oomi_config_fit_confidence(const oom_config *config);
/* The config file's text (NULL when none was read), for lines in messages. */
const char *oomi_config_text(const oom_config *config, size_t *len);
/* The config's `cluster:` overrides (none set for a NULL config). */
const struct oomi_pk_over *oomi_config_cluster(const oom_config *config);

/* The planner constants for GPU `id` (NULL: none) from a loaded catalog: defaults, the catalog
 * entry's, the config's `cluster:`, the user's entry's (catalog.c). c NULL: the defaults. */
int oomi_catalog_plan_consts(struct oomi_plan_consts *out, const oom_catalog *c, const char *id);
/* *out = {"KEY": {"value", "unit", "origin", "source"}...}: the constants for GPU `id` (NULL:
 * the catalog-wide ones); with `only_differing`, only the keys where the GPU's differ from the
 * catalog-wide ones (*out NULL when none do). */
int oomi_catalog_plan_json(struct json_object **out, const oom_catalog *c, const char *id,
                           int only_differing);

#endif
