/* version.c - the versions of the public structs: their _init functions, the check every function
 * taking one makes, and their sizes (for bindings that declare the layouts themselves). */
#include "core/core.h"

#include <stddef.h>
#include <string.h>

/* Every versioned public struct: its name, the newest version this library knows, its size. */
#define OOMI_VERSIONED_STRUCTS(X)                                                                  \
    X(oom_allocator, OOM_ALLOCATOR_VERSION)                                                        \
    X(oom_budget, OOM_BUDGET_VERSION)                                                              \
    X(oom_gpu_profile, OOM_GPU_PROFILE_VERSION)                                                    \
    X(oom_gpu_process, OOM_GPU_PROCESS_VERSION)                                                    \
    X(oom_gpu_info, OOM_GPU_INFO_VERSION)                                                          \
    X(oom_gpu_list, OOM_GPU_LIST_VERSION)                                                          \
    X(oom_target, OOM_TARGET_VERSION)                                                              \
    X(oom_target_request, OOM_TARGET_REQUEST_VERSION)                                              \
    X(oom_trend, OOM_TREND_VERSION)                                                                \
    X(oom_watch_process, OOM_WATCH_PROCESS_VERSION)                                                \
    X(oom_watch_gpu, OOM_WATCH_GPU_VERSION)                                                        \
    X(oom_watch_snapshot, OOM_WATCH_SNAPSHOT_VERSION)                                              \
    X(oom_run_event, OOM_RUN_EVENT_VERSION)                                                        \
    X(oom_knobs, OOM_KNOBS_VERSION)                                                                \
    X(oom_option_value, OOM_OPTION_VALUE_VERSION)                                                  \
    X(oom_option, OOM_OPTION_VERSION)                                                              \
    X(oom_plan_format_info, OOM_PLAN_FORMAT_INFO_VERSION)                                          \
    X(oom_model_info, OOM_MODEL_INFO_VERSION)                                                      \
    X(oom_preset, OOM_PRESET_VERSION)                                                              \
    X(oom_estimate, OOM_ESTIMATE_VERSION)                                                          \
    X(oom_estimate_report, OOM_ESTIMATE_REPORT_VERSION)                                            \
    X(oom_measured_line, OOM_MEASURED_LINE_VERSION)                                                \
    X(oom_plan_choice, OOM_PLAN_CHOICE_VERSION)                                                    \
    X(oom_plan_result, OOM_PLAN_RESULT_VERSION)                                                    \
    X(oom_job, OOM_JOB_VERSION)                                                                    \
    X(oom_job_event, OOM_JOB_EVENT_VERSION)                                                        \
    X(oom_job_relay, OOM_JOB_RELAY_VERSION)                                                        \
    X(oom_probe_trial, OOM_PROBE_TRIAL_VERSION)                                                    \
    X(oom_probe_fit, OOM_PROBE_FIT_VERSION)                                                        \
    X(oom_probe_search, OOM_PROBE_SEARCH_VERSION)                                                  \
    X(oom_probe_step, OOM_PROBE_STEP_VERSION)                                                      \
    X(oom_probe_options, OOM_PROBE_OPTIONS_VERSION)                                                \
    X(oom_probe_result, OOM_PROBE_RESULT_VERSION)                                                  \
    X(oom_run_options, OOM_RUN_OPTIONS_VERSION)                                                    \
    X(oom_run_result, OOM_RUN_RESULT_VERSION)                                                      \
    X(oom_calibration, OOM_CALIBRATION_VERSION)

int oomi_check_version(unsigned int version, unsigned int known, const char *name)
{
    if (version >= 1 && version <= known)
        return OOM_OK;
    if (version == 0)
        return oomi_fail(OOM_EINVAL,
                         "%s: version 0 (not initialised: start from its _INIT macro or %s_init())",
                         name, name);
    return oomi_fail(OOM_EINVAL, "%s: version %u is newer than this library knows (%u)", name,
                     version, known);
}

/* A caller built against an older version of a struct passes the smaller struct: its _init
 * zeroes the size of the version asked for (size_of_version), and every function filling or
 * reading it stops at that version's fields (see docs/HACKING.md). */
