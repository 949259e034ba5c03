/* test_plan.c - the planner: maximality, exact effective batch, overrides, downscaling,
 * multi-GPU sharding, inference, workers, measured lines, refusals, output formats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oomless.h"

/* a profile of the catalog's shape: memory, bandwidth, TFLOP/s bf16 fp16 fp32, compute capability
 */
#define PROFILE(id, name, mem, bw, bf16, fp16, fp32, major, minor)                                 \
    {                                                                                              \
        OOM_GPU_PROFILE_VERSION, id, name, "nvidia", "", mem, bw, bf16, fp16, fp32, major, minor,  \
            1, 1, 0                                                                                \
    }
static const oom_gpu_profile GPU_ADA =
    PROFILE("test-ada", "Test Ada 24GB", 24 * OOM_GiB, 1000, 165, 165, 82, 8, 9);
static const oom_gpu_profile GPU_A100 =
    PROFILE("test-a100", "Test A100 80GB", 80 * OOM_GiB, 2039, 312, 312, 19.5, 8, 0);
static const oom_gpu_profile GPU_TURING =
    PROFILE("test-turing", "Test Turing 16GB", 16 * OOM_GiB, 320, 0, 65, 8.1, 7, 5);

static oom_workload *make(const oom_gpu_profile *gpu, const char *const *kv)
{
    oom_workload *w = NULL;
    size_t i;
    assert_int_equal(oom_workload_create(&w), OOM_OK);
    for (i = 0; kv[i]; i += 2)
        if (oom_workload_set(w, kv[i], kv[i + 1]))
            fail_msg("%s=%s refused: %s", kv[i], kv[i + 1], oom_last_message());
    assert_int_equal(oom_workload_set_gpu(w, gpu), OOM_OK);
    return w;
}
#define W(gpu, ...) make(gpu, (const char *const[]){__VA_ARGS__, NULL})

static oom_plan_request request(const oom_workload *w, const oom_gpu_profile *gpu, double gib)
{
    oom_plan_request r;
    oom_plan_request_init(&r, OOM_PLAN_REQUEST_VERSION);
    r.workload = w;
    r.gpu = gpu;
    assert_int_equal(oom_budget_make(&r.budget, (uint64_t)(gib * (double)OOM_GiB), OOM_GiB),
                     OOM_OK);
    return r;
}

static oom_plan_result *plan_ok(const oom_plan_request *r)
{
    oom_plan_result *res = NULL;
    if (oom_plan_run(&res, r))
        fail_msg("plan failed: %s", oom_last_message());
    assert_non_null(res);
    assert_true(res->found);
    assert_true(res->best->fits);
    assert_true(res->best->estimate.device_peak <=
                r->budget.usable_bytes / (uint64_t)(r->workers > 1 ? r->workers : 1));
    return res;
}

static uint64_t peak_at(oom_workload *w, oom_knobs k)
{
    oom_estimate e = OOM_ESTIMATE_INIT;
    assert_int_equal(oom_workload_set_knobs(w, &k), OOM_OK);
    assert_int_equal(oom_estimate_run(&e, w), OOM_OK);
    return e.device_peak;
}

/* asserts that the plan in `format` contains `needle` */
static void format_has(const oom_plan_result *res, const char *format, const char *needle)
{
    char *text = NULL;
    assert_int_equal(oom_plan_format(&text, res, format), OOM_OK);
    if (!strstr(text, needle))
        fail_msg("%s output lacks '%s': %s", format, needle, text);
    oom_free(text);
}

/* checkpointing off: the chosen micro-batch is the largest divisor of 32 that fits */
static void test_maximal_micro_batch(void **state)
{
    static const double budgets[] = {32, 40, 48, 64, 80};
    size_t i;
    (void)state;
    for (i = 0; i < 5; i++) {
        oom_workload *w = W(&GPU_A100, "model", "llama-3.2-1b", "seq", "1024");
        oom_plan_request r = request(w, &GPU_A100, budgets[i]);
        oom_plan_result *res;
        long next;
        r.allow = 0; /* nothing but micro-batch and accumulation */
        res = plan_ok(&r);
        assert_int_equal(res->best->knobs.checkpointing, OOM_CHECKPOINTING_NONE);
        assert_int_equal(res->best->effective_batch, 32);
        assert_int_equal(res->best->knobs.batch * res->best->knobs.grad_accum, 32);
        for (next = res->best->knobs.batch + 1; next <= 32 && 32 % next; next++)
            ;
        if (next <= 32) {
            oom_knobs k = res->best->knobs;
            k.batch = next, k.grad_accum = 32 / next;
            assert_true(peak_at(w, k) > r.budget.usable_bytes);
        }
        oom_plan_free(res);
        oom_workload_free(w);
    }
}

