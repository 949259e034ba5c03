/*
 * test_alloc_fail.c - allocation-failure injection along the library's main paths.
 *
 * A counting allocator is installed with oom_set_allocator(); for n = 1, 2, ... the n-th
 * allocation of a path fails. Each time the path must return OOM_ENOMEM (with that code as the
 * last error), hand out no result, and leave no block of the library's allocator live; once n
 * is past the path's last allocation it must succeed with the same result as with malloc.
 * Every block carries a header, so a block freed by the wrong allocator (the library's with
 * free(), or malloc's with the library's) is caught too. json-c's and libyaml's own allocations
 * are not counted here: the sanitizer and valgrind builds run this test for those.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "oomless.h"

/* ---- the counting allocator ------------------------------------------------------------- */

#define MAGIC 0x6f6f6d6c65737321ULL

struct header {
    uint64_t magic;
    size_t size;
};

static struct {
    long calls;   /* allocation calls so far (malloc and realloc) */
    long fail_at; /* the call that fails; 0: none */
    long live;    /* blocks allocated and not freed */
    int failed;   /* the failing call was reached */
} cnt;

static int should_fail(void)
{
    if (++cnt.calls != cnt.fail_at)
        return 0;
    cnt.failed = 1;
    return 1;
}

static void *t_malloc(size_t n, void *user)
{
    struct header *h;
    (void)user;
    if (should_fail() || !(h = malloc(sizeof(*h) + n)))
        return NULL;
    h->magic = MAGIC;
    h->size = n;
    cnt.live++;
    return h + 1;
}

static struct header *header_of(void *p)
{
    struct header *h = (struct header *)p - 1;
    if (h->magic != MAGIC)
        fail_msg("a block not from the library's allocator was given back to it");
    return h;
}

static void *t_realloc(void *p, size_t n, void *user)
{
    struct header *h;
    if (!p)
        return t_malloc(n, user);
    h = header_of(p);
    if (should_fail())
        return NULL;
    if (!(h = realloc(h, sizeof(*h) + n)))
        return NULL;
    h->size = n;
    return h + 1;
}

static void t_free(void *p, void *user)
{
    struct header *h;
    (void)user;
    if (!p)
        return;
    h = header_of(p);
    h->magic = 0;
    cnt.live--;
    free(h);
}

static const oom_allocator counting = {OOM_ALLOCATOR_VERSION, t_malloc, t_realloc, t_free, NULL};

/* ---- the driver -------------------------------------------------------------------------- */

/* A path: runs, frees what the library gave it, and returns the code; on success *out is a
 * malloc'd summary of the result (compared with the run without failures). */
typedef int (*path_fn)(char **out);

static void fail_each_allocation(const char *name, path_fn path, int want)
{
    char *ref = NULL, *got;
    long n;
    int rc;

    for (n = 1;; n++) {
        memset(&cnt, 0, sizeof(cnt));
        cnt.fail_at = n;
        got = NULL;
        oom_set_allocator(&counting);
        rc = path(&got);
        oom_set_allocator(NULL);
        if (cnt.live != 0)
            fail_msg("%s: allocation %ld failing: %ld block(s) leaked", name, n, cnt.live);
        if (!cnt.failed) { /* past the last allocation: the full result */
            if (rc != want)
                fail_msg("%s: returned %d (%s), expected %d", name, rc, oom_last_message(), want);
            /* the reference comes after the failures, so that what a path loads once (the
             * coefficients) is loaded first under them */
            if (path(&ref) != want)
                fail_msg("%s: with malloc: %s", name, oom_last_message());
            if ((ref == NULL) != (got == NULL) || (ref && strcmp(ref, got)))
                fail_msg("%s: result differs:\n%s\n---- expected:\n%s", name, got ? got : "(none)",
                         ref ? ref : "(none)");
            break;
        }
        if (rc != OOM_ENOMEM || oom_last_error() != OOM_ENOMEM)
            fail_msg("%s: allocation %ld failing: returned %d (%s), last error %d; expected "
                     "OOM_ENOMEM",
                     name, n, rc, oom_last_message(), oom_last_error());
        if (got)
            fail_msg("%s: allocation %ld failing: a result was handed out", name, n);
    }
    free(ref);
    free(got);
    print_message("%-28s %ld allocation(s), each failed once\n", name, n - 1);
    assert_true(n > 1); /* the path allocates: otherwise this test tests nothing */
}

