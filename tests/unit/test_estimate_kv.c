/* test_estimate_kv.c - DeepSeek V2/V3 (multi-head latent attention, experts after dense layers),
 * Llama 4 (interleaved experts, chunked attention) and the KV cache per layer type: full,
 * sliding-window (and chunked) and latent layers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oomless.h"
#include "unit/tmpdir.h"
#include "unit/workload.h"

/* the keys the small DeepSeek configs below share (each adds its layers, latents, experts) */
#define DS_BASE                                                                                    \
    "\"hidden_size\": 256, \"intermediate_size\": 512, \"moe_intermediate_size\": 128, "           \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"n_routed_experts\": 8, "            \
    "\"num_experts_per_tok\": 2, \"kv_lora_rank\": 64, \"qk_nope_head_dim\": 32, "                 \
    "\"qk_rope_head_dim\": 16, \"vocab_size\": 1000, \"max_position_embeddings\": 4096, "          \
    "\"tie_word_embeddings\": false"

/* the parameters counted for a config given as text, or the refusal's code (params 0) */
static int load(const char *cfg, uint64_t *params)
{
    char *path = test_write_tmp(cfg), model[600];
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    oom_workload *w = NULL;
    int err;
    assert_non_null(path);
    snprintf(model, sizeof(model), "%s", path);
    assert_int_equal(oom_workload_create(&w), OOM_OK);
    *params = 0;
    if (!(err = oom_workload_set(w, "model", model))) {
        assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
        *params = mi.params;
    }
    oom_workload_free(w);
    unlink(path);
    return err;
}

static uint64_t params_of(const char *cfg)
{
    uint64_t n;
    if (load(cfg, &n))
        fail_msg("config refused: %s", oom_last_message());
    return n;
}

/* Each count is what transformers 5.23 counts for the same config (DeepseekV2ForCausalLM /
 * DeepseekV3ForCausalLM built on the meta device, sum of numel over parameters) */
static void test_deepseek_params(void **state)
{
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    oom_workload *w = W("model=deepseek-v3");
    (void)state;
    /* DeepSeek-V3 as published: 671,026,404,352 (the 671 B of the model card; the 14 B
     * multi-token-prediction module, num_nextn_predict_layers, is not part of the model) */
    assert_int_equal(oom_workload_model(&mi, w), OOM_OK);
    assert_int_equal(mi.params, 671026404352ULL);
    assert_string_equal(mi.family, "deepseek_v3");
    assert_int_equal(mi.experts, 256);
    assert_int_equal(mi.experts_per_token, 8);
    assert_int_equal(mi.head_dim, 192); /* qk_nope_head_dim + qk_rope_head_dim */
    assert_int_equal(mi.kv_heads, 128);
    oom_workload_free(w);
    /* V3: low-rank queries, one dense layer first, one shared expert */
    assert_int_equal(params_of("{\"model_type\": \"deepseek_v3\", " DS_BASE
                               ", \"num_hidden_layers\": 3, \"first_k_dense_replace\": 1, "
                               "\"n_shared_experts\": 1, \"q_lora_rank\": 96, "
                               "\"v_head_dim\": 32}"),
                     3018976);
    /* V2-Lite-shaped: no low-rank queries (q_lora_rank null), two shared experts, no dense
     * layer */
    assert_int_equal(params_of("{\"model_type\": \"deepseek_v2\", " DS_BASE
                               ", \"num_hidden_layers\": 4, \"first_k_dense_replace\": 0, "
                               "\"n_shared_experts\": 2, \"q_lora_rank\": null, "
                               "\"v_head_dim\": 32}"),
                     4930048);
    /* attention_bias: biases of q_a_proj, kv_a_proj_with_mqa and o_proj */
    assert_int_equal(params_of("{\"model_type\": \"deepseek_v2\", " DS_BASE
                               ", \"num_hidden_layers\": 4, \"first_k_dense_replace\": 2, "
                               "\"n_shared_experts\": 2, \"q_lora_rank\": 64, "
                               "\"attention_bias\": true, \"v_head_dim\": 32}"),
                     3666240);
}

/* moe_layer_freq 2 after one dense layer: experts in layer 2 only (layers 1 and 3 dense, as
 * DeepSeek's modeling code and vLLM place them), counted by hand */
