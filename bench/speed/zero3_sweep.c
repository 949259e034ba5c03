/*
 * zero3_sweep.c - the cost of the ZeRO-3 replay (lib/estimate/estimate_zero3.c) against the
 * number of layers: a Llama-shaped model of 32 to 1024 layers, small enough (hidden 256) that
 * DeepSpeed's reuse window covers its whole step, which is where a replay that scans ahead
 * through the window at every release is slowest.
 *
 * Per depth, two figures from oom_estimate_run (linked from liboomless.a: the library's own
 * code), each the median of 7 rounds, with the sequence length alternating between calls:
 *   replay   an estimate under --sharding zero3 (each replays: an estimate of the API keeps
 *            none; the planner's do, estimate_zero3.c), less
 *   base     the same estimate under --sharding zero2 (no replay).
 * The replay follows at most 1024 tensors (one per Linear of a block, fewer per block past 146
 * layers of 7 Linears), 4 x tensors + 4 steps.
 *
 * usage: zero3_sweep [--check] DIR      (DIR: a scratch folder for the configs)
 * --check: exits 1 when the replay's cost per step at the deepest model is more than 3 times
 * that at the shallowest (a replay linear in its steps keeps it flat).
 */
#define _POSIX_C_SOURCE 200809L
#include "oomless.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUNDS 7

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int write_config(const char *path, int layers)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
            "\"hidden_size\": 256, \"num_hidden_layers\": %d, \"num_attention_heads\": 4, "
            "\"num_key_value_heads\": 4, \"intermediate_size\": 688, \"vocab_size\": 32000, "
            "\"max_position_embeddings\": 4096, \"tie_word_embeddings\": false, "
            "\"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05, \"torch_dtype\": \"bfloat16\"}\n",
            layers);
    return fclose(f);
}

static oom_workload *workload(const char *config, const char *sharding)
{
    oom_workload *w = NULL;
    if (oom_workload_create(&w) || oom_workload_set(w, "model", config) ||
        oom_workload_set(w, "gpus", "8") || oom_workload_set(w, "sharding", sharding) ||
        oom_workload_set(w, "seq", "512")) {
        fprintf(stderr, "zero3_sweep: %s\n", oom_last_message());
        exit(2);
    }
    return w;
}

/* microseconds per estimate, median of ROUNDS rounds of n, the sequence alternating */
static double per_call(oom_workload *w, int n)
{
    double t[ROUNDS];
    int r, i;
    for (r = 0; r < ROUNDS; r++) {
        double t0 = now();
        for (i = 0; i < n; i++) {
            oom_estimate e = OOM_ESTIMATE_INIT;
            oom_workload_set(w, "seq", i & 1 ? "513" : "512");
            if (oom_estimate_run(&e, w)) {
                fprintf(stderr, "zero3_sweep: %s\n", oom_last_message());
                exit(2);
            }
        }
        t[r] = (now() - t0) / n * 1e6;
    }
    qsort(t, ROUNDS, sizeof(*t), cmp);
    return t[ROUNDS / 2];
}

int main(int argc, char **argv)
{
    static const int depths[] = {32, 64, 128, 256, 512, 1024};
    const char *dir = argc > 1 ? argv[argc - 1] : NULL;
    int check = argc > 2 && !strcmp(argv[1], "--check"), i;
    double first = 0, last = 0;

    if (!dir) {
        fprintf(stderr, "usage: zero3_sweep [--check] DIR\n");
        return 2;
    }
    printf("%7s %8s %6s %12s %12s %14s\n", "layers", "tensors", "steps", "base us", "replay us",
           "replay ns/step");
    for (i = 0; i < (int)(sizeof(depths) / sizeof(*depths)); i++) {
        char path[4096];
        int L = depths[i], k = 7 * L > 1024 ? 1024 / L : 7, steps = 4 * k * L + 4;
        int n = 20000 / L > 20 ? 20000 / L : 20;
        oom_workload *z3, *z2;
        double base, replay, per_step;
        snprintf(path, sizeof(path), "%s/layers-%d.json", dir, L);
        if (write_config(path, L)) {
            perror(path);
            return 2;
        }
        z3 = workload(path, "zero3");
        z2 = workload(path, "zero2");
        base = per_call(z2, n);
        replay = per_call(z3, n) - base;
        per_step = replay * 1000.0 / steps;
        printf("%7d %8d %6d %12.2f %12.2f %14.2f\n", L, k * L, steps, base, replay, per_step);
        if (i == 0)
            first = per_step;
        last = per_step;
        oom_workload_free(z3);
        oom_workload_free(z2);
    }
    if (check && last > 3 * first) {
        printf("FAIL: the replay costs %.2f ns per step at 1024 layers, %.1f times the %.2f at 32 "
               "(limit 3)\n",
               last, last / first, first);
        return 1;
    }
    return 0;
}