static void test_exact_effective_batch(void **state)
{
    static const long targets[] = {8, 24, 48, 96};
    size_t i;
    (void)state;
    for (i = 0; i < 4; i++) {
        oom_workload *w = W(&GPU_ADA, "model", "llama-3.1-8b", "method", "lora", "seq", "2048");
        oom_plan_request r = request(w, &GPU_ADA, 24);
        oom_plan_result *res;
        r.target_effective_batch = targets[i];
        res = plan_ok(&r);
        assert_int_equal(res->best->effective_batch, targets[i]);
        assert_int_equal(targets[i] % res->best->knobs.batch, 0);
        assert_int_equal(res->best->knobs.grad_accum, targets[i] / res->best->knobs.batch);
        oom_plan_free(res);
        oom_workload_free(w);
    }
}

/* a target that the GPUs do not divide is refused unless accumulation may round up */
static void test_inexact(void **state)
{
    oom_workload *w = W(&GPU_A100, "model", "gpt2", "seq", "512");
    oom_plan_request r = request(w, &GPU_A100, 80);
    oom_plan_result *res = NULL;
    (void)state;
    r.gpus_per_node = 4, r.target_effective_batch = 30;
    assert_int_equal(oom_plan_run(&res, &r), OOM_EINVAL);
    assert_null(res);
    assert_non_null(strstr(oom_last_message(), "--allow-inexact"));
    r.allow_inexact = 1, r.max_batch = 4;
    res = plan_ok(&r);
    assert_true(res->best->effective_batch >= 30);
    assert_true(res->best->knobs.batch <= 4);
    oom_plan_free(res);
    oom_workload_free(w);
}

/* a fixed batch, accumulation or sequence is never raised, however much memory there is */
static void test_overrides_never_raised(void **state)
{
    oom_workload *w = W(&GPU_A100, "model", "gpt2", "seq", "256", "batch", "2");
    oom_plan_request r = request(w, &GPU_A100, 80);
    oom_plan_result *res;
    (void)state;
    r.fixed_batch = 2, r.fixed_seq = 256, r.seq_max = 0;
    res = plan_ok(&r);
    assert_int_equal(res->best->knobs.batch, 2);
    assert_int_equal(res->best->knobs.seq_len, 256);
    assert_int_equal(res->best->effective_batch, 2); /* default target: batch x accum x GPUs */
    assert_int_equal(res->downscaled, 0);
    oom_plan_free(res);

    r.fixed_grad_accum = 4;
    r.fixed_batch = 0;
    r.target_effective_batch = 32;
    res = plan_ok(&r);
    assert_int_equal(res->best->knobs.grad_accum, 4);
    assert_int_equal(res->best->knobs.batch, 8);
    oom_plan_free(res);
    oom_workload_free(w);
}

/* a fixed batch that does not fit is lowered (reported) by default, refused without downscale */
static void test_downscale(void **state)
{
    oom_workload *w =
        W(&GPU_ADA, "model", "llama-3.1-8b", "method", "lora", "seq", "2048", "batch", "8");
    oom_plan_request r = request(w, &GPU_ADA, 24);
    oom_plan_result *res = NULL;
    size_t i;
    bool said = false;
    (void)state;
    r.fixed_batch = 8;
    res = plan_ok(&r);
    assert_true(res->best->knobs.batch < 8);
    assert_int_equal(res->best->effective_batch, 8);
    assert_true(res->downscaled & OOM_DOWNSCALE_BATCH);
    assert_int_equal(res->requested_batch, 8);
    for (i = 0; i < res->n_notices; i++)
        said |= strstr(res->notices[i], "DOWNSCALED: batch size 8") != NULL;
    assert_true(said);
    oom_plan_free(res);

    r.downscale = 0;
    res = NULL;
    assert_int_equal(oom_plan_run(&res, &r), OOM_ENOFIT);
    assert_non_null(res);
    assert_false(res->found);
    assert_int_equal(res->smallest->knobs.batch, 8);
    assert_true(res->n_suggestions >= 1);
    assert_non_null(strstr(res->suggestions[0], "--allow-downscale"));
    oom_plan_free(res);
    oom_workload_free(w);
}

/* 7B full fine-tune on 8 x 80 GB: DDP cannot hold AdamW states, so a ZeRO stage is chosen;
 * without sharding nothing fits; with one GPU sharding is never chosen */
