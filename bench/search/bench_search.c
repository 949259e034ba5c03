/*
 * bench_search.c - launches needed to find the largest batch that fits, and the fraction of the
 * true largest found, for simulated jobs with true limits from 3 to 2000: with exact peaks, and
 * with peaks that vary from launch to launch (noise).
 *
 * oomless: the library's own search, oom_probe_search_step() (linked from liboomless.a: no copy
 * of the algorithm here), with NVML peaks and, in a second column, by exit status alone.
 * The others are re-implemented from their source, named at each function.
 *
 * A simulated job: peak(b) = fixed + per*b + per2*b^2, times (1 + d) for each launch with noise,
 * d drawn uniformly from [-noise, +noise]; a launch dies of OOM when its peak is over the
 * capacity. The budget given to oomless is the capacity itself (no safety margin), so every
 * method aims at the same largest batch: the true limit, the largest b with peak(b) under the
 * capacity without noise.
 *
 *     bench_search [--seeds N] [--noise F] [--check | --trace LIMIT SEED QUADRATIC]
 *
 * --check: exit 1 when oomless (NVML peaks) recommends a batch above the true limit or below
 * 90 % of it for any job, without noise or with it (each failure named on stderr).
 */
#include "oomless.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct job {
    double fixed, per, per2, capacity;
    double noise; /* the peaks vary by up to this fraction, either way */
    uint64_t rng; /* splitmix64 state: the same seed draws the same noise */
};

/* splitmix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", 2014) */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double model_peak(const struct job *j, long b)
{
    return j->fixed + j->per * b + j->per2 * (double)b * b;
}

/* One launch's peak: the model's, varied by the noise. */
static double launch_peak(struct job *j, long b)
{
    double u = (double)(next_random(&j->rng) >> 11) / 9007199254740992.0; /* [0, 1) */
    return model_peak(j, b) * (1 + j->noise * (2 * u - 1));
}

static int fits(struct job *j, long b)
{
    return b >= 1 && launch_peak(j, b) <= j->capacity;
}

static struct job make_job(int limit, int quadratic, double noise, uint64_t seed)
{
    struct job j = {2.0 * OOM_GiB, 0, 0, 40.0 * OOM_GiB, noise, seed};
    double x = limit + 0.5, room = j.capacity - j.fixed;
    if (quadratic) {
        j.per = 0.3 * room / x;
        j.per2 = 0.7 * room / (x * x);
    } else {
        j.per = room / x;
    }
    return j;
}

static int tracing; /* --trace: each launch of oomless's search on stderr */

/* oomless: the library's search. `measure` = 0: no NVML, exit status only. */
static int oomless(struct job *j, int measure, long *found)
{
    oom_probe_trial t[64];
    const oom_probe_trial *tp[64];
    oom_probe_search s = OOM_PROBE_SEARCH_INIT;
    oom_probe_step st = OOM_PROBE_STEP_INIT;
    size_t n = 0;
    s.usable_bytes = (uint64_t)j->capacity;
    if (!measure)
        s.max_trials = 25; /* the same trial budget Lightning has */
    for (;;) {
        double p;
        if (oom_probe_search_step(&st, &s, tp, n) != OOM_OK || st.done || n == 64)
            break;
        t[n] = (oom_probe_trial)OOM_PROBE_TRIAL_INIT;
        tp[n] = &t[n];
        t[n].batch = st.next_batch;
        p = launch_peak(j, st.next_batch);
        t[n].oom = p > j->capacity;
        t[n].exit_code = t[n].oom;
        t[n].peak_bytes = t[n].oom || !measure ? OOM_UNKNOWN : (uint64_t)p;
        if (tracing)
            fprintf(stderr, "  launch %zu: batch %d: %s (%.6f of the capacity; model %.6f) %.0f\n",
                    n + 1, t[n].batch, t[n].oom ? "OOM" : "ran", p / j->capacity,
                    model_peak(j, t[n].batch) / j->capacity, p);
        n++;
    }
    *found = st.recommended_batch;
    return (int)n;
}

/* Lightning BatchSizeFinder, mode="power" (init_val=2, max_trials=25): double after a success;
 * after an OOM halve, and stop if anything succeeded before. Source: lightning/pytorch/tuner/
 * batch_size_scaling.py, _run_power_scaling (docs: "Keep multiplying the batch size by 2, until
 * we get an OOM error"). */
static int lightning_power(struct job *j, long *found)
{
    long size = 2;
    int i, launches = 0, any_success = 0;
    for (i = 0; i < 25; i++) {
        launches++;
        if (fits(j, size)) {
            if (i + 1 >= 25)
                break;
            size *= 2;
            any_success = 1;
        } else {
            size = size / 2 > 1 ? size / 2 : 1;
            if (any_success)
                break;
        }
    }
    *found = size;
    return launches;
}

