/* test_estimate.c - workloads, model configs, the memory model's arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "estimate/estimate.h"
#include "oomless.h"
#include "unit/tmpdir.h"
#include "unit/workload.h"

static void params_near(const char *model, double published)
{
    oom_workload *w = W(model);
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    double rel;
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    rel = fabs((double)mi.params - published) / published;
    if (rel > 0.005)
        fail_msg("%s: %llu params, published %.0f (%.2f%% off)", model,
                 (unsigned long long)mi.params, published, rel * 100);
    oom_workload_free(w);
}

static void test_param_counts(void **state)
{
    (void)state;
    params_near("model=gpt2", 124439808);
    params_near("model=bert-large", 335e6);
    params_near("model=llama-2-7b", 6.74e9);
    params_near("model=llama-3.1-8b", 8.03e9);
    params_near("model=mistral-7b", 7.24e9);
    params_near("model=mixtral-8x7b", 46.7e9);
    params_near("model=llama-2-70b", 68.98e9);
    params_near("model=qwen2.5-7b", 7.62e9);
    params_near("model=gemma-2-9b", 9.24e9);
    params_near("model=phi-3-mini", 3.82e9);
    params_near("model=falcon-7b", 6.92e9);
    params_near("model=t5-base", 222.9e6);
    params_near("model=roberta-base", 124.6e6);
}

static void test_exact_counts(void **state)
{
    oom_workload *w = W("model=llama-2-7b");
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    (void)state;
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    assert_int_equal(mi.params, 6738415616ULL); /* LlamaForCausalLM, Llama-2-7b */
    assert_string_equal(mi.family, "llama");
    assert_string_equal(mi.head, "causal-lm");
    oom_workload_free(w);
    w = W("model=gpt2");
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    assert_int_equal(mi.params, 124439808ULL);
    oom_workload_free(w);
    /* Qwen3 (q_norm, k_norm, no qkv bias): the model cards give 0.6B with 0.44B non-embedding
     * (embeddings tied) and 8.2B with 6.95B non-embedding (untied); the exact totals are
     * transformers' Qwen3ForCausalLM parameter counts (oomless trace counts the same) */
    w = W("model=qwen3-0.6b");
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    assert_int_equal(mi.params, 596049920ULL);
    assert_string_equal(mi.family, "qwen3");
    oom_workload_free(w);
    w = W("model=qwen3-8b");
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    assert_int_equal(mi.params, 8190735360ULL);
    assert_int_equal(mi.params - 2ULL * 151936 * 4096, 6946075648ULL);
    oom_workload_free(w);
    /* Gemma 3 1B (gemma3_text: four norms per layer, q/k norms, tied): keras-hub's gemma3_1b
     * preset publishes 999,885,952 parameters */
    w = W("model=gemma-3-1b");
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    assert_int_equal(mi.params, 999885952ULL);
    assert_string_equal(mi.family, "gemma3_text");
    oom_workload_free(w);
    /* Qwen3-30B-A3B (qwen3_moe: 128 experts of width 768, 8 per token, q/k norms, untied):
     * 30.5 B in the model card; the exact total is transformers' Qwen3MoeForCausalLM count */
    w = W("model=qwen3-30b-a3b");
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    assert_int_equal(mi.params, 30532122624ULL);
    assert_string_equal(mi.family, "qwen3_moe");
    oom_workload_free(w);
    /* Gemma 3 12B as published (gemma3: a gemma3_text language model with Gemma3TextConfig's
     * defaults for what its text_config leaves out, a SigLIP tower and projector of 421,290,864):
     * transformers' Gemma3ForConditionalGeneration counts 12,187,325,040; text-only training
     * trains the 11,766,034,176 of the language model (the tower gets no gradient) */
    w = W("model=gemma-3-12b", "method=full", "precision=bf16");
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    assert_int_equal(mi.params, 12187325040ULL);
    assert_string_equal(mi.family, "gemma3_text");
    {
        oom_estimate e = run(w);
        assert_int_equal(e.params_total, 12187325040ULL);
        assert_int_equal(e.params_trainable, 11766034176ULL);
    }
    oom_workload_free(w);
}

/* The presets of Llama 3.3, Qwen3 dense, Gemma 2 27B and Gemma 3 (multimodal, as published),
 * Phi-3.5/Phi-4, Mistral Nemo and Small 3, SmolLM2 and the DeepSeek-R1 distills: each the count
 * transformers gives for the same config.json (AutoModelForCausalLM, or
 * AutoModelForImageTextToText for Gemma 3, built on the meta device), and within 0.5% of what the
 * model card states where it states it closer than the size in the name */