static void test_multi_gpu_sharding(void **state)
{
    oom_workload *w = W(&GPU_A100, "model", "llama-2-7b", "seq", "2048");
    oom_plan_request r = request(w, &GPU_A100, 80);
    oom_plan_result *res = NULL;
    (void)state;
    r.gpus_per_node = 8, r.target_effective_batch = 64;
    res = plan_ok(&r);
    assert_int_equal(res->best->knobs.gpus, 8);
    assert_true(res->best->knobs.sharding >= OOM_SHARDING_ZERO1);
    assert_int_equal(res->best->effective_batch, 64);
    assert_int_equal(res->best->knobs.batch * res->best->knobs.grad_accum * 8, 64);
    oom_plan_free(res);

    r.allow = OOM_ALLOW_CHECKPOINTING;
    res = NULL;
    assert_int_equal(oom_plan_run(&res, &r), OOM_ENOFIT);
    assert_non_null(res);
    assert_int_equal(res->smallest->knobs.sharding, OOM_SHARDING_NONE);
    oom_plan_free(res);

    r.allow = OOM_ALLOW_DEFAULT, r.gpus_per_node = 1, r.nodes = 1;
    {
        oom_workload *small = W(&GPU_A100, "model", "llama-3.2-1b", "seq", "1024");
        r.workload = small;
        res = plan_ok(&r);
        assert_int_equal(res->best->knobs.sharding, OOM_SHARDING_NONE);
        oom_plan_free(res);
        oom_workload_free(small);
    }
    oom_workload_free(w);
}

/* inference: the largest batch that fits (one more does not), and the KV budget left */
static void test_inference(void **state)
{
    oom_workload *w = W(&GPU_ADA, "model", "llama-3.1-8b", "method", "inference", "seq", "2048");
    oom_plan_request r = request(w, &GPU_ADA, 24);
    oom_plan_result *res;
    oom_knobs k = OOM_KNOBS_INIT;
    (void)state;
    res = plan_ok(&r);
    assert_true(res->inference);
    assert_true(res->best->knobs.batch >= 1);
    k = res->best->knobs;
    k.batch++;
    assert_true(peak_at(w, k) > r.budget.usable_bytes);
    assert_int_equal(res->kv_bytes_per_token,
                     128 * 1024); /* 32 layers x 8 kv heads x 128 x 2 x 2 */
    assert_int_equal(res->kv_budget_bytes,
                     r.budget.usable_bytes -
                         (res->best->estimate.device_peak - res->best->estimate.kv_cache));
    oom_plan_free(res);

    /* a sequence range: the longest that fits is taken */
    r.seq_min = 1024, r.seq_max = 1 << 20;
    r.fixed_batch = 1;
    assert_int_equal(oom_workload_set(w, "max-positions", "1048576"), OOM_OK);
    res = plan_ok(&r);
    assert_true(res->best->knobs.seq_len >= 1024 && res->best->knobs.seq_len < (1 << 20));
    k = res->best->knobs;
    k.seq_len *= 2;
    assert_true(peak_at(w, k) > r.budget.usable_bytes);
    oom_plan_free(res);
    oom_workload_free(w);
}

/* tensor parallelism: the plan's best choice is per GPU; the vLLM figures follow vLLM's
 * arithmetic from the parts; a version-1 result (no tensor_parallel) refuses the vllm format */
static void test_tensor_parallel(void **state)
{
    oom_workload *w = W(&GPU_A100, "model", "llama-3.1-70b", "method", "inference", "seq", "8192",
                        "tensor-parallel", "4");
    oom_plan_request r = request(w, &GPU_A100, 80);
    oom_plan_result *res;
    char *out = NULL;
    uint64_t avail;
    (void)state;
    res = plan_ok(&r);
    assert_int_equal(res->tensor_parallel, 4);
    /* 80 layers x 2 of the 8 KV heads x 128 x 2 (K, V) x 2 bytes */
    assert_int_equal(res->kv_bytes_per_token, 80 * 2 * 128 * 2 * 2);
    assert_int_equal(res->serve_batched_tokens, 8192);
    assert_true(res->serve_profile_bytes > 0);
    assert_int_equal(oom_plan_format(&out, res, "vllm"), OOM_OK);
    assert_non_null(strstr(out, "--tensor-parallel-size 4 "));
    oom_free(out);
    /* the rotary cache (131 072 positions x 128 x 2 bytes) is whole on every GPU */
    assert_int_equal(res->serve_rope_bytes, 131072 * 128 * 2);
    assert_int_equal(res->serve_max_num_seqs, res->best->knobs.batch);
    avail = (uint64_t)((double)r.budget.target_bytes * 0.98) - res->best->estimate.weights -
            res->serve_rope_bytes - res->serve_profile_bytes -
            (uint64_t)llround(0.55 * (double)OOM_GiB);
    assert_int_equal(oom_plan_format(&out, res, "json"), OOM_OK);
    {
        json_object *doc = json_tokener_parse(out), *inf, *v, *x;
        assert_true(json_object_object_get_ex(doc, "inference", &inf));
        assert_true(json_object_object_get_ex(inf, "vllm", &v));
        assert_true(json_object_object_get_ex(v, "kv_cache_bytes", &x));
        assert_int_equal(json_object_get_int64(x), avail);
        assert_true(json_object_object_get_ex(v, "num_gpu_blocks", &x));
        assert_int_equal(json_object_get_int64(x), avail / (16 * 80 * 2 * 128 * 2 * 2));
        json_object_put(doc);
    }
    oom_free(out);
    res->version = 1; /* a result as a version-1 program knows it: no tensor_parallel */
    assert_int_equal(oom_plan_format(&out, res, "vllm"), OOM_EUNSUPPORTED);
    assert_null(out);
    res->version = OOM_PLAN_RESULT_VERSION;
    oom_plan_free(res);
    oom_workload_free(w);
}

