/*
 * abi_sizes.c - every versioned public struct against tests/header/abi.txt: its version and its
 * size on x86_64 (LP64). A struct whose size changed while its OOM_<NAME>_VERSION did not breaks
 * every program and binding built against the old layout: the test fails and says to bump the
 * version (and add the new size to the table). Usage: abi_sizes TABLE
 */
#include <oomless.h>

#include <ctype.h>
#include <stdio.h>
#include <string.h>

struct row {
    const char *name;
    unsigned version;
    size_t size;
};

#define ROW(name, VERSION)                                                                         \
    {                                                                                              \
#name, VERSION, sizeof(name)                                                               \
    }
static const struct row structs[] = {
    ROW(oom_allocator, OOM_ALLOCATOR_VERSION),
    ROW(oom_budget, OOM_BUDGET_VERSION),
    ROW(oom_gpu_profile, OOM_GPU_PROFILE_VERSION),
    ROW(oom_gpu_process, OOM_GPU_PROCESS_VERSION),
    ROW(oom_gpu_info, OOM_GPU_INFO_VERSION),
    ROW(oom_gpu_list, OOM_GPU_LIST_VERSION),
    ROW(oom_target, OOM_TARGET_VERSION),
    ROW(oom_target_request, OOM_TARGET_REQUEST_VERSION),
    ROW(oom_trend, OOM_TREND_VERSION),
    ROW(oom_watch_process, OOM_WATCH_PROCESS_VERSION),
    ROW(oom_watch_gpu, OOM_WATCH_GPU_VERSION),
    ROW(oom_watch_snapshot, OOM_WATCH_SNAPSHOT_VERSION),
    ROW(oom_run_event, OOM_RUN_EVENT_VERSION),
    ROW(oom_knobs, OOM_KNOBS_VERSION),
    ROW(oom_option_value, OOM_OPTION_VALUE_VERSION),
    ROW(oom_option, OOM_OPTION_VERSION),
    ROW(oom_plan_format_info, OOM_PLAN_FORMAT_INFO_VERSION),
    ROW(oom_model_info, OOM_MODEL_INFO_VERSION),
    ROW(oom_preset, OOM_PRESET_VERSION),
    ROW(oom_estimate, OOM_ESTIMATE_VERSION),
    ROW(oom_estimate_report, OOM_ESTIMATE_REPORT_VERSION),
    ROW(oom_measured_line, OOM_MEASURED_LINE_VERSION),
    ROW(oom_plan_request, OOM_PLAN_REQUEST_VERSION),
    ROW(oom_plan_choice, OOM_PLAN_CHOICE_VERSION),
    ROW(oom_plan_result, OOM_PLAN_RESULT_VERSION),
    ROW(oom_job, OOM_JOB_VERSION),
    ROW(oom_job_event, OOM_JOB_EVENT_VERSION),
    ROW(oom_job_relay, OOM_JOB_RELAY_VERSION),
    ROW(oom_probe_trial, OOM_PROBE_TRIAL_VERSION),
    ROW(oom_probe_fit, OOM_PROBE_FIT_VERSION),
    ROW(oom_probe_search, OOM_PROBE_SEARCH_VERSION),
    ROW(oom_probe_step, OOM_PROBE_STEP_VERSION),
    ROW(oom_probe_options, OOM_PROBE_OPTIONS_VERSION),
    ROW(oom_probe_result, OOM_PROBE_RESULT_VERSION),
    ROW(oom_run_options, OOM_RUN_OPTIONS_VERSION),
    ROW(oom_run_result, OOM_RUN_RESULT_VERSION),
    ROW(oom_calibration, OOM_CALIBRATION_VERSION),
};
#define N_STRUCTS (sizeof(structs) / sizeof(structs[0]))

int main(int argc, char **argv)
{
    char line[256], name[128];
    unsigned version;
    size_t size, i, lineno = 0;
    int failed = 0, seen[N_STRUCTS] = {0};
    FILE *f;

    if (sizeof(void *) != 8 || sizeof(long) != 8) {
        printf("abi_sizes: the table is for LP64 (x86_64); skipped\n");
        return 77;
    }
    if (argc != 2 || !(f = fopen(argv[1], "r"))) {
        fprintf(stderr, "usage: abi_sizes TABLE (a readable file)\n");
        return 2;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (sscanf(line, "%127s %u %zu", name, &version, &size) != 3) {
            fprintf(stderr, "%s:%zu: not 'NAME VERSION SIZE'\n", argv[1], lineno);
            failed = 1;
            continue;
        }
        for (i = 0; i < N_STRUCTS && strcmp(structs[i].name, name); i++)
            ;
        if (i == N_STRUCTS) {
            fprintf(stderr, "%s:%zu: %s is not a versioned struct of oomless.h\n", argv[1], lineno,
                    name);
            failed = 1;
            continue;
        }
        if (structs[i].version != version)
            continue; /* a row of an older (or newer) version: history */
        seen[i] = 1;
        if (structs[i].size != size) {
            char upper[128];
            size_t k;
            for (k = 0; name[k + 4] && k + 1 < sizeof(upper); k++) /* after "oom_" */
                upper[k] = (char)toupper((unsigned char)name[k + 4]);
            upper[k] = '\0';
            fprintf(stderr,
                    "%s: %zu bytes, but version %u was %zu bytes (%s:%zu): a struct that "
                    "changes size must get a new version: bump OOM_%s_VERSION in oomless.h "
                    "(grow it only at its end) and add a row for the new version to %s\n",
                    name, structs[i].size, version, size, argv[1], lineno, upper, argv[1]);
            failed = 1;
        }
    }
    fclose(f);
    for (i = 0; i < N_STRUCTS; i++)
        if (!seen[i]) {
            fprintf(stderr, "%s version %u (%zu bytes) has no row in %s: add '%s %u %zu'\n",
                    structs[i].name, structs[i].version, structs[i].size, argv[1], structs[i].name,
                    structs[i].version, structs[i].size);
            failed = 1;
        }
    if (!failed)
        printf("abi_sizes: %zu structs match %s\n", N_STRUCTS, argv[1]);
    return failed;
}