static void test_preset_counts(void **state)
{
    static const struct {
        const char *model;
        uint64_t transformers;
        double card; /* 0: the model card gives only the size in the name */
    } presets[] = {
        {"model=llama-3.3-70b", 70553706496ULL, 70.6e9},
        {"model=qwen3-1.7b", 1720574976ULL, 0},
        {"model=qwen3-4b", 4022468096ULL, 0},
        {"model=qwen3-14b", 14768307200ULL, 14.8e9},
        {"model=qwen3-32b", 32762123264ULL, 32.8e9},
        {"model=gemma-2-27b", 27227128320ULL, 0},
        {"model=gemma-3-4b", 4300079472ULL, 4.30e9},
        {"model=gemma-3-27b", 27432406640ULL, 0},
        {"model=phi-3.5-mini", 3821079552ULL, 0},
        {"model=phi-4", 14659507200ULL, 14.7e9},
        {"model=mistral-nemo", 12247782400ULL, 0},
        {"model=mistral-small-3", 23572403200ULL, 0},
        {"model=smollm2-135m", 134515008ULL, 0},
        {"model=smollm2-360m", 361821120ULL, 0},
        {"model=smollm2-1.7b", 1711376384ULL, 0},
        {"model=deepseek-r1-distill-llama-8b", 8030261248ULL, 8.03e9},
        {"model=deepseek-r1-distill-qwen-7b", 7615616512ULL, 7.62e9},
        {"model=deepseek-r1-distill-qwen-32b", 32763876352ULL, 0},
        {"model=deepseek-v2-lite", 15706484224ULL, 0},
        {"model=llama-4-scout-17b-16e", 108641793536ULL, 0},
        {"model=llama-4-maverick-17b-128e", 401583781376ULL, 0},
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof(presets) / sizeof(*presets); i++) {
        oom_workload *w = W(presets[i].model);
        oom_model_info mi = OOM_MODEL_INFO_INIT;
        assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
        if (mi.params != presets[i].transformers)
            fail_msg("%s: %llu parameters, transformers counts %llu", presets[i].model,
                     (unsigned long long)mi.params, (unsigned long long)presets[i].transformers);
        oom_workload_free(w);
        if (presets[i].card > 0)
            params_near(presets[i].model, presets[i].card);
    }
}

/* The parameters the estimator counts for a config.json given as text (written to a temp file) */
static uint64_t config_params(const char *cfg)
{
    char *path = test_write_tmp(cfg), model[600];
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    oom_workload *w;
    assert_non_null(path);
    snprintf(model, sizeof(model), "model=%s", path);
    w = W(model, "seq=128");
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    oom_workload_free(w);
    unlink(path);
    return mi.params;
}

/* A mixture of experts with a dense first layer (mlp_only_layers): counted by hand, layer 0 with
 * its own MLP of intermediate_size, layer 1 with the router and four experts of
 * moe_intermediate_size; transformers' Qwen3MoeForCausalLM counts the same 87,168 */
static void test_moe_dense_layers(void **state)
{
    static const char cfg[] =
        "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\", "
        "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"head_dim\": 16, \"intermediate_size\": 128, "
        "\"moe_intermediate_size\": 32, \"num_experts\": 4, \"num_experts_per_tok\": 2, "
        "\"decoder_sparse_step\": 1, \"mlp_only_layers\": [0], \"vocab_size\": 100, "
        "\"max_position_embeddings\": 256, \"tie_word_embeddings\": false}";
    const uint64_t embed = 2 * 100 * 64, attn = 4096 + 2048 + 2048 + 4096 + 2 * 64 + 2 * 16;
    const uint64_t dense = 3 * 64 * 128, moe = 64 * 4 + 4 * 3 * 64 * 32;
    uint64_t params = config_params(cfg);
    (void)state;
    assert_int_equal(params, embed + 2 * attn + dense + moe + 64);
    assert_int_equal(params, 87168);
}

/* Qwen2-MoE: q/k/v biases, a gated shared expert of its own width beside the routed ones in
 * the layers with experts (0 and 2; layer 1 dense): transformers' Qwen2MoeForCausalLM counts
 * the same 143,296 */
static void test_moe_shared_expert(void **state)
{
    static const char cfg[] =
        "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"model_type\": \"qwen2_moe\", "
        "\"hidden_size\": 64, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"intermediate_size\": 128, \"moe_intermediate_size\": 32, "
        "\"shared_expert_intermediate_size\": 48, \"num_experts\": 4, "
        "\"num_experts_per_tok\": 2, \"mlp_only_layers\": [1], \"vocab_size\": 100, "
        "\"max_position_embeddings\": 256, \"tie_word_embeddings\": false}";
    const uint64_t embed = 2 * 100 * 64, attn = 4096 + 64 + 2 * (2048 + 32) + 4096 + 2 * 64;
    const uint64_t routed = 64 * 4 + 4 * 3 * 64 * 32, shared = 3 * 64 * 48 + 64;
    uint64_t params = config_params(cfg);
    (void)state;
    assert_int_equal(params, embed + 3 * attn + 2 * (routed + shared) + 3 * 64 * 128 + 64);
    assert_int_equal(params, 143296);
}

