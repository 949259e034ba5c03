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
 * Versioned structs. Every public struct has `unsigned int version` as its first member, a
 * `#define OOM_<NAME>_VERSION`, an initializer `OOM_<NAME>_INIT` and `oom_<name>_init(s, version)`
 * (zero-fills, sets the version; OOM_EINVAL for a version this library does not know):
 *
 *     oom_target target = OOM_TARGET_INIT;            // or oom_target_init(&t, OOM_TARGET_VERSION)
 *     oom_target_request request = OOM_TARGET_REQUEST_INIT;
 *     request.gpu = "a100-80gb";
 *     if (oom_target_resolve(&target, &request, catalog) == OOM_OK) { ... }
 *     oom_target_dispose(&target);
 *
 * A function given a struct (in or out) checks its version: 0 (not initialised) or a version newer
 * than the library's is OOM_EINVAL, with a message naming the struct and the version. A struct
 * held inside another (a budget in a request) takes its layout from the outer one. The _INIT
 * macros use designated initializers (C99); from C++ use the _init functions.
 *
 * Owned results. Nothing the library returns is cut short: strings whose length has no documented
 * external bound are `char *` and lists are a pointer and a count, owned by the result; a list of
 * structs is a list of pointers, so that each struct can grow behind its own version. A result
 * that owns memory has `oom_<name>_dispose()` (NULL is fine; frees what it owns and leaves it safe
 * to dispose again); results allocated by the library have a _free that disposes and frees. The
 * few fixed-size arrays left are bounded by NVML and cite its nvml.h constant.
 *
 * ABI. Within a major version (OOMLESS_VERSION_MAJOR; the shared library is liboomless.so.MAJOR)
 * functions are never removed and never change their parameters or meaning; a struct only grows
 * at its end, behind a new OOM_<NAME>_VERSION (a library knows every older version of its
 * structs); enum values and error codes are never renumbered; and only oom_* symbols are exported.
 * A program checks at start that oom_version_number() / 10000 equals the OOMLESS_VERSION_MAJOR it
 * was compiled with (the oomless tool and the Python package do: they refuse another major).
 *
 * Since: 0.1.0 unless marked otherwise; 1.0.0 is the first version with this ABI promise.
 */
#ifndef OOMLESS_H
#define OOMLESS_H

#include <signal.h>
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

#define OOMLESS_VERSION_MAJOR 1
#define OOMLESS_VERSION_MINOR 0
#define OOMLESS_VERSION_PATCH 0
/** The version of this header as one number: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define OOMLESS_VERSION_NUMBER                                                                     \
    (OOMLESS_VERSION_MAJOR * 10000 + OOMLESS_VERSION_MINOR * 100 + OOMLESS_VERSION_PATCH)

/** The library's version as "MAJOR.MINOR.PATCH". */
OOM_EXPORT const char *oom_version(void);

/**
 * The library's version as one number, MAJOR * 10000 + MINOR * 100 + PATCH (10000 for 1.0.0).
 * A program compares its major, oom_version_number() / 10000, with the OOMLESS_VERSION_MAJOR it
 * was compiled with and refuses a library of another major (see "ABI" above). Since: 1.0.0.
 */
OOM_EXPORT unsigned oom_version_number(void);

/**
 * The size in bytes of the public struct named `name` ("oom_plan_result") as this library was
 * built, or 0 for a name it does not know. For bindings that declare the layouts themselves.
 */
OOM_EXPORT size_t oom_struct_size(const char *name);

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

/**
 * Notices: what a caller should tell the user although the call succeeded, as one sentence
 * naming the thing ("calibration file '/x/calibration.jsonl': skipped 1 damaged line (line 3)",
 * "$XDG_CACHE_HOME 'cache' is not an absolute path: ignored"). The library calls `fn` with
 * each one, on the thread that made the call, while the call runs; `message` is valid during
 * the call only. Without a handler (the default, or `fn` NULL) notices are dropped. One handler
 * for the process: set it before other calls, as the allocator. The oomless tool prints them
 * to stderr; the Python package turns them into warnings (oomless.Notice).
 */
typedef void (*oom_notice_fn)(const char *message, void *user);
OOM_EXPORT void oom_set_notice_handler(oom_notice_fn fn, void *user);

/** Progress lines of a long call ("fetching config.json of ORG/NAME from URL"), called as the
 * notice handler is; dropped without one. The tool prints them when stderr is a terminal. */
OOM_EXPORT void oom_set_progress_handler(oom_notice_fn fn, void *user);

/* ======================================================================== memory */

/**
 * The allocator the library uses for everything it allocates itself (third-party parsers
 * use the C library's). Set it before any other call; NULL restores malloc/realloc/free.
 * A test may make `malloc` fail on purpose: every path then returns OOM_ENOMEM, leaks nothing
 * and leaves no partial file.
 */
