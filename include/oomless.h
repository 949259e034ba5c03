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
    OOM_EINVAL = 1,        /**< a value or option is malformed, out of range or contradictory */
    OOM_ENOMEM = 2,        /**< an allocation failed */
    OOM_EIO = 3,           /**< a file could not be read, written or renamed */
    OOM_EPARSE = 4,        /**< a file's syntax is wrong (the message has line and column) */
    OOM_ENOTFOUND = 5,     /**< a named thing does not exist: model preset, GPU profile, key */
    OOM_ENODEV = 6,        /**< no GPU backend: NVML missing, its init failed, or no GPU */
    OOM_ENOFIT = 7,        /**< nothing fits in the memory budget */
    OOM_EJOB = 8,          /**< a supervised job failed (not by running out of memory) */
    OOM_EREFUSED = 9,      /**< an edit was refused; the file is unchanged */
    OOM_EUNSUPPORTED = 10, /**< a valid request this version cannot do (e.g. a model family) */
    OOM_EINTERRUPTED = 11, /**< stopped by a signal */
    OOM_EINTERNAL = 12,    /**< a bug in oomless; please report it */
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
    const char *id;         /**< canonical name: "a100-80gb", "rtx-4090" */
    const char *name;       /**< marketing name: "NVIDIA A100 80GB (SXM4)" */
    const char *vendor;     /**< "nvidia", "amd" */
    const char *match;      /**< substring of the NVML device name that identifies it, or "" */
    uint64_t memory_bytes;  /**< total memory as the driver reports it (nvidia-smi's MiB), bytes */
    double bandwidth_gbs;   /**< memory bandwidth, GB/s (has_bandwidth) */
    double bf16_tflops;     /**< dense bf16 tensor TFLOP/s (0: bf16 unsupported) */
    double fp16_tflops;     /**< dense fp16 tensor TFLOP/s */
    double fp32_tflops;     /**< dense fp32 (non-tensor) TFLOP/s */
    int cc_major, cc_minor; /**< CUDA compute capability (0.0 for non-NVIDIA) */
    int has_bandwidth;
    int has_tflops;
    int user_defined; /**< 1 when it came from the user's config file */
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
                                                    const char *device_name, uint64_t total_bytes);

/* ======================================================================== GPU discovery */
/* (section: gpu) */

/** Sentinel for a numeric field the backend could not read. */
#define OOM_UNKNOWN UINT64_MAX

/** One process using a GPU, as NVML's running-process lists report it. */
typedef struct oom_gpu_process {
    uint32_t pid;
    uint64_t used_bytes; /**< OOM_UNKNOWN when the driver does not say (e.g. some WDDM/MIG) */
    int is_graphics;     /**< 1 from the graphics list, 0 from the compute list */
} oom_gpu_process;

/** One GPU as seen now. A field the driver did not give is flagged, never faked. */
typedef struct oom_gpu_info {
    int index;      /**< CUDA's index, after CUDA_VISIBLE_DEVICES renumbering */
    int nvml_index; /**< NVML's index (= nvidia-smi's) */
    char name[96];
    char uuid[96];       /**< "GPU-xxxxxxxx-..." or "" when unknown */
    char pci_bus_id[32]; /**< "" when unknown */
    uint64_t total_bytes;
    uint64_t used_bytes;
    uint64_t free_bytes;
    int cc_major, cc_minor; /**< compute capability; has_cc says whether known */
    int has_cc;
    int has_utilization;
    unsigned utilization_gpu; /**< percent */
    unsigned utilization_mem; /**< percent */
    int has_temperature;
    unsigned temperature_c;
    int lost;             /**< 1 when the device stopped answering (fields are stale) */
    size_t process_count; /**< entries in processes (only when asked for) */
    oom_gpu_process *processes;
} oom_gpu_info;

/** A snapshot of the visible GPUs. */
typedef struct oom_gpu_list {
    size_t count;
    oom_gpu_info *gpus;
    char driver_version[32]; /**< "" when unknown */
    char nvml_version[32];   /**< "" when unknown */
    int cuda_driver_version; /**< e.g. 12040; 0 when unknown */
    const char *backend;     /**< "nvml" */
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
#define OOM_SAMPLE_PROCESSES 1u /**< also list each GPU's processes */
#define OOM_SAMPLE_ALL_GPUS  2u /**< ignore CUDA_VISIBLE_DEVICES (monitoring) */

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
    oom_gpu_profile profile; /**< the GPU planned for (a copy; strings owned by the target) */
    oom_budget budget;       /**< per GPU */
    int gpu_count;           /**< GPUs detected (or 1 for a profile) */
    int detected;            /**< 1 when the GPU was detected, 0 for a named profile */
    int mixed;               /**< 1 when the detected GPUs differ (the smallest is planned for) */
    int fallback;            /**< 1 when no GPU was found and the default profile was used */
    char reason[256];        /**< why a fallback happened ("NVML not found: ...") */
} oom_target;