/* KV cache bytes per token in 16-bit: 2 * layers * kv_heads * head_dim * 2 */
static void kv_per_token(const char *model, uint64_t want)
{
    oom_workload *w = W(model, "method=inference", "precision=bf16", "seq=1000", "batch=3");
    oom_estimate e = run(w);
    assert_int_equal(e.kv_cache, want * 1000 * 3);
    assert_int_equal(e.gradients, 0);
    assert_int_equal(e.optimizer, 0);
    assert_int_equal(e.params_trainable, 0);
    assert_int_equal(e.peak_phase, OOM_PHASE_PREFILL);
    oom_workload_free(w);
}

static void test_kv_cache(void **state)
{
    (void)state;
    kv_per_token("model=llama-2-7b", 512 * OOM_KiB);
    kv_per_token("model=llama-3.1-8b", 128 * OOM_KiB);
    kv_per_token("model=mistral-7b", 128 * OOM_KiB);
}

/* ZeRO on 8 GPUs, 16-bit parameters with fp32 master + Adam states (K = 12): seq 8 so the
 * optimizer step is the peak and the fields hold the model states */
static void zero_case(const char *sharding, double w_div, double g_div, double o_div)
{
    oom_workload *w =
        W("model=llama-2-7b", "precision=bf16", "optimizer=adamw", "seq=8", "gpus=8", sharding);
    oom_estimate e = run(w);
    double P = 6738415616.0;
    assert_int_equal(e.peak_phase, OOM_PHASE_OPTIMIZER);
    assert_true(fabs((double)e.weights - 2 * P / w_div) < 2);
    assert_true(fabs((double)e.gradients - 2 * P / g_div) < 2);
    assert_true(fabs((double)e.optimizer - 12 * P / o_div) < 2);
    oom_workload_free(w);
}

static void test_zero(void **state)
{
    oom_workload *w;
    oom_estimate e = OOM_ESTIMATE_INIT;
    (void)state;
    zero_case("sharding=zero1", 1, 1, 8);
    zero_case("sharding=zero2", 1, 8, 8);
    zero_case("sharding=zero3", 8, 8, 8);
    /* DDP: full states per GPU, torch AdamW states in the parameter dtype, gradient buckets */
    w = W("model=llama-2-7b", "precision=bf16", "seq=8", "gpus=8");
    e = run(w);
    assert_int_equal(e.optimizer, 4 * 6738415616ULL);
    assert_int_equal(e.gradients, 2 * 2 * 6738415616ULL);
    oom_workload_free(w);
    /* optimizer offload removes the states */
    w = W("model=llama-2-7b", "precision=bf16", "seq=8", "gpus=8", "sharding=zero2",
          "offload=optimizer");
    e = run(w);
    assert_int_equal(e.optimizer, 0);
    oom_workload_free(w);
}

static void test_full_fp32_states(void **state)
{
    oom_workload *w = W("model=gpt2", "precision=fp32", "seq=8", "optimizer=adamw-fused");
    oom_estimate e = run(w);
    (void)state;
    /* without step temporaries the end of backward (all gradients + one layer) is the peak */
    assert_int_equal(e.peak_phase, OOM_PHASE_BACKWARD);
    assert_int_equal(e.weights, 4 * 124439808ULL);
    assert_int_equal(e.gradients, 4 * 124439808ULL);
    assert_int_equal(e.optimizer, 8 * 124439808ULL);
    assert_int_equal(e.temporaries, 8519680); /* the cuBLAS workspace alone (:4096:2:16:8) */
    assert_true(e.activations > 0 && e.activations < 4 * OOM_MiB);
    assert_int_equal(e.allocated_peak, 16 * 124439808ULL + e.activations + e.temporaries);
    assert_true(e.reserved_peak >= e.allocated_peak);
    assert_int_equal(e.reserved_peak % (2 * OOM_MiB), 0);
    assert_int_equal(e.device_peak, e.reserved_peak + e.overhead);
    oom_workload_free(w);
}

static void lora_trainable(const char *model, const char *targets, const char *rank, uint64_t want)
{
    oom_workload *w = W(model, "method=lora", targets, rank);
    oom_estimate e = run(w);
    assert_int_equal(e.params_trainable, want);
    oom_workload_free(w);
}

