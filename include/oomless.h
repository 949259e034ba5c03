/*
 * oomless.h - fit deep-learning training and inference jobs to the GPU memory available.
 *
 * This is the whole public interface of liboomless. It is written to be read top to bottom.
 *
 * Conventions (they hold for every function below unless its comment says otherwise):
 *
 *  - Every function that can fail returns an int: OOM_OK (0) on success, or one of the oom_error
 *    codes below. The codes have fixed numbers and are never renumbered.
 *  - On failure, oom_last_message() returns a sentence naming the failing thing (the value, the
 *    file, the key, the NVML symbol). The message is per thread and stays valid until the next
 *    failing call on the same thread.
 *  - Out-parameters come first. Objects are opaque and come in _create/_free (or _open/_close)
 *    pairs; every _free accepts NULL and does nothing with it.
 *  - Strings the library returns through `char **` are allocated with the library's allocator
 *    and must be released with oom_free(). Strings returned as `const char *` belong to the
 *    library (or to the object they came from).
 *  - Sizes are bytes in uint64_t. A quantity the library could not learn is never reported as 0:
 *    it has a validity flag or the documented sentinel OOM_UNKNOWN.
 *  - The library never prints and never exits. It is safe to use from several threads as long as
 *    each object is used by one thread at a time.
 *
 * Since: 0.1.0 unless marked otherwise.
 */
#ifndef OOMLESS_H
#define OOMLESS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(OOMLESS_BUILDING_LIBRARY) && defined(__GNUC__)
#define OOM_EXPORT __attribute__((visibility("default")))
#else
#define OOM_EXPORT
#endif

#define OOMLESS_VERSION_MAJOR 0
#define OOMLESS_VERSION_MINOR 1
#define OOMLESS_VERSION_PATCH 0

/** The library's version as "MAJOR.MINOR.PATCH". */
OOM_EXPORT const char *oom_version(void);

/* ======================================================================== errors */

/** Error codes. Fixed numbers; new codes are only ever appended. */
typedef enum oom_error {
    OOM_OK = 0,
    OOM_EINVAL = 1,       /**< a value or option is malformed, out of range or contradictory */
    OOM_ENOMEM = 2,       /**< an allocation failed */
    OOM_EIO = 3,          /**< a file could not be read, written or renamed */
    OOM_EPARSE = 4,       /**< a file's syntax is wrong (the message has line and column) */
    OOM_ENOTFOUND = 5,    /**< a named thing does not exist: model preset, GPU profile, key */
    OOM_ENODEV = 6,       /**< no GPU backend: NVML missing, its init failed, or no GPU */
    OOM_ENOFIT = 7,       /**< nothing fits in the memory budget */
    OOM_EJOB = 8,         /**< a supervised job failed (not by running out of memory) */
    OOM_EREFUSED = 9,     /**< an edit was refused; the file is unchanged */
    OOM_EUNSUPPORTED = 10, /**< a valid request this version cannot do (e.g. a model family) */
    OOM_EINTERRUPTED = 11, /**< stopped by a signal */
    OOM_EINTERNAL = 12,   /**< a bug in oomless; please report it */
} oom_error;

/** A short, static description of an error code ("invalid value"). Never NULL. */
OOM_EXPORT const char *oom_strerror(int code);

/** The message of the last failure on this thread, or "" when there was none. Never NULL. */
OOM_EXPORT const char *oom_last_message(void);

/** The code of the last failure on this thread (OOM_OK when there was none). */
OOM_EXPORT int oom_last_error(void);

/* ======================================================================== memory */

/**
 * The allocator the library uses for everything it allocates itself (third-party parsers
 * use the C library's). Set it before any other call; NULL restores malloc/realloc/free.
 * A test may make `malloc` fail on purpose: every path then returns OOM_ENOMEM, leaks nothing
 * and leaves no partial file.
 */