/* a measured line: 2 GiB + 32 tensors x 40 MiB per sample (1 anchor + 8 positives + 23
 * negatives) in 23 GiB usable: batch 16 (2 + 16 x 1.25 = 22 GiB) fits, 32 (42 GiB) does not */
static void test_measured_line(void **state)
{
    oom_measured_line line = {OOM_MEASURED_LINE_VERSION, 2 * OOM_GiB, 40 * OOM_MiB, 0, 32, 0};
    oom_plan_request r;
    oom_plan_result *res;
    (void)state;
    oom_plan_request_init(&r, OOM_PLAN_REQUEST_VERSION);
    r.line = &line;
    assert_int_equal(oom_budget_make(&r.budget, 24 * OOM_GiB, OOM_GiB), OOM_OK);
    r.target_effective_batch = 64;
    res = plan_ok(&r);
    assert_true(res->measured);
    assert_int_equal(res->best->knobs.batch, 16);
    assert_int_equal(res->best->knobs.grad_accum, 4);
    assert_int_equal(res->best->estimate.device_peak, 22 * OOM_GiB);
    assert_false(res->best->has_throughput);
    oom_plan_free(res);

    /* with a per-token term the sequence counts: 2 GiB + b x 32 x (1 MiB + 4 KiB x 256) */
    line.bytes_per_sample = OOM_MiB, line.bytes_per_token = 4 * OOM_KiB;
    r.fixed_seq = 256;
    res = plan_ok(&r);
    assert_int_equal(res->best->estimate.device_peak,
                     2 * OOM_GiB + (uint64_t)res->best->knobs.batch * 32 * 2 * OOM_MiB);
    assert_int_equal(res->best->knobs.batch, 64); /* 2 GiB + 64 x 64 MiB = 6 GiB */
    oom_plan_free(res);
}

/* workers: copies of a fixed job per GPU, each with its own context */
static void test_workers(void **state)
{
    oom_measured_line line = {OOM_MEASURED_LINE_VERSION, 3 * OOM_GiB, 200 * OOM_MiB, 0, 1, 0};
    oom_plan_request r;
    oom_plan_result *res = NULL;
    (void)state;
    oom_plan_request_init(&r, OOM_PLAN_REQUEST_VERSION);
    r.line = &line;
    assert_int_equal(oom_budget_make(&r.budget, 16 * OOM_GiB, OOM_GiB), OOM_OK);
    r.fixed_batch = 4; /* 3 GiB + 800 MiB = 3.78 GiB per copy, 15 GiB usable */
    r.workers = -1;
    res = plan_ok(&r);
    assert_int_equal(res->max_workers, 3);
    oom_plan_free(res);
    r.workers = 3;
    res = plan_ok(&r);
    assert_int_equal(res->workers, 3);
    assert_int_equal(res->budget.usable_bytes, 5 * OOM_GiB);
    oom_plan_free(res);
    r.workers = 4, r.downscale = 0; /* 15 GiB / 4 = 3.75 GiB per copy: too small */
    res = NULL;
    assert_int_equal(oom_plan_run(&res, &r), OOM_ENOFIT);
    assert_non_null(res);
    assert_false(res->found);
    assert_int_equal(res->budget.usable_bytes, 15 * OOM_GiB / 4);
    assert_true(res->smallest->estimate.device_peak > res->budget.usable_bytes);
    oom_plan_free(res);
}

/* a 13B full fine-tune on one 24 GB card: refused with the smallest peak and suggestions */
static void test_impossible(void **state)
{
    oom_workload *w = W(&GPU_ADA, "model", "llama-2-13b", "seq", "2048");
    oom_plan_request r = request(w, &GPU_ADA, 24);
    oom_plan_result *res = NULL;
    size_t i;
    bool zero3 = false, qlora = false;
    (void)state;
    assert_int_equal(oom_plan_run(&res, &r), OOM_ENOFIT);
    assert_non_null(strstr(oom_last_message(), "nothing fits"));
    assert_non_null(res);
    assert_false(res->found);
    assert_true(res->smallest->estimate.device_peak > r.budget.usable_bytes);
    assert_int_equal(res->smallest->knobs.batch, 1);
    assert_true(res->n_suggestions >= 2);
    for (i = 0; i < res->n_suggestions; i++) {
        zero3 |= strstr(res->suggestions[i], "ZeRO-3") != NULL;
        qlora |= strstr(res->suggestions[i], "--method qlora") != NULL;
    }
    assert_true(zero3);
    assert_true(qlora);
    oom_plan_free(res);
    oom_workload_free(w);
}

