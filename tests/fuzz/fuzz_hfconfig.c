/*
 * fuzz_hfconfig.c - loading a Hugging Face config.json (oom_workload_set "model" with a path),
 * then estimating it as it comes and as LoRA, QLoRA and inference, with the JSON documents.
 * Input: the config.json bytes.
 * Invariants: a refusal is EPARSE/EUNSUPPORTED/EINVAL/EIO with a message and leaves the workload
 * without a model; an estimate's breakdown adds up to allocated_peak <= reserved_peak <=
 * device_peak; the JSON is one object; no leak, no undefined behaviour (huge sizes saturate).
 */
#include "fuzz.h"
#include "oomless.h"

#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup_env();
    return 0;
}

/* trained: 'f' full (every parameter), 'l' LoRA (the adapters), 'i' inference (none) */
static void check_estimate(oom_workload *w, char trained)
{
    oom_estimate e = OOM_ESTIMATE_INIT;
    char *json = NULL;
    uint64_t sum;
    int err = oom_estimate_run(&e, w);

    fuzz_check(err == OOM_OK || err == OOM_EINVAL || err == OOM_EUNSUPPORTED);
    if (err) {
        fuzz_check(oom_last_message()[0]);
        return;
    }
    sum = e.weights + e.gradients + e.optimizer + e.activations + e.logits + e.kv_cache +
          e.temporaries;
    /* the breakdown adds up (overhead is outside PyTorch's allocator: in device_peak) */
    fuzz_check(sum == e.allocated_peak || sum + e.overhead == e.allocated_peak ||
               e.allocated_peak >= ((uint64_t)1 << 60));
    fuzz_check(e.allocated_peak <= e.reserved_peak && e.reserved_peak <= e.device_peak);
    if (trained == 'f')
        fuzz_check(e.params_trainable == e.params_total);
    if (trained == 'i')
        fuzz_check(e.params_trainable == 0);
    fuzz_check(oom_estimate_to_json(&json, w, &e) == OOM_OK && json && json[0] == '{');
    oom_free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[][3] = {{"method", "lora", "l"},
                                             {"method", "qlora", "l"},
                                             {"method", "inference", "i"},
                                             {"sharding", "zero3", "f"}};
    const char *path = fuzz_memfile(data, size);
    oom_workload *w = NULL;
    oom_model_info info = OOM_MODEL_INFO_INIT;
    size_t i;
    int err;

    if (!path)
        return 0;
    fuzz_check(oom_workload_create(&w) == OOM_OK);
    err = oom_workload_set(w, "model", path);
    if (err) {
        fuzz_check(err == OOM_EPARSE || err == OOM_EUNSUPPORTED || err == OOM_EINVAL ||
                   err == OOM_EIO || err == OOM_ENOTFOUND);
        fuzz_check(oom_last_message()[0]);
        fuzz_check(oom_workload_model(&info, w) == OOM_EINVAL); /* unchanged: no model */
        oom_workload_free(w);
        return 0;
    }
    fuzz_check(oom_workload_model(&info, w) == OOM_OK);
    fuzz_check(info.layers >= 0 && info.layers + info.encoder_layers >= 1 && info.hidden >= 1);
    check_estimate(w, 'f');
    for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        if (i == 3) {
            fuzz_check(oom_workload_set(w, "method", "full") == OOM_OK);
            if (oom_workload_set(w, "gpus", "8") != OOM_OK)
                continue;
        }
        if (oom_workload_set(w, methods[i][0], methods[i][1]) == OOM_OK)
            check_estimate(w, methods[i][2][0]);
    }
    oom_workload_free(w);
    return 0;
}