/** What the user asked for; NULL/empty fields mean "default". */
typedef struct oom_target_request {
    const char *gpu;    /**< "auto", an index, or a profile id; else $OOMLESS_GPU, $GPU_PROFILE */
    const char *vram;   /**< --vram SIZE (bare number = GiB) */
    const char *margin; /**< --vram-safety-margin SIZE|PCT (bare number = MiB) */
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

/**
 * The document `oomless gpus --json` prints:
 *   {"gpus": [{"index", "nvml_index", "name", "uuid", "total_bytes", "used_bytes", "free_bytes",
 *              "compute_capability", "pci_bus_id", "lost"}...],
 *    "total_bytes", "mixed", "driver_version", "cuda_driver_version", "backend",
 *    "budget": {"target_bytes", "safety_margin_bytes", "usable_bytes"},
 *    "target": {"profile", "name", "detected", "fallback", "reason", "gpu_count"}}
 * Unknown fields are null. `list` may be NULL (no GPU backend); `target` may be NULL.
 */
OOM_EXPORT int oom_gpus_to_json(char **out, const oom_gpu_list *list, const oom_target *target);

/** The catalog as JSON: {"gpus": [{"id", "name", "vendor", "memory_bytes", ...}...]}. */
OOM_EXPORT int oom_catalog_to_json(char **out, const oom_catalog *catalog);

/* ---- monitoring (watch) ---- */

/**
 * Memory bands of one GPU, against its budget (oom_budget, per GPU) and, when known, the device
 * peak a plan predicted. With U = used bytes, usable = budget.usable_bytes:
 *   OOM_BAND_CRITICAL  U > usable                      (the safety margin is being eaten)
 *   OOM_BAND_WARNING   U > 90% of usable (and not critical)
 *   OOM_BAND_ELEVATED  U > the plan's peak (and not warning): more than planned, room left
 *   OOM_BAND_SAFE      otherwise (with no plan: U <= 90% of usable)
 *   OOM_BAND_UNKNOWN   used memory unknown (a lost GPU) or no budget (usable_bytes 0)
 * Since: 0.1.0 (watch).
 */
typedef enum oom_band {
    OOM_BAND_UNKNOWN = 0,
    OOM_BAND_SAFE = 1,
    OOM_BAND_ELEVATED = 2,
    OOM_BAND_WARNING = 3,
    OOM_BAND_CRITICAL = 4,
} oom_band;

/** The warning band starts above this fraction of the usable budget. */
#define OOM_BAND_WARNING_FRACTION 0.9

/** Classifies `used_bytes`; `plan_peak_bytes` is OOM_UNKNOWN when there is no plan. */
OOM_EXPORT oom_band oom_band_classify(uint64_t used_bytes, const oom_budget *budget,
                                      uint64_t plan_peak_bytes);
/** "safe", "elevated", "warning", "critical", "unknown". Never NULL. */
OOM_EXPORT const char *oom_band_name(oom_band band);

/**
 * A memory trend: the least-squares line through (time, used) samples of a window.
 * It is `growing` when all of these hold: at least OOM_TREND_MIN_SAMPLES samples spanning at
 * least OOM_TREND_MIN_SECONDS, a positive slope, a fit with R^2 >= OOM_TREND_MIN_R2 (steady, not
 * noise), and a fitted rise of at least OOM_TREND_MIN_RISE bytes over the window.
 */
typedef struct oom_trend {
    int valid;                /**< enough samples to fit a line */
    double slope_bytes_per_s; /**< fitted growth (negative: shrinking) */
    double r2;                /**< goodness of the fit, 0..1 (1 when the data is flat) */
    int growing;              /**< steady growth, as defined above */
    int has_eta;              /**< growing and a limit was given */
    double seconds_to_limit;  /**< when has_eta: seconds until the fitted line crosses the limit,
                                   from the last sample (0 when already above it) */
} oom_trend;

#define OOM_TREND_MIN_SAMPLES 5
#define OOM_TREND_MIN_SECONDS 2.0
#define OOM_TREND_MIN_R2      0.8
#define OOM_TREND_MIN_RISE    OOM_MiB

/**
 * Fits the trend of `n` samples (times in seconds, any origin, increasing). `current_bytes` is
 * what the limit is compared with (e.g. the GPU's used memory while the samples are one
 * process's); pass OOM_UNKNOWN to use the fitted value at the last sample. `limit_bytes`
 * OOM_UNKNOWN: no ETA. Never fails: too few samples give valid = 0.
 */
OOM_EXPORT void oom_trend_fit(oom_trend *out, const double *times, const uint64_t *used, size_t n,
                              uint64_t current_bytes, uint64_t limit_bytes);

/** One process on a GPU, with what /proc says about it. Unknown strings are "". */
typedef struct oom_watch_process {
    uint32_t pid;
    uint64_t used_bytes; /**< OOM_UNKNOWN when the driver does not say */
    int is_graphics;
    int local;          /**< 1 when the PID exists here; 0: another PID namespace (container) */
    char command[256];  /**< command line, arguments joined by spaces */
    char user[64];      /**< owner's user name (or uid as digits) */
    int64_t batch_size; /**< OOMLESS_BATCH_SIZE from its environment (`oomless run`), or -1 */
    int64_t grad_accum; /**< OOMLESS_GRAD_ACCUM likewise, or -1 */
    oom_trend trend;    /**< of this process's memory; ETA against the GPU's usable budget */
} oom_watch_process;

/** One GPU in a snapshot. */
typedef struct oom_watch_gpu {
    const oom_gpu_info *info; /**< the sample (a lost GPU keeps its last known name) */
    oom_budget budget;        /**< the budget applied to this GPU */
    oom_band band;
    oom_trend trend; /**< of the GPU's used memory; ETA against budget.usable_bytes */
    size_t process_count;
    oom_watch_process *processes;
} oom_watch_gpu;

/** A monitor's latest sample. Owned by the monitor; valid until its next sample or free. */
typedef struct oom_watch_snapshot {
    double time; /**< Unix seconds */
    size_t gpu_count;
    oom_watch_gpu *gpus;
    const oom_gpu_list *list;
    uint64_t plan_peak_bytes; /**< OOM_UNKNOWN when no plan was given */
    size_t foreign_pids;      /**< processes whose PID does not exist here (PID namespace) */
} oom_watch_snapshot;

/**
 * A monitor: samples all GPUs with their processes (OOM_SAMPLE_ALL_GPUS), reads /proc for each
 * new PID (cached: a PID's command, user and environment are re-read at most every few seconds),
 * and keeps a window of history for the trends. `session` is borrowed and must outlive it.
 */
typedef struct oom_monitor oom_monitor;

OOM_EXPORT int oom_monitor_create(oom_monitor **out, oom_gpu_session *session);
OOM_EXPORT void oom_monitor_free(oom_monitor *monitor);
/**
 * The budget of GPU `index` (CUDA index of the monitor's sample; -1: every GPU). By default a
 * GPU's budget is its total memory minus OOM_DEFAULT_SAFETY_MARGIN.
 */
OOM_EXPORT int oom_monitor_set_budget(oom_monitor *monitor, int index, const oom_budget *budget);
/** The safety margin text ("1GiB", "10%") each GPU's default budget is made with. */
OOM_EXPORT int oom_monitor_set_margin(oom_monitor *monitor, const char *margin);
/** The device peak a plan predicted (OOM_UNKNOWN: none), for the safe band. */
OOM_EXPORT void oom_monitor_set_plan_peak(oom_monitor *monitor, uint64_t plan_peak_bytes);
/** The trend window in seconds (default 60). */
OOM_EXPORT void oom_monitor_set_window(oom_monitor *monitor, double seconds);
/** Samples now. A GPU that stops answering is reported lost, not as an error. */
OOM_EXPORT int oom_monitor_sample(oom_monitor *monitor);
/** The latest snapshot, or NULL before the first sample. */
OOM_EXPORT const oom_watch_snapshot *oom_monitor_snapshot(const oom_monitor *monitor);

/**
 * The snapshot as JSON (one line, or indented when `pretty`):
 *   {"time", "plan_peak_bytes", "foreign_pids",
 *    "gpus": [{"index", "nvml_index", "name", "uuid", "used_bytes", "total_bytes",
 *              "utilization", "temperature_c", "lost", "band",
 *              "budget": {"target_bytes", "safety_margin_bytes", "usable_bytes"},
 *              "trend": {"slope_bytes_per_s", "growing", "seconds_to_budget"},
 *              "processes": [{"pid", "used_bytes", "command", "user", "local", "is_graphics",
 *                             "batch_size", "grad_accum", "growth_bytes_per_s",
 *                             "seconds_to_budget"}...]}...]}
 * Unknown values are null (a lost GPU's used/total, an unknown command, ...).
 */
OOM_EXPORT int oom_watch_to_json(char **out, const oom_watch_snapshot *snapshot, int pretty);

/** The CSV header line (with its newline) of oom_watch_to_csv()'s rows. */
OOM_EXPORT const char *oom_watch_csv_header(void);
/**
 * The snapshot as CSV rows (RFC 4180 quoting), each ending in "\n": one row per GPU
 * (kind "gpu") followed by one row per process on it (kind "process"). Columns:
 *   timestamp,kind,gpu_index,gpu_name,pid,command,user,used_bytes,total_bytes,
 *   utilization_gpu,temperature_c,band,lost,batch_size,grad_accum
 * timestamp is Unix seconds with milliseconds; a column that does not apply or is unknown is
 * empty.
 */
OOM_EXPORT int oom_watch_to_csv(char **out, const oom_watch_snapshot *snapshot);

/**
 * Reads the device peak a plan predicted from a plan JSON file: `.memory.device_peak`, a number
 * of bytes or a size string ("21.5GiB"). OOM_EIO / OOM_EPARSE / OOM_ENOTFOUND naming the file.
 */
OOM_EXPORT int oom_plan_file_peak(uint64_t *out, const char *path);

/**
 * The events `oomless run --events FILE` writes, one JSON object per line, as `watch` reads them
 * back (the supervise section's oom_job_event is the writer's side).
 */
typedef enum oom_run_event_kind {
    OOM_RUN_EVENT_OTHER = 0, /**< an "event" this version does not know */
    OOM_RUN_EVENT_LAUNCH = 1,
    OOM_RUN_EVENT_OOM = 2,
    OOM_RUN_EVENT_RESTART = 3,
    OOM_RUN_EVENT_EXIT = 4,
    OOM_RUN_EVENT_SIGNAL = 5, /**< a signal forwarded to the job */
    OOM_RUN_EVENT_KILL = 6,   /**< the job was killed after its grace period */
} oom_run_event_kind;

/** One event; an absent field is -1 (peak_bytes: OOM_UNKNOWN). */
typedef struct oom_run_event {
    double time; /**< Unix seconds */
    oom_run_event_kind kind;
    char name[16]; /**< the "event" string as written ("launch", "oom", ...) */
    int64_t pid, attempt, batch, grad_accum, exit_code;
    uint64_t peak_bytes;
    int batch_changed; /**< 1 when `batch` differs from the previous event's that had one */
} oom_run_event;

/** "launch", "oom", "restart", "exit", "signal", "kill" or "other". */
OOM_EXPORT const char *oom_run_event_kind_name(oom_run_event_kind kind);
/**
 * Parses one line (`len` bytes, no newline needed). OOM_EPARSE when it is not a JSON object
 * with a numeric "time" and a string "event".
 */
OOM_EXPORT int oom_run_event_parse(oom_run_event *out, const char *line, size_t len);

/**
 * Follows an events file that may not exist yet and that a writer appends to: each poll reads
 * the complete lines added since the last one (a partial last line waits for the next poll);
 * a file that shrank or was replaced (renamed over) is read again from the start. Bad lines are
 * skipped and counted. The last OOM_EVENTS_KEPT events are kept.
 */
typedef struct oom_event_log oom_event_log;
#define OOM_EVENTS_KEPT 256

OOM_EXPORT int oom_event_log_open(oom_event_log **out, const char *path);
OOM_EXPORT void oom_event_log_free(oom_event_log *log);
/** Reads what was appended; `*added` (may be NULL) receives the number of new events. */
OOM_EXPORT int oom_event_log_poll(oom_event_log *log, size_t *added);
/** Events kept, oldest first. */
OOM_EXPORT size_t oom_event_log_count(const oom_event_log *log);
OOM_EXPORT const oom_run_event *oom_event_log_at(const oom_event_log *log, size_t index);
/** Lines that could not be parsed so far. */
OOM_EXPORT size_t oom_event_log_skipped(const oom_event_log *log);

/* ======================================================================== workloads, estimate */
/* (section: estimate) */

/* ======================================================================== plan */
/* (section: plan) */

/* ======================================================================== probe, run */
/* (section: supervise) */

/* ======================================================================== apply */
/* (section: apply) */

#ifdef __cplusplus
}
#endif
#endif /* OOMLESS_H */