typedef struct oom_allocator {
    void *(*malloc)(size_t size, void *user);
    void *(*realloc)(void *ptr, size_t size, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} oom_allocator;

OOM_EXPORT void oom_set_allocator(const oom_allocator *allocator);

/** Releases memory the library handed out (strings from `char **` out-parameters). NULL is ok. */
OOM_EXPORT void oom_free(void *ptr);

/* ======================================================================== sizes */

#define OOM_KiB ((uint64_t)1 << 10)
#define OOM_MiB ((uint64_t)1 << 20)
#define OOM_GiB ((uint64_t)1 << 30)

/** What a bare number means when a size has no unit. */
typedef enum oom_size_unit {
    OOM_UNIT_BYTES = 0,
    OOM_UNIT_MIB = 1, /**< "512" = 512 MiB (safety margins, as in the seeds) */
    OOM_UNIT_GIB = 2, /**< "24" = 24 GiB (VRAM sizes) */
} oom_size_unit;

/**
 * Parses a size: "24", "20.5", "16gb", "16GiB", "16376MiB", "24000M", "512MiB", "1.5T", "4096B".
 * Every unit is binary (k/K/KB/KiB = 1024, ...); case does not matter; spaces between number
 * and unit are allowed. A bare number is taken in `bare_unit`. Refused with OOM_EINVAL, with the
 * text quoted in the message: empty, negative, not a number, NaN/inf, unknown unit, trailing
 * garbage, or more than 2^63 bytes.
 */
OOM_EXPORT int oom_parse_size(uint64_t *out, const char *text, oom_size_unit bare_unit);

/**
 * Parses a safety margin: a size (bare number = MiB) or a percentage of `target_bytes` ("10%",
 * "7.5 %"). Percentages must be in [0, 100).
 */
OOM_EXPORT int oom_parse_margin(uint64_t *out, const char *text, uint64_t target_bytes);

/**
 * Formats bytes for people: "23.00 GiB", "512.0 MiB", "900 B". Always NUL-terminates; returns
 * `buf`. 16 bytes are always enough.
 */
OOM_EXPORT char *oom_format_size(char *buf, size_t bufsize, uint64_t bytes);

/* ======================================================================== budget */

/** How much memory one GPU gives a job. All in bytes. */
typedef struct oom_budget {
    uint64_t target_bytes;        /**< the VRAM the job may target (default: the GPU's total) */
    uint64_t safety_margin_bytes; /**< kept free (default 1 GiB) */
    uint64_t usable_bytes;        /**< target - margin: what a job's device peak must stay under */
} oom_budget;

#define OOM_DEFAULT_SAFETY_MARGIN OOM_GiB

/**
 * Fills `out` from a target and a margin. OOM_EINVAL when the margin is not smaller than the
 * target (the message gives both).
 */
OOM_EXPORT int oom_budget_make(oom_budget *out, uint64_t target_bytes, uint64_t margin_bytes);

/* ======================================================================== GPU catalog */
/* (section: catalog) */

/**
 * A GPU profile: a known GPU (from the built-in catalog data/gpus/catalog.yaml, or added in the
 * user's config) that can be planned for without the GPU being present.
 * Fields the catalog does not know are 0 and say so through `has_*`.
 */
typedef struct oom_gpu_profile {
    const char *id;          /**< canonical name: "a100-80gb", "rtx-4090" */
    const char *name;        /**< marketing name: "NVIDIA A100 80GB (SXM4)" */
    const char *vendor;      /**< "nvidia", "amd" */
    const char *match;       /**< substring of the NVML device name that identifies it, or "" */
    uint64_t memory_bytes;   /**< total memory as the driver reports it (nvidia-smi's MiB), bytes */
    double bandwidth_gbs;    /**< memory bandwidth, GB/s (has_bandwidth) */
    double bf16_tflops;      /**< dense bf16 tensor TFLOP/s (0: bf16 unsupported) */
    double fp16_tflops;      /**< dense fp16 tensor TFLOP/s */
    double fp32_tflops;      /**< dense fp32 (non-tensor) TFLOP/s */
    int cc_major, cc_minor;  /**< CUDA compute capability (0.0 for non-NVIDIA) */
    int has_bandwidth;
    int has_tflops;
    int user_defined;        /**< 1 when it came from the user's config file */
} oom_gpu_profile;

/** The default profile planned for when no GPU is found (overridable in the config). */
#define OOM_DEFAULT_PROFILE "rtx-4090"

/**
 * User configuration ($XDG_CONFIG_HOME/oomless/config.yaml, or a file named with --config):
 *
 *     defaults:
 *       safety_margin: 1GiB        # or 10%, or a bare MiB number
 *       profile: a100-80gb         # planned for when no GPU is detected
 *     gpus:
 *       - id: my-gpu
 *         name: Lab card
 *         memory: 20GiB
 *         bf16_tflops: 80          # optional: bandwidth_gbs, fp16_tflops, fp32_tflops, match
 */
typedef struct oom_config oom_config;

/**
 * Loads `path`, or the default location when `path` is NULL (a missing default file is not an
 * error: the defaults apply). OOM_EPARSE with line and column for bad YAML, OOM_EINVAL naming
 * the key for a bad value.
 */
OOM_EXPORT int oom_config_load(oom_config **out, const char *path);
OOM_EXPORT void oom_config_free(oom_config *config);
/** The default safety margin text from the config ("1GiB" when not set). */
OOM_EXPORT const char *oom_config_default_margin(const oom_config *config);
/** The default profile id from the config (OOM_DEFAULT_PROFILE when not set). */
OOM_EXPORT const char *oom_config_default_profile(const oom_config *config);
/** The path the config was read from, or NULL when none was read. */
OOM_EXPORT const char *oom_config_path(const oom_config *config);

/** The catalog of GPU profiles: the built-in data plus the config's GPUs (config may be NULL). */
typedef struct oom_catalog oom_catalog;

OOM_EXPORT int oom_catalog_load(oom_catalog **out, const oom_config *config);
OOM_EXPORT void oom_catalog_free(oom_catalog *catalog);
OOM_EXPORT size_t oom_catalog_count(const oom_catalog *catalog);
OOM_EXPORT const oom_gpu_profile *oom_catalog_at(const oom_catalog *catalog, size_t index);

/**
 * Finds a profile by id, case-insensitively, with '-', '_' and ' ' equal ("a100_80gb",
 * "A100-80GB"). OOM_ENOTFOUND with the closest ids in the message.
 */
OOM_EXPORT int oom_catalog_find(const oom_gpu_profile **out, const oom_catalog *catalog,
                                const char *id);

/**
 * The profile that best matches a detected device (by NVML name and total memory), or NULL.
 * Used to learn the TFLOP/s and bandwidth of the GPU in the machine.
 */
OOM_EXPORT const oom_gpu_profile *oom_catalog_match(const oom_catalog *catalog,
                                                    const char *device_name,
                                                    uint64_t total_bytes);

/* ======================================================================== GPU discovery */
/* (section: gpu) */

/** Sentinel for a numeric field the backend could not read. */
#define OOM_UNKNOWN UINT64_MAX

/** One process using a GPU, as NVML's running-process lists report it. */
typedef struct oom_gpu_process {
    uint32_t pid;
    uint64_t used_bytes;      /**< OOM_UNKNOWN when the driver does not say (e.g. some WDDM/MIG) */
    int is_graphics;          /**< 1 from the graphics list, 0 from the compute list */
} oom_gpu_process;

/** One GPU as seen now. A field the driver did not give is flagged, never faked. */
typedef struct oom_gpu_info {
    int index;                /**< CUDA's index, after CUDA_VISIBLE_DEVICES renumbering */
    int nvml_index;           /**< NVML's index (= nvidia-smi's) */
    char name[96];
    char uuid[96];            /**< "GPU-xxxxxxxx-..." or "" when unknown */
    char pci_bus_id[32];      /**< "" when unknown */
    uint64_t total_bytes;
    uint64_t used_bytes;
    uint64_t free_bytes;
    int cc_major, cc_minor;   /**< compute capability; has_cc says whether known */
    int has_cc;
    int has_utilization;
    unsigned utilization_gpu; /**< percent */
    unsigned utilization_mem; /**< percent */
    int has_temperature;
    unsigned temperature_c;
    int lost;                 /**< 1 when the device stopped answering (fields are stale) */
    size_t process_count;     /**< entries in processes (only when asked for) */
    oom_gpu_process *processes;
} oom_gpu_info;

/** A snapshot of the visible GPUs. */
typedef struct oom_gpu_list {
    size_t count;
    oom_gpu_info *gpus;
    char driver_version[32];  /**< "" when unknown */
    char nvml_version[32];    /**< "" when unknown */
    int cuda_driver_version;  /**< e.g. 12040; 0 when unknown */
    const char *backend;      /**< "nvml" */
} oom_gpu_list;

/** A session with the GPU backend (NVML, loaded with dlopen at run time). */
typedef struct oom_gpu_session oom_gpu_session;

/**
 * Opens the backend: dlopen("libnvidia-ml.so.1"), then "libnvidia-ml.so" (or the file named by
 * $OOMLESS_NVML_LIBRARY), resolves its symbols newest-version first, and initialises it.
 * OOM_ENODEV, with the reason (library missing, symbol missing, init failed with NVML's own
 * message), when there is no usable backend.
 */
OOM_EXPORT int oom_gpu_open(oom_gpu_session **out);
OOM_EXPORT void oom_gpu_close(oom_gpu_session *session);

/** Flags for oom_gpu_sample(). */
#define OOM_SAMPLE_PROCESSES 1u  /**< also list each GPU's processes */
#define OOM_SAMPLE_ALL_GPUS 2u   /**< ignore CUDA_VISIBLE_DEVICES (monitoring) */

/**
 * Reads the visible GPUs now (honouring CUDA_VISIBLE_DEVICES unless OOM_SAMPLE_ALL_GPUS).
 * A device that fails mid-session is returned with lost = 1, not as an error. Free the list
 * with oom_gpu_list_free().
 */
OOM_EXPORT int oom_gpu_sample(oom_gpu_list **out, oom_gpu_session *session, unsigned flags);
OOM_EXPORT void oom_gpu_list_free(oom_gpu_list *list);

/**
 * Applies a CUDA_VISIBLE_DEVICES value to `count` devices with the given UUIDs, as CUDA does:
 * entries are indices or "GPU-<uuid>" (full or a unique prefix; "MIG-..." matched likewise);
 * the first invalid, unknown or repeated entry ends the list; an empty value selects none.
 * `visible` receives NVML indices in CUDA order; returns the number selected.
 * `value` NULL selects all devices in order.
 */
OOM_EXPORT size_t oom_cuda_visible(int *visible, size_t max_visible, const char *value,
                                   const char *const *uuids, size_t count);

/* ---- budgets for planning ----------------------------------------------------------------- */

/** Where a planning command's GPU and budget came from. */
typedef struct oom_target {
    oom_gpu_profile profile;  /**< the GPU planned for (a copy; strings owned by the target) */
    oom_budget budget;        /**< per GPU */
    int gpu_count;            /**< GPUs detected (or 1 for a profile) */
    int detected;             /**< 1 when the GPU was detected, 0 for a named profile */
    int mixed;                /**< 1 when the detected GPUs differ (the smallest is planned for) */
    int fallback;             /**< 1 when no GPU was found and the default profile was used */
    char reason[256];         /**< why a fallback happened ("NVML not found: ...") */
} oom_target;

/** What the user asked for; NULL/empty fields mean "default". */
typedef struct oom_target_request {
    const char *gpu;          /**< "auto", an index, or a profile id; else $OOMLESS_GPU, $GPU_PROFILE */
    const char *vram;         /**< --vram SIZE (bare number = GiB) */
    const char *margin;       /**< --vram-safety-margin SIZE|PCT (bare number = MiB) */
    const oom_config *config; /**< may be NULL */
} oom_target_request;

/**
 * Resolves the GPU and the budget: a profile id, an index of a detected GPU, or auto (detected
 * GPUs; the smallest when mixed; the config's / default profile when none). --vram overrides
 * the target memory. Strings in `out` stay valid until oom_target_free().
 */
OOM_EXPORT int oom_target_resolve(oom_target *out, const oom_target_request *request,
                                  const oom_catalog *catalog);
OOM_EXPORT void oom_target_free(oom_target *target);

/* ======================================================================== workloads, estimate */
/* (section: estimate) */

/* ======================================================================== plan */
/* (section: plan) */

/* ======================================================================== probe, run */
/* (section: supervise) */

/* ======================================================================== apply */
/*
 * `oomless apply`: writes plan values into the user's YAML and JSON config files, changing only
 * the bytes of the changed values (comments, blank lines, key order, quoting, number spelling and
 * indentation stay as they were). See docs/apply.md for the rules in full.
 *
 *     oom_apply *a;
 *     oom_apply_create(&a);
 *     oom_apply_load_plan(a, plan_json_text, "plan.json");
 *     oom_apply_preset(a, "hydra-lightning");
 *     oom_apply_set(a, "model.max_len", "seq_len", 0);
 *     oom_apply_run(a, files, 1, 0, NULL);     // writes conf/config.yaml (+ conf/config.yaml.bak)
 *     oom_apply_free(a);
 *
 * Keys are dotted paths into the config, list items by index: "training.trainer.devices",
 * "model.layers[0].dim". A key cannot name a map key that itself contains '.', '[' or ']'.
 *
 * Values ("value specs"):
 *   FIELD          a key of the plan document's "plan" object ("batch_size", "precision")
 *   A.B.C, A[0]    a dotted path from the root of the plan document ("memory.device_peak")
 *   FIELD==TEXT    true when the field's value, as text, is TEXT, else false ("precision==bf16");
 *   FIELD!=TEXT    the opposite ("checkpointing!=none")
 *   literal:VALUE  VALUE itself, read as a YAML scalar: 8 (int), 0.5 / 5e8 (float), true/false,
 *                  null, anything else a string; quote it ('8' or "8") to force a string
 * Two fields are derived when the plan does not have them: zero_stage (from "sharding": "none"
 * is 0, "zero1".."zero3" / "zero-2" / "ZeRO-3" give the digit) and global_batch (batch_size *
 * grad_accum * gpus, gpus 1 when absent).
 *
 * Types: the new value must have the old value's type (int, float, bool, string, null), except
 * that an int may replace a float (written as a float: 2.0) and anything may replace null.
 * Anything else is refused unless OOM_APPLY_FORCE_TYPE. An equal value (5e8 vs 500000000) is
 * left as it is spelled. Booleans keep their spelling family (true/True/TRUE/yes/on).
 *
 * Refused with OOM_EREFUSED, every file left byte for byte as it was: a missing key (unless
 * OOM_APPLY_CREATE), a key that is a map or a list, a block scalar (| or >), a multi-line plain
 * scalar, an anchored (&a), aliased (*a) or explicitly tagged (!!str) value, a duplicate key, a
 * missing key in a map with a merge key (<<), an unexpected type change, and a file reached through
 * a symbolic link that leads outside the current directory (unless OOM_APPLY_FOLLOW_SYMLINKS).
 * A file that does not parse gives OOM_EPARSE with its line and column; I/O errors OOM_EIO.
 * Messages name the file and the key.
 */

/** An edit set: a plan, the assignments to make, and (after a run) what was done. */
typedef struct oom_apply oom_apply;

/** Creates an empty edit set (backup suffix ".bak"). OOM_ENOMEM only. */
OOM_EXPORT int oom_apply_create(oom_apply **out);
/** Frees an edit set; NULL is fine. */
OOM_EXPORT void oom_apply_free(oom_apply *apply);

/**
 * Loads the plan document (the text `oomless plan --json` prints). `name` is used in messages
 * ("-" for stdin). OOM_EPARSE with line and column when it is not JSON, OOM_EINVAL when it is not
 * an object. Replaces an earlier plan.
 */
OOM_EXPORT int oom_apply_load_plan(oom_apply *apply, const char *json_text, const char *name);

/** Flag for oom_apply_set(): skip files that lack the key instead of refusing them. */
#define OOM_APPLY_OPTIONAL 1u

/**
 * Adds the assignment `key` = `value_spec` (see above); both strings are copied. The key is
 * checked at once (OOM_EINVAL for a malformed key or spec). An assignment to a key already
 * assigned replaces it, except that an optional (preset) one never replaces an explicit one.
 * With OOM_APPLY_OPTIONAL a file without the key is skipped, as is a value that is the
 * string "auto" (left to the framework), and a plan without the field skips it.
 */
OOM_EXPORT int oom_apply_set(oom_apply *apply, const char *key, const char *value_spec,
                             unsigned flags);

/**
 * Adds a preset's assignments as optional ones. Presets come from
 * $XDG_CONFIG_HOME/oomless/apply-presets.yaml (~/.config/... when unset), which wins, then from
 * the data file apply/presets.yaml. OOM_ENOTFOUND (listing the known names) for an unknown
 * preset, OOM_EPARSE / OOM_EINVAL for a bad presets file.
 */
OOM_EXPORT int oom_apply_preset(oom_apply *apply, const char *name);

/**
 * The backups' suffix (copied): FILE + suffix holds the old bytes after a write. NULL or ""
 * writes no backup.
 */
OOM_EXPORT int oom_apply_set_backup_suffix(oom_apply *apply, const char *suffix);

/**
 * A function called at each step of writing a file, with the step's name and the file:
 * "prepared" (all files edited in memory, nothing written yet), "backup-written",
 * "temp-created", "temp-written", "temp-synced", "before-rename", "renamed", "dir-synced". For progress reports and for the tests that kill the process at each step.
 */
typedef void (*oom_apply_step_fn)(const char *step, const char *file, void *user);
OOM_EXPORT void oom_apply_set_step_hook(oom_apply *apply, oom_apply_step_fn fn, void *user);

/** Flags for oom_apply_run(). */
#define OOM_APPLY_DRY_RUN         1u /**< write nothing; return the unified diff */
#define OOM_APPLY_CREATE          2u /**< add missing keys (block or flow maps, JSON objects) */
#define OOM_APPLY_FOLLOW_SYMLINKS 4u /**< edit files reached through links leading outside "." */
#define OOM_APPLY_FORCE_TYPE      8u /**< allow a value of another type (8 over "auto") */

/**
 * Makes the assignments in each of `files` (YAML, or JSON when the name ends in .json or the
 * text starts with '{' or '['). Every file is edited in memory first; when any is refused none
 * is written. Then, per changed file: the backup, a temporary file beside it (mode 0600, then
 * the file's mode; fsync), rename over the file, fsync of the directory. A symbolic link is
 * kept: its target is edited. Unchanged files are not touched.
 * `diff` (may be NULL) receives the unified diff of all changes (free with oom_free()), with or
 * without OOM_APPLY_DRY_RUN; "" when nothing changes.
 * Errors: OOM_EREFUSED, OOM_EPARSE, OOM_EIO (the files are unchanged: a write failure removes
 * every temporary file before any rename), OOM_ENOTFOUND for an explicit field the plan lacks,
 * OOM_EINVAL when a spec needs a plan and none is loaded.
 */
OOM_EXPORT int oom_apply_run(oom_apply *apply, const char *const *files, size_t count,
                             unsigned flags, char **diff);

/**
 * Edits one text in memory (no file is read or written): `name` is used in messages and to tell
 * JSON from YAML. `*out` (free with oom_free()) gets the new text, `*out_len` its length.
 */
OOM_EXPORT int oom_apply_buffer(oom_apply *apply, const char *name, const char *text, size_t len,
                                unsigned flags, char **out, size_t *out_len);

/**
 * What the last run did, as one JSON document: {"dry_run": bool, "written": bool, "files":
 * [{"file", "format", "changed", "backup" (path or null), "edits": [{"key", "action" ("set",
 * "create", "unchanged", "skipped"), "old", "new", "reason" (skipped only)}]}]}.
 * Free with oom_free(). OOM_EINVAL before any run.
 */
OOM_EXPORT int oom_apply_report(const oom_apply *apply, char **json);

#ifdef __cplusplus
}
#endif
#endif /* OOMLESS_H */