/* Lightning BatchSizeFinder, mode="binsearch" (init_val=2, max_trials=25): double until an OOM,
 * then bisect between the last success and the failure. Source: batch_size_scaling.py,
 * _run_binary_scaling (low = 1, high = None; success: low = size, size = (high + low) // 2 or
 * size * 2; OOM: high = size, size = (high + low) // 2; stop when high - low <= 1). */
static int lightning_binsearch(struct job *j, long *found)
{
    long size = 2, low = 1, high = 0;
    int count = 0, launches = 0;
    for (;;) {
        launches++;
        if (fits(j, size)) {
            count++;
            if (count > 25)
                break;
            low = size;
            if (high) {
                if (high - low <= 1)
                    break;
                size = (high + low) / 2;
            } else {
                size *= 2;
            }
        } else {
            high = size;
            size = (high + low) / 2;
            if (high - low <= 1)
                break;
        }
    }
    *found = size;
    return launches;
}

/* Accelerate find_executable_batch_size(starting_batch_size=128): on OOM retry with
 * int(batch_size * 0.9); it never grows. Source: accelerate/utils/memory.py. */
static int accelerate(struct job *j, long start, long *found)
{
    long size = start;
    int launches = 0;
    while (size > 0) {
        launches++;
        if (fits(j, size))
            break;
        size = (long)(size * 0.9);
    }
    *found = size;
    return launches;
}

enum { OOMLESS, OOMLESS_EXIT, POWER, BINSEARCH, ACC128, ACC4096, NMETHODS };
static const char *const names[NMETHODS] = {"oomless probe (NVML peaks)",
                                            "oomless probe (exit status only)",
                                            "Lightning power",
                                            "Lightning binsearch",
                                            "Accelerate x0.9 (start 128)",
                                            "Accelerate x0.9 (start 4096)"};

static int run_method(int m, struct job *j, long *found)
{
    switch (m) {
    case OOMLESS:
        return oomless(j, 1, found);
    case OOMLESS_EXIT:
        return oomless(j, 0, found);
    case POWER:
        return lightning_power(j, found);
    case BINSEARCH:
        return lightning_binsearch(j, found);
    case ACC128:
        return accelerate(j, 128, found);
    default:
        return accelerate(j, 4096, found);
    }
}

static const int limits[] = {3,   4,   5,   6,   7,   8,    10,   12,   16,   20,   24,
                             32,  40,  48,  64,  80,  100,  128,  150,  200,  256,  300,
                             400, 500, 512, 640, 750, 1000, 1024, 1200, 1500, 1750, 2000};
#define NLIM ((int)(sizeof(limits) / sizeof(limits[0])))

/* The seed of one job: the same for every method, so that they meet the same noise. */
static uint64_t job_seed(int seed, int limit, int quadratic)
{
    return (uint64_t)seed * 1000003u + (uint64_t)limit * 2u + (uint64_t)quadratic;
}

struct tally {
    double sum_l, sum_f, min_f;
    int max_l, within, over, under90, runs;
};

/* Runs method m on every limit for seeds [0, seeds) (one pass without noise: seeds = 1, noise
 * 0); `failures` > 0 names each recommendation above the limit or below 90 % of it. */
static struct tally measure(int m, int quadratic, double noise, int seeds, int failures)
{
    struct tally t = {0, 0, 1e9, 0, 0, 0, 0, 0};
    int i, s;
    for (s = 0; s < seeds; s++)
        for (i = 0; i < NLIM; i++) {
            struct job j = make_job(limits[i], quadratic, noise, job_seed(s, limits[i], quadratic));
            long found;
            int l = run_method(m, &j, &found);
            double f = (double)found / limits[i];
            t.runs++;
            t.sum_l += l;
            t.max_l = l > t.max_l ? l : t.max_l;
            t.sum_f += f;
            t.min_f = f < t.min_f ? f : t.min_f;
            t.within += found <= limits[i] && found >= limits[i] - 1;
            t.over += found > limits[i];
            t.under90 += found < 0.9 * limits[i];
            if (failures && (found > limits[i] || found < 0.9 * limits[i]))
                fprintf(stderr,
                        "FAIL: %s, %s job, noise %g, seed %d, limit %d: recommended %ld after "
                        "%d launches\n",
                        names[m], quadratic ? "quadratic" : "linear", noise, s, limits[i], found,
                        l);
        }
    return t;
}