static bool has_string(char *const *v, size_t n, const char *needle)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (strstr(v[i], needle))
            return true;
    return false;
}

/* --allow loss: a chunked loss instead of checkpointing where it is faster; never where it only
 * costs; a fixed batch that does not fit names it; the formats say so */
static void test_loss_and_attention(void **state)
{
    oom_workload *w = W(&GPU_ADA, "model", "qwen2.5-0.5b", "seq", "4096");
    oom_plan_request r = request(w, &GPU_ADA, 24);
    oom_plan_result *res, *chunked;
    oom_workload *eager, *small;
    char *text = NULL;
    (void)state;
    r.target_effective_batch = 32;
    res = plan_ok(&r); /* the default allows checkpointing only */
    assert_int_equal(res->best->knobs.loss, OOM_LOSS_STANDARD);
    assert_int_equal(res->best->knobs.checkpointing, OOM_CHECKPOINTING_FULL);
    r.allow |= OOM_ALLOW_LOSS;
    chunked = plan_ok(&r);
    assert_int_equal(chunked->best->knobs.loss, OOM_LOSS_CHUNKED);
    assert_int_equal(chunked->best->knobs.checkpointing, OOM_CHECKPOINTING_NONE);
    assert_true(chunked->best->tokens_per_s > res->best->tokens_per_s);
    format_has(chunked, "args", "--use_liger_kernel");
    format_has(chunked, "env", "OOMLESS_LOSS=chunked");
    format_has(chunked, "text", "chunked");
    oom_plan_free(res), oom_plan_free(chunked);

    /* a fixed batch that fits only with a change not allowed: the plan names the change */
    r.allow = OOM_ALLOW_DEFAULT, r.fixed_batch = 2, r.fixed_grad_accum = 16;
    res = plan_ok(&r);
    assert_int_equal(res->best->knobs.batch, 1);
    assert_true(has_string(res->notices, res->n_notices, "--allow loss (chunked loss)"));
    oom_plan_free(res);
    r.allow |= OOM_ALLOW_LOSS;
    res = plan_ok(&r);
    assert_int_equal(res->best->knobs.batch, 2);
    assert_false(has_string(res->notices, res->n_notices, "--allow loss"));
    oom_plan_free(res);
    r.allow = OOM_ALLOW_DEFAULT, r.downscale = 0;
    assert_int_equal(oom_plan_run(&res, &r), OOM_ENOFIT);
    assert_true(has_string(res->suggestions, res->n_suggestions, "--allow loss (chunked loss)"));
    oom_plan_free(res);

    /* the chunked loss costs time: not chosen where the standard loss fits at the same batch */
    small = W(&GPU_A100, "model", "qwen2.5-0.5b", "seq", "512");
    r = request(small, &GPU_A100, 80);
    r.allow = OOM_ALLOW_ALL, r.target_effective_batch = 8;
    res = plan_ok(&r);
    assert_int_equal(res->best->knobs.batch, 8);
    assert_int_equal(res->best->knobs.loss, OOM_LOSS_STANDARD);
    oom_plan_free(res);

    /* --allow attention: away from eager attention, which costs memory and time */
    eager = W(&GPU_ADA, "model", "qwen2.5-0.5b", "seq", "2048", "attention", "eager");
    r = request(eager, &GPU_ADA, 24);
    r.target_effective_batch = 16;
    res = plan_ok(&r);
    assert_int_equal(res->best->knobs.attention, OOM_ATTENTION_EAGER);
    r.allow |= OOM_ALLOW_ATTENTION;
    chunked = plan_ok(&r);
    assert_int_not_equal(chunked->best->knobs.attention, OOM_ATTENTION_EAGER);
    assert_true(chunked->best->tokens_per_s > res->best->tokens_per_s);
    assert_int_equal(oom_plan_to_json(&text, chunked), OOM_OK);
    assert_non_null(strstr(text, "\"attention\":"));
    oom_free(text);
    oom_plan_free(res), oom_plan_free(chunked);
    oom_workload_free(eager), oom_workload_free(small), oom_workload_free(w);
}

/* a prime target: a hint with the nearest effective batches that have larger micro-batches;
 * --allow-inexact rounds to the nearest, down as well as up, and says by how much */
