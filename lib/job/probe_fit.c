/*
 * probe_fit.c - fits of a probe's measured peaks: the line or parabola through chosen points
 * (peaks measured exactly), and the weighted least-squares line or parabola through all of them
 * with the uncertainty of what it predicts (peaks that vary from launch to launch).
 */
#include "job/job.h"

#include <limits.h>
#include <math.h>
#include <string.h>

oom_probe_fit oomi_line_through(oomi_pt p, oomi_pt q)
{
    oom_probe_fit f = {.version = OOM_PROBE_FIT_VERSION};
    f.per_sample_bytes = (q.peak - p.peak) / (q.b - p.b);
    f.fixed_bytes = p.peak - f.per_sample_bytes * p.b;
    f.valid = 1;
    return f;
}

/* the parabola through three points (Lagrange, expanded) */
oom_probe_fit oomi_parabola_through(oomi_pt p, oomi_pt q, oomi_pt r)
{
    oom_probe_fit f = {.version = OOM_PROBE_FIT_VERSION};
    double d1 = (q.peak - p.peak) / (q.b - p.b), d2 = (r.peak - q.peak) / (r.b - q.b);
    f.per_sample2_bytes = (d2 - d1) / (r.b - p.b);
    f.per_sample_bytes = d1 - f.per_sample2_bytes * (p.b + q.b);
    f.fixed_bytes = p.peak - f.per_sample_bytes * p.b - f.per_sample2_bytes * p.b * p.b;
    f.valid = f.quadratic = 1;
    return f;
}

/* The inverse of the symmetric n x n matrix a (n = 2 or 3) by cofactors; 0 when it is singular
 * (its determinant vanishes next to the product of its diagonal). */
static int invert(double inv[3][3], double a[3][3], int n)
{
    double det, diag = 1;
    int i, j;
    for (i = 0; i < n; i++)
        diag *= fabs(a[i][i]);
    if (n == 2) {
        det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
        if (!(fabs(det) > 1e-12 * diag))
            return 0;
        inv[0][0] = a[1][1] / det;
        inv[1][1] = a[0][0] / det;
        inv[0][1] = inv[1][0] = -a[0][1] / det;
        return 1;
    }
    for (i = 0; i < 3; i++)
        for (j = 0; j < 3; j++) { /* the cofactor of a[j][i] */
            int r0 = (j + 1) % 3, r1 = (j + 2) % 3, c0 = (i + 1) % 3, c1 = (i + 2) % 3;
            inv[i][j] = a[r0][c0] * a[r1][c1] - a[r0][c1] * a[r1][c0];
        }
    det = a[0][0] * inv[0][0] + a[0][1] * inv[1][0] + a[0][2] * inv[2][0];
    if (!(fabs(det) > 1e-12 * diag))
        return 0;
    for (i = 0; i < 3; i++)
        for (j = 0; j < 3; j++)
            inv[i][j] /= det;
    return 1;
}

static void basis(double phi[3], const oomi_lsq *f, double b)
{
    double x = b / f->scale;
    phi[0] = 1;
    phi[1] = x;
    phi[2] = x * x;
}

double oomi_lsq_peak(const oomi_lsq *f, double b)
{
    double phi[3];
    int i;
    double y = 0;
    basis(phi, f, b);
    for (i = 0; i < f->terms; i++)
        y += f->c[i] * phi[i];
    return y;
}

double oomi_lsq_spread(const oomi_lsq *f, double b)
{
    double phi[3], v = 0;
    int i, j;
    basis(phi, f, b);
    for (i = 0; i < f->terms; i++)
        for (j = 0; j < f->terms; j++)
            v += phi[i] * f->inv[i][j] * phi[j];
    return v > 0 ? sqrt(v) : 0;
}

/* Each peak weighted by 1/peak^2: the noise is taken as a fraction of the peak (the caching
 * allocator's rounding and what other kernels hold grow with it), so that the small batches'
 * peaks, all close to the fixed memory, do not decide the slope alone. */
int oomi_lsq_fit(oomi_lsq *f, const oomi_pt *p, size_t k, int terms)
{
    double a[3][3], rhs[3] = {0, 0, 0}, phi[3], ss = 0;
    size_t n;
    int i, j;

    memset(f, 0, sizeof(*f));
    memset(a, 0, sizeof(a));
    f->terms = terms;
    f->scale = k ? p[k - 1].b : 1;
    if (k < (size_t)terms || f->scale <= 0)
        return 0;
    for (n = 0; n < k; n++) {
        double w;
        if (!(p[n].peak > 0))
            return 0;
        w = 1 / (p[n].peak * p[n].peak);
        basis(phi, f, p[n].b);
        for (i = 0; i < terms; i++) {
            rhs[i] += w * phi[i] * p[n].peak;
            for (j = 0; j < terms; j++)
                a[i][j] += w * phi[i] * phi[j];
        }
    }
    if (!invert(f->inv, a, terms))
        return 0;
    for (i = 0; i < terms; i++)
        for (j = 0; j < terms; j++)
            f->c[i] += f->inv[i][j] * rhs[j];
    for (n = 0; n < k; n++) {
        double r = (p[n].peak - oomi_lsq_peak(f, p[n].b)) / p[n].peak;
        ss += r * r;
        f->worst = fabs(r) > f->worst ? fabs(r) : f->worst;
    }
    f->rms = k > (size_t)terms ? sqrt(ss / (double)(k - (size_t)terms)) : 0;
    f->ok = 1;
    return 1;
}

oom_probe_fit oomi_lsq_to_fit(const oomi_lsq *f)
{
    oom_probe_fit r = {.version = OOM_PROBE_FIT_VERSION};
    if (!f->ok)
        return r;
    r.valid = 1;
    r.fixed_bytes = f->c[0];
    r.per_sample_bytes = f->c[1] / f->scale;
    if (f->terms == 3) {
        r.per_sample2_bytes = f->c[2] / (f->scale * f->scale);
        r.quadratic = 1;
    }
    return r;
}

static int bound_under(const oomi_lsq *f, double noise, double k_sigma, double aim, int b)
{
    return oomi_lsq_peak(f, b) + k_sigma * noise * oomi_lsq_spread(f, b) <= aim;
}

/* Up from `from` in growing steps to the first batch over `aim`, then bisected back: the first
 * crossing (a bound one standard error low can come back under far out, where the uncertainty
 * grows faster than the peak). */
int oomi_lsq_max_batch(const oomi_lsq *f, double noise, double k_sigma, double aim, int from,
                       int to)
{
    int lo = from - 1, hi = from, step = 1;
    while (hi <= to && bound_under(f, noise, k_sigma, aim, hi)) {
        lo = hi;
        hi = to - hi > step ? hi + step : to + 1;
        step = step > INT_MAX / 2 ? step : 2 * step;
    }
    while (hi - lo > 1) { /* lo under (or from - 1), hi over (or to + 1) */
        int mid = lo + (hi - lo) / 2;
        if (bound_under(f, noise, k_sigma, aim, mid))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}