static void test_deepseek_layer_freq(void **state)
{
    const uint64_t h = 256, V = 1000, H = 4, ql = 96, kl = 64;
    const uint64_t attn = h * ql + ql + ql * H * 48 + h * (kl + 16) + kl + kl * H * 64 + H * 32 * h;
    const uint64_t dense = 3 * h * 512, moe = 8 * h + 8 * 3 * h * 128 + 3 * h * 128;
    (void)state;
    assert_int_equal(params_of("{\"model_type\": \"deepseek_v3\", " DS_BASE
                               ", \"num_hidden_layers\": 4, \"first_k_dense_replace\": 1, "
                               "\"moe_layer_freq\": 2, \"n_shared_experts\": 1, "
                               "\"q_lora_rank\": 96, \"v_head_dim\": 32}"),
                     2 * V * h + h + 4 * (attn + 2 * h) + 3 * dense + moe);
}

/* a config without one of MLA's widths is refused, naming the key */
static void test_deepseek_missing_key(void **state)
{
    uint64_t n;
    (void)state;
    assert_int_equal(load("{\"model_type\": \"deepseek_v3\", " DS_BASE
                          ", \"num_hidden_layers\": 3, \"q_lora_rank\": 96}",
                          &n),
                     OOM_EPARSE);
    assert_non_null(strstr(oom_last_message(), "missing key 'v_head_dim'"));
    assert_int_equal(load("{\"model_type\": \"deepseek_v2\", " DS_BASE
                          ", \"num_hidden_layers\": 3, \"v_head_dim\": 32}",
                          &n),
                     OOM_EPARSE);
    assert_non_null(strstr(oom_last_message(), "missing key 'q_lora_rank'"));
}

static uint64_t kv_bytes(const char *model, const char *seq, const char *extra)
{
    oom_workload *w = W(model, "method=inference", "precision=bf16", seq, "batch=1", extra);
    oom_estimate e = run(w);
    oom_workload_free(w);
    return e.kv_cache;
}

/* Gemma 3 12B at 32k tokens: 8 full layers keep 32768 tokens, 40 sliding ones the last 1024,
 * 2 x 8 KV heads x 256 x 2 bytes = 8 KiB per token per layer: 2.3125 GiB (transformers' prefill
 * keeps all 48 layers' 32768 tokens: 12 GiB). DeepSeek-V3: 61 layers x (512 + 64) x 2 bytes =
 * 70,272 bytes per token, in vLLM and in transformers (both cache the latent). */
static void test_kv_layer_types(void **state)
{
    const double hand = (8.0 * 32768 + 40.0 * 1024) * 8192;
    uint64_t g = kv_bytes("model=gemma-3-12b", "seq=32768", "kv-cache=vllm");
    (void)state;
    assert_true(g > hand * 0.98 && g < hand * 1.02);
    assert_int_equal(g, 2483027968ULL);
    assert_int_equal(kv_bytes("model=gemma-3-12b", "seq=32768", "kv-cache=transformers"),
                     12ULL * OOM_GiB);
    /* below the window every layer keeps every token */
    assert_int_equal(kv_bytes("model=gemma-3-12b", "seq=1000", "kv-cache=vllm"),
                     48ULL * 1000 * 8192);
    assert_int_equal(kv_bytes("model=deepseek-v3", "seq=1000", "kv-cache=vllm"), 70272ULL * 1000);
    assert_int_equal(kv_bytes("model=deepseek-v3", "seq=1000", "kv-cache=transformers"),
                     70272ULL * 1000);
    /* Mistral 7B v0.1: a window of 4096 on every layer, 128 KiB per token */
    assert_int_equal(kv_bytes("model=mistral-7b", "seq=8192", "kv-cache=vllm"),
                     4096ULL * 128 * OOM_KiB);
    /* tensor parallelism splits the KV heads, not MLA's latent (each GPU holds all of it) */
    assert_int_equal(kv_bytes("model=gemma-3-12b", "seq=32768", "tensor-parallel=2"), g / 2);
    assert_int_equal(kv_bytes("model=deepseek-v3", "seq=1000", "tensor-parallel=8"),
                     70272ULL * 1000);
}