static char *copy(const char *s)
{
    char *d = strdup(s ? s : "(null)");
    assert_non_null(d);
    return d;
}

/* ---- fixtures ------------------------------------------------------------------------------ */

static char config_path[256], bad_config_path[256], spec_path[256], hf_config_path[256],
    plan_options_path[256], workloads_path[256], hub_dir[256];

static void write_file(char *path, size_t size, const char *text)
{
    int fd;
    snprintf(path, size, "%s/oomless-fault.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_true((fd = mkstemp(path)) >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static const char config_text[] = "# a config long enough that reading it grows the buffer\n"
                                  "defaults:\n"
                                  "  safety_margin: 10%\n"
                                  "  profile: lab-card\n"
                                  "gpus:\n"
                                  "  - id: lab-card\n"
                                  "    name: Lab card\n"
                                  "    memory: 20GiB\n"
                                  "    bf16_tflops: 80\n"
                                  "    bandwidth_gbs: 900\n"
                                  "    match: \"Lab Card\"\n"
                                  "    cc: \"8.6\"\n"
                                  "    aliases: [lab, mine, 4242]\n"
                                  "  - {id: rtx-4090, name: Overridden 4090, memory_mib: 24000}\n";

static const char spec_text[] =
    "driver 550.54.15\ncuda 12040\n"
    "gpu name=\"NVIDIA GeForce RTX 4090\" uuid=GPU-4090aaaa-0000-0000-0000-000000000000 "
    "total=25757220864 used=1073741824 cc=8.9 util=30 temp=55\n"
    "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-a100bbbb-0000-0000-0000-000000000000 "
    "total=85899345920 used=0 cc=8.0\n"
    "proc gpu=0 pid=4141 used=1000\n"
    "proc gpu=1 pid=4242 used=2147483648\nproc gpu=1 pid=4343 used=4096\n";

static void use_fake_nvml(void)
{
    const char *lib = getenv("FAKE_NVML_LIB");
    assert_non_null(lib);
    setenv("OOMLESS_NVML_LIBRARY", lib, 1);
    setenv("FAKE_NVML_SPEC", spec_path, 1);
}

static void no_nvml(void)
{
    setenv("OOMLESS_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
}

/* ---- the paths ---------------------------------------------------------------------------- */

static int path_config(char **out)
{
    oom_config *c = NULL;
    int err = oom_config_load(&c, config_path);
    if (!err) {
        char buf[512];
        snprintf(buf, sizeof(buf), "%s|%s|%s", oom_config_path(c), oom_config_default_margin(c),
                 oom_config_default_profile(c));
        *out = copy(buf);
    }
    if (err && c)
        fail_msg("config handed out on failure");
    oom_config_free(c);
    return err;
}

static int path_bad_config(char **out)
{
    oom_config *c = NULL;
    int err = oom_config_load(&c, bad_config_path);
    (void)out;
    oom_config_free(c);
    return err;
}

static int path_default_config(char **out)
{
    oom_config *c = NULL;
    int err = oom_config_load(&c, NULL); /* no default file: the defaults */
    if (!err)
        *out = copy(oom_config_default_profile(c));
    oom_config_free(c);
    return err;
}

static int path_catalog(char **out)
{
    oom_config *c = NULL;
    oom_catalog *cat = NULL;
    const oom_gpu_profile *p;
    char *json = NULL;
    int err;

    if ((err = oom_config_load(&c, config_path)) || (err = oom_catalog_load(&cat, c)) ||
        (err = oom_catalog_find(&p, cat, "mine")) || (err = oom_catalog_to_json(&json, cat)))
        goto done;
    *out = copy(json);
done:
    oom_free(json);
    oom_catalog_free(cat);
    oom_config_free(c);
    return err;
}

static int target_json(char **out, const char *gpu, const char *vram, const char *margin,
                       int sample)
{
    oom_config *c = NULL;
    oom_catalog *cat = NULL;
    oom_gpu_session *s = NULL;
    oom_gpu_list *list = NULL;
    oom_target t = OOM_TARGET_INIT;
    oom_target_request req = {OOM_TARGET_REQUEST_VERSION, gpu, vram, margin, NULL};
    char *json = NULL;
    int err, have_target = 0;

    if ((err = oom_config_load(&c, config_path)) || (err = oom_catalog_load(&cat, c)))
        goto done;
    req.config = c;
    if ((err = oom_target_resolve(&t, &req, cat)))
        goto done;
    have_target = 1;
    if (sample && ((err = oom_gpu_open(&s)) ||
                   (err = oom_gpu_sample(&list, s, OOM_SAMPLE_PROCESSES | OOM_SAMPLE_ALL_GPUS))))
        goto done;
    if ((err = oom_gpus_to_json(&json, list, &t)))
        goto done;
    *out = copy(json);
done:
    if (have_target)
        oom_target_dispose(&t);
    oom_free(json);
    oom_gpu_list_free(list);
    oom_gpu_close(s);
    oom_catalog_free(cat);
    oom_config_free(c);
    return err;
}

static int path_target_profile(char **out)
{
    return target_json(out, "lab_card", "18.5", "512", 0);
}

static int path_target_fallback(char **out)
{
    no_nvml();
    return target_json(out, NULL, NULL, NULL, 0);
}

static int path_target_detected(char **out)
{
    use_fake_nvml();
    return target_json(out, NULL, NULL, "5%", 1);
}

static int path_target_index(char **out)
{
    use_fake_nvml();
    return target_json(out, "1", "70", NULL, 1);
}

static int path_sample(char **out)
{
    oom_gpu_session *s = NULL;
    oom_gpu_list *list = NULL;
    char buf[256];
    int err;

    use_fake_nvml();
    if ((err = oom_gpu_open(&s)) || (err = oom_gpu_sample(&list, s, OOM_SAMPLE_PROCESSES)))
        goto done;
    snprintf(buf, sizeof(buf), "%zu gpus, %zu+%zu processes, pid %u", list->count,
             list->gpus[0]->process_count, list->gpus[1]->process_count,
             list->gpus[1]->processes[0]->pid);
    *out = copy(buf);
done:
    oom_gpu_list_free(list);
    oom_gpu_close(s);
    return err;
}

static int estimate_json(char **out, const char *model, const char *const *opts)
{
    oom_workload *w = NULL, *c = NULL;
    oom_estimate e = OOM_ESTIMATE_INIT;
    oom_budget b = {OOM_BUDGET_VERSION, 24 * OOM_GiB, OOM_GiB, 23 * OOM_GiB};
    char *json = NULL, *v = NULL;
    int err;

    if ((err = oom_workload_create(&w)) || (err = oom_workload_set(w, "model", model)))
        goto done;
    for (; *opts; opts += 2)
        if ((err = oom_workload_set(w, opts[0], opts[1])))
            goto done;
    if ((err = oom_workload_get(&v, w, "lora-targets")) || (err = oom_workload_clone(&c, w)) ||
        (err = oom_estimate_run(&e, c)) || (err = oom_estimate_to_json_budget(&json, w, &e, &b)))
        goto done;
    *out = copy(json);
done:
    oom_free(json);
    oom_free(v);
    oom_workload_free(c);
    oom_workload_free(w);
    return err;
}

static int path_estimate_lora(char **out)
{
    static const char *const opts[] = {
        "method", "lora", "lora-targets", "all-linear", "batch", "4", "seq", "2048",
        "gpus",   "2",    "sharding",     "zero2",      NULL};
    return estimate_json(out, "llama-3.1-8b", opts);
}

static int path_estimate_hf(char **out)
{
    static const char *const opts[] = {"method", "qlora", "overhead", "600MiB", "seq", "256", NULL};
    return estimate_json(out, hf_config_path, opts);
}

static int path_estimate_t5(char **out)
{
    static const char *const opts[] = {"decoder-seq", "128", "checkpointing", "full", "optimizer",
                                       "adafactor",   NULL};
    return estimate_json(out, "t5-base", opts);
}

/* the report `oomless estimate` prints, with every string it owns */
static int path_estimate_report(char **out)
{
    oom_workload *w = NULL;
    oom_estimate_report r = OOM_ESTIMATE_REPORT_INIT;
    oom_budget b = {OOM_BUDGET_VERSION, 80 * OOM_GiB, OOM_GiB, 79 * OOM_GiB};
    char text[512];
    int err;

    if ((err = oom_workload_create(&w)) || (err = oom_workload_set(w, "model", "qwen2.5-0.5b")) ||
        (err = oom_workload_set(w, "method", "qlora")) ||
        (err = oom_workload_set(w, "objective", "grpo")) ||
        (err = oom_workload_set(w, "batch", "8")) || (err = oom_workload_set(w, "gpus", "2")) ||
        (err = oom_workload_set(w, "sharding", "zero2")) ||
        (err = oom_estimate_report_run(&r, w, &b)))
        goto done;
    snprintf(text, sizeof text, "%s %s %s %s %s %s %s %s %llu", r.model, r.family, r.checkpointing,
             r.sharding, r.objective, r.rollout, r.confidence_class, r.adapter_dtype,
             (unsigned long long)r.estimate.device_peak);
    *out = copy(text);
done:
    oom_estimate_report_dispose(&r);
    oom_workload_free(w);
    return err;
}

static int path_presets(char **out)
{
    oom_preset **p = NULL;
    size_t n = 0;
    char *json = NULL;
    int err;

    if ((err = oom_model_presets(&p, &n)) || (err = oom_model_presets_json(&json)))
        goto done;
    *out = copy(json);
done:
    oom_model_presets_free(p, n);
    oom_free(json);
    return err;
}

/* what a model argument names: a Hub id in the cache (refs/main), a variant's preset (with a
 * notice), nothing (the closest presets) */
static int resolve_json(char **out, const char *model)
{
    char *path = NULL;
    int err = oom_model_resolve(&path, model);
    if (!err)
        *out = copy(path);
    oom_free(path);
    return err;
}

static int path_resolve_hub(char **out)
{
    return resolve_json(out, "tinyorg/tiny-lm");
}

static int path_resolve_variant(char **out)
{
    return resolve_json(out, "Qwen/Qwen2.5-7B-Instruct");
}

static int path_resolve_none(char **out)
{
    return resolve_json(out, "meta-llama/Llama-3-8B");
}

/* The plan's JSON (the CLI's and the Python package's path) apart from the calls after it: its
 * search (allow=all on two GPUs) is the slow part, and a failure in a later call would rerun it
 * (swept as one path, 415 failure points ran it about 220 times). */
static int path_plan_json(char **out)
{
    static const char *const keys[] = {"model", "method", "gpu", "target-effective-batch",
                                       "seq",   "allow",  "gpus"};
    static const char *const values[] = {"llama-3.2-1b", "lora", "a10", "32", "1024", "all", "2"};
    char *json = NULL;
    int err;

    no_nvml();
    if (!(err = oom_plan_json(&json, keys, values, 7)))
        *out = copy(json);
    oom_free(json);
    return err;
}
static int path_plan(char **out)
{
    static const char *const keys[] = {"model", "method", "gpu"};
    static const char *const values[] = {"llama-3.2-1b", "lora", "a10"};
    oom_plan_options *o = NULL;
    oom_plan_result *r = NULL;
    char *text = NULL, *svg = NULL;
    size_t i;
    int err;

    no_nvml();
    if ((err = oom_plan_options_create(&o)))
        goto done;
    for (i = 0; i < 3; i++)
        if ((err = oom_plan_options_set(o, keys[i], values[i])))
            goto done;
    if ((err = oom_plan_options_load(o, plan_options_path)) ||
        (err = oom_plan_options_run(&r, o)) || (err = oom_plan_format(&text, r, "deepspeed")) ||
        (err = oom_plan_svg(&svg, r)))
        goto done;
    *out = copy(text);
done:
    oom_free(text);
    oom_free(svg);
    oom_plan_free(r);
    oom_plan_options_free(o);
    return err;
}
static int path_table(char **out)
{
    static const char *const gpus[] = {"t4", "a100-80gb"};
    oom_plan_options **w = NULL;
    char **names = NULL, *md = NULL;
    size_t n = 0;
    int err;

    no_nvml();
    if ((err = oom_table_workloads_load(&w, &names, &n, workloads_path)) ||
        (err = oom_table(&md, (const oom_plan_options *const *)w, (const char *const *)names, n,
                         gpus, 2, "markdown")))
        goto done;
    *out = copy(md);
done:
    oom_free(md);
    oom_table_workloads_free(w, names, n);
    return err;
}

/* ---- apply: real writes (backup, temporary file, rename) on two files at once --------------- */

static const char apply_yaml[] = "# ü\ntrain:\n  batch_size: 45  # per GPU\n  accum: 5\n";
static const char apply_json[] = "{\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"x\": [1]\n}\n";
/* made for an effective batch of 9 x 28 = 252: the yaml's 45 x 5 = 225 is kept, 9 x 25 (the
 * accumulation recomputed, the text edited again) */
static const char apply_plan[] = "{\"plan\": {\"batch_size\": 9, \"grad_accum\": 28}}";
static char apply_dir[256];

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = calloc(1, (size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return buf;
}

static void put(const char *dir, const char *name, const char *text)
{
    char path[512];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_non_null(f = fopen(path, "wb"));
    fputs(text, f);
    fclose(f);
}

static int apply_files(char **out)
{
    const char *files[] = {"c.yaml", "d.json"};
    oom_apply *a = NULL;
    char *diff = NULL;
    int err;

    if ((err = oom_apply_create(&a)) || (err = oom_apply_load_plan(a, apply_plan, "plan")) ||
        (err = oom_apply_set(a, "train.batch_size", "batch_size", OOM_APPLY_OPTIONAL)) ||
        (err = oom_apply_set(a, "train.accum", "grad_accum", OOM_APPLY_OPTIONAL)) ||
        (err = oom_apply_set(a, "train_micro_batch_size_per_gpu", "batch_size",
                             OOM_APPLY_OPTIONAL)) ||
        /* d.json has the micro-batch key but not the accumulation one: --partial (and its
         * note, allocated too) */
        (err = oom_apply_run(a, files, 2, OOM_APPLY_PARTIAL, &diff)))
        goto done;
    *out = copy(diff);
done:
    oom_free(diff);
    oom_apply_free(a);
    return err;
}

/* Each file is its old or its new text, never partial; no temporary file is left; a backup,
 * when there is one, is the old text; on failure both files are old. */
static int path_apply(char **out)
{
    const char *names[] = {"c.yaml", "d.json"}, *olds[] = {apply_yaml, apply_json};
    char cwd[512], path[600], *now;
    int err, i, changed = 0;
    DIR *d;
    struct dirent *e;

    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(apply_dir), 0);
    put(".", "c.yaml", apply_yaml);
    put(".", "d.json", apply_json);
    unlink("c.yaml.bak");
    unlink("d.json.bak");
    err = apply_files(out);
    for (i = 0; i < 2; i++) {
        now = slurp(names[i]);
        assert_non_null(now);
        if (strcmp(now, olds[i])) {
            changed++;
            assert_true(strstr(now, "9") != NULL); /* the new text, as a whole: */
            assert_true(i == 0 ? !strcmp(now, "# ü\ntrain:\n  batch_size: 9  # per GPU\n  "
                                              "accum: 25\n")
                               : !strcmp(now, "{\n  \"train_micro_batch_size_per_gpu\": 9,\n  "
                                              "\"x\": [1]\n}\n"));
        }
        free(now);
        snprintf(path, sizeof(path), "%s.bak", names[i]);
        if ((now = slurp(path))) {
            assert_string_equal(now, olds[i]);
            free(now);
        }
    }
    assert_non_null(d = opendir("."));
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".oomless-"))
            fail_msg("temporary file %s left (error %d)", e->d_name, err);
    closedir(d);
    /* all or nothing: a failure (before the first rename: nothing after it allocates) leaves
     * both files as they were */
    if (err && changed)
        fail_msg("apply failed (%s) with %d file(s) changed", oom_last_message(), changed);
    if (!err)
        assert_int_equal(changed, 2);
    assert_int_equal(chdir(cwd), 0);
    return err;
}

/* ---- calibration store: an append onto a half line, then a lookup past the damaged line ---- */

static const char calib_half[] = "{\"time\":1,\"gpu\":\"NVIDIA A100-SXM4-80GB\",\"comm";

/* A failed save leaves the file as it was; a saved record starts a line of its own. */
static int path_calibration(char **out)
{
    const char *argv[] = {"python", "train.py", "--bs", "{batch}", NULL};
    oom_calibration rec = OOM_CALIBRATION_INIT, *got = NULL;
    char path[512], text[64], *key = NULL, *now;
    size_t half = sizeof(calib_half) - 1;
    int err, saved = 0;

    snprintf(path, sizeof(path), "%s/calibration.jsonl", apply_dir);
    put(apply_dir, "calibration.jsonl", calib_half);
    if ((err = oom_calibration_command_key(&key, argv)))
        goto done;
    rec.gpu = "NVIDIA A100-SXM4-80GB";
    rec.command = key;
    rec.workload = "seq=512";
    rec.fit = (oom_probe_fit){OOM_PROBE_FIT_VERSION, 1, 0, 1e9, 2e7, 0};
    rec.recommended_batch = 12;
    rec.max_batch = 13;
    if ((err = oom_calibration_save(path, &rec)))
        goto done;
    saved = 1;
    if ((err = oom_calibration_lookup(&got, path, rec.gpu, key, "seq=512")))
        goto done;
    snprintf(text, sizeof(text), "batch %d of %d", got->recommended_batch, got->max_batch);
    *out = copy(text);
done:
    assert_non_null(now = slurp(path));
    if (!saved && strcmp(now, calib_half))
        fail_msg("calibration: a failed save (%s) changed the file: %s", oom_last_message(), now);
    if (saved &&
        (strncmp(now, calib_half, half) || now[half] != '\n' || now[strlen(now) - 1] != '\n' ||
         strchr(now + half + 1, '\n') != now + strlen(now) - 1))
        fail_msg("calibration: the record is not one line of its own: %s", now);
    free(now);
    oom_calibration_free(got);
    oom_free(key);
    return err;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_config(void **state)
{
    (void)state;
    fail_each_allocation("config load", path_config, OOM_OK);
    fail_each_allocation("config load, bad value", path_bad_config, OOM_EINVAL);
    fail_each_allocation("config load, default", path_default_config, OOM_OK);
}

static void test_catalog(void **state)
{
    (void)state;
    fail_each_allocation("catalog load + find + json", path_catalog, OOM_OK);
}

static void test_target(void **state)
{
    (void)state;
    fail_each_allocation("target: profile", path_target_profile, OOM_OK);
    fail_each_allocation("target: no NVML, fallback", path_target_fallback, OOM_OK);
    fail_each_allocation("target: detected + gpus json", path_target_detected, OOM_OK);
    fail_each_allocation("target: GPU index", path_target_index, OOM_OK);
}

static void test_estimate(void **state)
{
    (void)state;
    fail_each_allocation("estimate: preset, lora", path_estimate_lora, OOM_OK);
    fail_each_allocation("estimate: config.json, qlora", path_estimate_hf, OOM_OK);
    fail_each_allocation("estimate: t5", path_estimate_t5, OOM_OK);
    fail_each_allocation("estimate report: qlora, grpo, zero2", path_estimate_report, OOM_OK);
    fail_each_allocation("model presets", path_presets, OOM_OK);
    fail_each_allocation("model lookup: Hub cache", path_resolve_hub, OOM_OK);
    fail_each_allocation("model lookup: variant preset", path_resolve_variant, OOM_OK);
    fail_each_allocation("model lookup: closest presets", path_resolve_none, OOM_ENOTFOUND);
}

static void test_plan(void **state)
{
    (void)state;
    fail_each_allocation("plan: json", path_plan_json, OOM_OK);
    fail_each_allocation("plan: options, run, svg", path_plan, OOM_OK);
    fail_each_allocation("table: workloads file", path_table, OOM_OK);
}

static void test_apply(void **state)
{
    (void)state;
    fail_each_allocation("apply: two files written", path_apply, OOM_OK);
}

static void test_calibration(void **state)
{
    (void)state;
    fail_each_allocation("calibration: save + lookup", path_calibration, OOM_OK);
}

static void test_sample(void **state)
{
    (void)state;
    fail_each_allocation("gpu open + sample", path_sample, OOM_OK);
}

/* The allocator itself: a block it did not hand out is noticed (so the checks above can fail). */
static void test_allocator_checks(void **state)
{
    char *s;
    (void)state;
    memset(&cnt, 0, sizeof(cnt));
    oom_set_allocator(&counting);
    s = NULL;
    assert_int_equal(oom_config_load((oom_config **)&s, config_path), OOM_OK);
    assert_true(cnt.live > 0);
    oom_config_free((oom_config *)s);
    assert_int_equal(cnt.live, 0);
    cnt.fail_at = cnt.calls + 1;
    assert_int_equal(oom_config_load((oom_config **)&s, config_path), OOM_ENOMEM);
    assert_true(cnt.failed);
    assert_null(s);
    oom_set_allocator(NULL);
}

static int setup(void **state)
{
    (void)state;
    write_file(config_path, sizeof(config_path), config_text);
    write_file(
        bad_config_path, sizeof(bad_config_path),
        "defaults:\n  profile: x\ngpus:\n  - {id: a, memory: 1GiB}\n  - {id: b, memory: lots}\n");
    write_file(spec_path, sizeof(spec_path), spec_text);
    write_file(plan_options_path, sizeof(plan_options_path),
               "checkpointing: selective\nseq-range: 256:2048\nvram-safety-margin: 5%\n");
    write_file(workloads_path, sizeof(workloads_path),
               "workloads:\n  small: {model: gpt2, seq: 512}\n"
               "  lora: {model: llama-3.2-1b, method: lora, target-effective-batch: 16}\n");
    snprintf(apply_dir, sizeof(apply_dir), "%s/oomless-fault-apply.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(apply_dir));
    write_file(hf_config_path, sizeof(hf_config_path),
               "{\"model_type\": \"mistral\", \"hidden_size\": 1024, \"num_hidden_layers\": 4, "
               "\"num_attention_heads\": 16, \"num_key_value_heads\": 4, "
               "\"intermediate_size\": 3584, \"vocab_size\": 32000, "
               "\"max_position_embeddings\": 4096, \"tie_word_embeddings\": false}");
    snprintf(hub_dir, sizeof(hub_dir), "%s/oomless-fault-hub.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(hub_dir));
    {
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "r='%s/models--TinyOrg--Tiny-LM' && mkdir -p \"$r/refs\" \"$r/snapshots/a\" "
                 "\"$r/snapshots/b\" && cp '%s' \"$r/snapshots/a/config.json\" && cp '%s' "
                 "\"$r/snapshots/b/config.json\" && echo a > \"$r/refs/main\"",
                 hub_dir, hf_config_path, hf_config_path);
        assert_int_equal(system(cmd), 0);
    }
    setenv("HF_HUB_CACHE", hub_dir, 1);
    setenv("XDG_CONFIG_HOME", "/nonexistent", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("OOMLESS_GPU");
    unsetenv("GPU_PROFILE");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(config_path);
    unlink(bad_config_path);
    unlink(spec_path);
    unlink(hf_config_path);
    unlink(plan_options_path);
    unlink(workloads_path);
    {
        char cmd[800];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", apply_dir, hub_dir);
        if (system(cmd) != 0)
            return -1;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* test_estimate first: the coefficients it loads once are loaded under failures */
        cmocka_unit_test(test_estimate),    cmocka_unit_test(test_allocator_checks),
        cmocka_unit_test(test_config),      cmocka_unit_test(test_catalog),
        cmocka_unit_test(test_target),      cmocka_unit_test(test_sample),
        cmocka_unit_test(test_plan),        cmocka_unit_test(test_apply),
        cmocka_unit_test(test_calibration),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
