/* test_oommatch.c - OOM recognition: the pattern file, its syntax, and exit status + tail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "job/job.h"
#include "oomless.h"

#include <stdio.h>
#include <stdlib.h>
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

/* The verdict on a job's output split as it came: each piece "1:" (stderr) or "0:" (stdout)
 * followed by its text */
static int verdict(int exit_code, const char *const *pieces, size_t n)
{
    oomi_oomscan sc;
    size_t i;
    oomi_oomscan_init(&sc, shipped);
    for (i = 0; i < n; i++)
        oomi_oomscan_feed(&sc, pieces[i][0] == '1', pieces[i] + 2, strlen(pieces[i] + 2));
    return exit_code != 0 && oomi_oomscan_verdict(&sc);
}

/* stdout carries data as well as messages: an OOM message there counts only on a line shaped as
 * an error report (issue 31: a generated text or a dataset sample that mentions it, with nothing
 * on stderr, was taken as an OOM: three relaunches, then "does not fit at batch 1") */
static void test_stdout_data(void **state)
{
    static const char *const data[][3] = {
        {"0:sample 17: Q: Why does training stop with 'CUDA out of memory'? A: lower the batch\n"},
        {"0:generated: the model answered CUDA out of memory\n", "0:done\n"},
        /* the message after an exception ends at a blank line */
        {"0:RuntimeError: dataset shard 3 is corrupt\n\n", "0:next sample: CUDA out of memory\n"},
        /* a warning is no error record */
        {"0:WARNING: the text mentions CUDA out of memory\n"},
        /* an OOM on stderr, then data on stdout that mentions one: still the OOM */
    };
    static const char *const oom[][3] = {
        {"0:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"},
        {"0:[rank1]: torch.OutOfMemoryError: CUDA out of memory.\n"},
        {"0:Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n",
         "0:RuntimeError: NCCL error: unhandled cuda error\nLast error:\n",
         "0:Cuda failure 'out of memory'\n"},
        {"0:n1:123:456 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 'out of memory'\n"},
        {"0:2026-11-28 12:00:00 - ERROR - step 3: CUDA out of memory, giving up\n"},
        {"0:ERROR:root:CUDA out of memory\n"},
        {"0:terminate called after throwing an instance of 'c10::OutOfMemoryError'\n",
         "0:  what():  CUDA out of memory. Tried to allocate 20.00 MiB\n"},
        /* the same data line on stderr */
        {"1:sample 17: Q: Why does training stop with 'CUDA out of memory'?\n"},
        {"1:torch.OutOfMemoryError: CUDA out of memory.\n", "0:sample: CUDA out of memory\n"},
    };
    size_t i, n;
    (void)state;
    for (i = 0; i < sizeof(data) / sizeof(data[0]); i++) {
        for (n = 0; n < 3 && data[i][n]; n++)
            ;
        if (n && verdict(1, data[i], n))
            fail_msg("stdout data taken as an OOM: %s", data[i][0]);
    }
    for (i = 0; i < sizeof(oom) / sizeof(oom[0]); i++) {
        for (n = 0; n < 3 && oom[i][n]; n++)
            ;
        if (!verdict(1, oom[i], n))
            fail_msg("not recognised: %s", oom[i][0]);
    }
}

/* The index that skips ahead (Wu-Manber) finds exactly what a search at every position finds:
 * patterns of several lengths, in both cases, at every offset of texts of every length, with
 * NUL bytes and bytes that fold together in the index ('_' and DEL, '@' and '`'). */
static int naive_any(const char *const *pats, size_t np, const char *t, size_t n)
{
    size_t i, at, j;
    for (i = 0; i < np; i++)
        for (at = 0; at + strlen(pats[i]) <= n; at++) {
            for (j = 0; pats[i][j]; j++) {
                int a = (unsigned char)t[at + j], b = (unsigned char)pats[i][j];
                if ((a >= 'A' && a <= 'Z' ? a + 32 : a) != (b >= 'A' && b <= 'Z' ? b + 32 : b))
                    break;
            }
            if (!pats[i][j])
                return 1;
        }
    return 0;
}