typedef struct oom_allocator {
    unsigned int version; /**< OOM_ALLOCATOR_VERSION */
    void *(*malloc)(size_t size, void *user);
    void *(*realloc)(void *ptr, size_t size, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} oom_allocator;

#define OOM_ALLOCATOR_VERSION 1
#define OOM_ALLOCATOR_INIT                                                                         \
    {                                                                                              \
        .version = OOM_ALLOCATOR_VERSION                                                           \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_allocator_init(oom_allocator *s, unsigned int version);

/** OOM_EINVAL (the allocator unchanged) for a version this library does not know. */
OOM_EXPORT int oom_set_allocator(const oom_allocator *allocator);

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
    unsigned int version;         /**< OOM_BUDGET_VERSION */
    uint64_t target_bytes;        /**< the VRAM the job may target (default: the GPU's total) */
    uint64_t safety_margin_bytes; /**< kept free (default 1 GiB) */
    uint64_t usable_bytes;        /**< target - margin: what a job's device peak must stay under */
} oom_budget;

#define OOM_BUDGET_VERSION 1
#define OOM_BUDGET_INIT                                                                            \
    {                                                                                              \
        .version = OOM_BUDGET_VERSION                                                              \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_budget_init(oom_budget *s, unsigned int version);

#define OOM_DEFAULT_SAFETY_MARGIN OOM_GiB

/**
 * Fills `out` from a target and a margin. OOM_EINVAL when the margin is not smaller than the
 * target (the message gives both).
 */
OOM_EXPORT int oom_budget_make(oom_budget *out, uint64_t target_bytes, uint64_t margin_bytes);

/**
 * Lowers a made budget for memory others hold on a GPU of `total_bytes`: usable becomes the
 * smaller of target - margin and total - others - margin (target and margin are kept).
 * OOM_ENOFIT when others leave no more than the margin free (the message gives the sizes).
 */
OOM_EXPORT int oom_budget_less_others(oom_budget *budget, uint64_t total_bytes,
                                      uint64_t others_bytes);

/* ======================================================================== GPU catalog */
/* (section: catalog) */

/**
 * A GPU profile: a known GPU (from the built-in catalog data/gpus/catalog.yaml, or added in the
 * user's config) that can be planned for without the GPU being present.
 * Fields the catalog does not know are 0 and say so through `has_*`.
 */
typedef struct oom_gpu_profile {
    unsigned int version;   /**< OOM_GPU_PROFILE_VERSION */
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

#define OOM_GPU_PROFILE_VERSION 1
#define OOM_GPU_PROFILE_INIT                                                                       \
    {                                                                                              \
        .version = OOM_GPU_PROFILE_VERSION                                                         \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_gpu_profile_init(oom_gpu_profile *s, unsigned int version);

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
    unsigned int version; /**< OOM_GPU_PROCESS_VERSION */
    uint32_t pid;
    uint64_t used_bytes; /**< OOM_UNKNOWN when the driver does not say (e.g. some WDDM/MIG) */
    int is_graphics;     /**< 1 from the graphics list, 0 from the compute list */
} oom_gpu_process;

#define OOM_GPU_PROCESS_VERSION 1
#define OOM_GPU_PROCESS_INIT                                                                       \
    {                                                                                              \
        .version = OOM_GPU_PROCESS_VERSION                                                         \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_gpu_process_init(oom_gpu_process *s, unsigned int version);

/** One GPU as seen now. A field the driver did not give is flagged, never faked. */
typedef struct oom_gpu_info {
    unsigned int version; /**< OOM_GPU_INFO_VERSION */
    int index;            /**< CUDA's index, after CUDA_VISIBLE_DEVICES renumbering */
    int nvml_index;       /**< NVML's index (= nvidia-smi's) */
    char name[96];        /**< NVML_DEVICE_NAME_V2_BUFFER_SIZE (96) bounds nvmlDeviceGetName */
    char uuid[96]; /**< "GPU-xxxxxxxx-..." or "" when unknown; NVML_DEVICE_UUID_V2_BUFFER_SIZE */
    char pci_bus_id[32]; /**< "" when unknown; NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE (32) */
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
    int lost;                    /**< 1 when the device stopped answering (fields are stale) */
    size_t process_count;        /**< entries in processes (only when asked for) */
    oom_gpu_process **processes; /**< owned by the list */
} oom_gpu_info;

#define OOM_GPU_INFO_VERSION 1
#define OOM_GPU_INFO_INIT                                                                          \
    {                                                                                              \
        .version = OOM_GPU_INFO_VERSION                                                            \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_gpu_info_init(oom_gpu_info *s, unsigned int version);

/** A snapshot of the visible GPUs. */
typedef struct oom_gpu_list {
    unsigned int version; /**< OOM_GPU_LIST_VERSION */
    size_t count;
    oom_gpu_info **gpus;     /**< owned by the list */
    char driver_version[80]; /**< "" when unknown; NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE (80) */
    char nvml_version[80];   /**< "" when unknown; NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE (80) */
    int cuda_driver_version; /**< e.g. 12040; 0 when unknown */
    const char *backend;     /**< "nvml" */
} oom_gpu_list;

#define OOM_GPU_LIST_VERSION 1
#define OOM_GPU_LIST_INIT                                                                          \
    {                                                                                              \
        .version = OOM_GPU_LIST_VERSION                                                            \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_gpu_list_init(oom_gpu_list *s, unsigned int version);

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
 * The memory the driver keeps for itself on `g` and that no process can allocate: total - used -
 * free (NVML defines total = reserved + used + free: nvmlMemory_v2_t's `reserved`, which
 * nvmlDeviceGetMemoryInfo_v1 leaves out of both used and free). 0 for a lost GPU or when used +
 * free covers the total. A budget starts from total - reserved, the capacity CUDA reports
 * (torch.cuda.get_device_properties().total_memory). Since: 1.1.0.
 */
OOM_EXPORT uint64_t oom_gpu_reserved_bytes(const oom_gpu_info *g);

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
    unsigned int version;    /**< OOM_TARGET_VERSION */
    oom_gpu_profile profile; /**< the GPU planned for (a copy; strings owned by the target) */
    oom_budget budget;       /**< per GPU */
    int gpu_count;           /**< GPUs detected (or 1 for a profile) */
    int detected;            /**< 1 when the GPU was detected, 0 for a named profile */
    int mixed;               /**< 1 when the detected GPUs differ (the smallest is planned for) */
    int fallback;            /**< 1 when no GPU was found and the default profile was used */
    char *reason;            /**< why a fallback happened ("NVML not found: ..."), or NULL; owned */
    /* version 2 */
    uint64_t others_bytes; /**< memory in use on the detected GPU when resolved (other processes,
                              and memory NVML gives to none); 0 for a profile */
    char *others;          /**< the processes holding it: "pid 4242 (2.00 GiB), pid 77 (512 MiB)",
                              or NULL when NVML names none; owned */
} oom_target;

#define OOM_TARGET_VERSION 2
#define OOM_TARGET_INIT                                                                            \
    {                                                                                              \
        .version = OOM_TARGET_VERSION                                                              \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_target_init(oom_target *s, unsigned int version);

/** What the user asked for; NULL/empty fields mean "default". */
typedef struct oom_target_request {
    unsigned int version; /**< OOM_TARGET_REQUEST_VERSION */
    const char *gpu;      /**< "auto", an index, or a profile id; else $OOMLESS_GPU, $GPU_PROFILE */
    const char *vram;     /**< --vram SIZE (bare number = GiB) */
    const char *margin;   /**< --vram-safety-margin SIZE|PCT (bare number = MiB) */
    const oom_config *config; /**< may be NULL */
} oom_target_request;

#define OOM_TARGET_REQUEST_VERSION 1
#define OOM_TARGET_REQUEST_INIT                                                                    \
    {                                                                                              \
        .version = OOM_TARGET_REQUEST_VERSION                                                      \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_target_request_init(oom_target_request *s, unsigned int version);

/**
 * Resolves the GPU and the budget: a profile id, an index of a detected GPU, or auto (detected
 * GPUs; the smallest when mixed; the config's / default profile when none). A bare number is a
 * GPU index only when a GPU is detected, else a profile id (a notice says which reading was
 * used). --vram overrides the target memory: "auto" (the GPU's memory), "free" (the detected
 * GPU's free memory now) or a size, refused (OOM_EINVAL) when larger than the detected GPU.
 * On a detected GPU the usable budget is the smaller of target - margin and
 * total - others_bytes - margin (oom_budget_less_others), with a notice naming what others hold;
 * a profile named by $OOMLESS_GPU/$GPU_PROFILE that is not the detected GPU gets a notice naming
 * both. Strings in `out` stay valid until oom_target_dispose().
 */
OOM_EXPORT int oom_target_resolve(oom_target *out, const oom_target_request *request,
                                  const oom_catalog *catalog);
/** Frees what `target` owns (its profile's strings, reason); NULL is fine; safe to repeat. */
OOM_EXPORT void oom_target_dispose(oom_target *target);

/**
 * The document `oomless gpus --json` prints:
 *   {"gpus": [{"index", "nvml_index", "name", "uuid", "total_bytes", "used_bytes", "free_bytes",
 *              "compute_capability", "pci_bus_id", "lost"}...],
 *    "total_bytes", "mixed", "driver_version", "cuda_driver_version", "backend",
 *    "budget": {"target_bytes", "safety_margin_bytes", "usable_bytes", "others_bytes", "others"},
 *    "target": {"profile", "name", "detected", "fallback", "reason", "gpu_count"}}
 * Unknown fields are null. `list` may be NULL (no GPU backend); `target` may be NULL.
 */
OOM_EXPORT int oom_gpus_to_json(char **out, const oom_gpu_list *list, const oom_target *target);

/**
 * Everything `oomless gpus --json` does in one call: samples the GPUs (a missing backend is not
 * an error: the list is empty and target.reason says why), resolves the budget from `request`
 * (NULL = defaults; request->config is used when set) and returns the JSON document.
 * `flags` takes OOM_SAMPLE_ALL_GPUS.
 */
OOM_EXPORT int oom_gpus_report(char **out, const oom_target_request *request, unsigned flags);

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

/** Classifies `used_bytes`; `plan_peak_bytes` is OOM_UNKNOWN when there is no plan. A budget of
 *  a version this library does not know gives OOM_BAND_UNKNOWN (and oom_last_message says so). */
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
    unsigned int version;     /**< OOM_TREND_VERSION */
    int valid;                /**< enough samples to fit a line */
    double slope_bytes_per_s; /**< fitted growth (negative: shrinking) */
    double r2;                /**< goodness of the fit, 0..1 (1 when the data is flat) */
    int growing;              /**< steady growth, as defined above */
    int has_eta;              /**< growing and a limit was given */
    double seconds_to_limit;  /**< when has_eta: seconds until the fitted line crosses the limit,
                                   from the last sample (0 when already above it) */
} oom_trend;

#define OOM_TREND_VERSION 1
#define OOM_TREND_INIT                                                                             \
    {                                                                                              \
        .version = OOM_TREND_VERSION                                                               \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_trend_init(oom_trend *s, unsigned int version);

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
OOM_EXPORT int oom_trend_fit(oom_trend *out, const double *times, const uint64_t *used, size_t n,
                             uint64_t current_bytes, uint64_t limit_bytes);

/** One process on a GPU, with what /proc says about it. Unknown strings are "". Its strings belong
 *  to the monitor (valid as long as the snapshot). */
typedef struct oom_watch_process {
    unsigned int version; /**< OOM_WATCH_PROCESS_VERSION */
    uint32_t pid;
    uint64_t used_bytes; /**< OOM_UNKNOWN when the driver does not say */
    int is_graphics;
    int local;          /**< 1 when the PID exists here; 0: another PID namespace (container) */
    char *command;      /**< the whole command line, arguments joined by spaces (never NULL) */
    char *user;         /**< owner's user name, or uid as digits (never NULL) */
    int64_t batch_size; /**< OOMLESS_BATCH_SIZE from its environment (`oomless run`), or -1 */
    int64_t grad_accum; /**< OOMLESS_GRAD_ACCUM likewise, or -1 */
    oom_trend trend;    /**< of this process's memory; ETA against the GPU's usable budget */
} oom_watch_process;

#define OOM_WATCH_PROCESS_VERSION 1
#define OOM_WATCH_PROCESS_INIT                                                                     \
    {                                                                                              \
        .version = OOM_WATCH_PROCESS_VERSION                                                       \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_watch_process_init(oom_watch_process *s, unsigned int version);

/** One GPU in a snapshot. */
typedef struct oom_watch_gpu {
    unsigned int version;     /**< OOM_WATCH_GPU_VERSION */
    const oom_gpu_info *info; /**< the sample (a lost GPU keeps its last known name) */
    oom_budget budget;        /**< the budget applied to this GPU */
    oom_band band;
    oom_trend trend; /**< of the GPU's used memory; ETA against budget.usable_bytes */
    size_t process_count;
    oom_watch_process **processes;
} oom_watch_gpu;

#define OOM_WATCH_GPU_VERSION 1
#define OOM_WATCH_GPU_INIT                                                                         \
    {                                                                                              \
        .version = OOM_WATCH_GPU_VERSION                                                           \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_watch_gpu_init(oom_watch_gpu *s, unsigned int version);

/** A monitor's latest sample. Owned by the monitor; valid until its next sample or free. */
typedef struct oom_watch_snapshot {
    unsigned int version; /**< OOM_WATCH_SNAPSHOT_VERSION */
    double time;          /**< Unix seconds */
    size_t gpu_count;
    oom_watch_gpu **gpus;
    const oom_gpu_list *list;
    uint64_t plan_peak_bytes; /**< OOM_UNKNOWN when no plan was given */
    size_t foreign_pids;      /**< processes whose PID does not exist here (PID namespace) */
} oom_watch_snapshot;

#define OOM_WATCH_SNAPSHOT_VERSION 1
#define OOM_WATCH_SNAPSHOT_INIT                                                                    \
    {                                                                                              \
        .version = OOM_WATCH_SNAPSHOT_VERSION                                                      \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_watch_snapshot_init(oom_watch_snapshot *s, unsigned int version);

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
 *   utilization_gpu,temperature_c,band,lost,batch_size,grad_accum,reserved_bytes
 * (reserved_bytes: oom_gpu_reserved_bytes() of a GPU row, since 1.1.0; the columns before it
 * are those of 1.0)
 * timestamp is Unix seconds with milliseconds; a column that does not apply or is unknown is
 * empty. A text column (gpu_name, command, user) that starts with =, +, -, @, a tab or a carriage
 * return gets a leading single quote ('), so that a spreadsheet shows it as text instead of running
 * it as a formula (CSV injection: anyone sharing the GPU chooses their command line).
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
    unsigned int version; /**< OOM_RUN_EVENT_VERSION */
    double time;          /**< Unix seconds */
    oom_run_event_kind kind;
    char *name; /**< the "event" string as written ("launch", "oom", ...); owned */
    int64_t pid, attempt, batch, grad_accum, exit_code;
    uint64_t peak_bytes;
    int batch_changed; /**< 1 when `batch` differs from the previous event's that had one */
    /* version 2 */
    char *detail; /**< one line for an "oom_snapshot" event written by the job (what filled the
                       memory: "largest: 3.10 GiB model.py:88 forward ..."), else NULL; owned */
} oom_run_event;

#define OOM_RUN_EVENT_VERSION 2
#define OOM_RUN_EVENT_INIT                                                                         \
    {                                                                                              \
        .version = OOM_RUN_EVENT_VERSION                                                           \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_run_event_init(oom_run_event *s, unsigned int version);

/** "launch", "oom", "restart", "exit", "signal", "kill" or "other". */
OOM_EXPORT const char *oom_run_event_kind_name(oom_run_event_kind kind);
/**
 * Parses one line (`len` bytes, no newline needed) into `out` (from OOM_RUN_EVENT_INIT or an
 * earlier parse). OOM_EPARSE when it is not a JSON object with a numeric "time" and a string
 * "event". Dispose of `out` with oom_run_event_dispose().
 */
OOM_EXPORT int oom_run_event_parse(oom_run_event *out, const char *line, size_t len);
/** Frees what `ev` owns (name, detail); NULL is fine; safe to repeat. oom_run_event_parse()
 * replaces the name an event it is given already holds, so one event may be parsed into again and
 * again. */
OOM_EXPORT void oom_run_event_dispose(oom_run_event *ev);

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

/*
 * A workload is what `estimate` and `plan` reason about: a model (a built-in preset or any Hugging
 * Face config.json), a method (full fine-tune, LoRA, QLoRA, inference), precision, optimizer,
 * micro-batch, sequence length, accumulation, checkpointing, attention kind, loss kind, and the
 * data-parallel layout. It is set from strings (the CLI's option names, so the CLI, the Python
 * package and YAML workload files share one vocabulary) or through typed knobs (the planner).
 */
typedef struct oom_workload oom_workload;

/** Training method. */
typedef enum oom_method {
    OOM_METHOD_FULL = 0,      /**< every parameter trained */
    OOM_METHOD_LORA = 1,      /**< frozen base, LoRA adapters trained (fp32, PEFT's default) */
    OOM_METHOD_QLORA = 2,     /**< frozen NF4 base (bitsandbytes), 16-bit compute, LoRA adapters */
    OOM_METHOD_INFERENCE = 3, /**< forward only (prefill of --seq tokens) with a KV cache */
} oom_method;

/** Numeric precision. fp16/bf16: parameters held in that dtype (model.to(dtype));
 *  amp-*: autocast with fp32 parameters; int8/4bit: quantized base weights (inference, LoRA). */
typedef enum oom_precision {
    OOM_PRECISION_AUTO = 0, /**< amp-bf16 full training, bf16 LoRA/inference, 4bit QLoRA */
    OOM_PRECISION_FP32 = 1,
    OOM_PRECISION_FP16 = 2,
    OOM_PRECISION_BF16 = 3,
    OOM_PRECISION_AMP_FP16 = 4,
    OOM_PRECISION_AMP_BF16 = 5,
    OOM_PRECISION_INT8 = 6,
    OOM_PRECISION_4BIT = 7,
} oom_precision;

typedef enum oom_optimizer {
    OOM_OPTIMIZER_ADAMW = 0,
    OOM_OPTIMIZER_ADAMW_8BIT = 1, /**< bitsandbytes 8-bit AdamW */
    OOM_OPTIMIZER_ADAFACTOR = 2,  /**< factored second moment, no momentum (HF default) */
    OOM_OPTIMIZER_SGD = 3,
    OOM_OPTIMIZER_SGD_MOMENTUM = 4,
    OOM_OPTIMIZER_LION = 5,
    OOM_OPTIMIZER_NONE = 6,        /**< gradients only (e.g. gradient analysis) */
    OOM_OPTIMIZER_ADAMW_FUSED = 7, /**< AdamW without step-wide temporaries: torch fused=True, or a
                                        per-tensor loop (transformers' adamw_hf, torch < 2.0) */
    OOM_OPTIMIZER_PAGED_ADAMW = 8, /**< bitsandbytes PagedAdamW32bit: fp32 states of tensors
                                        of 100,000 elements or more in CUDA unified memory */
    OOM_OPTIMIZER_PAGED_ADAMW_8BIT = 9, /**< bitsandbytes PagedAdamW8bit, paged as above */
} oom_optimizer;

typedef enum oom_checkpointing {
    OOM_CHECKPOINTING_NONE = 0,
    OOM_CHECKPOINTING_SELECTIVE = 1, /**< attention core recomputed (Korthikanti et al.) */
    OOM_CHECKPOINTING_FULL = 2,      /**< every layer recomputed; only layer inputs kept */
} oom_checkpointing;

typedef enum oom_attention {
    OOM_ATTENTION_EAGER = 0, /**< scores materialised (b·a·s² per layer) */
    OOM_ATTENTION_SDPA = 1,  /**< torch scaled_dot_product_attention (fused kernels) */
    OOM_ATTENTION_FLASH = 2, /**< FlashAttention-2 */
} oom_attention;

typedef enum oom_loss {
    OOM_LOSS_STANDARD = 0, /**< full logits, fp32 upcast for cross-entropy (transformers) */
    OOM_LOSS_CHUNKED = 1,  /**< chunked / fused linear + cross-entropy (Liger, torchtune) */
} oom_loss;

typedef enum oom_sharding {
    OOM_SHARDING_NONE = 0, /**< DDP when gpus > 1 */
    OOM_SHARDING_ZERO1 = 1,
    OOM_SHARDING_ZERO2 = 2,
    OOM_SHARDING_ZERO3 = 3, /**< also FSDP FULL_SHARD */
} oom_sharding;

typedef enum oom_offload {
    OOM_OFFLOAD_NONE = 0,
    OOM_OFFLOAD_OPTIMIZER = 1,        /**< optimizer states (and fp32 master) on the CPU */
    OOM_OFFLOAD_OPTIMIZER_PARAMS = 2, /**< also the parameters (ZeRO-3 / FSDP CPU offload) */
} oom_offload;

/** The knobs the planner turns, typed. Counts are per GPU (batch = micro-batch per GPU). */
typedef struct oom_knobs {
    unsigned int version; /**< OOM_KNOBS_VERSION */
    long batch;           /**< micro-batch per GPU, >= 1 */
    long grad_accum;      /**< gradient accumulation steps, >= 1 */
    long seq_len;         /**< tokens per sample (inference: prompt + generated) */
    long gpus;            /**< data-parallel GPUs, >= 1 */
    oom_method method;
    oom_precision precision;
    oom_optimizer optimizer;
    oom_checkpointing checkpointing;
    oom_attention attention;
    oom_loss loss;
    oom_sharding sharding;
    oom_offload offload;
} oom_knobs;

#define OOM_KNOBS_VERSION 1
#define OOM_KNOBS_INIT                                                                             \
    {                                                                                              \
        .version = OOM_KNOBS_VERSION                                                               \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_knobs_init(oom_knobs *s, unsigned int version);

/** The names the options use ("amp-bf16", "zero3", ...); "?" for a value out of range. */
OOM_EXPORT const char *oom_method_name(oom_method v);
OOM_EXPORT const char *oom_precision_name(oom_precision v);
OOM_EXPORT const char *oom_optimizer_name(oom_optimizer v);
OOM_EXPORT const char *oom_checkpointing_name(oom_checkpointing v);
OOM_EXPORT const char *oom_attention_name(oom_attention v);
OOM_EXPORT const char *oom_loss_name(oom_loss v);
OOM_EXPORT const char *oom_sharding_name(oom_sharding v);
OOM_EXPORT const char *oom_offload_name(oom_offload v);

/**
 * A new workload with the defaults: no model, method full, precision auto, AdamW, batch 1,
 * seq 512, grad-accum 1, no checkpointing, sdpa attention, standard loss, 1 GPU, no sharding, no
 * offload, LoRA rank 16 on PEFT's default modules, dropout 0.05, gradients freed between steps
 * (keep-grads no), overhead from the GPU generation. OOM_ENOMEM only.
 */
OOM_EXPORT int oom_workload_create(oom_workload **out);
OOM_EXPORT void oom_workload_free(oom_workload *w);
/** A deep copy (the planner clones, changes knobs, estimates). OOM_ENOMEM only. */
OOM_EXPORT int oom_workload_clone(oom_workload **out, const oom_workload *w);

/**
 * Sets one option from text. `key` is the CLI option name without dashes; '_' may stand for '-'
 * ("lora_rank"). Keys and values are listed by oom_workload_options(). "model" loads the config
 * at once: a preset name (see oom_model_presets), a path to a config.json (or a directory
 * holding one) or a Hub id in the local Hugging Face cache, found as oom_model_resolve() says.
 * Errors: OOM_ENOTFOUND for an unknown key, preset or missing file (the message names it, and
 * for a name the closest presets), OOM_EINVAL for a bad value (the message names key and value),
 * OOM_EIO / OOM_EPARSE / OOM_EUNSUPPORTED for a config that cannot be read, parsed or modelled (the
 * message names the file and the missing or bad key). On failure the workload is unchanged.
 */
OOM_EXPORT int oom_workload_set(oom_workload *w, const char *key, const char *value);

/**
 * The current value of an option as text ("" when unset, e.g. overhead by default), into a
 * string to release with oom_free(). OOM_ENOTFOUND for an unknown key.
 */
OOM_EXPORT int oom_workload_get(char **out, const oom_workload *w, const char *key);

/*
 * The vocabulary. Every option the commands take, its values, its default and its help, and every
 * output format, are defined once, in the library's tables below: the tool's help and parsing, its
 * man page and completion, the Python package and the web page read them from here.
 */

/** The commands an option or a value is for (bits of oom_option.commands). Since: 1.1.0. */
enum {
    OOM_COMMAND_ESTIMATE = 1u << 0,
    OOM_COMMAND_PLAN = 1u << 1,
    OOM_COMMAND_TABLE = 1u << 2,
    OOM_COMMAND_PROBE = 1u << 3, /**< probe --set KEY=VALUE */
    OOM_COMMAND_TRACE = 1u << 4, /**< trace (the tracer, on PyTorch's meta device) */
    OOM_COMMAND_GPUS = 1u << 5,
    OOM_COMMAND_RUN = 1u << 6,
    OOM_COMMAND_WATCH = 1u << 7,
};

/** One value an option takes. Since: 1.1.0. */
typedef struct oom_option_value {
    unsigned int version;  /**< OOM_OPTION_VALUE_VERSION */
    const char *name;      /**< "lion", or a form ("every:N", "SIZE"; see `form`) */
    const char *help;      /**< one line */
    unsigned int commands; /**< OOM_COMMAND_* bits that take it: its option's, or fewer */
    int form;              /**< 1: `name` is a form, its capitals standing for a number, a size,
                                a name ("every:N": every:2, every:4, ...) */
    /** The value as Hugging Face transformers' TrainingArguments spells it: an optimizer's
     *  `optim` ("lion_32bit"), NULL when it has none. What `plan --format args` writes. */
    const char *trainer;
    /** TrainingArguments.optim_args the value needs ("momentum=0.9"), NULL when none. */
    const char *trainer_args;
    /* version 2 */
    /** The versions of the code the value models, a stack's ("torchtune 0.6.1, torchao
     *  0.15.0"); NULL for a value that models no particular code. */
    const char *versions;
    /** 1: `oomless trace` runs the value's code on the meta device and the estimator is held to
     *  that trace; 0: modelled from its source and published measurements (kernels that run only
     *  on a GPU). Meaningful where `versions` is set. */
    int traced;
} oom_option_value;

#define OOM_OPTION_VALUE_VERSION 2
#define OOM_OPTION_VALUE_INIT                                                                      \
    {                                                                                              \
        .version = OOM_OPTION_VALUE_VERSION                                                        \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_option_value_init(oom_option_value *s, unsigned int version);

/**
 * One option: name (CLI spelling), metavar, one line of help. Version 2 (1.1.0) adds its values,
 * its default and the commands that take it. The help does not repeat the values nor the default:
 * oom_option_help() puts the default after it. The tables are static and owned by the library.
 */
typedef struct oom_option {
    unsigned int version; /**< OOM_OPTION_VERSION */
    const char *name;     /**< "lora-rank" */
    const char *metavar;  /**< "R"; for an option with values, one word for them ("METHOD") */
    const char *help;     /**< "LoRA rank" */
    /* version 2 */
    /** The values, in order (NULL, 0: any text the metavar describes). Where the option has
     *  values, the CLI shows them joined by '|' in place of the metavar. */
    const oom_option_value *const *values;
    size_t n_values;
    /** The value when the option is not given, as it would be written ("adamw", "16"); NULL when
     *  the library works it out (the help then says how). */
    const char *default_value;
    unsigned int commands; /**< OOM_COMMAND_* bits */
    int list;              /**< 1: a comma-separated list of values ("checkpointing,sharding") */
} oom_option;

#define OOM_OPTION_VERSION 2
#define OOM_OPTION_INIT                                                                            \
    {                                                                                              \
        .version = OOM_OPTION_VERSION                                                              \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_option_init(oom_option *s, unsigned int version);

/** The option table (static, owned by the library): `*count` pointers. */
OOM_EXPORT const oom_option *const *oom_workload_options(size_t *count);

/**
 * The option named `name` ('_' may stand for '-') in the workload or the plan table, or NULL.
 * Since: 1.1.0.
 */
OOM_EXPORT const oom_option *oom_option_lookup(const char *name);

/**
 * The option's line of help as the tool prints it: its help, then "(default V)" when it has a
 * default, with V's own help when V is one of its values ("(default adamw: torch.optim.AdamW,
 * foreach)"). Allocated; release with oom_free(). OOM_ENOMEM only. Since: 1.1.0.
 */
OOM_EXPORT int oom_option_help(char **out, const oom_option *option);

/** The knobs as set (precision AUTO resolved to what the estimate will use). */
OOM_EXPORT int oom_workload_get_knobs(oom_knobs *out, const oom_workload *w);
/**
 * Sets all knobs at once. OOM_EINVAL naming the first out-of-range field (a count < 1, an enum
 * value out of range); the workload is unchanged on failure. Combinations are checked by
 * oom_workload_validate().
 */
OOM_EXPORT int oom_workload_set_knobs(oom_workload *w, const oom_knobs *knobs);

/**
 * The GPU the estimate is for: its compute capability picks the default CUDA context/workspace
 * overhead (see docs/estimate.md and data/coefficients.json) and bf16 support. The profile is
 * copied. NULL returns to the generic default. OOM_ENOMEM only.
 */
OOM_EXPORT int oom_workload_set_gpu(oom_workload *w, const oom_gpu_profile *gpu);

/**
 * Checks the combination: a model is set; counts >= 1; QLoRA needs a 4-bit base with 16-bit
 * compute (not fp32/int8); int8/4bit need LoRA, QLoRA or inference; LoRA options need a LoRA
 * method and the targets must be linears of the model; offload needs a ZeRO stage (one GPU is
 * allowed: ZeRO-Offload) and parameter offload needs zero3; inference takes no sharding or
 * accumulation; bf16 needs compute capability >= 8.0 when a GPU is set; seq must be within the
 * model's max positions unless max-positions overrides them; decoder-seq is for encoder-decoder
 * models. OOM_EINVAL naming the problem and the values, or OOM_OK.
 */
OOM_EXPORT int oom_workload_validate(const oom_workload *w);

/** What the loaded model is. Strings belong to the workload. */
typedef struct oom_model_info {
    unsigned int version; /**< OOM_MODEL_INFO_VERSION */
    const char *name;     /**< preset name, or the config's path */
    const char *family;   /**< "llama", "gpt2", "bert", "t5", "mixtral", ... */
    const char *head;     /**< "causal-lm", "seq-cls", "masked-lm", "seq2seq-lm", "base" */
    long layers;          /**< decoder (or only) layers */
    long encoder_layers;  /**< T5: encoder layers; else 0 */
    long hidden, heads, kv_heads, head_dim, ffn, vocab;
    long max_positions;              /**< 0: no limit given (relative positions, ALiBi) */
    long experts, experts_per_token; /**< 0 for dense models */
    uint64_t params;                 /**< all parameters */
} oom_model_info;

#define OOM_MODEL_INFO_VERSION 1
#define OOM_MODEL_INFO_INIT                                                                        \
    {                                                                                              \
        .version = OOM_MODEL_INFO_VERSION                                                          \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_model_info_init(oom_model_info *s, unsigned int version);

/** Info on the workload's model. OOM_EINVAL when no model is set. */
OOM_EXPORT int oom_workload_model(oom_model_info *out, const oom_workload *w);

/** The built-in model presets (data/models/<name>.json). */
typedef struct oom_preset {
    unsigned int version; /**< OOM_PRESET_VERSION */
    char *name;           /**< "llama-3.1-8b" */
    char *family;         /**< "llama" */
    uint64_t params;      /**< parameters counted from the config */
} oom_preset;

#define OOM_PRESET_VERSION 1
#define OOM_PRESET_INIT                                                                            \
    {                                                                                              \
        .version = OOM_PRESET_VERSION                                                              \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_preset_init(oom_preset *s, unsigned int version);

/**
 * Lists the presets, sorted by name, as `*count` pointers to release with
 * oom_model_presets_free(). OOM_EIO when the models folder cannot be read,
 * OOM_EPARSE/OOM_EUNSUPPORTED for a bad preset.
 */
OOM_EXPORT int oom_model_presets(oom_preset ***out, size_t *count);
OOM_EXPORT void oom_model_presets_free(oom_preset **presets, size_t count);
/** The presets as a JSON array of {"name", "family", "params"}; release with oom_free(). */
OOM_EXPORT int oom_model_presets_json(char **out);

/**
 * The config.json a model argument names, as oom_workload_set(w, "model", ...) reads it, into a
 * string to release with oom_free(). In order: an existing file is that config.json; a folder
 * holds one; an argument meant as a file (ending in ".json", or with a '/' and starting with '/',
 * './', '../' or '~') that does not exist is OOM_ENOTFOUND naming it; a preset name
 * (case-insensitive, '_' for '-'); a Hub id "ORG/NAME[@REVISION]" in the local Hub cache
 * ($HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub or ~/.cache/huggingface/hub;
 * "models--ORG--NAME" in any case, the snapshot refs/REVISION (main) names), else fetched into
 * it as huggingface_hub does ($HF_ENDPOINT, $HF_TOKEN, $HF_HUB_OFFLINE; libcurl loaded at run
 * time), else its newest snapshot; a preset named like NAME, also once an "-Instruct", "-chat",
 * "-base", "-it", "-pt" or "-hf" ending is dropped (the variants share the architecture), with a
 * notice. Else OOM_ENOTFOUND naming why the Hub did not give it and the closest presets.
 */
OOM_EXPORT int oom_model_resolve(char **out, const char *model);

/** The phase of a step at which memory peaks. */
typedef enum oom_phase {
    OOM_PHASE_FORWARD = 0,   /**< end of the forward pass: all saved activations and the loss */
    OOM_PHASE_BACKWARD = 1,  /**< start of the backward pass (loss gradient) / end (all grads) */
    OOM_PHASE_OPTIMIZER = 2, /**< optimizer step: states, gradients and its temporaries */
    OOM_PHASE_PREFILL = 3,   /**< inference: prompt processed with the KV cache filled */
    OOM_PHASE_DECODE = 4, /**< inference: the last token generated, its KV cache at full length */
    OOM_PHASE_LOAD = 5,   /**< loading the weights: all of them, and one being put on the GPU */
} oom_phase;

OOM_EXPORT const char *oom_phase_name(oom_phase v);

/**
 * An estimate, per GPU. The breakdown fields are the bytes live at the peak phase; they add up to
 * allocated_peak. All sizes are bytes (a field saturates at 2^60 for absurd inputs).
 */
typedef struct oom_estimate {
    unsigned int version; /**< OOM_ESTIMATE_VERSION */
    uint64_t weights;     /**< parameters (and quantisation constants), this GPU's share */
    uint64_t gradients;   /**< parameter gradients live at the peak (incl. DDP buckets) */
    uint64_t optimizer;   /**< optimizer states (and fp32 master weights) on this GPU */
    uint64_t activations; /**< tensors saved for backward (inference: one layer's working set) */
    uint64_t logits;      /**< logits and the loss path (fp32 upcast, log-softmax, its gradient) */
    uint64_t kv_cache;    /**< inference KV cache */
    uint64_t temporaries; /**< autocast weight copies, optimizer-step temporaries, ZeRO-3 gathers */
    uint64_t overhead;    /**< CUDA context + workspaces (+ NCCL) outside PyTorch's allocator */
    uint64_t allocated_peak; /**< ~ torch.cuda.max_memory_allocated() */
    uint64_t reserved_peak;  /**< ~ torch.cuda.max_memory_reserved() (caching-allocator rounding) */
    uint64_t device_peak;    /**< ~ NVML / nvidia-smi for the process: reserved + overhead */
    oom_phase peak_phase;
    uint64_t params_total;     /**< all parameters of the model */
    uint64_t params_trainable; /**< trained parameters (LoRA: the adapters; inference: 0) */
    double
        flops_per_token; /**< 6Ψ + attention training (8Ψ full recompute, 4Ψ LoRA), 2Ψ inference */
    double flops_per_step;    /**< per GPU per optimizer step (all micro-batches) */
    uint64_t tokens_per_step; /**< per GPU: batch × seq × grad_accum */
} oom_estimate;

#define OOM_ESTIMATE_VERSION 1
#define OOM_ESTIMATE_INIT                                                                          \
    {                                                                                              \
        .version = OOM_ESTIMATE_VERSION                                                            \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_estimate_init(oom_estimate *s, unsigned int version);

/**
 * Estimates the workload's peak memory per GPU. Validates first (see oom_workload_validate) and
 * loads data/coefficients.json (kept once loaded; $OOMLESS_DATA_DIR applies). OOM_EINVAL for an
 * impossible combination, OOM_EIO/OOM_EPARSE for an unreadable coefficients file.
 */
OOM_EXPORT int oom_estimate_run(oom_estimate *out, const oom_workload *w);

/**
 * The estimate as one JSON document: {"workload": {...}, "model": {...}, "memory": {"weights",
 * "gradients", "optimizer", "activations", "logits", "kv_cache", "temporaries", "overhead",
 * "allocated_peak", "reserved_peak", "device_peak"}, "peak_phase", "params": {"total",
 * "trainable"}, "compute": {...}}; sizes are integers in bytes. `e` may be NULL: the workload
 * alone. The string is released with oom_free(). OOM_ENOMEM only.
 */
OOM_EXPORT int oom_estimate_to_json(char **out, const oom_workload *w, const oom_estimate *e);

/**
 * As oom_estimate_to_json(), plus "budget": {"target_bytes", "safety_margin_bytes",
 * "usable_bytes", "fits", "headroom_bytes"} when `budget` is not NULL (fits: device_peak <=
 * usable_bytes; headroom may be negative). OOM_ENOMEM only.
 */
OOM_EXPORT int oom_estimate_to_json_budget(char **out, const oom_workload *w, const oom_estimate *e,
                                           const oom_budget *budget);

/**
 * The optional budget of an estimate, resolved as `oomless estimate` does: with request->gpu
 * through the catalog or GPU discovery (oom_target_resolve; the workload's GPU is set from the
 * profile; on a GPU without bf16 a bf16 precision becomes fp16 / amp-bf16 amp-fp16, with a
 * notice), also when request->vram is "auto" or "free"; else with request->vram alone as a bare
 * target (no discovery), else none (*have = 0; a margin without --vram or --gpu is OOM_EINVAL).
 * `label` (may be NULL) receives what the budget came from ("NVIDIA A100 80GB", "--vram 24"),
 * allocated (release with oom_free(); NULL when there is no budget or on failure). request may be
 * NULL (no budget).
 */
OOM_EXPORT int oom_estimate_budget(oom_budget *out, int *have, char **label, oom_workload *w,
                                   const oom_target_request *request);

/**
 * An estimate with everything `oomless estimate` says about it: the peaks, the workload as
 * estimated, what its objective and its packing change, the 95 % bounds with the class of
 * measured errors behind them, a quantised base's and LoRA's parts, the overhead outside
 * PyTorch's allocator part by part, loading the weights, and the budget. The tool's text is
 * written from it, and oom_estimate_to_json_budget() writes the same figures (workload.objective,
 * workload.packing, "confidence", "qlora", "overhead", "load"). The strings are owned by the report
 * (oom_estimate_report_dispose); the string of a part the workload does not have is NULL and its
 * numbers are 0. Since: 1.1.0.
 */
/** One pipeline rank of a model-parallel training estimate (oom_estimate_report.ranks).
 * Since: 1.1.0. */
typedef struct oom_estimate_rank {
    uint64_t allocated_peak; /**< its allocated peak */
    long layers;             /**< the transformer layers it holds */
    long in_flight;          /**< the micro-batches whose activations it keeps at its peak */
    oom_phase peak_phase;    /**< when it peaks */
} oom_estimate_rank;

typedef struct oom_estimate_report {
    unsigned int version;  /**< OOM_ESTIMATE_REPORT_VERSION */
    oom_estimate estimate; /**< the peaks and their breakdown, as oom_estimate_run() */
    /* the workload as estimated */
    char *model;                 /**< the model's name */
    char *family;                /**< its model_type ("llama") */
    oom_knobs knobs;             /**< as oom_workload_get_knobs() (precision AUTO resolved) */
    char *checkpointing;         /**< as --checkpointing spells it ("every:2+offload") */
    char *sharding;              /**< as --sharding spells it ("fsdp2" where knobs say zero3) */
    char *fsdp_param_dtype;      /**< sharding fsdp2: "fp32" or "bf16"; else NULL */
    char *reshard_after_forward; /**< sharding fsdp2: "yes", "no" or N; else NULL */
    long tensor_parallel;        /**< GPUs one model copy is split over (1: none) */
    char *stack;                 /**< the training stack modelled (--stack: "torchtune") */
    char *stack_versions;        /**< the versions of its code modelled ("torchtitan 0.3.0") */
    int stack_traced; /**< 1: `oomless trace` runs its code; 0: modelled from its source */
    /* the training objective as TRL runs it; objective NULL under sft */
    char *objective;            /**< "dpo", "grpo", ... */
    char *batch_counts;         /**< what --batch counts: "pairs", "examples", "completions" */
    long sequences_per_forward; /**< sequences in one forward of the policy */
    char *reference;            /**< the reference model: "copy", "adapter" or "none" */
    char *reference_precision;  /**< a reference copy's weights ("bf16"); else NULL */
    int precompute_ref;         /**< the reference's log-probs computed before training */
    long generation_batch;      /**< grpo: completions each GPU generates at once; else 0 */
    long num_generations;       /**< grpo: completions per prompt; else 0 */
    long prompt_len;     /**< grpo, inference with completion-len: prompt tokens of --seq; else 0 */
    long completion_len; /**< grpo, inference with completion-len: generated tokens; else 0 */
    char *rollout;       /**< grpo: where completions are generated ("none"); else NULL */
    int sleep_mode;      /**< grpo with a colocated engine: its sleep level */
    /* sequence packing; packing NULL without (docs/estimate.md, "Sequence packing") */
    char *packing;                   /**< "padding-free" or "block-mask" */
    long tokens_per_batch;           /**< packed tokens per micro-batch */
    long pack_rows, pack_row_tokens; /**< the rows the model sees and the tokens of each */
    long longest_document;           /**< --seq */
    char *attention_path;            /**< how attention takes the packed rows */
    /* how sure: the peaks' bounds at `confidence_level` (0.95) and the class of measured errors
     * they come from (docs/estimate.md, "How sure an estimate is") */
    uint64_t allocated_peak_upper95, reserved_peak_upper95, device_peak_upper95;
    double confidence_level;
    char *confidence_class;             /**< the workload's class ("lora/sdpa/none/none/none") */
    char *confidence_basis;             /**< "measured", "fallback" or "none" */
    char *confidence_errors_of;         /**< the classes whose errors were used */
    long confidence_cases;              /**< measured cases of the workload's own class */
    double under_prediction;            /**< the relative under-prediction at the level */
    uint64_t context_uncertainty_bytes; /**< added to the device peak's bound */
    /* a 4-bit base quantised at load, LoRA's adapters, a paged optimizer (docs/estimate.md,
     * "QLoRA"); has_qlora 0: none of them */
    int has_qlora;
    int quantized;                  /**< a base quantised to NF4 at load: the next five are set */
    int double_quant;               /**< its absmaxes quantised again */
    uint64_t nf4_bytes;             /**< its 4-bit codes */
    uint64_t absmax_bytes;          /**< first-level absmaxes */
    uint64_t absmax2_bytes;         /**< second-level constants (double quantization) */
    uint64_t unquantized_bytes;     /**< the weights left unquantised (embeddings, head, norms) */
    uint64_t dequantized_bytes;     /**< one linear dequantised in a forward or backward */
    char *adapter_dtype;            /**< LoRA's adapters: "fp32" or "bf16"; else NULL */
    uint64_t adapter_bytes;         /**< the adapters' weights */
    uint64_t paged_optimizer_bytes; /**< in CUDA unified memory, outside the peaks */
    /* the overhead outside PyTorch's allocator (estimate.overhead), part by part
     * (docs/estimate.md, "Memory outside PyTorch") */
    int overhead_given;          /**< --overhead replaced every part: the next two are 0 */
    uint64_t cuda_context_bytes; /**< the CUDA context and the kernels a step loads */
    uint64_t nccl_bytes;         /**< NCCL's buffers (0: one GPU, no communicator) */
    long nccl_gpus, nccl_communicators, nccl_channels;
    uint64_t nccl_buffsize;                    /**< SIMPLE's buffer per channel */
    uint64_t nccl_ring_bytes, nccl_nvls_bytes; /**< per communicator */
    int nccl_nvls;                             /**< NVLink SHARP buffers */
    char *nccl_defaults;             /**< the options of the NCCL settings taken as NCCL's defaults;
                                          NULL when every one was given */
    uint64_t cublas_workspace_bytes; /**< counted in estimate.temporaries */
    int cublas_workspace_default;    /**< not set by --cublas-workspace */
    /* the budget it is held to (has_budget 0: none) */
    int has_budget;
    oom_budget budget;
    int fits; /**< estimate.device_peak <= budget.usable_bytes */
    /* version 2: the bias across setups in the 95 % bounds (docs/estimate.md, "A new setup") */
    char *confidence_spread;        /**< the bias across setups the bound takes: "stack" (over the
                                         stack's own sources), "cross-stack" (over every source: the
                                         stack has too few of its own) or "none" (data without it) */
    long confidence_spread_sources; /**< the sources it is taken over (the stack's own, or all) */
    long confidence_stack_sources;  /**< the sources of the workload's stack in the data */
    double confidence_spread_bias;  /**< that bias at the level (may be < 0) */
    /* version 2: training with a model-parallel layout (docs/parallelism.md): the estimate's
     * figures are the limiting pipeline rank's; n_ranks 0 and engine NULL without a layout */
    char *engine;                           /**< "megatron" or "torchtitan" */
    long pipeline_parallel, virtual_stages; /**< stages; model chunks per rank */
    long context_parallel, data_parallel;   /**< and tensor_parallel above */
    long expert_parallel, expert_tensor_parallel;
    int sequence_parallel;
    size_t n_ranks, limiting_rank; /**< the pipeline ranks, and the one that peaks highest */
    oom_estimate_rank *ranks;      /**< n_ranks of them, owned by the report */
    /* version 3: the code of a 4-bit base whose linears are bitsandbytes' (quantized set; NULL and
     * 0 for any other): who quantized it at load, the bitsandbytes release modelled, and the
     * 16-bit inputs that release's 4-bit linears keep for the backward (docs/estimate.md,
     * "QLoRA") */
    char *quantizer;            /**< "transformers" or "fabric", as --quantizer spells it */
    char *bitsandbytes;         /**< "0.44" (or later) or "0.43" (or earlier), as --bitsandbytes */
    uint64_t kept_inputs_bytes; /**< 0.43: those inputs, counted in estimate.activations */
    /* version 3: loading the weights (docs/estimate.md, "Loading"); the estimate's peak phase is
     * OOM_PHASE_LOAD when it is the largest */
    uint64_t load_peak;      /**< allocated while loading: the weights and load_transient */
    uint64_t load_transient; /**< the largest copy beside them while one weight is put on the GPU */
    char *load_how;          /**< what makes that copy ("bitsandbytes quantizes each linear ...") */
} oom_estimate_report;

#define OOM_ESTIMATE_REPORT_VERSION 3
#define OOM_ESTIMATE_REPORT_INIT                                                                   \
    {                                                                                              \
        .version = OOM_ESTIMATE_REPORT_VERSION                                                     \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_estimate_report_init(oom_estimate_report *s, unsigned int version);

/**
 * Estimates the workload (as oom_estimate_run()) and fills `out` (initialised; its version kept)
 * with the report, held to `budget` when it is not NULL. Fails as oom_estimate_run() does, and
 * with OOM_EIO/OOM_EPARSE when data/confidence.json cannot be read; `out` owns nothing then.
 * Since: 1.1.0.
 */
OOM_EXPORT int oom_estimate_report_run(oom_estimate_report *out, const oom_workload *w,
                                       const oom_budget *budget);
/** Frees what the report owns and leaves it safe to dispose again. NULL is fine. Since: 1.1.0. */
OOM_EXPORT void oom_estimate_report_dispose(oom_estimate_report *r);

/* ======================================================================== plan */
/* (section: plan) */

/*
 * The planner searches the estimator for the fastest configuration that fits: micro-batch and
 * gradient accumulation (micro x accum x data-parallel GPUs = the target effective batch),
 * checkpointing, precision, 8-bit optimizer, CPU offload, ZeRO stage, chunked loss and attention
 * kernel, each only where the
 * request allows it. The objective is the estimated throughput (see docs/plan.md: FLOPs per token
 * from the estimate, the GPU's TFLOP/s for the precision, a utilisation curve that falls for
 * small micro-batches, communication and offload time); the constraint is device_peak <= usable
 * budget. Ties go to the simpler configuration. Values the user fixed are never raised.
 */

/** Knobs the planner may change (oom_plan_request.allow). */
#define OOM_ALLOW_CHECKPOINTING 0x01u
#define OOM_ALLOW_PRECISION     0x02u /**< other 16-bit/quantised precisions of the same method */
#define OOM_ALLOW_OPTIMIZER     0x04u /**< 8-bit AdamW in place of AdamW */
#define OOM_ALLOW_OFFLOAD       0x08u /**< ZeRO CPU offload of the optimizer (and parameters) */
#define OOM_ALLOW_SHARDING      0x10u /**< ZeRO-1/2/3 when there is more than one GPU */
#define OOM_ALLOW_LOSS          0x20u /**< a chunked (fused linear + cross-entropy) loss */
#define OOM_ALLOW_ATTENTION     0x40u /**< a more memory-efficient attention (sdpa, flash) */
/** tensor, pipeline, expert and context parallelism over the GPUs (training past one node, or
 * where data parallelism needs ZeRO-3 or offload). Since: 1.2.0. */
#define OOM_ALLOW_LAYOUT 0x80u
#define OOM_ALLOW_ALL    0xffu
/** The default: checkpointing and (on several GPUs) sharding; they do not change the maths. */
#define OOM_ALLOW_DEFAULT (OOM_ALLOW_CHECKPOINTING | OOM_ALLOW_SHARDING | OOM_ALLOW_LAYOUT)

/** Fixed values the planner may lower when they do not fit (oom_plan_request.downscale). */
#define OOM_DOWNSCALE_BATCH         0x01u
#define OOM_DOWNSCALE_SEQ           0x02u
#define OOM_DOWNSCALE_CHECKPOINTING 0x04u /**< a fixed checkpointing may become more thorough */
#define OOM_DOWNSCALE_ALL           0x07u
#define OOM_DOWNSCALE_DEFAULT       OOM_DOWNSCALE_BATCH

/**
 * A workload that is not a modelled transformer, as a measured line (from `oomless probe` or by
 * hand): device peak = fixed + multiplier x batch x (per_sample + per_token x seq).
 * The multiplier is e.g. 1 + n_positives + n_negatives for a contrastive model whose "sample" is
 * an anchor with its positives and negatives.
 */
typedef struct oom_measured_line {
    unsigned int version;      /**< OOM_MEASURED_LINE_VERSION */
    uint64_t fixed_bytes;      /**< weights, optimizer states, CUDA context: independent of batch */
    uint64_t bytes_per_sample; /**< per (multiplied) sample */
    uint64_t bytes_per_token;  /**< per (multiplied) sample per token of seq; 0: no seq term */
    double sample_multiplier;  /**< >= 1 (0 is taken as 1) */
    double flops_per_sample;   /**< training FLOPs per sample; 0: unknown (ranked by batch) */
} oom_measured_line;

#define OOM_MEASURED_LINE_VERSION 1
#define OOM_MEASURED_LINE_INIT                                                                     \
    {                                                                                              \
        .version = OOM_MEASURED_LINE_VERSION                                                       \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_measured_line_init(oom_measured_line *s, unsigned int version);

/** What to plan. Start from oom_plan_request_init(). Counts of 0 mean "not given". */
typedef struct oom_plan_request {
    unsigned int version;          /**< OOM_PLAN_REQUEST_VERSION */
    const oom_workload *workload;  /**< the model workload (its knobs are the starting point) */
    const oom_measured_line *line; /**< or a measured line (then workload is NULL) */
    oom_budget budget;             /**< per GPU */
    const oom_gpu_profile *gpu;    /**< TFLOP/s, bandwidth, bf16 support; NULL: generic */
    long nodes, gpus_per_node;   /**< data-parallel GPUs = nodes x gpus_per_node (default 1 x 1) */
    long target_effective_batch; /**< samples per optimizer step, all GPUs; 0: default */
    long fixed_batch;            /**< micro-batch the user fixed (never raised) */
    long fixed_grad_accum;       /**< accumulation the user fixed (never raised) */
    long fixed_seq;              /**< sequence length the user fixed (never raised) */
    int fixed_checkpointing;     /**< 1: the workload's checkpointing was given by the user */
    long seq_min, seq_max;       /**< a range the planner may choose from (longest that fits) */
    long max_batch;              /**< cap on any micro-batch (0: none) */
    long max_auto_batch;         /**< cap on a micro-batch the planner chooses (0: none) */
    unsigned allow;              /**< OOM_ALLOW_* */
    unsigned downscale;          /**< OOM_DOWNSCALE_* */
    int allow_inexact; /**< the effective batch may miss the target (nearest above/below) */
    long workers;      /**< 0/1: one job; N: N copies share each GPU; -1: auto */
} oom_plan_request;

#define OOM_PLAN_REQUEST_VERSION 1
/** The defaults: allow OOM_ALLOW_DEFAULT, downscale OOM_DOWNSCALE_DEFAULT, 1 node x 1 GPU. */
#define OOM_PLAN_REQUEST_INIT                                                                      \
    {                                                                                              \
        .version = OOM_PLAN_REQUEST_VERSION, .budget = {.version = OOM_BUDGET_VERSION},            \
        .nodes = 1, .gpus_per_node = 1, .allow = OOM_ALLOW_DEFAULT,                                \
        .downscale = OOM_DOWNSCALE_DEFAULT                                                         \
    }
/** Sets `r` to the defaults of OOM_PLAN_REQUEST_INIT; OOM_EINVAL for an unknown version. */
OOM_EXPORT int oom_plan_request_init(oom_plan_request *r, unsigned int version);

/** One configuration the planner estimated. */
typedef struct oom_plan_choice {
    unsigned int version;  /**< OOM_PLAN_CHOICE_VERSION */
    oom_knobs knobs;       /**< knobs.gpus: all data-parallel GPUs */
    long effective_batch;  /**< batch x grad_accum x gpus */
    oom_estimate estimate; /**< per GPU (measured lines: only the peaks are set) */
    int fits;              /**< estimate.device_peak <= usable budget */
    int has_throughput;    /**< 0 for a measured line without flops_per_sample */
    double tokens_per_s;   /**< all GPUs (measured lines: samples x seq) */
    double samples_per_s;  /**< all GPUs */
    double step_s;         /**< one optimizer step (inference: one batch) */
    double utilisation;    /**< model-FLOPs utilisation assumed for the micro-batch */
    double score;          /**< what was maximised */
    char *why;             /**< for alternatives: why it lost / how it fails, or NULL; owned */
    /* version 2 */
    /** the checkpointing as `--checkpointing` spells it: "none", "selective", "full", or a
     * variant of full ("op-sac", "nth:2", "every:2", "full+offload"); the longest spelling,
     * "every:1048576+offload", is 21 characters */
    char checkpointing[32];
    /** forwards recomputed per forward by the checkpointing: 0 without, 1 for full, 0.35 for
     * op-sac on Llama 3.2-1B (the estimate's FLOPs less those without checkpointing) */
    double recompute;
} oom_plan_choice;

#define OOM_PLAN_CHOICE_VERSION 2
#define OOM_PLAN_CHOICE_INIT                                                                       \
    {                                                                                              \
        .version = OOM_PLAN_CHOICE_VERSION                                                         \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_plan_choice_init(oom_plan_choice *s, unsigned int version);
/** Frees what `c` owns (why); NULL is fine; safe to repeat. */
OOM_EXPORT void oom_plan_choice_dispose(oom_plan_choice *c);

/**
 * The answer; free with oom_plan_free(). Its strings, lists and choices are owned by it: nothing is
 * cut short. The choices are pointers (never NULL for best and smallest) so that oom_plan_choice
 * can grow behind its own version.
 */
typedef struct oom_plan_result {
    unsigned int version;    /**< OOM_PLAN_RESULT_VERSION */
    int found;               /**< 1: `best` fits; 0: nothing did (see smallest, suggestions) */
    int inference, measured; /**< what kind of workload was planned */
    oom_plan_choice *best;
    size_t n_alternatives;
    oom_plan_choice **alternatives; /**< the runners-up (at most 3), each with its `why` */
    oom_plan_choice *smallest;      /**< the configuration with the smallest device peak tried */
    size_t n_suggestions;           /**< when nothing fits: what would make it fit */
    char **suggestions;
    size_t n_notices; /**< downscaled values, precision changed for the GPU, ... */
    char **notices;
    unsigned downscaled; /**< OOM_DOWNSCALE_* bits of the fixed values that were lowered */
    long requested_batch, requested_seq; /**< the fixed values asked for (0: none) */
    long target_effective_batch;
    oom_budget gpu_budget;    /**< per GPU */
    oom_budget budget;        /**< per job: per GPU, or per worker when workers > 1 */
    long workers;             /**< copies per GPU planned for (1 unless asked) */
    long max_workers;         /**< copies of the chosen job that fit one GPU (0 when none) */
    uint64_t kv_budget_bytes; /**< inference: memory a serving engine may give its KV cache */
    double kv_bytes_per_token;
    long nodes, gpus_per_node;
    long candidates;         /**< configurations estimated */
    char *model;             /**< model name, or "measured line" */
    char *gpu_id, *gpu_name; /**< the profile planned for ("" when none) */
    double peak_tflops;      /**< for the chosen precision */
    int target_fallback;     /**< oom_plan_options_run: no GPU found, default profile used */
    char *target_reason;     /**< why the fallback happened, or NULL */
    /* device peak versus micro-batch for the chosen knobs, without and with full checkpointing
     * (UINT64_MAX where the estimator refused), for pictures; each array has n_curve entries */
    size_t n_curve;
    long *curve_batch;
    uint64_t *curve_peak_none, *curve_peak_full;
    /* version 2 */
    uint64_t others_bytes; /**< memory in use on the detected GPU (oom_target.others_bytes) */
    char *others;          /**< the processes holding it, or NULL; owned */
    int workers_requested; /**< 1: the request named workers (N, 1 or auto): reports show them */
    long tensor_parallel;  /**< inference: GPUs one model copy is split over (1: none) */
    /** inference: the activation peak of a serving engine's start-up profile run (vLLM's
     * profile_run: serve_batched_tokens tokens in one forward, then the sampler over
     * min(serve_max_num_seqs, serve_batched_tokens) rows), per GPU; 0 for training plans */
    uint64_t serve_profile_bytes;
    long serve_batched_tokens;
    /* version 3: how sure the plan is, from the estimator's measured error per kind
     * of workload (data/confidence.json; model workloads that fit only) */
    double fit_confidence;      /**< the confidence planned to (plan option fit-confidence): the
                                   device peak's bound at it within budget.target_bytes instead of
                                   the device peak within usable_bytes; 0: the margin */
    double fit_probability;     /**< confidence that best's device peak stays within
                                   budget.target_bytes (see fit_probability_side) */
    uint64_t device_peak_bound; /**< best's device peak bound at fit_confidence (0.95 when 0) */
    int has_fit_probability;    /**< 1: fit_probability and device_peak_bound are known */
    int fit_probability_side;   /**< -1: below the lowest level measured (fit_probability is that
                                   level), 1: at or above the highest, 0: between */
    /* version 4 */
    /** inference: the KV cache per layer type, as the estimate JSON's "kv_cache_layers": layers
     * that keep every token, layers that keep the last kv_window tokens (0: none), the elements
     * one token takes in one layer on one GPU; kv_latent 1 for multi-head latent attention (one
     * latent per token and layer, the same on every GPU); kv_vllm 1 for a serving engine's cache
     * (kv-cache vllm), 0 for transformers' */
    long kv_full_layers, kv_sliding_layers, kv_window, kv_elements;
    int kv_latent, kv_vllm;
    /* version 5 */
    long serve_max_num_seqs;   /**< inference: the sequences the profile run's sampler is sized
                                  for, vLLM's max_num_seqs: the workload option max-num-seqs, else
                                  best->knobs.batch; 0 for training plans */
    uint64_t serve_rope_bytes; /**< inference: the rotary embedding's cos/sin cache a serving
                                  engine allocates with the weights (max positions x head size in
                                  the model's dtype), per GPU; 0 without rotary embeddings */
    /* version 6: GRPO with a vLLM engine on the trainer's GPU (workload option rollout
     * vllm-colocate; docs/plan.md, "RL with a colocated rollout engine"), per GPU; all 0 without */
    int rollout_sleep_level;               /**< the engine's sleep level while training (0: none) */
    double rollout_gpu_memory_utilization; /**< vLLM's gpu_memory_utilization planned */
    uint64_t rollout_weights_bytes;        /**< the engine's weights (with its rotary cache) */
    uint64_t rollout_profile_bytes;        /**< its start-up profile run's activation peak */
    uint64_t rollout_kv_bytes;             /**< the KV cache it will find at that utilization */
    long rollout_kv_tokens;                /**< that cache in tokens (whole 16-token blocks) */
    long rollout_max_num_seqs;             /**< sequences generated at once (TRL's max_num_seqs) */
    uint64_t rollout_resident_bytes;       /**< the trainer's memory while the engine generates
                                              (weights, optimizer states, context) */
    uint64_t rollout_sleeping_bytes; /**< the engine's memory while asleep (0: no sleep mode) */
    long rollout_num_generations;    /**< completions per prompt (TRL num_generations) */
    long rollout_completion_len;     /**< generated tokens of the sequence */
    int rollout_reference;           /**< 1: a reference model is loaded (TRL's beta > 0) */
    /* version 7: sequence packing (workload option packing; docs/plan.md, "Sequence packing"):
     * the micro-batch is best->knobs.batch packs of best->knobs.seq_len tokens */
    int packing;           /**< 0 none, 1 padding-free (TRL), 2 block-mask (torchtune) */
    long tokens_per_batch; /**< packed tokens per micro-batch (batch x seq); 0 without packing */
    /* version 8: training with a model-parallel layout (docs/parallelism.md): best splits each
     * layer over tensor_parallel GPUs, the layers over pipeline_parallel stages, the experts over
     * expert_parallel x expert_tensor_parallel GPUs, each sequence over context_parallel GPUs;
     * best->knobs.gpus is the data-parallel copies and best->knobs.grad_accum the micro-batches
     * of a step. pipeline_parallel is 0 when best is plain data parallelism. */
    long pipeline_parallel;
    long virtual_stages; /**< model chunks per pipeline GPU: 1 (1F1B) or V (interleaved) */
    long expert_parallel, expert_tensor_parallel, context_parallel;
    int sequence_parallel;
    int engine;            /**< whose memory was planned: 0 Megatron-Core, 1 torchtitan */
    int recompute_method;  /**< full recomputation: 0 uniform, 1 block (Megatron's) */
    long recompute_layers; /**< Megatron's recompute_num_layers */
    long layers;           /**< the model's decoder layers */
    char *stage_layers;    /**< the layers of each virtual stage in order ("7,8,8"); owned */
    double bubble;         /**< the share of a step the pipeline's stages wait */
    /** The training stack modelled: the index of its value among the values of the workload
     *  option "stack" (oom_option_lookup("stack")->values: name, versions, traced); 0 for a
     *  measured line, which models no stack. */
    int stack;
} oom_plan_result;

#define OOM_PLAN_RESULT_VERSION 8
#define OOM_PLAN_RESULT_INIT                                                                       \
    {                                                                                              \
        .version = OOM_PLAN_RESULT_VERSION                                                         \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_plan_result_init(oom_plan_result *s, unsigned int version);

/**
 * Plans. OOM_OK with `*out` (found = 1). OOM_ENOFIT when nothing fits: `*out` is still set
 * (found = 0, smallest, suggestions) and the message says what was tried. OOM_EINVAL naming the
 * value for an impossible request (no workload, effective batch not a multiple of the GPUs
 * without allow_inexact, a fixed batch above max_batch, ...). Free with oom_plan_free().
 */
OOM_EXPORT int oom_plan_run(oom_plan_result **out, const oom_plan_request *request);
/** oom_plan_result_dispose(), then frees the result itself. NULL is fine. */
OOM_EXPORT void oom_plan_free(oom_plan_result *result);
/** Frees what `result` owns (choices, strings, lists, curve); NULL is fine; safe to repeat. */
OOM_EXPORT void oom_plan_result_dispose(oom_plan_result *result);

/**
 * The plan as one JSON document: {"plan": {"batch_size", "grad_accum", "effective_batch",
 * "seq_len", "checkpointing", "precision", "optimizer", "sharding", "offload", "gpus"}, "found",
 * "memory": {the estimate's keys}, "budget": {"target_bytes", "safety_margin_bytes",
 * "usable_bytes", "utilisation", "others_bytes", "others"}, "throughput": {...}, "alternatives":
 * [...], "downscaled", "notices", "workers", "inference", "suggestions", "smallest", "search",
 * "fit_probability", "confidence": {"level", "bound_level", "device_peak_bound",
 * "needed_margin_bytes", "margin_bytes", "margin_excess_bytes"}} (the last two: version 3).
 */
OOM_EXPORT int oom_plan_to_json(char **out, const oom_plan_result *result);

/**
 * The plan for the next step, as text: "text" (the human report), "json", "env"
 * (OOMLESS_BATCH_SIZE=... lines for eval), "args" (Hugging Face Trainer arguments), "deepspeed"
 * (a ds_config.json fragment), "torchrun" (the launch line), "vllm" (vLLM's settings and the
 * KV-cache capacity vLLM will find; inference plans of a version-2 result), "accelerate" (an
 * FSDP2 accelerate config), "torchtitan" (a config function's settings), "trl", "verl",
 * "torchtune" (oom_plan_formats() lists them all). A format that follows a framework writes the
 * keys of the latest version it knows: oom_plan_format_version() chooses another.
 * OOM_EINVAL for another name; OOM_ENOFIT for a machine format when nothing fits;
 * OOM_EUNSUPPORTED for a format the plan's kind does not have, or a plan the framework cannot
 * run (LoRA for torchtitan, fp16 for torchtune...: the message says why).
 */
OOM_EXPORT int oom_plan_format(char **out, const oom_plan_result *result, const char *format);

/**
 * oom_plan_format() for a version of the format's framework: `version` ("0.2.2", "5.23.0"; NULL:
 * the latest the format knows, the last of its info's `versions`) picks the newest version of
 * that list that is not newer than it, whose keys are written (a notice says so when `version`
 * is newer than every one listed). `*written` (may be NULL) gets the version picked, as listed
 * (static; NULL for a format without a framework). OOM_EINVAL for a `version` that is not a
 * version, or older than every one the format knows, or given to a format without a framework
 * (the message lists the versions); otherwise as oom_plan_format(). Since: 1.1.0.
 */
OOM_EXPORT int oom_plan_format_version(char **out, const char **written,
                                       const oom_plan_result *result, const char *format,
                                       const char *version);
/**
 * The version of `format`'s framework whose keys oom_plan_format_version() writes for `version`
 * (NULL: the latest), into `*written` (static), without a plan: what a binding asks before it
 * writes the same keys itself (oomless.hf). Errors as oom_plan_format_version(). Since: 1.1.0.
 */
OOM_EXPORT int oom_plan_format_pick(const char **written, const char *format, const char *version);

/** One output format of `plan` (oom_plan_format) or `table` (oom_table). Since: 1.1.0. */
typedef struct oom_plan_format_info {
    unsigned int version;  /**< OOM_PLAN_FORMAT_INFO_VERSION */
    const char *name;      /**< "vllm" */
    const char *help;      /**< one line: what it writes, and for which plans */
    const char *framework; /**< what reads it ("vLLM"), NULL for oomless's own */
    /** the framework versions whose keys it can write, oldest first, ", "-separated ("0.2, 0.3";
     * the last is the default: oom_plan_format_version()), NULL when none */
    const char *versions;
    unsigned int commands; /**< OOM_COMMAND_PLAN and/or OOM_COMMAND_TABLE */
    /* version 2 */
    /** the Python distribution whose version `versions` counts ("torchtitan"; "transformers"
     * for the formats of TrainingArguments' keys), as pip names it; NULL when none */
    const char *package;
} oom_plan_format_info;

#define OOM_PLAN_FORMAT_INFO_VERSION 2
#define OOM_PLAN_FORMAT_INFO_INIT                                                                  \
    {                                                                                              \
        .version = OOM_PLAN_FORMAT_INFO_VERSION                                                    \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_plan_format_info_init(oom_plan_format_info *s, unsigned int version);

/** The output formats of plan and table (static, owned by the library): `*count` pointers.
 *  Since: 1.1.0. */
OOM_EXPORT const oom_plan_format_info *const *oom_plan_formats(size_t *count);

/**
 * Plans from text options, as `oomless plan` does (the CLI is a thin layer over this): every
 * workload option (oom_workload_options) plus the plan options of oom_plan_option_table(). The
 * budget is resolved like the CLI's (--gpu/--vram/--vram-safety-margin/--config, detected GPUs,
 * else the default profile). $OOMLESS_BATCH_SIZE fixes the batch when no batch option is given.
 */
typedef struct oom_plan_options oom_plan_options;

OOM_EXPORT int oom_plan_options_create(oom_plan_options **out);
OOM_EXPORT void oom_plan_options_free(oom_plan_options *o);
/** Sets a workload or plan option ('_' may stand for '-'). Errors as oom_workload_set(). */
OOM_EXPORT int oom_plan_options_set(oom_plan_options *o, const char *key, const char *value);
/** Sets every option of a YAML mapping file (keys are option names). */
OOM_EXPORT int oom_plan_options_load(oom_plan_options *o, const char *path);
/** The plan-only options (static). */
OOM_EXPORT const oom_option *const *oom_plan_option_table(size_t *count);
/** Resolves the budget and plans. Returns as oom_plan_run(). */
OOM_EXPORT int oom_plan_options_run(oom_plan_result **out, const oom_plan_options *o);

/**
 * The one call for bindings: `n` options as key/value strings in, the JSON document of
 * oom_plan_to_json() out (also when nothing fits: the function then returns OOM_ENOFIT).
 */
OOM_EXPORT int oom_plan_json(char **out, const char *const *keys, const char *const *values,
                             size_t n);

/**
 * The same for a format: plans from `n` text options and writes the plan as
 * oom_plan_format_version(out, written, result, format, version) does (the Python package's
 * oomless.plan_format(), which passes the installed framework's version). OOM_ENOFIT (and no
 * text) when nothing fits. Since: 1.1.0.
 */
OOM_EXPORT int oom_plan_options_format(char **out, const char **written, const char *const *keys,
                                       const char *const *values, size_t n, const char *format,
                                       const char *version);

/** Writes an SVG picture of a plan (memory bar against the budget; peak versus micro-batch). */
OOM_EXPORT int oom_plan_svg(char **out, const oom_plan_result *result);
/** An SVG picture of one estimate's breakdown against a budget (NULL: no budget line). */
OOM_EXPORT int oom_estimate_svg(char **out, const oom_workload *w, const oom_estimate *e,
                                const oom_budget *budget);

/* ---- table: one plan per GPU ------------------------------------------------------------ */

/**
 * Plans each named workload on each GPU profile and formats the rows: "text", "markdown", "csv"
 * or "json". A GPU where nothing fits gets a row that says so. `gpus` are catalog ids.
 */
OOM_EXPORT int oom_table(char **out, const oom_plan_options *const *workloads,
                         const char *const *names, size_t n_workloads, const char *const *gpus,
                         size_t n_gpus, const char *format);

/**
 * Loads a workloads file: YAML `workloads: {NAME: {option: value, ...}, ...}`. `*names` and
 * `*options` are arrays of `*count`; free with oom_table_workloads_free().
 */
OOM_EXPORT int oom_table_workloads_load(oom_plan_options ***options, char ***names, size_t *count,
                                        const char *path);
OOM_EXPORT void oom_table_workloads_free(oom_plan_options **options, char **names, size_t count);

/* ======================================================================== probe, run */
/* (section: supervise) */

/*
 * probe and run drive the user's own training command as a child process. The command is an
 * argv template (never a shell line): placeholders inside its elements are replaced per launch
 * without re-splitting, and every launch gets environment variables with the same values:
 *
 *   {batch}     OOMLESS_BATCH_SIZE    micro-batch size of this launch
 *   {accum}     OOMLESS_GRAD_ACCUM    gradient-accumulation steps
 *   {effective} OOMLESS_EFFECTIVE_BATCH  batch x accum
 *   {seq}       OOMLESS_SEQ_LEN       sequence length (only when one was given)
 *   {attempt}   OOMLESS_ATTEMPT       1 for the first launch, then 2, 3...
 *
 * Any other "{...}" is left as it is. PYTHONUNBUFFERED=1 is added unless already set, so that a
 * Python job's output (and its "step N" lines) arrives as it is printed.
 *
 * The child runs in its own process group. Its stdout and stderr are read through pipes and
 * copied to the file descriptors the caller names (the library never prints); the last 16 KiB
 * are kept to recognise an out-of-memory death. When a launch ends, whatever is left of its
 * process group (and of its descendants that left the group) is killed with SIGKILL and reaped:
 * no process outlives a launch. On Linux the calling process becomes a child subreaper
 * (prctl PR_SET_CHILD_SUBREAPER) so that orphaned grandchildren can be found and reaped.
 * The functions below are not async-signal-safe and must not run concurrently in one process.
 */

/** A job: the command template and what to add to its environment. */
typedef struct oom_job {
    unsigned int version;    /**< OOM_JOB_VERSION */
    const char *const *argv; /**< NULL-terminated template; argv[0] is looked up in $PATH */
    const char *const *env;  /**< extra "KEY=VALUE" entries (NULL-terminated) or NULL */
    int stdout_fd;           /**< where the child's stdout is copied: 0 = 1, -1 = dropped */
    int stderr_fd;           /**< where the child's stderr is copied: 0 = 2, -1 = dropped */
} oom_job;

#define OOM_JOB_VERSION 1
#define OOM_JOB_INIT                                                                               \
    {                                                                                              \
        .version = OOM_JOB_VERSION                                                                 \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_job_init(oom_job *s, unsigned int version);

/** What happened to a supervised job, reported as it happens. */
typedef enum oom_job_event_kind {
    OOM_EVENT_LAUNCH = 0,  /**< a launch started (pid known) */
    OOM_EVENT_OOM = 1,     /**< a launch died of out-of-memory */
    OOM_EVENT_RESTART = 2, /**< run: relaunching smaller (batch/grad_accum are the new values) */
    OOM_EVENT_EXIT = 3,    /**< a launch ended (exit_code, peak_bytes) */
    OOM_EVENT_SIGNAL = 4,  /**< a signal was forwarded to the job's process group (signal) */
    OOM_EVENT_KILL = 5,    /**< the job outlived its grace period or timeout: SIGKILL sent */
    /** The job's leader stopped (signal: SIGTSTP, SIGTTIN, SIGTTOU, SIGSTOP). After a terminal
     *  stop (SIGTSTP, or SIGTTIN/SIGTTOU: the job wants a terminal it does not hold) the job
     *  stays stopped until the callback returns, then is continued (with the terminal when the
     *  caller holds it, see oom_run_options.foreground): a caller doing job control stops
     *  itself in the callback (by_job: its whole process group, as the terminal would have;
     *  else itself) and returns once continued. A job stopped by SIGSTOP is left to whoever
     *  stopped it. */
    OOM_EVENT_STOP = 6,
    OOM_EVENT_CONTINUE = 7, /**< the job's leader was continued (SIGCONT) */
} oom_job_event_kind;

typedef struct oom_job_event {
    unsigned int version; /**< OOM_JOB_EVENT_VERSION */
    oom_job_event_kind kind;
    double time;         /**< Unix time, seconds */
    long pid;            /**< the launch's pid (= its process group id) */
    int attempt;         /**< 1, 2, ... (probe: the trial number) */
    int batch;           /**< micro-batch of the launch (RESTART: the new one) */
    int grad_accum;      /**< accumulation of the launch (RESTART: the new one) */
    int previous_batch;  /**< RESTART: the batch that ran out of memory; else 0 */
    int previous_accum;  /**< RESTART: its accumulation; else 0 */
    uint64_t peak_bytes; /**< peak seen so far in this launch, OOM_UNKNOWN when not measured */
    int exit_code;       /**< EXIT/OOM: 0..255, 128+N for signal N, 127/126 exec failures */
    long step;           /**< last "step N" the job printed, -1 when none */
    int signal;          /**< SIGNAL/KILL: the signal sent; STOP: the one that stopped it */
    int by_job;          /**< STOP: 1 when the job was stopped (by its terminal or another
                              process), 0 when the caller's relayed SIGTSTP stopped it */
    double duration_s;   /**< EXIT/OOM: how long the launch ran */
    const char *rank;    /**< OOM: the failed rank(s) as the job reported them ("1", "0,3" from
                              torchrun's "[rankN]:" prefix or an OOMLESS_RECOVERY line), or NULL */
    const char *reason;  /**< OOM: the line that reported the out-of-memory error; RESTART: how
                              the new batch was chosen ("inexact accumulation: ..." when the
                              effective batch changes); or NULL */
} oom_job_event;

#define OOM_JOB_EVENT_VERSION 1
#define OOM_JOB_EVENT_INIT                                                                         \
    {                                                                                              \
        .version = OOM_JOB_EVENT_VERSION                                                           \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_job_event_init(oom_job_event *s, unsigned int version);

typedef void (*oom_job_event_fn)(const oom_job_event *event, void *user);

/**
 * Signals a caller passes on to a supervised job without ending the supervision. The caller's
 * handler of each signal counts it here (that handler is the counter's only writer); when the
 * running launch sees a count grown, it sends the signal to the job's process group, once
 * (signals that came together are merged, as the kernel merges them) and reports
 * OOM_EVENT_SIGNAL. Counts that grow while no launch runs (between relaunches) are not passed
 * on. SIGTSTP stops the job and then reports OOM_EVENT_STOP (by_job 0); SIGCONT continues it
 * (giving it the terminal when the caller holds it and `foreground` is set).
 */
typedef struct oom_job_relay {
    unsigned int version;       /**< OOM_JOB_RELAY_VERSION */
    volatile sig_atomic_t usr1; /**< SIGUSR1 (SLURM --signal=USR1@T, Lightning's requeue) */
    volatile sig_atomic_t usr2; /**< SIGUSR2 */
    volatile sig_atomic_t tstp; /**< SIGTSTP */
    volatile sig_atomic_t cont; /**< SIGCONT */
    /** version 2: the stop signals (those it sets `stop` for) the caller's handler counted; a
     *  second one during a launch's kill grace kills its group at once. Since: 1.1.0 */
    volatile sig_atomic_t stops;
} oom_job_relay;

#define OOM_JOB_RELAY_VERSION 2
#define OOM_JOB_RELAY_INIT                                                                         \
    {                                                                                              \
        .version = OOM_JOB_RELAY_VERSION                                                           \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_job_relay_init(oom_job_relay *s, unsigned int version);

/** The name of an event kind as the events file writes it ("launch", "oom", ...). */
OOM_EXPORT const char *oom_job_event_name(oom_job_event_kind kind);

/* ---- out-of-memory recognition ------------------------------------------------------------ */

/**
 * OOM message patterns: data/oom-patterns.txt, one case-insensitive substring per line; '#'
 * starts a comment line; blank lines are ignored; leading/trailing blanks are trimmed.
 */
typedef struct oom_patterns oom_patterns;

/** Loads `path`, or the data directory's oom-patterns.txt when NULL. OOM_EIO, OOM_EPARSE (a file
 *  with no pattern). */
OOM_EXPORT int oom_patterns_load(oom_patterns **out, const char *path);
/** Parses patterns from memory (`name` is used in messages). */
OOM_EXPORT int oom_patterns_parse(oom_patterns **out, const char *text, size_t len,
                                  const char *name);
OOM_EXPORT void oom_patterns_free(oom_patterns *patterns);
OOM_EXPORT size_t oom_patterns_count(const oom_patterns *patterns);

/** The first pattern found in text[0..len) (case-insensitive), or NULL. NUL bytes are allowed. */
OOM_EXPORT const char *oom_patterns_find(const oom_patterns *patterns, const char *text,
                                         size_t len);

/**
 * Whether a job died of running out of GPU memory: it failed (exit_code != 0: a non-zero status
 * or a signal such as SIGABRT) and the last error in its output `text` is an OOM. The text is
 * read line by line (a line longer than 4 KiB in overlapping windows): a line holding a pattern
 * is an OOM; a Python exception line ("ValueError: ..."), "terminate called after throwing" or
 * "Fatal Python error:" at the start of a line is another error; a Python traceback's frame
 * lines are skipped, and a traceback that ends in ChildFailedError or CalledProcessError (a
 * child's failure reported) leaves the child's error standing. So an OOM the job handled,
 * followed by a different fatal error, is not an OOM death. A job that printed an OOM message
 * but exited 0 recovered by itself; a SIGKILL without a message (the kernel's host-RAM OOM
 * killer) is not a GPU OOM. `text` is read as a job's stderr. run and probe apply the same
 * reading to a launch's whole output, except that on its stdout, which also carries data
 * (generated text, samples), a pattern counts only on a line shaped as an error report: an
 * exception or fatal line and the message after it, a traceback's exception line, a log record
 * at an error level (ERROR, CRITICAL, FATAL, NCCL WARN). Returns 1 or 0.
 */
OOM_EXPORT int oom_is_oom_exit(const oom_patterns *patterns, int exit_code, const char *text,
                               size_t len);

/* ---- the batch-size search (pure: no process is launched) --------------------------------- */

/** One trial: a launch at one batch size. */
typedef struct oom_probe_trial {
    unsigned int version; /**< OOM_PROBE_TRIAL_VERSION */
    int batch;
    uint64_t peak_bytes; /**< largest per-GPU sum over the job's processes; OOM_UNKNOWN if not
                              measured (no NVML, or the job ended before the first sample) */
    int exit_code;       /**< 0..255, 128+N for signal N */
    int oom;             /**< 1 when it died of out-of-memory */
    int timed_out;       /**< 1 when --trial-timeout stopped it */
    double duration_s;
} oom_probe_trial;

#define OOM_PROBE_TRIAL_VERSION 1
#define OOM_PROBE_TRIAL_INIT                                                                       \
    {                                                                                              \
        .version = OOM_PROBE_TRIAL_VERSION                                                         \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_probe_trial_init(oom_probe_trial *s, unsigned int version);

/** peak(batch) = fixed + per_sample * batch + per_sample2 * batch^2 */
typedef struct oom_probe_fit {
    unsigned int version; /**< OOM_PROBE_FIT_VERSION */
    int valid;            /**< 0: fewer than two measured successful trials */
    int quadratic;        /**< 1 when per_sample2 was fitted (growth is not linear) */
    double fixed_bytes, per_sample_bytes, per_sample2_bytes;
} oom_probe_fit;

#define OOM_PROBE_FIT_VERSION 1
#define OOM_PROBE_FIT_INIT                                                                         \
    {                                                                                              \
        .version = OOM_PROBE_FIT_VERSION                                                           \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_probe_fit_init(oom_probe_fit *s, unsigned int version);

/* The next two return a value, not an error code, and take a fit that is often held inside another
 * struct: they read only the fields every version of oom_probe_fit has, and check no version. */
/** The fitted peak at `batch` (fit must be valid). */
OOM_EXPORT double oom_probe_fit_peak(const oom_probe_fit *fit, int batch);
/** The largest batch in [1, limit] whose fitted peak is <= usable_bytes, 0 when none. */
OOM_EXPORT int oom_probe_fit_max_batch(const oom_probe_fit *fit, uint64_t usable_bytes, int limit);

typedef struct oom_probe_search {
    unsigned int version;     /**< OOM_PROBE_SEARCH_VERSION */
    uint64_t usable_bytes;    /**< a batch fits when its peak is <= this (target - margin) */
    int start_batch;          /**< first trial; 0: from `prediction` when valid, else 1 */
    int max_trials;           /**< launches at most; 0: 8 */
    int max_batch;            /**< no trial above this; 0: 1048576 */
    double tolerance;         /**< relative error of a prediction still "on"; 0: 0.01 */
    oom_probe_fit prediction; /**< the estimator's line, used for the first trial when valid */
} oom_probe_search;

#define OOM_PROBE_SEARCH_VERSION 1
#define OOM_PROBE_SEARCH_INIT                                                                      \
    {                                                                                              \
        .version = OOM_PROBE_SEARCH_VERSION                                                        \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_probe_search_init(oom_probe_search *s, unsigned int version);

typedef struct oom_probe_step {
    unsigned int version;  /**< OOM_PROBE_STEP_VERSION */
    int done;              /**< 1: stop searching */
    int next_batch;        /**< the batch to try next when !done */
    int recommended_batch; /**< largest batch known to fit under the budget; 0 when none */
    int max_batch;         /**< largest batch that ran to completion; 0 when none */
    oom_probe_fit fit;     /**< the line (or curve) through the measured successful trials */
} oom_probe_step;

#define OOM_PROBE_STEP_VERSION 1
#define OOM_PROBE_STEP_INIT                                                                        \
    {                                                                                              \
        .version = OOM_PROBE_STEP_VERSION                                                          \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_probe_step_init(oom_probe_step *s, unsigned int version);

/**
 * The search: given the trials so far (in launch order), what to try next. Successful trials
 * with measured peaks are fitted (a line through the two largest; a quadratic through the three
 * largest once a line mispredicts by more than `tolerance`); the next trial is the largest batch
 * the fit allows under the budget, kept strictly between the largest batch known to fit and the
 * smallest known not to (a failure, or a peak over the budget); when the fit is contradicted by
 * a failure it bisects. It stops when those two are adjacent, when the peaks are shown exact (a
 * point more than the curve needs lies on it to within the bytes' rounding) and the next batch
 * would not fit, when 1 does not fit, or after max_trials. Without measured peaks it doubles,
 * then bisects, and stops within one of the limit. Peaks that vary from launch to launch (a
 * larger batch measured less by up to twice `tolerance`, a fit with negative fixed memory or
 * curvature, a fourth point off the curve) are fitted all together by weighted least squares,
 * jumps are bounded by the fit's uncertainty, and an allowance is kept under the budget
 * (`tolerance`, or twice the measured scatter when larger): a batch then fits only when its peak
 * is at most usable x (1 - allowance). Stepped peaks (a batch more than twice `tolerance` above
 * a larger one, as the caching allocator's rounding makes them) are not followed: it bisects
 * between the largest batch under the budget and the smallest over it until they are adjacent
 * or max_trials is reached, and `fit` is then the line through zero and the most memory per
 * sample measured. The recommended batch is always the largest whose peak and every smaller
 * tried batch's stayed under the budget (less the allowance): a batch over it is never
 * recommended, nor one above it that happened to measure less. A linear job with exact peaks
 * takes 3 launches. OOM_EINVAL for a malformed trial list.
 */
OOM_EXPORT int oom_probe_search_step(oom_probe_step *out, const oom_probe_search *search,
                                     const oom_probe_trial *const *trials, size_t count);

/* ---- probe ---------------------------------------------------------------------------------- */

#define OOM_DEFAULT_SAMPLE_INTERVAL 0.05   /**< seconds between NVML samples */
#define OOM_DEFAULT_KILL_GRACE      10.0   /**< seconds between SIGTERM and SIGKILL */
#define OOM_MAX_KILL_GRACE          3600.0 /**< longest kill grace, else OOM_EINVAL. Since: 1.1.0 */
#define OOM_DEFAULT_SYNC_WAIT       300.0  /**< run: seconds a node waits for the other nodes */
#define OOM_MAX_SYNC_WAIT           86400.0 /**< longest sync wait, else OOM_EINVAL. Since: 1.1.0 */

typedef struct oom_probe_options {
    unsigned int version; /**< OOM_PROBE_OPTIONS_VERSION */
    oom_probe_search search;
    int grad_accum;               /**< {accum} for every trial; 0: 1 */
    int seq;                      /**< {seq} for every trial (--seq-max); 0: not set */
    double trial_timeout_s;       /**< 0: no limit */
    double sample_interval_s;     /**< 0: OOM_DEFAULT_SAMPLE_INTERVAL */
    double kill_grace_s;          /**< 0: OOM_DEFAULT_KILL_GRACE */
    int no_gpu;                   /**< 1: do not open NVML (exit status only) */
    const oom_patterns *patterns; /**< NULL: the data directory's */
    oom_job_event_fn on_event;    /**< may be NULL */
    void *user;
    /** When non-NULL and it becomes non-zero (a signal number, set by the caller's handler),
     *  the signal is forwarded to the running trial and the probe stops: OOM_EINTERRUPTED. */
    const volatile sig_atomic_t *stop;
    const oom_job_relay *relay; /**< signals passed on without stopping; NULL: none */
    /** 1: terminal job control. When the caller's process group is the foreground group of
     *  its controlling terminal, the job gets the terminal while it runs (it can read it:
     *  input(), breakpoint(), getpass; Ctrl-C and Ctrl-Z reach it) and the caller takes it
     *  back when the job stops or ends; a job the terminal interrupted (SIGINT, SIGQUIT) stops
     *  the probe like a stop signal. 0: the job never gets the terminal. Either way a job
     *  stopped waiting for terminal input it cannot get is ended, and the launch fails
     *  (OOM_EJOB, "stopped waiting for terminal input"). */
    int foreground;
    /* version 2 */
    /** The budget's safety margin (oom_budget.safety_margin_bytes). Memory other processes
     *  take while a trial runs lowers the budget only as far as the GPU's room falls under it:
     *  usable becomes the smaller of search.usable_bytes and total - the driver's reserve -
     *  others - margin, so a budget smaller than the card (--vram 24 on an 80 GiB card) stays
     *  while others fit beside it. Version 1 takes every byte others add off the budget.
     *  Since: 1.1.0 */
    uint64_t safety_margin_bytes;
} oom_probe_options;

#define OOM_PROBE_OPTIONS_VERSION 2
#define OOM_PROBE_OPTIONS_INIT                                                                     \
    {                                                                                              \
        .version = OOM_PROBE_OPTIONS_VERSION                                                       \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_probe_options_init(oom_probe_options *s, unsigned int version);

typedef struct oom_probe_result {
    unsigned int version; /**< OOM_PROBE_RESULT_VERSION */
    size_t trial_count;
    oom_probe_trial **trials; /**< in launch order; owned */
    oom_probe_fit fit;
    int recommended_batch; /**< 0 when nothing fits */
    int max_batch;         /**< largest batch that ran; 0 when none */
    int launches;
    int peaks_measured; /**< 0 when NVML was not available: peaks are unknown */
    double sample_interval_s;
    uint64_t usable_bytes;
    int seq;           /**< {seq} (oom_probe_options.seq); 0 when not set (the tool then reports the
                            sequence length its estimator used) */
    char gpu_name[96]; /**< the first visible GPU's name, "" without NVML (bounded by NVML's
                            NVML_DEVICE_NAME_V2_BUFFER_SIZE, 96) */
    char *nvml_error;  /**< why peaks are unknown, NULL when measured; owned */
    int stop_signal;   /**< the signal that stopped the probe, 0 */
    int has_prediction;          /**< 1 when search.prediction was valid */
    double predicted_peak_bytes; /**< prediction at recommended_batch */
    double measured_peak_bytes;  /**< measured (or fitted) peak at recommended_batch */
    double prediction_error;     /**< (predicted - measured) / measured */
} oom_probe_result;

#define OOM_PROBE_RESULT_VERSION 1
#define OOM_PROBE_RESULT_INIT                                                                      \
    {                                                                                              \
        .version = OOM_PROBE_RESULT_VERSION                                                        \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_probe_result_init(oom_probe_result *s, unsigned int version);

/**
 * Runs the search, launching the job once per trial. Returns OOM_OK with a recommendation,
 * OOM_ENOFIT when batch 1 does not fit, OOM_EJOB when a trial failed other than by OOM (exit
 * status, timeout, exec failure: the message says which), OOM_EINTERRUPTED when `stop` fired.
 * In all four cases *out holds the trials so far (free with oom_probe_result_free).
 * OOM_ENODEV is never returned: without NVML the probe goes on by exit status alone.
 */
OOM_EXPORT int oom_probe(oom_probe_result **out, const oom_job *job,
                         const oom_probe_options *options);
OOM_EXPORT void oom_probe_result_free(oom_probe_result *result);

/**
 * {"recommended_batch", "max_batch", "launches", "sample_interval_s", "usable_bytes",
 *  "peaks_measured", "gpu", "seq", "trials": [{"batch", "peak_bytes", "exit", "oom",
 *  "timed_out", "duration_s"}...], "fit": {"fixed_bytes", "per_sample_bytes"
 *  [, "per_sample2_bytes"]} or null, "peaks_monotone" (null with fewer than two peaks),
 *  "non_monotone": [{"batch", "peak_bytes", "larger_batch", "larger_peak_bytes"}...],
 *  "peaks" ("regular", "noisy", "stepped"; null with no measured peak; since 1.1.0),
 *  "allowance" (the fraction of the budget the search kept free; since 1.1.0), "bisected",
 *  "prediction": {...} or null}. Unknown values are null.
 */
OOM_EXPORT int oom_probe_to_json(char **out, const oom_probe_result *result);

/**
 * Irregular peaks: `*out` (owned, free with oom_free()) says which measured trials peaked above a
 * larger batch ("not monotone in the batch: batch 28 (24.94 GiB) above batch 29 (23.05 GiB)"), or
 * that no sensible curve (fixed >= 0, curvature >= 0) fits them, and what the search did: it
 * bisected (stepped peaks), or it fitted all the trials and kept an allowance free (noisy
 * peaks: "the peaks vary from launch to launch: ..."); NULL when the peaks were regular. The
 * JSON carries the same as "peaks_monotone", "non_monotone", "peaks", "allowance" and
 * "bisected". Since: 1.1.0.
 */
OOM_EXPORT int oom_probe_describe_peaks(char **out, const oom_probe_result *result);

/* ---- run --------------------------------------------------------------------------------------
 */

typedef struct oom_run_options {
    unsigned int version;     /**< OOM_RUN_OPTIONS_VERSION */
    int batch;                /**< micro-batch of the first launch (required, >= 1) */
    int grad_accum;           /**< 0: target_effective / batch, or 1 */
    long target_effective;    /**< batch x accum kept on every relaunch; 0: batch x grad_accum */
    int seq;                  /**< {seq}; 0: not set */
    int max_restarts;         /**< relaunches after OOM at most; -1: 0; 0: 5 */
    int min_batch;            /**< never below; 0: 1 */
    const char *events_path;  /**< JSONL events appended here; NULL: none */
    double sample_interval_s; /**< 0: OOM_DEFAULT_SAMPLE_INTERVAL */
    double kill_grace_s;      /**< 0: OOM_DEFAULT_KILL_GRACE */
    int no_gpu;               /**< 1: do not open NVML (peaks unknown) */
    const oom_patterns *patterns;
    oom_job_event_fn on_event;
    void *user;
    const volatile sig_atomic_t
        *stop;                  /**< as in oom_probe_options: forwarded, then the job's status */
    const oom_job_relay *relay; /**< as in oom_probe_options */
    int foreground;             /**< as in oom_probe_options */
    /* version 2 */
    uint64_t usable_bytes; /**< the run's usable budget (oom_target's budget.usable_bytes: target
                              VRAM - margin, less what others held); a restart plans for at most
                              this much (and at most what PyTorch's "N allowed" and "total
                              capacity" say); 0: not known. Since: 1.1.0 */
    /* version 3 */
    const char *sync_dir; /**< a folder the supervisors of one job's nodes share (a shared
                               filesystem): they relaunch together at the batch the node that ran
                               out of memory chose (docs/probe-run.md); NULL: none. Since: 1.1.0 */
    const char *sync_id;  /**< the job's id there; NULL: torchrun's --rdzv-id, $SLURM_JOB_ID... */
    double sync_wait_s;   /**< the longest wait for the other nodes; 0: OOM_DEFAULT_SYNC_WAIT */
} oom_run_options;

#define OOM_RUN_OPTIONS_VERSION 3
#define OOM_RUN_OPTIONS_INIT                                                                       \
    {                                                                                              \
        .version = OOM_RUN_OPTIONS_VERSION                                                         \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_run_options_init(oom_run_options *s, unsigned int version);

typedef struct oom_run_result {
    unsigned int version;  /**< OOM_RUN_RESULT_VERSION */
    int exit_code;         /**< the last launch's status: 0..255, 128+N for signal N */
    int attempts;          /**< launches */
    int restarts;          /**< relaunches after OOM */
    int batch, grad_accum; /**< of the last launch */
    long effective;
    uint64_t peak_bytes; /**< the largest peak over all launches, OOM_UNKNOWN if unmeasured */
    int oom;             /**< 1 when the last launch died of OOM */
    int stop_signal;     /**< the signal forwarded from `stop`, 0 */
} oom_run_result;

#define OOM_RUN_RESULT_VERSION 1
#define OOM_RUN_RESULT_INIT                                                                        \
    {                                                                                              \
        .version = OOM_RUN_RESULT_VERSION                                                          \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_run_result_init(oom_run_result *s, unsigned int version);

/**
 * Runs the job; when a launch dies of OOM, relaunches it with the next smaller micro-batch that
 * divides the effective batch (and the matching larger accumulation). The batch is never
 * raised. Returns OOM_OK when the job ended without OOM (whatever its status: see exit_code),
 * OOM_ENOFIT when it ran out of memory at the floor, had no smaller divisor, or used up
 * max_restarts, OOM_EINTERRUPTED when `stop` fired, OOM_EJOB when it could not be started
 * (exit_code 127/126) or another node left the job (sync_dir), OOM_EIO when the events file
 * cannot be written, OOM_EINVAL for bad options. `out` is filled in every case but OOM_EINVAL.
 */
OOM_EXPORT int oom_run(oom_run_result *out, const oom_job *job, const oom_run_options *options);

/** {"exit_code", "attempts", "restarts", "batch", "grad_accum", "effective_batch",
 *   "peak_bytes", "oom", "signal"} */
OOM_EXPORT int oom_run_to_json(char **out, const oom_run_result *result);

/* ---- calibration records --------------------------------------------------------------------- */

/**
 * A measured line saved by probe: JSONL, one object per line, appended to
 * $XDG_CACHE_HOME/oomless/calibration.jsonl (~/.cache/... when unset). Keyed by GPU name +
 * command template (the argv array, placeholders unexpanded) + workload (free text, e.g.
 * "seq=2048"); the last matching line wins.
 */
typedef struct oom_calibration {
    unsigned int version; /**< OOM_CALIBRATION_VERSION */
    char *gpu;            /**< NVML device name */
    char *command;        /**< the argv template as a JSON array */
    char *workload;       /**< "" when none */
    oom_probe_fit fit;
    int recommended_batch, max_batch;
    uint64_t usable_bytes;
    double time; /**< Unix time it was measured */
    /** 1: traced by `oomless trace --calibrate` on the meta device: the line is in allocated
     *  bytes (torch.cuda.max_memory_allocated), for any GPU (gpu is ""); `plan` adds the
     *  allocator's reserve and the CUDA context of the GPU it plans for. 0: measured by probe
     *  on `gpu`, device bytes. A measured record for the GPU wins over a traced one. */
    int traced;
    /* version 2 (1.1.0) */
    /** More members of the record, as the text of one JSON object ("{\"seq\":2048}"): written
     *  after the ones above by oom_calibration_save (NULL: none), and filled by
     *  oom_calibration_lookup with the line's members it does not know (NULL: none). */
    char *extra;
} oom_calibration;

#define OOM_CALIBRATION_VERSION 2
#define OOM_CALIBRATION_INIT                                                                       \
    {                                                                                              \
        .version = OOM_CALIBRATION_VERSION                                                         \
    }
/** Zero-fills `s` and sets its version; OOM_EINVAL for a version this library does not know. */
OOM_EXPORT int oom_calibration_init(oom_calibration *s, unsigned int version);

/**
 * The default file path (allocated; free with oom_free): $XDG_CACHE_HOME/oomless/calibration.jsonl
 * when $XDG_CACHE_HOME is an absolute path (a relative one is ignored, with a notice, as the XDG
 * Base Directory spec says), else $HOME/.cache/oomless/calibration.jsonl. OOM_ENOTFOUND when
 * neither is set.
 */
OOM_EXPORT int oom_calibration_default_path(char **out);
/** The key form of an argv template: a JSON array string (allocated). */
OOM_EXPORT int oom_calibration_command_key(char **out, const char *const *argv);
/**
 * Appends a record; `path` NULL = the default (its folders are made with mode 0700, but a $HOME
 * that does not exist is not created). All or nothing: one line written whole under flock() and
 * fsync'ed; when the disk fills part way the file is cut back to its old size. A file that does
 * not end in a newline gets one first. Only a regular file: a symbolic link or a FIFO is refused.
 * OOM_EIO names the file and the reason ("No space left on device"); OOM_EINVAL for a line that
 * lookup would skip as damaged (not finite, negative fixed memory or curvature, a peak below zero
 * at some batch, more than 1 PiB); OOM_EPARSE when `extra`
 * (version 2) is not a JSON object. The one writer of the store: `probe`, `run`, the Python
 * package's recovery and `trace --calibrate` all append through it.
 */
OOM_EXPORT int oom_calibration_save(const char *path, const oom_calibration *record);
/**
 * The newest record for (gpu, command, workload) in `path` (NULL = the default). OOM_ENOTFOUND
 * when there is none (or no file); OOM_EIO when the file is not a regular file (a FIFO). Lines
 * are read by their length: a line that is not one JSON object (cut short, glued, NUL bytes),
 * or whose record holds a value no probe writes (not a number, NaN, infinite, negative, a batch
 * that is not whole, more than 1 PiB, a line whose peak goes below zero), is skipped, and a
 * notice says how many and names the first line and what was wrong. Free with
 * oom_calibration_free.
 */
OOM_EXPORT int oom_calibration_lookup(oom_calibration **out, const char *path, const char *gpu,
                                      const char *command, const char *workload);
OOM_EXPORT void oom_calibration_free(oom_calibration *record);

/**
 * The largest batch `record` puts under `usable_bytes` (0 in `*out`: none), as `oomless run`
 * starts from it. A record probe or run measured: its line or curve, raised to the batch the
 * probe recommended when `usable_bytes` is at least the budget it was measured under (a probe
 * whose peaks were irregular saves a bound above its trials, which can put fewer under the
 * budget than ran under it), and never above the largest batch that ran. A record `oomless
 * trace --calibrate` made (allocated bytes): first made device bytes for a GPU of compute
 * capability cc_major.cc_minor (its CUDA context and the allocator's reserve, as `plan` does),
 * then for any batch; cc is unused for a measured record. Since: 1.1.0.
 */
OOM_EXPORT int oom_calibration_max_batch(int *out, const oom_calibration *record,
                                         uint64_t usable_bytes, int cc_major, int cc_minor);

/**
 * What `oomless estimate [--batch N] -- CMD...` reports: the device peak that the calibration
 * record of `command` (a key from oom_calibration_command_key) and `workload` on the target GPU
 * predicts at `batch`, against the target's budget. The GPU and budget are resolved from
 * `request` as for every planning command (the detected GPU by default; records are keyed by the
 * NVML device name). `path` NULL = the default file. The document:
 *   {"calibration": {"gpu", "command", "workload", "fixed_bytes", "per_sample_bytes",
 *                    "per_sample2_bytes", "measured_max_batch", "time"},
 *    "batch", "memory": {"device_peak"},
 *    "budget": {"target_bytes", "safety_margin_bytes", "usable_bytes", "fits", "headroom_bytes"}}
 * `fits` (may be NULL) receives whether the peak is within the usable memory. A batch above the
 * largest the probe ran is extrapolated and flagged ("extrapolated": true). OOM_ENOTFOUND when
 * no record matches (the message names the GPU).
 */
OOM_EXPORT int oom_calibration_estimate_json(char **out, int *fits, const char *path,
                                             const char *command, const char *workload, long batch,
                                             const oom_target_request *request);

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

/** Flag for oom_apply_set(): skip files that lack the key instead of refusing them (but see
 * oom_apply_run() for the effective batch's keys). */
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
 * The backups' suffix (copied): FILE + suffix holds the old bytes after a write. NULL writes no
 * backup; "" (the backup would be the file itself) and a suffix with '/' are OOM_EINVAL.
 */
OOM_EXPORT int oom_apply_set_backup_suffix(oom_apply *apply, const char *suffix);

/**
 * The YAML document to edit in files that hold several (separated by ---): 1 is the first.
 * With 0 (the default) a file of several documents is refused (OOM_EREFUSED); with N, a file of
 * fewer than N documents is. A JSON file is one document.
 */
OOM_EXPORT int oom_apply_set_document(oom_apply *apply, size_t document);

/**
 * How long a run waits for the lock another run holds on a file it edits (default 10 s; 0: not
 * at all), after which that file is refused (OOM_EREFUSED). OOM_EINVAL outside 0..86400.
 */
OOM_EXPORT int oom_apply_set_lock_timeout(oom_apply *apply, double seconds);

/**
 * A function called at each step of writing a file, with the step's name and the file:
 * "locked" (the file is locked, not yet read), "prepared" (all files edited in memory, nothing
 * written yet), "temp-created", "temp-written", "temp-synced" (the replacement, complete),
 * "backup-written" (the new backup, under a temporary name), "before-rename", "renamed" (the
 * file is new), "backup-renamed" (the backup is in place), "dir-synced". For progress reports,
 * and for the tests that kill or stop the process at each step.
 */
typedef void (*oom_apply_step_fn)(const char *step, const char *file, void *user);
OOM_EXPORT void oom_apply_set_step_hook(oom_apply *apply, oom_apply_step_fn fn, void *user);

/** Flags for oom_apply_run(). */
#define OOM_APPLY_DRY_RUN         1u  /**< write nothing; return the unified diff */
#define OOM_APPLY_CREATE          2u  /**< add missing keys (block or flow maps, JSON objects) */
#define OOM_APPLY_FOLLOW_SYMLINKS 4u  /**< edit files reached through links leading outside "." */
#define OOM_APPLY_FORCE_TYPE      8u  /**< allow a value of another type (8 over "auto") */
#define OOM_APPLY_PARTIAL         16u /**< write the batch keys a file has when it lacks others */
#define OOM_APPLY_FORCE           32u /**< replace a write-protected file (since 1.1.0) */
/** write the plan's accumulation where it changes the effective batch a file states (since
 * 1.1.0); without it the file's effective batch is kept (below) */
#define OOM_APPLY_ALLOW_BATCH_CHANGE 64u
/** write the rest where a file lacks a key the plan's memory needs (since 1.1.0) */
#define OOM_APPLY_ALLOW_SKIPPED 128u

/**
 * Makes the assignments in each of `files` (YAML, or JSON when the name ends in .json or the
 * text starts with '{' or '['). Every file is edited in memory first; when any is refused none
 * is written. Unless OOM_APPLY_DRY_RUN, each file is locked (flock) from before it is read until
 * it is replaced, so that runs on one file follow each other; a second name of a file already
 * named is OOM_EINVAL. Then, per changed file: a temporary file beside the file (mode 0600, then
 * the file's owner, group, extended attributes such as ACLs, and mode; fsync) and the new backup
 * under a temporary name; once all are written, a check that no file changed since it
 * was read (OOM_EREFUSED: another program wrote it), then per file: rename over the file, rename
 * of the backup over the old backup, fsync of the directory. A symbolic link is kept: its target
 * is edited. Unchanged files are not touched. Refused (OOM_EREFUSED) before anything is
 * written: a file with several hard links (a rename would split them), a write-protected file
 * (no write permission in its mode, or none for the caller; unless OOM_APPLY_FORCE, and then
 * the new file keeps the mode), a file whose owner, group or extended attributes the
 * replacement cannot be given (not permitted), a file still locked by another run after the
 * lock timeout.
 * `diff` (may be NULL) receives the unified diff of all changes (free with oom_free()), with or
 * without OOM_APPLY_DRY_RUN; "" when nothing changes. It is computed only when asked for. Time
 * and memory grow linearly with the files' sizes.
 * The effective batch is guarded: when the assignments set plan fields that make it up
 * (batch_size, grad_accum, global_batch) and a file has some of their keys but lacks one it
 * needs (a preset's accumulation key, say), writing the others would change it silently: the run
 * is refused (OOM_EREFUSED, naming the missing key and the change) unless OOM_APPLY_CREATE adds
 * the key or OOM_APPLY_PARTIAL writes the rest anyway (the report's "notes" say how the
 * effective batch changes). A file that states an effective batch (its micro-batch and
 * accumulation, or global batch) other than the plan's keeps it: the accumulation written is
 * the file's effective batch over the plan's micro-batch x GPUs, refused (OOM_EREFUSED) where
 * that is no whole number, unless OOM_APPLY_ALLOW_BATCH_CHANGE (a note says the change either
 * way). A file without a key the plan's memory needs (its checkpointing, offload or sharding,
 * where the framework's default for the missing key is not the plan's) is refused unless
 * OOM_APPLY_CREATE or OOM_APPLY_ALLOW_SKIPPED (then noted). Comments beside a changed value that
 * still name its old value or the old effective batch are reported in "notes" (docs/apply.md).
 * Errors: OOM_EREFUSED, OOM_EPARSE, OOM_EIO (the files and their old backups are unchanged: a
 * write failure removes every temporary file before any rename), OOM_ENOTFOUND for an explicit
 * field the plan lacks, OOM_EINVAL when a spec needs a plan and none is loaded.
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
 * "create", "unchanged", "skipped"), "old", "new", "reason" (skipped only)}], "notes": [{"line"
 * (1-based; absent when the note is about the whole file), "message"}]}]}: the notes are stale
 * comments and, with OOM_APPLY_PARTIAL, the effective batch a partial write leaves.
 * Free with oom_free(). OOM_EINVAL before any run.
 */
OOM_EXPORT int oom_apply_report(const oom_apply *apply, char **json);

#ifdef __cplusplus
}
#endif
#endif /* OOMLESS_H */
