/* test_estimate_report.c - oom_estimate_report: the estimate with everything `oomless estimate`
 * says about it, field for field the figures of the estimate's JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "oomless.h"
#include "unit/workload.h"

static json_object *get(json_object *o, const char *path)
{
    char key[64];
    const char *dot;
    while (o && (dot = strchr(path, '.'))) {
        snprintf(key, sizeof key, "%.*s", (int)(dot - path), path);
        o = json_object_object_get_ex(o, key, &o) ? o : NULL;
        path = dot + 1;
    }
    return o && json_object_object_get_ex(o, path, &o) ? o : NULL;
}

static uint64_t num(json_object *root, const char *path)
{
    json_object *v = get(root, path);
    if (!v)
        fail_msg("no %s in the estimate's JSON", path);
    return (uint64_t)json_object_get_int64(v);
}

static const char *str(json_object *root, const char *path)
{
    json_object *v = get(root, path);
    return v ? json_object_get_string(v) : NULL;
}

static void same_str(const char *report, const char *json, const char *what)
{
    if (!report != !json || (report && strcmp(report, json)))
        fail_msg("%s: report '%s', JSON '%s'", what, report ? report : "(null)",
                 json ? json : "(null)");
}

/* the report of w against a 24 GiB budget, and the JSON of its estimate */
static json_object *report_and_json(oom_estimate_report *r, oom_workload *w)
{
    oom_budget b = OOM_BUDGET_INIT;
    oom_estimate e = run(w);
    char *text = NULL;
    json_object *root;

    b.target_bytes = 24ULL << 30, b.safety_margin_bytes = 1ULL << 30;
    b.usable_bytes = b.target_bytes - b.safety_margin_bytes;
    assert_int_equal(oom_estimate_report_run(r, w, &b), OOM_OK);
    assert_memory_equal(&r->estimate, &e, sizeof e);
    assert_int_equal(oom_estimate_to_json_budget(&text, w, &r->estimate, &b), OOM_OK);
    assert_non_null(root = json_tokener_parse(text));
    oom_free(text);
    assert_int_equal(r->has_budget, 1);
    assert_int_equal(r->fits, e.device_peak <= b.usable_bytes);
    assert_int_equal(r->fits, json_object_get_boolean(get(root, "budget.fits")));
    return root;
}

/* the figures the text prints from the report are the JSON's */
static void check_common(const oom_estimate_report *r, json_object *root)
{
    assert_int_equal(r->device_peak_upper95, num(root, "memory.device_peak_upper95"));
    assert_int_equal(r->allocated_peak_upper95, num(root, "memory.allocated_peak_upper95"));
    assert_int_equal(r->confidence_cases, num(root, "confidence.cases"));
    same_str(r->confidence_class, str(root, "confidence.class"), "class");
    same_str(r->confidence_basis, str(root, "confidence.basis"), "basis");
    same_str(r->checkpointing, str(root, "workload.checkpointing"), "checkpointing");
    same_str(r->sharding, str(root, "workload.sharding"), "sharding");
    same_str(r->model, str(root, "model.name"), "model");
    same_str(r->family, str(root, "model.family"), "family");
    assert_int_equal(r->cublas_workspace_bytes, num(root, "cublas_workspace.bytes"));
    assert_int_equal(r->cublas_workspace_default,
                     json_object_get_boolean(get(root, "cublas_workspace.default")));
    assert_true(r->device_peak_upper95 > r->estimate.device_peak);
}

