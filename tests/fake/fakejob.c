/*
 * fakejob.c - a fake training job for the probe/run tests. It "uses" GPU memory by writing
 * "GPU BYTES" to DIR/<pid> (the fake NVML's procdir reports it while the pid lives) and dies like
 * PyTorch when a step would need more than the capacity.
 *
 *   fakejob --batch-size N [--grad-accum N] [--steps N] --fixed BYTES --per-sample BYTES
 *           [--per-sample2 BYTES] [--capacity BYTES] [--allowed BYTES] [--procdir DIR] [--gpu N]
 *           [--spike-step S --spike-factor F] [--checkpoint FILE] [--step-time-ms N]
 *           [--ignore-sigterm] [--fork-child] [--fork-child-setsid] [--exit N] [--marker TEXT]
 *           [--after-oom BYTES] [--round BYTES] [--bump BATCH:BYTES]...
 *
 * used(step) = fixed + per_sample * batch + per_sample2 * batch^2, plus the --bump of this batch
 * (up to 16, each BATCH:BYTES), rounded up to a multiple of --round, times spike_factor at the
 * spike step: peaks that are not monotone in the batch, as the caching allocator's block rounding
 * makes them. BYTES take an optional K/M/G (binary) suffix. --allowed caps the process below the
 * capacity as torch.cuda.set_per_process_memory_fraction does, and the OOM message then has
 * PyTorch's long form ("... this process has X memory in use. N allowed; Of the allocated
 * memory ...", c10/cuda/CUDACachingAllocator.cpp). The checkpoint file holds the last
 * completed step; a relaunch resumes after it. It prints "step N/M batch B accum A" per step.
 * --after-oom prints that many bytes of teardown log lines after the OOM traceback (a job whose
 * OOM is not at the end of its output). --marker is ignored: tests use it to find their
 * processes in the process table.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct opts {
    long batch, accum, steps, gpu, spike_step, step_ms, exit_code, after_oom;
    double fixed, per, per2, capacity, allowed, spike;
    double round, bump[16];
    long bump_batch[16], nbump;
    const char *procdir, *checkpoint;
    int ignore_term, fork_child, fork_setsid;
};

static double bytes(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K':
    case 'k':
        return v * 1024.0;
    case 'M':
    case 'm':
        return v * 1048576.0;
    case 'G':
    case 'g':
        return v * 1073741824.0;
    default:
        return v;
    }
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void report(const struct opts *o, double used)
{
    char path[4096], tmp[4200];
    FILE *f;
    if (!o->procdir)
        return;
    snprintf(path, sizeof(path), "%s/%ld", o->procdir, (long)getpid());
    snprintf(tmp, sizeof(tmp), "%s/.tmp.%ld", o->procdir, (long)getpid()); /* not a pid name */
    if (!(f = fopen(tmp, "w")))
        return;
    fprintf(f, "%ld %.0f\n", o->gpu, used);
    fclose(f);
    rename(tmp, path);
}

static long read_checkpoint(const char *path)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    long step = 0;
    if (f) {
        if (fscanf(f, "%ld", &step) != 1)
            step = 0;
        fclose(f);
    }
    return step;
}

static void write_checkpoint(const char *path, long step)
{
    char tmp[4200];
    FILE *f;
    if (!path)
        return;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if ((f = fopen(tmp, "w"))) {
        fprintf(f, "%ld\n", step);
        fclose(f);
        rename(tmp, path);
    }
}