static void test_lora(void **state)
{
    oom_workload *w;
    oom_estimate e = OOM_ESTIMATE_INIT;
    (void)state;
    /* PEFT's print_trainable_parameters for these */
    lora_trainable("model=llama-2-7b", "lora-targets=q_proj,v_proj", "lora-rank=8", 4194304);
    lora_trainable("model=llama-3.1-8b", "lora-targets=default", "lora-rank=16", 6815744);
    lora_trainable("model=llama-3.1-8b", "lora_targets=all-linear", "lora_rank=16", 41943040);
    lora_trainable("model=gpt2", "lora-targets=c_attn", "lora-rank=8", 12 * 8 * (768 + 2304));
    /* QLoRA: NF4 linears (double-quantised by default, 0.5625 B without), 16-bit rest, fp32
     * adapters */
    w = W("model=llama-2-7b", "method=qlora", "lora-rank=8", "seq=8", "batch=1");
    e = run(w);
    {
        double linear = 32.0 * (4 * 4096.0 * 4096 + 3 * 4096.0 * 11008);
        double other = 6738415616.0 - linear;
        double want = linear * (0.5 + 1.0 / 64 + 4.0 / 16384) + other * 2 + 4194304.0 * 4;
        assert_true(fabs((double)e.weights - want) < 2);
        oom_workload_free(w);
        w = W("model=llama-2-7b", "method=qlora", "lora-rank=8", "seq=8", "double-quant=no");
        e = run(w);
        want = linear * 0.5625 + other * 2 + 4194304.0 * 4;
        assert_true(fabs((double)e.weights - want) < 2);
    }
    assert_int_equal(e.optimizer, 8 * 4194304ULL);
    oom_workload_free(w);
    /* QLoRA under any 16-bit precision knob is the same 16-bit compute */
    {
        oom_workload *a = W("model=llama-2-7b", "method=qlora", "seq=1024");
        oom_workload *b = W("model=llama-2-7b", "method=qlora", "seq=1024", "precision=amp-bf16");
        oom_estimate ea = run(a), eb = run(b);
        assert_int_equal(ea.device_peak, eb.device_peak);
        oom_workload_free(a);
        oom_workload_free(b);
    }
}

static uint64_t peak_with(const char *batch, const char *seq, const char *ckpt, uint64_t *acts)
{
    oom_workload *w = W("model=llama-3.2-1b", batch, seq, ckpt);
    oom_estimate e = run(w);
    oom_workload_free(w);
    if (acts)
        *acts = e.activations;
    return e.device_peak;
}

static void test_monotonic(void **state)
{
    uint64_t none, sel, full, a_none, a_sel, a_full;
    (void)state;
    /* small steps: the optimizer step may be the peak, so the device peak only never falls */
    assert_true(peak_with("batch=1", "seq=512", "checkpointing=none", NULL) <=
                peak_with("batch=2", "seq=512", "checkpointing=none", NULL));
    assert_true(peak_with("batch=2", "seq=512", "checkpointing=none", NULL) <=
                peak_with("batch=2", "seq=1024", "checkpointing=none", NULL));
    assert_true(peak_with("batch=8", "seq=1024", "checkpointing=none", NULL) <
                peak_with("batch=8", "seq=2048", "checkpointing=none", NULL));
    assert_true(peak_with("batch=8", "seq=2048", "checkpointing=none", NULL) <
                peak_with("batch=16", "seq=2048", "checkpointing=none", NULL));
    none = peak_with("batch=4", "seq=2048", "checkpointing=none", &a_none);
    sel = peak_with("batch=4", "seq=2048", "checkpointing=selective", &a_sel);
    full = peak_with("batch=4", "seq=2048", "checkpointing=full", &a_full);
    assert_true(full < sel && sel <= none);
    assert_true(a_full < a_sel / 4 && a_sel <= a_none);
}

static void test_eager_and_chunked(void **state)
{
    /* batch 4: the backward (activations, logits) is the peak, not the optimizer step */
    oom_workload *a = W("model=llama-3.2-1b", "batch=4", "seq=2048", "attention=eager");
    oom_workload *b = W("model=llama-3.2-1b", "batch=4", "seq=2048", "attention=flash");
    oom_workload *c = W("model=llama-3.2-1b", "batch=4", "seq=2048", "loss=chunked");
    oom_estimate ea = run(a), eb = run(b), ec = run(c);
    (void)state;
    assert_true(ea.activations > eb.activations);
    assert_true(ec.logits < eb.logits / 2);
    oom_workload_free(a);
    oom_workload_free(b);
    oom_workload_free(c);
}

static void refused(oom_workload *w, const char *needle)
{
    oom_estimate e = OOM_ESTIMATE_INIT;
    assert_int_equal(oom_workload_validate(w), OOM_EINVAL);
    assert_int_equal(oom_estimate_run(&e, w), OOM_EINVAL);
    if (!strstr(oom_last_message(), needle))
        fail_msg("message '%s' lacks '%s'", oom_last_message(), needle);
    oom_workload_free(w);
}

static void test_impossible(void **state)
{
    oom_workload *w = W("model=gpt2");
    oom_estimate e = OOM_ESTIMATE_INIT;
    (void)state;
    assert_int_equal(oom_workload_set(w, "gpus", "0"), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "gpus"));
    assert_int_equal(oom_workload_set(w, "batch", "many"), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "many"));
    oom_workload_free(w);
    refused(W("model=llama-2-7b", "method=qlora", "precision=fp32"), "fp32");
    refused(W("model=gpt2", "lora-rank=8"), "lora-rank");
    refused(W("model=gpt2", "method=full", "precision=4bit"), "4bit");
    refused(W("model=gpt2", "seq=2048"), "2048");
    refused(W("model=gpt2", "offload=optimizer"), "offload");
    refused(W("model=gpt2", "method=lora", "lora-targets=q_proj"), "q_proj");
    w = W("model=gpt2", "seq=2048", "max-positions=4096");
    assert_int_equal(oom_workload_validate(w), OOM_OK);
    oom_workload_free(w);
    assert_int_equal(oom_workload_create(&w), OOM_OK);
    assert_int_equal(oom_estimate_run(&e, w), OOM_EINVAL); /* no model */
    oom_workload_free(w);
}

