/*
 * bench_search.c - launches needed to find the largest batch that fits, and the fraction of the
 * true largest found, for simulated jobs with true limits from 3 to 2000.
 *
 * oomless: the library's own search, oom_probe_search_step() (linked from liboomless.a: no copy
 * of the algorithm here), with NVML peaks and, in a second column, by exit status alone.
 * The others are re-implemented from their source, named at each function.
 *
 * A simulated job: peak(b) = fixed + per*b + per2*b^2; a launch dies of OOM when the peak is over
 * the capacity. The budget given to oomless is the capacity itself (no safety margin), so every
 * method aims at the same largest batch.
 */
#include "oomless.h"

#include <stdio.h>
#include <string.h>

struct job {
    double fixed, per, per2, capacity;
};

static double peak(const struct job *j, long b)
{
    return j->fixed + j->per * b + j->per2 * (double)b * b;
}

static int fits(const struct job *j, long b)
{
    return b >= 1 && peak(j, b) <= j->capacity;
}

static struct job make_job(int limit, int quadratic)
{
    struct job j = {2.0 * OOM_GiB, 0, 0, 40.0 * OOM_GiB};
    double x = limit + 0.5, room = j.capacity - j.fixed;
    if (quadratic) {
        j.per = 0.3 * room / x;
        j.per2 = 0.7 * room / (x * x);
    } else {
        j.per = room / x;
    }
    return j;
}

/* oomless: the library's search. `measure` = 0: no NVML, exit status only. */
static int oomless(const struct job *j, int measure, long *found)
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
        if (oom_probe_search_step(&st, &s, tp, n) != OOM_OK || st.done || n == 64)
            break;
        t[n] = (oom_probe_trial)OOM_PROBE_TRIAL_INIT;
        tp[n] = &t[n];
        t[n].batch = st.next_batch;
        t[n].oom = !fits(j, st.next_batch);
        t[n].exit_code = t[n].oom;
        t[n].peak_bytes = t[n].oom || !measure ? OOM_UNKNOWN : (uint64_t)peak(j, st.next_batch);
        n++;
    }
    *found = st.recommended_batch;
    return (int)n;
}

/* Lightning BatchSizeFinder, mode="power" (init_val=2, max_trials=25): double after a success;
 * after an OOM halve, and stop if anything succeeded before. Source: lightning/pytorch/tuner/
 * batch_size_scaling.py, _run_power_scaling (docs: "Keep multiplying the batch size by 2, until
 * we get an OOM error"). */
static int lightning_power(const struct job *j, long *found)
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
static int lightning_binsearch(const struct job *j, long *found)
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
static int accelerate(const struct job *j, long start, long *found)
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

static int run_method(int m, const struct job *j, long *found)
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

static void summary(int quadratic)
{
    int m, i;
    printf("\n### %s jobs (%d true limits from 3 to 2000)\n\n", quadratic ? "Quadratic" : "Linear",
           NLIM);
    printf("| method | launches mean | launches max | found / true max, mean | min | "
           "within one of the max | over the max |\n|---|---|---|---|---|---|---|\n");
    for (m = 0; m < NMETHODS; m++) {
        double sum_l = 0, sum_f = 0, min_f = 1e9;
        int max_l = 0, within = 0, over = 0;
        for (i = 0; i < NLIM; i++) {
            struct job j = make_job(limits[i], quadratic);
            long found;
            int l = run_method(m, &j, &found);
            double f = (double)found / limits[i];
            sum_l += l;
            max_l = l > max_l ? l : max_l;
            sum_f += f;
            min_f = f < min_f ? f : min_f;
            within += found <= limits[i] && found >= limits[i] - 1;
            over += found > limits[i];
        }
        printf("| %s | %.1f | %d | %.3f | %.3f | %d/%d | %d |\n", names[m], sum_l / NLIM, max_l,
               sum_f / NLIM, min_f, within, NLIM, over);
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
            struct job j = make_job(some[i], quadratic);
            long found;
            int l = run_method(m, &j, &found);
            printf(" %d (%ld) |", l, found);
        }
        printf("\n");
    }
}

int main(void)
{
    summary(0);
    summary(1);
    detail(0);
    detail(1);
    return 0;
}
