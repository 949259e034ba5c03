/* test_oommatch.c - OOM recognition: the pattern file, its syntax, and exit status + tail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "oomless.h"

#include <stdio.h>
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
    assert_string_equal(oom_job_event_name(OOM_EVENT_STOP), "stop");
    assert_string_equal(oom_job_event_name(OOM_EVENT_CONTINUE), "continue");
}

/* Spellings of other projects (each as that project prints it; data/oom-patterns.txt names the
 * source file). None of these lines holds an older pattern, so each needs its own. */
static void test_more_spellings(void **state)
{
    static const char *const msgs[] = {
        /* NCCL's driver-call check prints the error number */
        "node1:123:456 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 2 'out of memory'",
        /* ONNX Runtime's CUDA execution provider */
        "RUNTIME_EXCEPTION : Non-zero status code returned while running Conv node. CUDA failure "
        "2: out of memory ; GPU=0 ; hostname=n1 ; expr=cudaMalloc((void**)&p, size);",
        /* PyTorch before 1.0 (THC) */
        "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/"
        "THCCachingAllocator.cpp:510",
        "RuntimeError:CUDA error:out of memory",
        /* PyTorch's driver-API check (expandable segments) */
        "RuntimeError: CUDA driver error: out of memory",
        /* PyTorch on ROCm: the runtime check, hipified */
        "RuntimeError: HIP error: out of memory",
        /* Intel Extension for PyTorch / PyTorch XPU */
        "RuntimeError: XPU out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.11 GiB total)",
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++)
        if (!is_oom(1, msgs[i]))
            fail_msg("not recognised: %s", msgs[i]);
}

/* The error that ended the job decides, not any OOM message somewhere in the output. */
static void test_last_error_decides(void **state)
{
    static const char *const not_oom[] = {
        /* an OOM the job caught and logged, then a different fatal error */
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB (caught, batch "
        "halved)\nstep 1\nstep 2\nTraceback (most recent call last):\n  File \"t.py\", line 3, "
        "in <module>\nValueError: expected 3 dimensions\n",
        /* a chained exception: the OOM was being handled when another one ended the job */
        "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n"
        "torch.OutOfMemoryError: CUDA out of memory.\n\nDuring handling of the above exception, "
        "another exception occurred:\n\nTraceback (most recent call last):\n  File \"t.py\", "
        "line 5, in <module>\nFileNotFoundError: [Errno 2] No such file: 'ckpt/last.pt'\n",
        /* a traceback's source line names the OOM class; the exception is another one */
        "Traceback (most recent call last):\n  File \"t.py\", line 9, in <module>\n"
        "    except torch.OutOfMemoryError: raise KeyError(k)\nKeyError: 'lr'\n",
        /* torchrun's rank prefix */
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. (retrying smaller)\n"
        "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"t.py\", line 2\n"
        "[rank0]: RuntimeError: Expected all tensors to be on the same device\n",
        /* C++: an uncaught exception that is not an OOM */
        "CUDA out of memory (handled)\nterminate called after throwing an instance of "
        "'std::runtime_error'\n  what():  cannot open shard 7\n",
        "CUDA out of memory (handled)\nFatal Python error: Segmentation fault\n",
    };
    static const char *const oom[] = {
        /* an earlier, handled error does not hide the OOM that ended the job */
        "Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: warmup\n"
        "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
        /* the OOM on a later line of a multi-line exception message */
        "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n"
        "RuntimeError: NCCL error: unhandled cuda error\nLast error:\n"
        "Cuda failure 'out of memory'\n",
        /* torchrun reporting its worker's failure: the worker's OOM stays the cause */
        "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"t.py\", line 3\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory.\nTraceback (most recent call "
        "last):\n  File \"/bin/torchrun\", line 8, in <module>\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\ntrain.py FAILED\n",
        ("terminate called after throwing an instance of 'c10::OutOfMemoryError'\n"
         "  what():  CUDA out of memory. Tried to allocate 20.00 MiB\n"),
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof(not_oom) / sizeof(not_oom[0]); i++)
        if (is_oom(1, not_oom[i]))
            fail_msg("taken as OOM: %s", not_oom[i]);
    for (i = 0; i < sizeof(oom) / sizeof(oom[0]); i++)
        if (!is_oom(1, oom[i]))
            fail_msg("not recognised: %s", oom[i]);
}

/* A pattern inside a line far longer than the per-line window (a progress bar redrawn with \r),
 * across the window's edge, is still found. */
static void test_long_line(void **state)
{
    static char text[20000];
    size_t at;
    (void)state;
    for (at = 4000; at < 4200; at += 7) {
        memset(text, '=', sizeof(text) - 1);
        text[sizeof(text) - 1] = '\0';
        memcpy(text + at, "CUDA out of memory", 18);
        if (!is_oom(1, text))
            fail_msg("not found at offset %zu of a %zu-byte line", at, sizeof(text) - 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frameworks),         cmocka_unit_test(test_not_oom),
        cmocka_unit_test(test_case_and_nul),       cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_event_names),        cmocka_unit_test(test_more_spellings),
        cmocka_unit_test(test_last_error_decides), cmocka_unit_test(test_long_line),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