static void test_set_errors(void **state)
{
    oom_workload *w = W("model=gpt2", "batch=4");
    char *v = NULL;
    (void)state;
    assert_int_equal(oom_workload_set(w, "bogus", "1"), OOM_ENOTFOUND);
    assert_non_null(strstr(oom_last_message(), "bogus"));
    assert_int_equal(oom_workload_set(w, "precision", "fp12"), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "fp12"));
    assert_int_equal(oom_workload_set(w, "model", "no-such-model"), OOM_ENOTFOUND);
    assert_non_null(strstr(oom_last_message(), "no-such-model"));
    assert_int_equal(oom_workload_set(w, "grad_accum", "3"), OOM_OK);
    assert_int_equal(oom_workload_get(&v, w, "grad-accum"), OOM_OK);
    assert_string_equal(v, "3");
    oom_free(v);
    assert_int_equal(oom_workload_get(&v, w, "model"), OOM_OK); /* unchanged by the failure */
    assert_string_equal(v, "gpt2");
    oom_free(v);
    assert_int_equal(oom_workload_get(&v, w, "precision"), OOM_OK);
    assert_string_equal(v, "amp-bf16"); /* auto for full training */
    oom_free(v);
    oom_workload_free(w);
}

/* the option's value read back is `want` */
static void assert_option(const oom_workload *w, const char *key, const char *want)
{
    char *v = NULL;
    assert_int_equal(oom_workload_get(&v, w, key), OOM_OK);
    assert_string_equal(v, want);
    oom_free(v);
}

/* NCCL's buffers: none on one GPU; 32 channels x (SIMPLE + LL + LL128) on two; the options
 * move the overhead by exactly the buffers they change; the settings read back */
static void test_nccl_overhead(void **state)
{
    oom_workload *one = W("model=gpt2", "method=lora", "gpus=1");
    oom_workload *two = W("model=gpt2", "method=lora", "gpus=2");
    oom_workload *small =
        W("model=gpt2", "method=lora", "gpus=2", "nccl_buffsize=1048576", "nccl_channels=8");
    oom_workload *nvls = W("model=gpt2", "method=lora", "gpus=4", "nccl_nvls=yes");
    oom_estimate a = run(one), b = run(two), c = run(small), d = run(nvls);
    const double conn = 4194304.0 + 524288 + 4915200; /* SIMPLE + LL + LL128 */
    (void)state;
    assert_int_equal(b.overhead - a.overhead, (uint64_t)(32 * conn));
    assert_int_equal(c.overhead - a.overhead, (uint64_t)(8 * (conn - 3145728)));
    /* NVLS: 24 channels x 2 x (4 MiB + 2 MiB) x 4 GPUs, beside the ring */
    assert_int_equal(d.overhead - b.overhead, (uint64_t)24 * 2 * 6291456 * 4);
    assert_option(nvls, "nccl-nvls", "yes");
    assert_option(small, "nccl-buffsize", "1048576");
    assert_int_equal(oom_workload_set(two, "nccl-nvls", "maybe"), OOM_EINVAL);
    assert_int_equal(oom_workload_set(two, "nccl-buffsize", "0"), OOM_EINVAL);
    assert_int_equal(oom_workload_set(two, "nccl-channels", "0"), OOM_EINVAL);
    oom_workload_free(one), oom_workload_free(two), oom_workload_free(small);
    oom_workload_free(nvls);
}

/* CUBLAS_WORKSPACE_CONFIG's pairs summed, in the temporaries; malformed settings refused and
 * leave the workload as it was */
static void test_cublas_workspace(void **state)
{
    oom_workload *w = W("model=gpt2", "method=lora");
    oom_estimate a = run(w), b;
    (void)state;
    assert_int_equal(oom_workload_set(w, "cublas-workspace", ":4096:8"), OOM_OK);
    b = run(w);
    assert_int_equal(b.temporaries - a.temporaries, 33554432 - 8519680);
    assert_int_equal(b.allocated_peak - a.allocated_peak, 33554432 - 8519680);
    assert_option(w, "cublas-workspace", ":32768:1");
    assert_int_equal(oom_workload_set(w, "cublas-workspace", "4096:8"), OOM_EINVAL);
    assert_int_equal(oom_workload_set(w, "cublas-workspace", ":4096"), OOM_EINVAL);
    assert_int_equal(oom_workload_set(w, "cublas-workspace", ":4096:8:"), OOM_EINVAL);
    assert_int_equal(oom_workload_set(w, "cublas-workspace", ""), OOM_EINVAL);
    b = run(w);
    assert_int_equal(b.temporaries - a.temporaries, 33554432 - 8519680);
    oom_workload_free(w);
}