static void test_index_exact(void **state)
{
    static const char *const sets[][4] = {
        {"CUDA out of memory", "ALLOC_FAILED", "oom_", NULL},
        {"ab", "xyz", NULL},
        {"q", "zz_top", NULL},
        {"a_b@c", "A`B", "___", NULL},
    };
    static const char alphabet[] = "aAbBcCoOmM_ @`\x7fxyzq\0UDAud";
    char text[64];
    size_t k, round, len, np, i;
    (void)state;
    srand(34);
    for (k = 0; k < sizeof(sets) / sizeof(sets[0]); k++) {
        char file[128] = "";
        oom_patterns *p = NULL;
        for (np = 0; np < 4 && sets[k][np]; np++)
            strcat(strcat(file, sets[k][np]), "\n");
        assert_int_equal(oom_patterns_parse(&p, file, strlen(file), "t"), OOM_OK);
        for (round = 0; round < 20000; round++) {
            len = (size_t)rand() % sizeof(text);
            for (i = 0; i < len; i++)
                text[i] = alphabet[rand() % (int)(sizeof(alphabet) - 1)];
            if (len > 4 && rand() % 3 == 0) { /* a pattern in it, case flipped at random */
                const char *q = sets[k][rand() % (int)np];
                size_t at = (size_t)rand() % len, j;
                for (j = 0; q[j] && at + j < len; j++)
                    text[at + j] = rand() % 2 ? q[j] : (char)(q[j] ^ (q[j] >= 'A' ? 0x20 : 0));
            }
            if ((oom_patterns_find(p, text, len) != NULL) != naive_any(sets[k], np, text, len))
                fail_msg("set %zu, round %zu: index and search at every position disagree", k,
                         round);
        }
        oom_patterns_free(p);
    }
}

/* A job's lines for its step and recovery lines (joblines.c) read the same whatever pieces the
 * output comes in: whole lines read where they lie, or across pieces, a line longer than a part
 * (4096 bytes) in parts; the last valid "step N" and the last recovery line win. */
static void read_pieces(oomi_launch *l, const char *text, size_t len, size_t piece, int err)
{
    oomi_lines ls = {{0}, 0};
    oomi_oomscan sc;
    size_t at;
    memset(l, 0, sizeof(*l));
    l->step = -1;
    oomi_oomscan_init(&sc, shipped);
    for (at = 0; at < len; at += piece)
        oomi_lines_take(&ls, &sc, err, l, text + at, len - at < piece ? len - at : piece);
    oomi_lines_end(&ls, l);
}

static void test_lines_any_pieces(void **state)
{
    static char text[3 * OOMI_LINE_MAX];
    static const size_t sizes[] = {1, 2, 3, 7, 64, 4095, 4096, 4097, sizeof(text)};
    const char *tail = "[rank1]: OOMLESS_RECOVERY {\"micro_batch\": 3, \"failed_ranks\": [1, 2]}\n"
                       "Step: 41/100 loss 2.3\nglobal_step=42\nStEp#43 of 100\n"
                       "OOMLESS_RECOVERY {\"micro_batch\": 0}\nxstep 5 (a word ending in step)\n"
                       "steps 6 (a count)\nstep x (no number)\nthe end, no newline: misstep 9";
    oomi_launch l;
    size_t k, len;
    (void)state;
    /* a line longer than a part, "step 7" across the first part's edge, then the tail */
    memset(text, '=', OOMI_LINE_MAX + 100);
    memcpy(text + OOMI_LINE_MAX - 3, "step 7", 6);
    text[OOMI_LINE_MAX + 100] = '\n';
    strcpy(text + OOMI_LINE_MAX + 101, tail);
    len = strlen(text);
    for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        read_pieces(&l, text, len, sizes[k], 0);
        if (l.step != 43 || l.recovery_batch != 3 || strcmp(l.oom_rank, "1,2"))
            fail_msg("pieces of %zu bytes: step %ld, batch %d, ranks '%s'", sizes[k], l.step,
                     l.recovery_batch, l.oom_rank);
    }
    /* "step 7" split across the part's edge is in neither part */
    read_pieces(&l, text, OOMI_LINE_MAX + 101, OOMI_LINE_MAX + 101, 1);
    assert_int_equal(l.step, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frameworks),         cmocka_unit_test(test_not_oom),
        cmocka_unit_test(test_case_and_nul),       cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_event_names),        cmocka_unit_test(test_more_spellings),
        cmocka_unit_test(test_last_error_decides), cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_stdout_data),        cmocka_unit_test(test_index_exact),
        cmocka_unit_test(test_lines_any_pieces),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