/* the KV cache of a config given as text, at 1000 tokens in bf16 */
static uint64_t kv_of_config(const char *cfg)
{
    char *path = test_write_tmp(cfg), model[600];
    uint64_t kv;
    assert_non_null(path);
    snprintf(model, sizeof(model), "model=%s", path);
    kv = kv_bytes(model, "seq=1000", "kv-cache=vllm");
    unlink(path);
    return kv;
}

#define SMALL(type, extra)                                                                         \
    "{\"model_type\": \"" type "\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "               \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 128, "         \
    "\"vocab_size\": 100, \"max_position_embeddings\": 2048, \"sliding_window\": 128" extra "}"

/* Llama 4's text model cut small (Llama4ForCausalLM): 4 layers, every other one with 4 experts
 * of 32 and a shared expert beside its router, the others dense of intermediate_size_mlp 128,
 * untied by Llama4TextConfig's default; and as Llama4ForConditionalGeneration with a 2-layer
 * vision tower, adapter and projector. transformers 5.23 counts 288,832 and 327,264 */
#define L4_TEXT                                                                                    \
    "{\"model_type\": \"llama4_text\", \"hidden_size\": 64, \"num_hidden_layers\": 4, "            \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "                   \
    "\"intermediate_size\": 32, \"intermediate_size_mlp\": 128, \"num_local_experts\": 4, "        \
    "\"num_experts_per_tok\": 1, \"interleave_moe_layer_step\": 2, \"vocab_size\": 1000, "         \
    "\"max_position_embeddings\": 2048"

static void test_llama4_params(void **state)
{
    (void)state;
    assert_int_equal(params_of(L4_TEXT "}"), 288832);
    /* moe_layers, where listed, names the layers with the experts */
    assert_int_equal(params_of(L4_TEXT ", \"moe_layers\": [1, 3]}"), 288832);
    /* all four with experts: two dense MLPs (3 x 64 x 128) become experts and shared experts
     * (router 256 + 4 x 64 x 96 + 3 x 64 x 32) */
    assert_int_equal(params_of(L4_TEXT ", \"moe_layers\": [0, 1, 2, 3]}"),
                     288832 - 2 * 24576 + 2 * 30976);
    assert_int_equal(
        params_of(
            "{\"model_type\": \"llama4\", \"architectures\": "
            "[\"Llama4ForConditionalGeneration\"], \"text_config\": " L4_TEXT "}, "
            "\"vision_config\": {\"model_type\": \"llama4_vision_model\", \"hidden_size\": 32, "
            "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 48, "
            "\"vision_output_dim\": 40, \"image_size\": 28, \"patch_size\": 14, "
            "\"projector_input_dim\": 24, \"projector_output_dim\": 24}}"),
        327264);
}

/* Llama 4's chunked attention layers keep at most a chunk of attention_chunk_size tokens in a
 * serving engine (vLLM's ChunkedLocalAttentionSpec): which layers are chunked follows
 * layer_types, else no_rope_layers (1: a RoPE layer, chunked), else all but every 4th */
static void test_llama4_chunks(void **state)
{
    const uint64_t tok = 2 * 2 * 16 * 2; /* 2 KV heads of 16, K and V, 2 bytes */
    (void)state;
    /* layers 0-2 chunked, layer 3 (every 4th) full */
    assert_int_equal(kv_of_config(L4_TEXT ", \"attention_chunk_size\": 128}"),
                     (3 * 128 + 1000) * tok);
    assert_int_equal(
        kv_of_config(L4_TEXT ", \"attention_chunk_size\": 128, \"no_rope_layers\": [1, 0, 0, 1]}"),
        (2 * 128 + 2 * 1000) * tok);
    assert_int_equal(kv_of_config(L4_TEXT ", \"attention_chunk_size\": 128, \"layer_types\": "
                                          "[\"chunked_attention\", \"full_attention\", "
                                          "\"full_attention\", \"full_attention\"]}"),
                     (128 + 3 * 1000) * tok);
    /* null: no chunks; the default chunk (8192) is longer than the 1000 tokens */
    assert_int_equal(kv_of_config(L4_TEXT ", \"attention_chunk_size\": null}"), 4 * 1000 * tok);
    assert_int_equal(kv_of_config(L4_TEXT "}"), 4 * 1000 * tok);
}

/* which layers slide: layer_types where listed, Qwen's use_sliding_window from
 * max_window_layers on, and no window for a family whose window is not modelled (Phi-3) */
