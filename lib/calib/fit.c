/* fit.c - evaluating a fitted memory line (fixed + per sample + per sample^2): the peak at a
 * batch, and the largest batch under a budget. Written by probe, read by run, plan and estimate. */
#include "calib/calib.h"

double oom_probe_fit_peak(const oom_probe_fit *f, int batch)
{
    double b = batch;
    return f->fixed_bytes + f->per_sample_bytes * b + f->per_sample2_bytes * b * b;
}

int oom_probe_fit_max_batch(const oom_probe_fit *f, uint64_t usable, int limit)
{
    int lo = 0, hi = limit; /* largest b in [1, limit] with peak(b) <= usable, by bisection */
    if (!f || !f->valid || limit < 1)
        return 0;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (oom_probe_fit_peak(f, mid) <= (double)usable)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}