static void test_knobs_and_clone(void **state)
{
    oom_workload *w = W("model=llama-3.2-1b"), *c = NULL;
    oom_knobs k = OOM_KNOBS_INIT;
    oom_estimate a = OOM_ESTIMATE_INIT, b = OOM_ESTIMATE_INIT;
    (void)state;
    oom_workload_get_knobs(&k, w);
    assert_int_equal(k.batch, 1);
    assert_int_equal(k.precision, OOM_PRECISION_AMP_BF16);
    k.batch = 0;
    assert_int_equal(oom_workload_set_knobs(w, &k), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "batch"));
    k.batch = 8;
    k.checkpointing = (oom_checkpointing)7;
    assert_int_equal(oom_workload_set_knobs(w, &k), OOM_EINVAL);
    k.checkpointing = OOM_CHECKPOINTING_FULL;
    assert_int_equal(oom_workload_set_knobs(w, &k), OOM_OK);
    assert_int_equal(oom_workload_clone(&c, w), OOM_OK);
    k.batch = 1;
    assert_int_equal(oom_workload_set_knobs(w, &k), OOM_OK);
    a = run(w);
    b = run(c);
    /* the clone kept batch 8, the original has batch 1 again */
    assert_int_equal(a.tokens_per_step, 512);
    assert_int_equal(b.tokens_per_step, 8 * 512);
    assert_true(b.flops_per_token > 7.9 * 1.0e9 && b.flops_per_step > 0);
    oom_workload_free(w);
    oom_workload_free(c);
}

static void test_gpu_overhead(void **state)
{
    oom_gpu_profile h100 = {
        .version = OOM_GPU_PROFILE_VERSION, .id = "h100-sxm", .cc_major = 9, .cc_minor = 0};
    oom_gpu_profile v100 = {
        .version = OOM_GPU_PROFILE_VERSION, .id = "v100", .cc_major = 7, .cc_minor = 0};
    oom_workload *w = W("model=gpt2", "precision=fp32");
    oom_estimate a = OOM_ESTIMATE_INIT, b = OOM_ESTIMATE_INIT, c = OOM_ESTIMATE_INIT;
    (void)state;
    a = run(w);
    assert_int_equal(oom_workload_set_gpu(w, &h100), OOM_OK);
    b = run(w);
    assert_true(b.overhead > a.overhead);
    assert_int_equal(oom_workload_set(w, "overhead", "1343MiB"), OOM_OK);
    c = run(w);
    assert_int_equal(c.overhead, 1343 * OOM_MiB);
    assert_int_equal(oom_workload_set_gpu(w, &v100), OOM_OK);
    assert_int_equal(oom_workload_set(w, "precision", "amp-bf16"), OOM_OK);
    assert_int_equal(oom_workload_validate(w), OOM_EINVAL); /* no bf16 before Ampere */
    oom_workload_free(w);
}

static void bad_config(const char *file, int code, const char *needle)
{
    char path[1024];
    oom_workload *w = NULL;
    snprintf(path, sizeof(path), "%s/tests/data/%s", getenv("OOMLESS_SRC"), file);
    assert_int_equal(oom_workload_create(&w), OOM_OK);
    assert_int_equal(oom_workload_set(w, "model", path), code);
    if (!strstr(oom_last_message(), needle) || !strstr(oom_last_message(), file))
        fail_msg("message '%s' lacks '%s' or the file name", oom_last_message(), needle);
    oom_workload_free(w);
}

static void test_bad_configs(void **state)
{
    (void)state;
    bad_config("estimate_missing_key.json", OOM_EPARSE, "hidden_size");
    bad_config("estimate_unsupported.json", OOM_EUNSUPPORTED, "mamba");
    bad_config("estimate_truncated.json", OOM_EPARSE, "estimate_truncated.json");
    bad_config("estimate_bad_value.json", OOM_EPARSE, "n_embd");
    /* widths and counts are whole numbers: 2048.5 is not read as 2048 */
    bad_config("estimate_fractional.json", OOM_EPARSE, "hidden_size 2048.5 is not a whole number");
}

static void test_seq_cls_head(void **state)
{
    char path[1024];
    oom_workload *w = NULL;
    oom_estimate e = OOM_ESTIMATE_INIT;
    (void)state;
    snprintf(path, sizeof(path), "%s/tests/data/estimate_tiny_llama.json", getenv("OOMLESS_SRC"));
    assert_int_equal(oom_workload_create(&w), OOM_OK);
    assert_int_equal(oom_workload_set(w, "model", path), OOM_OK);
    assert_int_equal(oom_workload_set(w, "seq", "64"), OOM_OK);
    e = run(w);
    /* embed + 2 * (q,k,v,o + 3 MLP + 2 norms) + norm + score (256 x 3) */
    assert_int_equal(e.params_total, 1000 * 256 +
                                         2 * (256 * 256 * 2 + 256 * 128 * 2 + 3 * 256 * 512 + 512) +
                                         256 + 256 * 3);
    assert_int_equal(e.logits, 0); /* no vocabulary logits */
    oom_workload_free(w);
}