static int parse(struct opts *o, int argc, char **argv)
{
    int i;
    *o = (struct opts){.batch = 1,
                       .accum = 1,
                       .steps = 3,
                       .step_ms = 100,
                       .spike = 1.0,
                       .spike_step = -1,
                       .capacity = 1e300};
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "--ignore-sigterm"))
            o->ignore_term = 1, takes = 0;
        else if (!strcmp(a, "--fork-child"))
            o->fork_child = 1, takes = 0;
        else if (!strcmp(a, "--fork-child-setsid"))
            o->fork_child = o->fork_setsid = 1, takes = 0;
        else if (!v)
            return fprintf(stderr, "fakejob: %s needs a value\n", a), 2;
        else if (!strcmp(a, "--batch-size"))
            o->batch = atol(v);
        else if (!strcmp(a, "--grad-accum"))
            o->accum = atol(v);
        else if (!strcmp(a, "--steps"))
            o->steps = atol(v);
        else if (!strcmp(a, "--fixed"))
            o->fixed = bytes(v);
        else if (!strcmp(a, "--per-sample"))
            o->per = bytes(v);
        else if (!strcmp(a, "--per-sample2"))
            o->per2 = bytes(v);
        else if (!strcmp(a, "--capacity"))
            o->capacity = bytes(v);
        else if (!strcmp(a, "--allowed"))
            o->allowed = bytes(v);
        else if (!strcmp(a, "--procdir"))
            o->procdir = v;
        else if (!strcmp(a, "--gpu"))
            o->gpu = atol(v);
        else if (!strcmp(a, "--spike-step"))
            o->spike_step = atol(v);
        else if (!strcmp(a, "--spike-factor"))
            o->spike = strtod(v, NULL);
        else if (!strcmp(a, "--checkpoint"))
            o->checkpoint = v;
        else if (!strcmp(a, "--step-time-ms"))
            o->step_ms = atol(v);
        else if (!strcmp(a, "--exit"))
            o->exit_code = atol(v);
        else if (!strcmp(a, "--round"))
            o->round = bytes(v);
        else if (!strcmp(a, "--bump") && o->nbump < 16 && strchr(v, ':')) {
            o->bump_batch[o->nbump] = atol(v);
            o->bump[o->nbump++] = bytes(strchr(v, ':') + 1);
        } else if (!strcmp(a, "--after-oom"))
            o->after_oom = (long)bytes(v);
        else if (strcmp(a, "--marker"))
            return fprintf(stderr, "fakejob: unknown option %s\n", a), 2;
        i += takes;
    }
    if (o->batch < 1)
        return fprintf(stderr, "fakejob: bad --batch-size\n"), 2;
    return 0;
}

static void fork_child(const struct opts *o)
{
    pid_t pid = fork();
    if (pid == 0) { /* a "dataloader worker" that outlives its parent */
        if (o->fork_setsid)
            setsid();
        sleep_ms(3600 * 1000L);
        _exit(0);
    }
}

int main(int argc, char **argv)
{
    struct opts o;
    double b, used;
    long step, first, i;
    int rc;

    if ((rc = parse(&o, argc, argv)))
        return rc;
    if (o.ignore_term)
        signal(SIGTERM, SIG_IGN);
    if (o.fork_child)
        fork_child(&o);
    b = (double)o.batch;
    report(&o, o.fixed);
    first = read_checkpoint(o.checkpoint) + 1;
    if (first > 1)
        printf("resuming from step %ld\n", first - 1);
    for (step = first; step <= o.steps; step++) {
        used = o.fixed + o.per * b + o.per2 * b * b;
        for (i = 0; i < o.nbump; i++)
            used += o.bump_batch[i] == o.batch ? o.bump[i] : 0;
        if (o.round > 0)
            used = ceil(used / o.round) * o.round;
        if (step == o.spike_step)
            used *= o.spike;
        if (o.allowed > 0 && used > o.allowed && o.allowed < o.capacity) {
            fprintf(stderr,
                    "Traceback (most recent call last):\n  File \"train.py\", line 42, in "
                    "<module>\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                    "%.2f MiB. GPU %ld has a total capacity of %.2f MiB of which %.2f MiB is free. "
                    "Including non-PyTorch memory, this process has %.2f MiB memory in use. %.2f "
                    "MiB allowed; Of the allocated memory %.2f MiB is allocated by PyTorch, and "
                    "0 bytes is reserved by PyTorch but unallocated.\n",
                    (used - o.fixed) / 1048576.0, o.gpu, o.capacity / 1048576.0,
                    (o.capacity - o.fixed) / 1048576.0, o.fixed / 1048576.0, o.allowed / 1048576.0,
                    o.fixed / 1048576.0);
            return 1;
        }
        if (used > o.capacity) {
            fprintf(
                stderr,
                "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f MiB. GPU %ld "
                "has a total capacity of %.2f MiB of which 0 bytes is free.\n",
                (used - o.fixed) / 1048576.0, o.gpu, o.capacity / 1048576.0);
            for (b = 0; b < (double)o.after_oom; b += 64) /* 64-byte lines */
                fprintf(stderr, "teardown: releasing worker %-10.0f and its shared memory: ok\n",
                        b);
            return 1;
        }
        report(&o, used);
        printf("step %ld/%ld batch %ld accum %ld\n", step, o.steps, o.batch, o.accum);
        fflush(stdout);
        sleep_ms(o.step_ms);
        write_checkpoint(o.checkpoint, step);
    }
    printf("done: %ld steps\n", o.steps);
    return (int)o.exit_code;
}
