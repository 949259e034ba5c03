/* test_estimate_stacks.c - what a training stack's own code changes in the estimate
 * (docs/stacks.md): torchtune's optimizer_in_bwd, each parameter stepped in its gradient's hook. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "oomless.h"
#include "unit/workload.h"

#define FULL_3B                                                                                    \
    "model=llama-3.2-3b", "method=full", "precision=bf16", "optimizer=adamw", "batch=2", "seq=1024"

/* the bytes of the largest parameter of the workload's model: Llama 3.2 3B's embedding (tied
 * with its head) is larger than any of its linears */
static uint64_t embedding_bytes(const oom_workload *w, double bytes)
{
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    return (uint64_t)((double)mi.vocab * (double)mi.hidden * bytes);
}

/* no gradient outlives its parameter's step: at the peak at most the largest parameter's, the
 * states as they were, and no optimizer phase of every gradient at once */
static void test_optimizer_in_backward_frees_each_gradient(void **state)
{
    oom_workload *no = W(FULL_3B), *yes = W(FULL_3B, "optimizer-in-backward=yes");
    oom_estimate a = run(no), b = run(yes);
    uint64_t one = embedding_bytes(yes, 2); /* bf16 gradients */
    (void)state;
    assert_int_equal(a.peak_phase, OOM_PHASE_OPTIMIZER);
    assert_true(a.gradients >= a.params_trainable * 2);
    assert_true(b.gradients <= one + 1);
    assert_int_equal(b.optimizer, a.optimizer);
    assert_int_equal(b.weights, a.weights);
    assert_true(b.peak_phase != OOM_PHASE_OPTIMIZER);
    /* the step's temporaries are one parameter's too */
    assert_true(b.temporaries < a.temporaries);
    assert_true(b.allocated_peak < a.allocated_peak);
    oom_workload_free(no);
    oom_workload_free(yes);
}

/* torchtune steps in the backward only in its full fine-tuning recipes, without gradient
 * accumulation (full_finetune_single_device.py refuses it): other workloads are refused, naming
 * what they set */
static void test_optimizer_in_backward_needs_full_without_accumulation(void **state)
{
    oom_workload *lora = W("model=llama-3.2-3b", "method=lora", "optimizer-in-backward=yes");
    oom_workload *accum = W(FULL_3B, "grad-accum=2", "optimizer-in-backward=yes");
    oom_estimate e = OOM_ESTIMATE_INIT;
    (void)state;
    assert_int_equal(oom_estimate_run(&e, lora), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "method 'lora'"));
    assert_int_equal(oom_estimate_run(&e, accum), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "grad-accum '2'"));
    oom_workload_free(lora);
    oom_workload_free(accum);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optimizer_in_backward_frees_each_gradient),
        cmocka_unit_test(test_optimizer_in_backward_needs_full_without_accumulation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