static void test_json(void **state)
{
    oom_workload *w = W("model=llama-3.1-8b", "method=lora", "seq=1024");
    oom_estimate e = run(w);
    char *text = NULL;
    json_object *root, *mem, *v;
    static const char *const keys[] = {
        "weights",     "gradients", "optimizer",      "activations",   "logits",     "kv_cache",
        "temporaries", "overhead",  "allocated_peak", "reserved_peak", "device_peak"};
    size_t i;
    (void)state;
    assert_int_equal(oom_estimate_to_json(&text, w, &e), OOM_OK);
    root = json_tokener_parse(text);
    assert_non_null(root);
    assert_true(json_object_object_get_ex(root, "memory", &mem));
    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        assert_true(json_object_object_get_ex(mem, keys[i], &v));
        assert_true(json_object_is_type(v, json_type_int));
    }
    json_object_object_get_ex(mem, "device_peak", &v);
    assert_int_equal((uint64_t)json_object_get_int64(v), e.device_peak);
    assert_true(json_object_object_get_ex(root, "peak_phase", &v));
    assert_true(json_object_object_get_ex(root, "workload", &v));
    assert_true(json_object_object_get_ex(v, "lora_rank", &v));
    json_object_put(root);
    oom_free(text);
    oom_workload_free(w);
}

static void test_presets_and_options(void **state)
{
    oom_preset **p = NULL;
    size_t n = 0, i, nopt;
    const oom_option *const *o = oom_workload_options(&nopt);
    (void)state;
    assert_int_equal(oom_model_presets(&p, &n), OOM_OK);
    assert_true(n >= 30);
    for (i = 1; i < n; i++)
        assert_true(strcmp(p[i - 1]->name, p[i]->name) < 0);
    oom_model_presets_free(p, n);
    assert_true(nopt >= 18);
    for (i = 0; i < nopt; i++) {
        oom_workload *w = NULL;
        char *v = NULL;
        assert_int_equal(oom_workload_create(&w), OOM_OK);
        /* every option in the table can be read back */
        assert_int_equal(oom_workload_get(&v, w, o[i]->name), OOM_OK);
        oom_free(v);
        oom_workload_free(w);
        assert_non_null(o[i]->help);
    }
}

/* an allocator that fails after `budget` allocations */
static long alloc_budget;
static void *fail_malloc(size_t n, void *u)
{
    (void)u;
    return alloc_budget-- > 0 ? malloc(n) : NULL;
}
static void *fail_realloc(void *p, size_t n, void *u)
{
    (void)u;
    return alloc_budget-- > 0 ? realloc(p, n) : NULL;
}
static void plain_free(void *p, void *u)
{
    (void)u;
    free(p);
}

static int workflow(void)
{
    oom_workload *w = NULL, *c = NULL;
    oom_estimate e = OOM_ESTIMATE_INIT;
    char *json = NULL, *v = NULL;
    int err;
    if ((err = oom_workload_create(&w)) || (err = oom_workload_set(w, "model", "llama-3.1-8b")) ||
        (err = oom_workload_set(w, "method", "lora")) ||
        (err = oom_workload_set(w, "lora-targets", "all-linear")) ||
        (err = oom_workload_clone(&c, w)) || (err = oom_estimate_run(&e, c)) ||
        (err = oom_estimate_to_json(&json, c, &e)) || (err = oom_workload_get(&v, c, "seq")))
        goto done;
    if ((err = oom_workload_set(w, "model", "no-such-preset")) == OOM_ENOTFOUND)
        err = OOM_OK;
done:
    oom_free(v);
    oom_free(json);
    oom_workload_free(c);
    oom_workload_free(w);
    return err;
}

static void test_allocation_failures(void **state)
{
    oom_allocator a = {OOM_ALLOCATOR_VERSION, fail_malloc, fail_realloc, plain_free, NULL};
    long n;
    int err = OOM_ENOMEM;
    (void)state;
    for (n = 0; n < 5000 && err == OOM_ENOMEM; n++) {
        alloc_budget = n;
        oom_set_allocator(&a);
        err = workflow();
        oom_set_allocator(NULL);
        if (err != OOM_OK && err != OOM_ENOMEM)
            fail_msg("after %ld allocations: %d %s", n, err, oom_last_message());
    }
    assert_int_equal(err, OOM_OK); /* enough allocations: it succeeds */
    assert_true(n > 5);
}