static void summary(int quadratic, double noise, int seeds)
{
    int m;
    if (noise > 0)
        printf("\n### %s jobs, peaks varying by up to %g %% (%d true limits from 3 to 2000, "
               "%d draws of the noise each)\n\n",
               quadratic ? "Quadratic" : "Linear", 100 * noise, NLIM, seeds);
    else
        printf("\n### %s jobs (%d true limits from 3 to 2000)\n\n",
               quadratic ? "Quadratic" : "Linear", NLIM);
    printf("| method | launches mean | launches max | found / true max, mean | min | "
           "within one of the max | over the max | under 90 %% |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (m = 0; m < NMETHODS; m++) {
        struct tally t = measure(m, quadratic, noise, seeds, 0);
        printf("| %s | %.1f | %d | %.3f | %.3f | %d/%d | %d | %d |\n", names[m], t.sum_l / t.runs,
               t.max_l, t.sum_f / t.runs, t.min_f, t.within, t.runs, t.over, t.under90);
    }
}

static void detail(int quadratic)
{
    static const int some[] = {3, 10, 100, 500, 1000, 2000};
    size_t i;
    int m;
    printf("\n#### %s: launches (found batch) per true limit\n\n| method |",
           quadratic ? "Quadratic" : "Linear");
    for (i = 0; i < sizeof(some) / sizeof(some[0]); i++)
        printf(" %d |", some[i]);
    printf("\n|---|");
    for (i = 0; i < sizeof(some) / sizeof(some[0]); i++)
        printf("---|");
    printf("\n");
    for (m = 0; m < NMETHODS; m++) {
        printf("| %s |", names[m]);
        for (i = 0; i < sizeof(some) / sizeof(some[0]); i++) {
            struct job j = make_job(some[i], quadratic, 0, 0);
            long found;
            int l = run_method(m, &j, &found);
            printf(" %d (%ld) |", l, found);
        }
        printf("\n");
    }
}

/* oomless (NVML peaks): every recommendation within [90 %, 100 %] of the true limit, without
 * noise and with it; the launches said. Returns the number of failures. */
static int check(double noise, int seeds)
{
    int q, bad = 0;
    for (q = 0; q < 2; q++) {
        struct tally exact = measure(OOMLESS, q, 0, 1, 1);
        struct tally noisy = measure(OOMLESS, q, noise, seeds, 1);
        bad += exact.over + exact.under90 + noisy.over + noisy.under90;
        printf("%s jobs: exact peaks: launches mean %.2f, max %d; peaks +-%g %% (%d runs): "
               "launches mean %.2f, max %d; found / true max mean %.3f, min %.3f; over %d, "
               "under 90 %% %d\n",
               q ? "quadratic" : "linear", exact.sum_l / exact.runs, exact.max_l, 100 * noise,
               noisy.runs, noisy.sum_l / noisy.runs, noisy.max_l, noisy.sum_f / noisy.runs,
               noisy.min_f, noisy.over, noisy.under90);
    }
    return bad;
}

int main(int argc, char **argv)
{
    double noise = 0.01;
    int seeds = 20, i, checking = 0;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check"))
            checking = 1;
        else if (!strcmp(argv[i], "--seeds") && i + 1 < argc)
            seeds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--noise") && i + 1 < argc)
            noise = atof(argv[++i]);
        else if (!strcmp(argv[i], "--trace") && i + 3 < argc) { /* LIMIT SEED QUADRATIC */
            int limit = atoi(argv[i + 1]), seed = atoi(argv[i + 2]), q = atoi(argv[i + 3]);
            struct job j = make_job(limit, q, noise, job_seed(seed, limit, q));
            long found;
            tracing = 1;
            oomless(&j, 1, &found);
            fprintf(stderr, "recommended %ld of %d\n", found, limit);
            return 0;
        } else {
            fprintf(stderr,
                    "usage: bench_search [--seeds N] [--noise F] [--check | --trace LIMIT SEED "
                    "QUADRATIC]\n");
            return 2;
        }
    }
    if (seeds < 1 || !(noise >= 0 && noise < 0.5)) {
        fprintf(stderr, "bench_search: --seeds must be >= 1 and --noise in [0, 0.5)\n");
        return 2;
    }
    if (checking) {
        int bad = check(noise, seeds);
        if (bad)
            fprintf(stderr,
                    "bench_search: %d recommendation(s) above the true limit or below "
                    "90 %% of it\n",
                    bad);
        return bad ? 1 : 0;
    }
    summary(0, 0, 1);
    summary(1, 0, 1);
    detail(0);
    detail(1);
    if (noise > 0) {
        summary(0, noise, seeds);
        summary(1, noise, seeds);
    }
    return 0;
}