static void test_qlora(void **state)
{
    oom_workload *w =
        W("model=llama-3.1-8b", "method=qlora", "seq=2048", "optimizer=paged-adamw-8bit");
    oom_estimate_report r = OOM_ESTIMATE_REPORT_INIT;
    json_object *root = report_and_json(&r, w);
    (void)state;
    check_common(&r, root);
    assert_int_equal(r.has_qlora, 1);
    assert_int_equal(r.quantized, 1);
    assert_int_equal(r.double_quant, 1); /* qlora: double quantization by default */
    assert_int_equal(r.nf4_bytes, num(root, "qlora.nf4_bytes"));
    assert_int_equal(r.absmax_bytes, num(root, "qlora.absmax_bytes"));
    assert_int_equal(r.absmax2_bytes, num(root, "qlora.absmax2_bytes"));
    assert_int_equal(r.unquantized_bytes, num(root, "qlora.unquantized_bytes"));
    assert_int_equal(r.dequantized_bytes, num(root, "qlora.dequantized_transient_bytes"));
    assert_int_equal(r.adapter_bytes, num(root, "qlora.adapter_bytes"));
    same_str(r.adapter_dtype, "fp32", "adapter dtype");
    /* rank-16 adapters are below the 100,000 elements bitsandbytes pages from */
    assert_int_equal(r.paged_optimizer_bytes, 0);
    assert_int_equal(r.paged_optimizer_bytes, num(root, "qlora.paged_optimizer_bytes"));
    assert_null(r.objective);
    assert_null(r.packing);
    assert_null(r.fsdp_param_dtype);
    assert_int_equal(r.overhead_given, 0);
    assert_int_equal(r.cuda_context_bytes, r.estimate.overhead); /* one GPU: no NCCL */
    assert_int_equal(r.nccl_gpus, 0);
    json_object_put(root);
    oom_estimate_report_dispose(&r);
    oom_estimate_report_dispose(&r); /* twice is fine */
    oom_workload_free(w);

    /* a full fine-tune's paged states: the part without a quantised base or adapters */
    w = W("model=llama-3.1-8b", "optimizer=paged-adamw-8bit");
    root = report_and_json(&r, w);
    assert_int_equal(r.has_qlora, 1);
    assert_int_equal(r.quantized, 0);
    assert_null(r.adapter_dtype);
    assert_true(r.paged_optimizer_bytes > 8ULL << 30);
    assert_int_equal(r.paged_optimizer_bytes, num(root, "qlora.paged_optimizer_bytes"));
    json_object_put(root);
    oom_estimate_report_dispose(&r);
    oom_workload_free(w);
}

static void test_objective_and_packing(void **state)
{
    oom_workload *w = W("model=qwen2.5-0.5b", "method=lora", "objective=dpo", "batch=3",
                        "reference=copy", "reference-precision=bf16");
    oom_estimate_report r = OOM_ESTIMATE_REPORT_INIT;
    json_object *root = report_and_json(&r, w);
    (void)state;
    check_common(&r, root);
    same_str(r.objective, "dpo", "objective");
    same_str(r.batch_counts, "pairs", "batch counts");
    assert_int_equal(r.sequences_per_forward, 6);
    same_str(r.reference, "copy", "reference");
    same_str(r.reference_precision, "bf16", "reference precision");
    assert_null(r.rollout);
    assert_int_equal(r.generation_batch, 0);
    json_object_put(root);
    oom_estimate_report_dispose(&r);
    oom_workload_free(w);

    w = W("model=qwen2.5-0.5b", "method=lora", "objective=grpo", "batch=8", "grad-accum=2",
          "seq=1024", "completion-len=256", "num-generations=4");
    root = report_and_json(&r, w);
    same_str(r.objective, "grpo", "objective");
    same_str(r.rollout, "none", "rollout");
    assert_int_equal(r.generation_batch, 16);
    assert_int_equal(r.num_generations, 4);
    assert_int_equal(r.prompt_len, 768);
    assert_int_equal(r.completion_len, 256);
    assert_int_equal(r.generation_batch, num(root, "workload.objective.generation_batch"));
    json_object_put(root);
    oom_estimate_report_dispose(&r);
    oom_workload_free(w);

    w = W("model=llama-3.2-1b", "method=full", "batch=4", "seq=1024", "packing=padding-free",
          "attention=flash");
    root = report_and_json(&r, w);
    same_str(r.packing, "padding-free", "packing");
    assert_int_equal(r.tokens_per_batch, 4096);
    assert_int_equal(r.pack_rows, 1);
    assert_int_equal(r.pack_row_tokens, 4096);
    assert_int_equal(r.longest_document, 1024);
    same_str(r.attention_path, "varlen kernel, no mask", "attention path");
    same_str(r.attention_path, str(root, "workload.packing.attention_path"), "attention path");
    assert_int_equal(r.has_qlora, 0); /* a full fine-tune, no paged optimizer */
    json_object_put(root);
    oom_estimate_report_dispose(&r);
    oom_workload_free(w);
}

