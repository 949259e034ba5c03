/*
 * fuzz_workload.c - workload options from text (oom_workload_set/get, as the CLI, the Python
 * package and YAML workload files set them), then validate, estimate, clone, JSON with a budget.
 * Input: byte 0 picks a preset model; the rest is lines "key=value" (a line without '=' is a
 * key with an empty value).
 * Invariants: a refused option leaves the workload unchanged (its JSON is the same); every
 * option the table lists can be read back; a clone estimates the same; a refusal has a message.
 */
#include "fuzz.h"
#include "oomless.h"

#include <string.h>

static const char *const presets[] = {"llama-3.1-8b", "gpt2",       "bert-base", "t5-base",
                                      "mixtral-8x7b", "gemma-2-2b", "falcon-7b", "qwen2.5-0.5b"};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup_env();
    return 0;
}

static char *snapshot(const oom_workload *w)
{
    char *json = NULL;
    fuzz_check(oom_estimate_to_json(&json, w, NULL) == OOM_OK && json);
    return json;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oom_workload *w = NULL, *c = NULL;
    oom_estimate e1 = OOM_ESTIMATE_INIT, e2 = OOM_ESTIMATE_INIT;
    oom_budget b = {OOM_BUDGET_VERSION, 24 * OOM_GiB, OOM_GiB, 23 * OOM_GiB};
    const oom_option *const *opts;
    char *text, *line, *next, *eq, *before, *after, *json = NULL, *v = NULL;
    size_t n, i, lines = 0;
    int err;

    if (size < 1)
        return 0;
    fuzz_check(oom_workload_create(&w) == OOM_OK);
    fuzz_check(oom_workload_set(w, "model", presets[data[0] % 8]) == OOM_OK);
    text = fuzz_cstring(data + 1, size - 1);
    for (line = text; line && *line && lines < 64; line = next, lines++) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        eq = strchr(line, '=');
        if (eq)
            *eq = '\0';
        before = snapshot(w);
        err = oom_workload_set(w, line, eq ? eq + 1 : "");
        if (err) {
            fuzz_check(err == OOM_EINVAL || err == OOM_ENOTFOUND || err == OOM_EIO ||
                       err == OOM_EPARSE || err == OOM_EUNSUPPORTED);
            fuzz_check(oom_last_message()[0]);
            after = snapshot(w);
            fuzz_check(!strcmp(before, after)); /* unchanged on failure */
            oom_free(after);
        }
        oom_free(before);
    }
    free(text);

    opts = oom_workload_options(&n);
    for (i = 0; i < n; i++) {
        fuzz_check(oom_workload_get(&v, w, opts[i]->name) == OOM_OK && v);
        oom_free(v);
    }
    err = oom_estimate_run(&e1, w);
    fuzz_check(err == OOM_OK || err == OOM_EINVAL || err == OOM_EUNSUPPORTED);
    fuzz_check((oom_workload_validate(w) == OOM_OK) == (err == OOM_OK) || err == OOM_EUNSUPPORTED);
    if (!err) {
        fuzz_check(e1.allocated_peak <= e1.reserved_peak && e1.reserved_peak <= e1.device_peak);
        fuzz_check(oom_workload_clone(&c, w) == OOM_OK);
        fuzz_check(oom_estimate_run(&e2, c) == OOM_OK);
        fuzz_check(e1.allocated_peak == e2.allocated_peak && e1.device_peak == e2.device_peak &&
                   e1.reserved_peak == e2.reserved_peak && e1.peak_phase == e2.peak_phase &&
                   e1.params_trainable == e2.params_trainable);
        oom_workload_free(c);
        fuzz_check(oom_estimate_to_json_budget(&json, w, &e1, &b) == OOM_OK && json);
        oom_free(json);
    }
    oom_workload_free(w);
    return 0;
}