static void test_window_rules(void **state)
{
    const uint64_t tok = 2 * 2 * 16 * 2; /* 2 KV heads of 16, K and V, 2 bytes */
    (void)state;
    assert_int_equal(kv_of_config(SMALL("mistral", "")), 2 * 128 * tok);
    assert_int_equal(
        kv_of_config(
            SMALL("mistral", ", \"layer_types\": [\"full_attention\", \"sliding_attention\"]")),
        (1000 + 128) * tok);
    assert_int_equal(kv_of_config(SMALL("qwen2", "")), 2 * 1000 * tok);
    assert_int_equal(
        kv_of_config(SMALL("qwen2", ", \"use_sliding_window\": true, \"max_window_layers\": 1")),
        (1000 + 128) * tok);
    assert_int_equal(kv_of_config(SMALL("phi3", "")), 2 * 1000 * tok);
}

static json_object *kv_layers_json(const char *model, const char *stack)
{
    oom_workload *w = W(model, "method=inference", "seq=4096", stack);
    oom_estimate e = run(w);
    char *text = NULL;
    json_object *root, *o = NULL;
    assert_int_equal(oom_estimate_to_json(&text, w, &e), OOM_OK);
    root = json_tokener_parse(text);
    assert_non_null(root);
    assert_true(json_object_object_get_ex(root, "kv_cache_layers", &o));
    json_object_get(o);
    json_object_put(root);
    oom_free(text);
    oom_workload_free(w);
    return o;
}

static long long member(json_object *o, const char *key)
{
    json_object *v = NULL;
    assert_true(json_object_object_get_ex(o, key, &v));
    return v ? (long long)json_object_get_int64(v) : -1;
}

/* the estimate's JSON names the stack and splits the layers by type */
static void test_kv_json(void **state)
{
    json_object *o = kv_layers_json("model=gemma-3-12b", "kv-cache=vllm"), *v = NULL;
    (void)state;
    assert_string_equal(json_object_get_string(json_object_object_get(o, "stack")), "vllm");
    assert_int_equal(member(o, "full"), 8);
    assert_int_equal(member(o, "sliding"), 40);
    assert_int_equal(member(o, "window"), 1024);
    assert_int_equal(member(o, "elements_per_token"), 4096);
    assert_false(json_object_get_boolean(json_object_object_get(o, "latent")));
    json_object_put(o);
    o = kv_layers_json("model=gemma-3-12b", "kv-cache=transformers");
    assert_string_equal(json_object_get_string(json_object_object_get(o, "stack")), "transformers");
    assert_int_equal(member(o, "full"), 48);
    assert_int_equal(member(o, "sliding"), 0);
    assert_true(json_object_object_get_ex(o, "window", &v) && v == NULL);
    json_object_put(o);
    o = kv_layers_json("model=deepseek-v3", "kv-cache=vllm");
    assert_int_equal(member(o, "full"), 61);
    assert_int_equal(member(o, "elements_per_token"), 576);
    assert_true(json_object_get_boolean(json_object_object_get(o, "latent")));
    json_object_put(o);
}

/* the option reads back, and refuses what it does not know */
static void test_kv_option(void **state)
{
    oom_workload *w = W("model=gemma-3-1b");
    char *v = NULL;
    (void)state;
    assert_int_equal(oom_workload_get(&v, w, "kv-cache"), OOM_OK);
    assert_string_equal(v, "vllm");
    oom_free(v);
    assert_int_equal(oom_workload_set(w, "kv_cache", "transformers"), OOM_OK);
    assert_int_equal(oom_workload_get(&v, w, "kv-cache"), OOM_OK);
    assert_string_equal(v, "transformers");
    oom_free(v);
    assert_int_equal(oom_workload_set(w, "kv-cache", "paged"), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "vllm, transformers"));
    oom_workload_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepseek_params),
        cmocka_unit_test(test_deepseek_layer_freq),
        cmocka_unit_test(test_deepseek_missing_key),
        cmocka_unit_test(test_kv_layer_types),
        cmocka_unit_test(test_kv_json),
        cmocka_unit_test(test_kv_option),
        cmocka_unit_test(test_window_rules),
        cmocka_unit_test(test_llama4_params),
        cmocka_unit_test(test_llama4_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
