/* test_oommatch.c - OOM recognition: the pattern file, its syntax, and exit status + tail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "oomless.h"

#include <string.h>

static oom_patterns *shipped;

static int setup(void **state)
{
    (void)state;
    return oom_patterns_load(&shipped, NULL) == OOM_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    oom_patterns_free(shipped);
    return 0;
}

static int is_oom(int exit_code, const char *text)
{
    return oom_is_oom_exit(shipped, exit_code, text, strlen(text));
}

static void test_frameworks(void **state)
{
    static const char *const msgs[] = {
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total",
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
        "torch.cuda.OutOfMemoryError: CUDA out of memory.",
        "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "cuDNN error: CUDNN_STATUS_NOT_ENOUGH_WORKSPACE",
        "CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        "cudaErrorMemoryAllocation",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
        "allocate 17179869184 bytes.",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
        "tensor "
        "with shape[1024,1024]",
        "NCCL WARN Cuda failure 'out of memory'",
        "hipErrorOutOfMemory",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate",
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization`",
    };
    size_t i;
    (void)state;
    assert_true(oom_patterns_count(shipped) >= 15);
    for (i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++)
        if (!is_oom(1, msgs[i]))
            fail_msg("not recognised: %s", msgs[i]);
}

static void test_not_oom(void **state)
{
    (void)state;
    assert_false(is_oom(1, "ValueError: expected 3 dimensions\n"));
    assert_false(is_oom(1, "RuntimeError: CUDA error: device-side assert triggered"));
    assert_false(is_oom(137, "")); /* the kernel's host-RAM OOM killer: no message */
    /* a message, but the job recovered on its own and exited 0 */
    assert_false(is_oom(0, "CUDA out of memory. Tried to allocate 2 GiB (retrying smaller)"));
    assert_true(is_oom(134, "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory")); /* SIGABRT */
}

static void test_case_and_nul(void **state)
{
    const char text[] = "junk\0more junk\0cuda OUT OF MEMORY. tried";
    (void)state;
    assert_string_equal(oom_patterns_find(shipped, text, sizeof(text) - 1), "CUDA out of memory");
    assert_null(oom_patterns_find(shipped, text, 14)); /* only what is inside len counts */
}

static void test_syntax(void **state)
{
    const char text[] = "# comment\n\n   first pattern  \n#second\r\nthird\r\n";
    oom_patterns *p = NULL;
    (void)state;
    assert_int_equal(oom_patterns_parse(&p, text, sizeof(text) - 1, "t"), OOM_OK);
    assert_int_equal(oom_patterns_count(p), 2);
    assert_string_equal(oom_patterns_find(p, "a FIRST PATTERN b", 17), "first pattern");
    assert_string_equal(oom_patterns_find(p, "xthirdx", 7), "third");
    assert_null(oom_patterns_find(p, "second", 6));
    oom_patterns_free(p);
    assert_int_equal(oom_patterns_parse(&p, "# only\n\n", 8, "empty.txt"), OOM_EPARSE);
    assert_null(p);
    assert_non_null(strstr(oom_last_message(), "empty.txt"));
    assert_int_equal(oom_patterns_load(&p, "/nonexistent/patterns.txt"), OOM_EIO);
    assert_non_null(strstr(oom_last_message(), "/nonexistent/patterns.txt"));
}

static void test_event_names(void **state)
{
    (void)state;
    assert_string_equal(oom_job_event_name(OOM_EVENT_LAUNCH), "launch");
    assert_string_equal(oom_job_event_name(OOM_EVENT_OOM), "oom");
    assert_string_equal(oom_job_event_name(OOM_EVENT_RESTART), "restart");
    assert_string_equal(oom_job_event_name(OOM_EVENT_EXIT), "exit");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frameworks),   cmocka_unit_test(test_not_oom),
        cmocka_unit_test(test_case_and_nul), cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_event_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