static void test_awkward_effective_batch(void **state)
{
    oom_workload *w = W(&GPU_ADA, "model", "qwen2.5-0.5b", "seq", "2048");
    oom_plan_request r = request(w, &GPU_ADA, 24);
    oom_plan_result *res;
    (void)state;
    r.target_effective_batch = 97, r.allow |= OOM_ALLOW_LOSS;
    res = plan_ok(&r);
    assert_int_equal(res->best->effective_batch, 97);
    assert_int_equal(res->best->knobs.batch, 1);
    assert_true(has_string(res->notices, res->n_notices,
                           "nearest with larger, faster micro-batches: 96 = 3 x 32"));
    assert_true(has_string(res->notices, res->n_notices, "98 = 2 x 49"));
    oom_plan_free(res);
    r.allow_inexact = 1;
    res = plan_ok(&r);
    assert_true(res->best->knobs.batch > 1);
    assert_true(res->best->effective_batch < 97); /* rounded down: 96 = 3 x 32 */
    assert_true(
        has_string(res->notices, res->n_notices, "effective batch 96 instead of 97 (-1.0%"));
    assert_false(has_string(res->notices, res->n_notices, "nearest with larger"));
    assert_int_equal(res->best->knobs.batch * res->best->knobs.grad_accum, 96);
    oom_plan_free(res);
    r.target_effective_batch = 96, r.allow_inexact = 0; /* not awkward: no hint */
    res = plan_ok(&r);
    assert_int_equal(res->n_notices, 0);
    oom_plan_free(res);
    oom_workload_free(w);
}

/* never bf16 on a GPU without bf16, even when every knob may change */
static void test_no_bf16(void **state)
{
    oom_workload *w = W(&GPU_TURING, "model", "gpt2", "seq", "512", "precision", "fp16");
    oom_plan_request r = request(w, &GPU_TURING, 16);
    oom_plan_result *res;
    size_t i;
    (void)state;
    assert_int_equal(oom_workload_set(w, "precision", "auto"), OOM_OK);
    r.allow = OOM_ALLOW_ALL;
    res = plan_ok(&r);
    assert_int_not_equal(res->best->knobs.precision, OOM_PRECISION_BF16);
    assert_int_not_equal(res->best->knobs.precision, OOM_PRECISION_AMP_BF16);
    for (i = 0; i < res->n_alternatives; i++) {
        assert_int_not_equal(res->alternatives[i]->knobs.precision, OOM_PRECISION_BF16);
        assert_int_not_equal(res->alternatives[i]->knobs.precision, OOM_PRECISION_AMP_BF16);
    }
    assert_true(res->n_notices >= 1);
    assert_non_null(strstr(res->notices[0], "no bf16"));
    oom_plan_free(res);
    oom_workload_free(w);
}

static json_object *parse_json(const char *text)
{
    json_object *o = json_tokener_parse(text);
    if (!o)
        fail_msg("not JSON: %s", text);
    return o;
}

static const char *jstr(json_object *o, const char *a, const char *b)
{
    json_object *x, *y;
    if (!json_object_object_get_ex(o, a, &x) || (b && !json_object_object_get_ex(x, b, &y)))
        fail_msg("missing %s.%s", a, b ? b : "");
    return json_object_get_string(b ? y : x);
}

/* JSON keys `oomless apply` reads, and the machine formats */
static void test_json_and_formats(void **state)
{
    static const char *const keys[] = {
        "batch_size", "grad_accum", "effective_batch", "seq_len",  "checkpointing",
        "precision",  "optimizer",  "exact_precision", "sharding", "offload",
        "gpus",       "loss",       "attention"};
    oom_workload *w = W(&GPU_A100, "model", "llama-2-7b", "seq", "2048");
    oom_plan_request r = request(w, &GPU_A100, 80);
    oom_plan_result *res;
    json_object *o, *plan;
    char *text = NULL;
    size_t i;
    (void)state;
    r.nodes = 2, r.gpus_per_node = 4, r.target_effective_batch = 64;
    r.allow = OOM_ALLOW_ALL;
    res = plan_ok(&r);
    assert_int_equal(oom_plan_to_json(&text, res), OOM_OK);
    o = parse_json(text);
    assert_true(json_object_object_get_ex(o, "plan", &plan));
    assert_int_equal(json_object_object_length(plan), 13);
    for (i = 0; i < 13; i++)
        assert_non_null(jstr(o, "plan", keys[i]));
    assert_string_equal(jstr(o, "plan", "gpus"), "8");
    assert_string_equal(jstr(o, "plan", "effective_batch"), "64");
    assert_string_equal(jstr(o, "plan", "sharding"), oom_sharding_name(res->best->knobs.sharding));
    assert_non_null(jstr(o, "memory", "device_peak"));
    assert_non_null(jstr(o, "budget", "usable_bytes"));
    assert_non_null(jstr(o, "throughput", "tokens_per_s"));
    assert_string_equal(jstr(o, "plan", "exact_precision"),
                        oom_precision_name(res->best->knobs.precision));
    /* a sharded plan carries its DeepSpeed config (the same as --format deepspeed) */
    assert_int_not_equal(res->best->knobs.sharding, OOM_SHARDING_NONE);
    assert_true(json_object_object_get_ex(o, "deepspeed", &plan));
    assert_true(json_object_object_get_ex(plan, "zero_optimization", &plan));
    assert_true(json_object_object_get_ex(plan, "stage", &plan));
    assert_int_equal(json_object_get_int(plan), (int)res->best->knobs.sharding);
    json_object_put(o);
    oom_free(text);

    assert_int_equal(oom_plan_format(&text, res, "deepspeed"), OOM_OK);
    o = parse_json(text);
    assert_int_equal(atol(jstr(o, "train_micro_batch_size_per_gpu", NULL)), res->best->knobs.batch);
    assert_int_equal(atol(jstr(o, "gradient_accumulation_steps", NULL)),
                     res->best->knobs.grad_accum);
    assert_string_equal(jstr(o, "train_batch_size", NULL), "64");
    assert_int_equal(atol(jstr(o, "zero_optimization", "stage")), (long)res->best->knobs.sharding);
    json_object_put(o);
    oom_free(text);

    format_has(res, "torchrun", "--nnodes=2 --nproc_per_node=4");
    format_has(res, "env", "export OOMLESS_GRAD_ACCUM=");
    assert_int_equal(oom_plan_format(&text, res, "yaml"), OOM_EINVAL);
    oom_plan_free(res);
    oom_workload_free(w);
}

