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

/* ======================================================================== GPU discovery */
/* (section: gpu) */

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