static void test_sharding_and_overhead(void **state)
{
    oom_workload *w = W("model=llama-3.1-8b", "gpus=8", "sharding=fsdp2", "fsdp-param-dtype=bf16",
                        "reshard-after-forward=no", "nccl-channels=16");
    oom_estimate_report r = OOM_ESTIMATE_REPORT_INIT;
    json_object *root = report_and_json(&r, w), *parts;
    (void)state;
    check_common(&r, root);
    same_str(r.sharding, "fsdp2", "sharding");
    same_str(r.fsdp_param_dtype, "bf16", "fsdp dtype");
    same_str(r.reshard_after_forward, "no", "reshard");
    assert_int_equal(r.nccl_gpus, 8);
    assert_int_equal(r.nccl_channels, 16);
    assert_int_equal(r.nccl_communicators, num(root, "overhead.nccl.communicators"));
    assert_int_equal(r.nccl_ring_bytes, num(root, "overhead.nccl.ring_bytes"));
    assert_int_equal(r.nccl_nvls_bytes, num(root, "overhead.nccl.nvls_bytes"));
    assert_non_null(r.nccl_defaults); /* the buffer size and NVLS were not given */
    assert_non_null(parts = get(root, "overhead.parts"));
    assert_int_equal(json_object_array_length(parts), 2);
    assert_int_equal(r.cuda_context_bytes,
                     json_object_get_int64(get(json_object_array_get_idx(parts, 0), "bytes")));
    assert_int_equal(r.nccl_bytes,
                     json_object_get_int64(get(json_object_array_get_idx(parts, 1), "bytes")));
    json_object_put(root);
    oom_estimate_report_dispose(&r);
    oom_workload_free(w);

    w = W("model=llama-3.1-8b", "method=inference", "tensor-parallel=2", "overhead=300MiB");
    root = report_and_json(&r, w);
    assert_int_equal(r.tensor_parallel, 2);
    assert_int_equal(r.overhead_given, 1);
    assert_int_equal(r.estimate.overhead, 300ULL << 20);
    assert_int_equal(r.cuda_context_bytes, 0);
    assert_int_equal(r.nccl_gpus, 0);
    json_object_put(root);
    oom_estimate_report_dispose(&r);
    oom_workload_free(w);
}

static void test_versions_and_failures(void **state)
{
    oom_workload *w = W("model=gpt2");
    oom_estimate_report r = {0};
    (void)state;
    assert_int_equal(oom_estimate_report_run(&r, w, NULL), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "oom_estimate_report"));
    assert_int_equal(oom_estimate_report_init(&r, OOM_ESTIMATE_REPORT_VERSION), OOM_OK);
    assert_int_equal(oom_estimate_report_run(&r, w, NULL), OOM_OK);
    assert_int_equal(r.version, OOM_ESTIMATE_REPORT_VERSION);
    assert_int_equal(r.has_budget, 0);
    assert_int_equal(r.fits, 0);
    oom_estimate_report_dispose(&r);
    oom_estimate_report_dispose(NULL);
    oom_workload_free(w);
    /* an impossible combination fails as the estimate does, and the report owns nothing */
    w = W("model=llama-3.1-8b", "method=inference", "tensor-parallel=3");
    assert_int_not_equal(oom_estimate_report_run(&r, w, NULL), OOM_OK);
    assert_null(r.model);
    assert_null(r.checkpointing);
    oom_workload_free(w);
}