/* the confidence bounds' arithmetic on data/confidence.json (estimate_confidence.c) */
static void test_confidence(void **state)
{
    oom_knobs k = OOM_KNOBS_INIT;
    const unsigned tf = OOMI_STACK_TRANSFORMERS;
    oomi_conf a, b, m, c, o;
    double lo, hi, p, x;
    uint64_t peak = 10 * OOM_GiB, bound;
    int side;
    (void)state;
    k.method = OOM_METHOD_LORA, k.attention = OOM_ATTENTION_SDPA;
    k.checkpointing = OOM_CHECKPOINTING_NONE, k.precision = OOM_PRECISION_BF16, k.gpus = 1;
    assert_int_equal(oomi_confidence_range(&lo, &hi), OOM_OK);
    assert_true(lo == 0.5 && hi == 0.99);
    assert_int_equal(oomi_confidence_class(&a, &k, 1, false, tf, 0.8), OOM_OK);
    assert_int_equal(oomi_confidence_class(&b, &k, 1, false, tf, 0.9), OOM_OK);
    assert_int_equal(oomi_confidence_class(&m, &k, 1, false, tf, 0.85), OOM_OK);
    assert_string_equal(a.key, "lora/sdpa/none/none/none");
    assert_true(fabs(m.under - (a.under + b.under) / 2) < 1e-12); /* interpolated */
    assert_true(a.under >= 0 && b.under >= a.under);
    /* the bound, and back: its own target fits with the level's confidence */
    assert_int_equal(oomi_confidence_class(&c, &k, 1, false, tf, 0.95), OOM_OK);
    assert_true(c.ctx > 0);
    bound = oomi_confidence_bound(&c, peak, true);
    assert_true(bound == (uint64_t)ceil((double)peak * (1 + c.under) + c.ctx));
    assert_true(oomi_confidence_bound(&c, peak, false) ==
                (uint64_t)ceil((double)peak * (1 + c.under)));
    p = oomi_confidence_probability(&c, peak, bound, &side);
    assert_true(p >= 0.95 - 1e-9 && side >= 0);
    x = oomi_confidence_probability(&m, peak, oomi_confidence_bound(&m, peak, true), &side);
    assert_true(x >= 0.85 - 1e-9 && x <= p);
    p = oomi_confidence_probability(&c, peak, peak, &side); /* no room for the context */
    assert_int_equal(side, -1);
    assert_true(p == lo);
    p = oomi_confidence_probability(&c, peak, 2 * peak, &side);
    assert_int_equal(side, 1);
    assert_true(p == hi);
    /* --overhead given: no context term */
    assert_int_equal(oomi_confidence_class(&o, &k, 1, true, tf, 0.95), OOM_OK);
    assert_true(o.ctx == 0 && o.under == c.under);
    assert_int_equal(oomi_confidence_class(&o, &k, 1, false, tf, 0.3), OOM_EINVAL);
    assert_int_equal(oomi_confidence_class(&o, &k, 1, false, tf, 0.995), OOM_EINVAL);
    /* never measured: the widest class, basis none */
    k.sharding = OOM_SHARDING_ZERO2, k.gpus = 2;
    assert_int_equal(oomi_confidence_class(&o, &k, 1, false, tf, 0.95), OOM_OK);
    assert_int_equal(o.basis, OOMI_CONF_NONE);
    assert_string_equal(o.key, "lora/sdpa/none/none/zero2");
    assert_int_equal(o.cases, 0);
    /* the levels as text */
    assert_int_equal(oomi_parse_confidence(&x, "95%", "c"), OOM_OK);
    assert_true(fabs(x - 0.95) < 1e-12);
    assert_int_equal(oomi_parse_confidence(&x, "0.8", "c"), OOM_OK);
    assert_true(x == 0.8);
    assert_int_equal(oomi_parse_confidence(&x, "1", "c"), OOM_EINVAL);
    assert_int_equal(oomi_parse_confidence(&x, "0", "c"), OOM_EINVAL);
    assert_int_equal(oomi_parse_confidence(&x, "%", "c"), OOM_EINVAL);
    assert_int_equal(oomi_parse_confidence(&x, "high", "c"), OOM_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_counts),
        cmocka_unit_test(test_exact_counts),
        cmocka_unit_test(test_preset_counts),
        cmocka_unit_test(test_moe_dense_layers),
        cmocka_unit_test(test_moe_shared_expert),
        cmocka_unit_test(test_kv_cache),
        cmocka_unit_test(test_zero),
        cmocka_unit_test(test_full_fp32_states),
        cmocka_unit_test(test_lora),
        cmocka_unit_test(test_monotonic),
        cmocka_unit_test(test_eager_and_chunked),
        cmocka_unit_test(test_impossible),
        cmocka_unit_test(test_set_errors),
        cmocka_unit_test(test_nccl_overhead),
        cmocka_unit_test(test_cublas_workspace),
        cmocka_unit_test(test_knobs_and_clone),
        cmocka_unit_test(test_gpu_overhead),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_seq_cls_head),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_presets_and_options),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_confidence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