static int init_struct(void *s, size_t size, unsigned int version, unsigned int known,
                       const char *name)
{
    int rc;
    if (!s)
        return oomi_fail(OOM_EINVAL, "%s_init: the struct is NULL", name);
    rc = oomi_check_version(version, known, name);
    if (rc)
        return rc;
    memset(s, 0, size);
    *(unsigned int *)s = version; /* the first member of every versioned struct */
    return OOM_OK;
}

/* The size of an older version of a struct that has grown (the size of its newest otherwise). */
static size_t size_of_version(const char *name, unsigned int version, size_t newest)
{
    if (!strcmp(name, "oom_run_options") && version == 1)
        return offsetof(oom_run_options, usable_bytes);
    if (!strcmp(name, "oom_run_options") && version == 2)
        return offsetof(oom_run_options, sync_dir);
    if (!strcmp(name, "oom_probe_options") && version == 1)
        return offsetof(oom_probe_options, safety_margin_bytes);
    if (!strcmp(name, "oom_target") && version == 1)
        return offsetof(oom_target, others_bytes);
    if (!strcmp(name, "oom_option") && version == 1)
        return offsetof(oom_option, values);
    if (!strcmp(name, "oom_option_value") && version == 1)
        return offsetof(oom_option_value, versions);
    if (!strcmp(name, "oom_estimate_report") && version == 1)
        return offsetof(oom_estimate_report, confidence_spread);
    if (!strcmp(name, "oom_estimate_report") && version == 2)
        return offsetof(oom_estimate_report, quantizer);
    if (!strcmp(name, "oom_calibration") && version == 1)
        return offsetof(oom_calibration, extra);
    if (!strcmp(name, "oom_plan_choice") && version == 1)
        return offsetof(oom_plan_choice, checkpointing);
    if (!strcmp(name, "oom_plan_result") && version >= 1 && version < OOM_PLAN_RESULT_VERSION) {
        /* version N ends where the first field of version N + 1 starts */
        static const size_t end[] = {offsetof(oom_plan_result, others_bytes),
                                     offsetof(oom_plan_result, fit_confidence),
                                     offsetof(oom_plan_result, kv_full_layers),
                                     offsetof(oom_plan_result, serve_max_num_seqs),
                                     offsetof(oom_plan_result, rollout_sleep_level),
                                     offsetof(oom_plan_result, packing),
                                     offsetof(oom_plan_result, pipeline_parallel)};
        _Static_assert(sizeof(end) / sizeof(end[0]) == OOM_PLAN_RESULT_VERSION - 1,
                       "one end per older version of oom_plan_result");
        return end[version - 1];
    }
    return newest;
}

#define OOMI_DEFINE_INIT(name, known)                                                              \
    int name##_init(name *s, unsigned int version)                                                 \
    {                                                                                              \
        return init_struct(s, size_of_version(#name, version, sizeof(*s)), version, known, #name); \
    }
OOMI_VERSIONED_STRUCTS(OOMI_DEFINE_INIT)

int oom_plan_request_init(oom_plan_request *r, unsigned int version)
{
    static const oom_plan_request defaults = OOM_PLAN_REQUEST_INIT;
    int rc = init_struct(r, sizeof(*r), version, OOM_PLAN_REQUEST_VERSION, "oom_plan_request");
    if (rc)
        return rc;
    *r = defaults;
    r->version = version;
    return OOM_OK;
}

size_t oom_struct_size(const char *name)
{
    static const struct {
        const char *name;
        size_t size;
    } table[] = {
#define OOMI_SIZE_ROW(n, known) {#n, sizeof(n)},
        OOMI_VERSIONED_STRUCTS(OOMI_SIZE_ROW) OOMI_SIZE_ROW(oom_plan_request, 0)
#undef OOMI_SIZE_ROW
    };
    size_t i;
    for (i = 0; name && i < OOMI_ARRAY_LEN(table); i++)
        if (strcmp(table[i].name, name) == 0)
            return table[i].size;
    return 0;
}
