/* test_estimate_zero3.c - the ZeRO-3 replay (lib/estimate/estimate_zero3.c) kept for a search:
 * every part of its answer equal, bit for bit, to a replay made for the one call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "estimate/estimate.h"
#include "oomless.h"
#include "unit/workload.h"

/* Workloads that move every value the replay reads: the models (decoder, encoder-decoder, tied
 * and untied heads, experts), the tokens, LoRA against a full fine-tune (gradients, a frozen
 * embedding), the dtype, parameters offloaded, and each of DeepSpeed's knobs (windows that keep
 * nothing, everything, or some; no prefetch; no persistence) */
static oom_workload *workload(size_t i)
{
    static const char *const models[] = {"qwen3-0.6b",   "llama-3.1-8b", "t5-base",     "gpt2",
                                         "mixtral-8x7b", "bert-base",    "smollm2-135m"};
    static const char *const knobs[][3] = {
        {"method=full", "seq=1024", "precision=bf16"},
        {"method=lora", "seq=512", "offload=optimizer+params"},
        {"zero3-max-reuse-distance=0", "zero3-prefetch-bucket=0", "seq=256"},
        {"zero3-max-reuse-distance=1e7", "zero3-max-live-params=3e8", "seq=300"},
        {"zero3-persistence-threshold=0", "precision=fp32", "seq=128"},
        {"zero3-prefetch-bucket=2e8", "zero3-reduce-bucket=1e6", "seq=2048"},
    };
    const char *model = models[i % 7], *const *k = knobs[(i / 7) % 6];
    const char *seq =
        strstr(model, "bert") || strstr(model, "t5") || strstr(model, "gpt2") ? "seq=128" : k[2];
    char m[64];
    snprintf(m, sizeof(m), "model=%s", model);
    return W(m, "sharding=zero3", "gpus=8", k[0], k[1], seq);
}

static void test_kept_replays_answer_alike(void **state)
{
    static const double acts[] = {0, 1, 2.5e6, 1e9, 3.3e10, 1e13, INFINITY, -5, NAN};
    oomi_zero3_cache *cache = NULL;
    size_t i, a, pass, n = 7 * 6;
    (void)state;
    assert_int_equal(oomi_zero3_cache_new(&cache), OOM_OK);
    /* 42 replays into one cache: more than it keeps at once, so it empties and fills again;
     * twice over, so that the second pass finds some kept and replays others */
    for (pass = 0; pass < 2; pass++)
        for (i = 0; i < n; i++) {
            oom_workload *w = workload(i);
            for (a = 0; a < sizeof(acts) / sizeof(acts[0]); a++) {
                oomi_zero3 alone, kept;
                w->zero3.cache = NULL;
                assert_int_equal(oomi_zero3_of(&alone, w, acts[a]), OOM_OK);
                w->zero3.cache = cache;
                assert_int_equal(oomi_zero3_of(&kept, w, acts[a]), OOM_OK);
                if (memcmp(&alone, &kept, sizeof(alone)))
                    fail_msg("workload %zu, activations %g: turn %.17g alone, %.17g kept; "
                             "gathered %.17g, %.17g",
                             i, acts[a], alone.turn, kept.turn, alone.gathered, kept.gathered);
                assert_true(alone.turn != 0 || alone.persistent + alone.bucket == 0 ||
                            isnan(acts[a]) || isinf(acts[a]));
            }
            w->zero3.cache = NULL;
            oom_workload_free(w);
        }
    oomi_zero3_cache_free(cache);
}

/* a clone does not take the searcher's cache with it */
static void test_clone_has_none(void **state)
{
    oomi_zero3_cache *cache = NULL;
    oom_workload *w = workload(0), *c = NULL;
    (void)state;
    assert_int_equal(oomi_zero3_cache_new(&cache), OOM_OK);
    w->zero3.cache = cache;
    assert_int_equal(oom_workload_clone(&c, w), OOM_OK);
    assert_null(c->zero3.cache);
    w->zero3.cache = NULL;
    oom_workload_free(c);
    oom_workload_free(w);
    oomi_zero3_cache_free(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_replays_answer_alike),
        cmocka_unit_test(test_clone_has_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