/* the text-option path (the CLI's and the Python package's) */
static void test_options(void **state)
{
    static const char *const k[] = {"model",     "method", "seq", "gpu", "target_effective_batch",
                                    "batch_size"};
    static const char *const v[] = {"llama-3.1-8b", "lora", "2048", "rtx-4090", "32", "2"};
    oom_plan_options *o = NULL;
    char *text = NULL;
    json_object *j;
    (void)state;
    assert_int_equal(oom_plan_json(&text, k, v, 6), OOM_OK);
    j = parse_json(text);
    assert_string_equal(jstr(j, "plan", "batch_size"), "1"); /* 2 does not fit: downscaled */
    assert_string_equal(jstr(j, "plan", "grad_accum"), "32");
    assert_string_equal(jstr(j, "downscaled", NULL), "[ \"batch\" ]");
    assert_string_equal(jstr(j, "budget", "gpu"), "rtx-4090");
    json_object_put(j);
    oom_free(text);

    assert_int_equal(oom_plan_options_create(&o), OOM_OK);
    assert_int_equal(oom_plan_options_set(o, "allow", "checkpointing,bogus"), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "bogus"));
    assert_int_equal(oom_plan_options_set(o, "seq-range", "4096:1024"), OOM_EINVAL);
    assert_int_equal(oom_plan_options_set(o, "workers", "auto"), OOM_OK);
    assert_int_equal(oom_plan_options_set(o, "no-such-option", "1"), OOM_ENOTFOUND);
    oom_plan_options_free(o);
}

/* Notes longer than the fixed arrays the result once had (240 bytes a notice, 200 a suggestion
 * or a why, 64 a GPU id) come back whole, as owned strings the result frees. */