/* a caller built against version 1 passes the smaller struct: nothing is written past it, and
 * version 2 says which bias across setups the bound took */
static void test_version_1_caller(void **state)
{
    const size_t v1 = offsetof(oom_estimate_report, confidence_spread);
    oom_workload *w = W("model=gpt2", "method=lora");
    oom_estimate_report r;
    unsigned char *buf = malloc(sizeof(r));
    size_t i;
    (void)state;
    assert_non_null(buf);
    memset(buf, 0xa5, sizeof(r));
    assert_int_equal(oom_estimate_report_init((oom_estimate_report *)buf, 1), OOM_OK);
    assert_int_equal(oom_estimate_report_run((oom_estimate_report *)buf, w, NULL), OOM_OK);
    for (i = v1; i < sizeof(r); i++)
        assert_int_equal(buf[i], 0xa5);
    memcpy(&r, buf, v1);
    assert_true(r.device_peak_upper95 > r.estimate.device_peak);
    oom_estimate_report_dispose((oom_estimate_report *)buf);
    free(buf);
    assert_int_equal(oom_estimate_report_init(&r, 2), OOM_OK);
    assert_int_equal(oom_estimate_report_run(&r, w, NULL), OOM_OK);
    assert_non_null(r.confidence_spread);
    assert_true(r.confidence_spread_sources > 0);
    oom_estimate_report_dispose(&r);
    assert_null(r.confidence_spread);
    oom_workload_free(w);
}

/* a version 2 caller of a 4-bit base: nothing written past version 2, where version 3 names the
 * quantizer and the bitsandbytes release, and what 0.43's 4-bit linears keep */
static void test_version_2_caller(void **state)
{
    const size_t v2 = offsetof(oom_estimate_report, quantizer);
    oom_workload *w = W("model=llama-3.2-1b", "method=qlora", "seq=256", "bitsandbytes=0.43");
    oom_workload *w44 = W("model=llama-3.2-1b", "method=qlora", "seq=256");
    oom_estimate_report r = OOM_ESTIMATE_REPORT_INIT, r44 = OOM_ESTIMATE_REPORT_INIT;
    unsigned char *buf = malloc(sizeof(r));
    size_t i;
    (void)state;
    assert_non_null(buf);
    memset(buf, 0xa5, sizeof(r));
    assert_int_equal(oom_estimate_report_init((oom_estimate_report *)buf, 2), OOM_OK);
    assert_int_equal(oom_estimate_report_run((oom_estimate_report *)buf, w, NULL), OOM_OK);
    for (i = v2; i < sizeof(r); i++)
        assert_int_equal(buf[i], 0xa5);
    oom_estimate_report_dispose((oom_estimate_report *)buf);
    free(buf);
    assert_int_equal(oom_estimate_report_run(&r, w, NULL), OOM_OK);
    assert_int_equal(oom_estimate_report_run(&r44, w44, NULL), OOM_OK);
    assert_string_equal(r.quantizer, "transformers");
    assert_string_equal(r.bitsandbytes, "0.43");
    assert_string_equal(r44.bitsandbytes, "0.44");
    assert_int_equal(r44.kept_inputs_bytes, 0);
    /* what 0.43 keeps is what it adds to the activations */
    assert_true(r.kept_inputs_bytes > 0);
    assert_int_equal(r.kept_inputs_bytes, r.estimate.activations - r44.estimate.activations);
    oom_estimate_report_dispose(&r), oom_estimate_report_dispose(&r44);
    assert_null(r.quantizer);
    oom_workload_free(w), oom_workload_free(w44);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qlora),
        cmocka_unit_test(test_objective_and_packing),
        cmocka_unit_test(test_sharding_and_overhead),
        cmocka_unit_test(test_versions_and_failures),
        cmocka_unit_test(test_version_1_caller),
        cmocka_unit_test(test_version_2_caller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