static void test_whole_strings(void **state)
{
    char id[301];
    oom_gpu_profile gpu = GPU_TURING; /* no bf16: the plan says so, naming the GPU */
    oom_workload *w;
    oom_plan_request r;
    oom_plan_result *res;
    size_t i, found = 0;
    (void)state;
    memset(id, 'g', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    gpu.id = id;
    w = W(&gpu, "model", "llama-3.1-8b", "method", "lora", "seq", "512");
    r = request(w, &gpu, 80);
    res = plan_ok(&r);
    assert_string_equal(res->gpu_id, id);
    for (i = 0; i < res->n_notices; i++)
        if (strstr(res->notices[i], id) && strstr(res->notices[i], "no bf16 tensor cores")) {
            assert_true(strlen(res->notices[i]) > 240);
            found++;
        }
    assert_int_equal(found, 1);
    assert_true(res->n_alternatives > 0);
    for (i = 0; i < res->n_alternatives; i++)
        assert_non_null(res->alternatives[i]->why);
    oom_plan_result_dispose(res);
    assert_null(res->best);
    assert_null(res->notices);
    assert_int_equal(res->n_notices, 0);
    oom_plan_result_dispose(res); /* twice is fine */
    oom_plan_result_dispose(NULL);
    oom_plan_choice_dispose(NULL);
    oom_plan_free(res);
    oom_workload_free(w);
}

/* A struct of version 0 (not initialised) or of a version newer than the library is refused
 * with OOM_EINVAL and a message naming the struct and the version; _init sets the version. */
static void test_struct_versions(void **state)
{
    oom_workload *w = W(&GPU_A100, "model", "llama-3.1-8b", "method", "lora");
    oom_plan_request r = request(w, &GPU_A100, 80);
    oom_plan_result *res = NULL;
    oom_measured_line line = OOM_MEASURED_LINE_INIT;
    oom_budget b;
    char *json = NULL;
    (void)state;

    r.version = 0;
    assert_int_equal(oom_plan_run(&res, &r), OOM_EINVAL);
    assert_null(res);
    assert_non_null(strstr(oom_last_message(), "oom_plan_request: version 0"));
    r.version = 999;
    assert_int_equal(oom_plan_run(&res, &r), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "oom_plan_request: version 999"));
    r.version = OOM_PLAN_REQUEST_VERSION;
    r.workload = NULL;
    r.line = &line;
    line.fixed_bytes = OOM_GiB;
    line.version = 999;
    assert_int_equal(oom_plan_run(&res, &r), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "oom_measured_line: version 999"));
    r.line = NULL;
    r.workload = w;
    res = plan_ok(&r);
    res->version = 999; /* as a result from a newer library would say */
    assert_int_equal(oom_plan_to_json(&json, res), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "oom_plan_result: version 999"));
    res->version = OOM_PLAN_RESULT_VERSION;
    assert_int_equal(oom_plan_to_json(&json, res), OOM_OK);
    oom_free(json);
    oom_plan_free(res);

    /* _init: known versions only; zero-fills and sets the version */
    assert_int_equal(oom_budget_init(&b, 0), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "oom_budget: version 0"));
    assert_int_equal(oom_budget_init(&b, 999), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "oom_budget: version 999"));
    b.usable_bytes = 5;
    assert_int_equal(oom_budget_init(&b, OOM_BUDGET_VERSION), OOM_OK);
    assert_int_equal(b.version, OOM_BUDGET_VERSION);
    assert_int_equal(b.usable_bytes, 0);
    b.version = 0;
    assert_int_equal(oom_budget_make(&b, 2 * OOM_GiB, OOM_GiB), OOM_EINVAL);
    assert_int_equal(oom_plan_request_init(&r, 999), OOM_EINVAL);
    assert_int_equal(oom_plan_request_init(&r, OOM_PLAN_REQUEST_VERSION), OOM_OK);
    assert_int_equal(r.allow, OOM_ALLOW_DEFAULT);
    assert_int_equal(r.nodes, 1);
    assert_int_equal(r.budget.version, OOM_BUDGET_VERSION);

    /* an older caller's result is smaller: _init writes only the bytes of its version, which
     * end where the next version's first field starts */
    {
        unsigned char buf[sizeof(oom_plan_result) + 1];
        static const size_t end[] = {offsetof(oom_plan_result, others_bytes),
                                     offsetof(oom_plan_result, fit_confidence),
                                     offsetof(oom_plan_result, kv_full_layers),
                                     offsetof(oom_plan_result, serve_max_num_seqs),
                                     offsetof(oom_plan_result, rollout_sleep_level),
                                     offsetof(oom_plan_result, packing),
                                     offsetof(oom_plan_result, stack),
                                     sizeof(oom_plan_result)};
        unsigned v;
        assert_int_equal(sizeof(end) / sizeof(end[0]), OOM_PLAN_RESULT_VERSION);
        for (v = 1; v <= sizeof(end) / sizeof(end[0]); v++) {
            memset(buf, 0xAB, sizeof(buf));
            assert_int_equal(oom_plan_result_init((oom_plan_result *)(void *)buf, v), OOM_OK);
            assert_int_equal(buf[end[v - 1] - 1], 0);
            assert_int_equal(buf[end[v - 1]], 0xAB);
        }
    }

    /* the sizes bindings check their declarations against */
    assert_int_equal(oom_struct_size("oom_plan_result"), sizeof(oom_plan_result));
    assert_int_equal(oom_struct_size("oom_plan_request"), sizeof(oom_plan_request));
    assert_int_equal(oom_struct_size("oom_no_such_struct"), 0);
    assert_int_equal(oom_struct_size(NULL), 0);
    oom_workload_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_maximal_micro_batch),
        cmocka_unit_test(test_exact_effective_batch),
        cmocka_unit_test(test_inexact),
        cmocka_unit_test(test_overrides_never_raised),
        cmocka_unit_test(test_downscale),
        cmocka_unit_test(test_multi_gpu_sharding),
        cmocka_unit_test(test_inference),
        cmocka_unit_test(test_tensor_parallel),
        cmocka_unit_test(test_measured_line),
        cmocka_unit_test(test_workers),
        cmocka_unit_test(test_impossible),
        cmocka_unit_test(test_no_bf16),
        cmocka_unit_test(test_loss_and_attention),
        cmocka_unit_test(test_awkward_effective_batch),
        cmocka_unit_test(test_json_and_formats),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_whole_strings),
        cmocka_unit_test(test_struct_versions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
