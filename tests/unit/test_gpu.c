/* test_gpu.c - CUDA_VISIBLE_DEVICES, the catalog, the config file, targets, the NVML backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oomless.h"
#include "unit/tmpdir.h"

static const char *const uuids[] = {
    "GPU-aaaaaaaa-1111-2222-3333-444444444444",
    "GPU-bbbbbbbb-1111-2222-3333-444444444444",
    "GPU-bbbbcccc-1111-2222-3333-444444444444",
    "GPU-dddddddd-1111-2222-3333-444444444444",
};

static size_t cvd(int *vis, const char *value)
{
    return oom_cuda_visible(vis, 8, value, uuids, 4);
}

static void test_cuda_visible(void **state)
{
    int v[8];
    (void)state;
    assert_int_equal(cvd(v, NULL), 4);
    assert_int_equal(v[3], 3);
    assert_int_equal(cvd(v, ""), 0);
    assert_int_equal(cvd(v, "1"), 1);
    assert_int_equal(v[0], 1);
    assert_int_equal(cvd(v, "3,1"), 2);
    assert_int_equal(v[0], 3);
    assert_int_equal(v[1], 1);
    /* an invalid entry ends the list, as in CUDA */
    assert_int_equal(cvd(v, "0,7,1"), 1);
    assert_int_equal(cvd(v, "0,-1,1"), 1);
    assert_int_equal(cvd(v, "banana,0"), 0);
    assert_int_equal(cvd(v, "2,2"), 1); /* repeated */
    /* UUIDs: full, unique prefix, ambiguous prefix */
    assert_int_equal(cvd(v, "GPU-dddddddd-1111-2222-3333-444444444444"), 1);
    assert_int_equal(v[0], 3);
    assert_int_equal(cvd(v, "GPU-aaa,GPU-bbbbc"), 2);
    assert_int_equal(v[0], 0);
    assert_int_equal(v[1], 2);
    assert_int_equal(cvd(v, "GPU-bbbb,0"), 0); /* ambiguous */
    assert_int_equal(cvd(v, " 1 , 0 "), 2);
    assert_int_equal(cvd(v, "GPU-ffff"), 0);
}

static void test_catalog(void **state)
{
    oom_catalog *c = NULL;
    const oom_gpu_profile *p;
    (void)state;
    assert_int_equal(oom_catalog_load(&c, NULL), OOM_OK);
    assert_true(oom_catalog_count(c) >= 31);
    assert_int_equal(oom_catalog_find(&p, c, "a100_80gb"), OOM_OK);
    assert_int_equal(p->version, OOM_GPU_PROFILE_VERSION);
    assert_string_equal(p->id, "a100-80gb");
    assert_int_equal(p->memory_bytes, 81920 * OOM_MiB);
    assert_int_equal(oom_catalog_find(&p, c, "RTX_4090"), OOM_OK);
    assert_int_equal(p->memory_bytes, 24564 * OOM_MiB);
    assert_int_equal(oom_catalog_find(&p, c, "h100"), OOM_OK); /* alias */
    assert_string_equal(p->id, "h100-sxm");
    assert_int_equal(oom_catalog_find(&p, c, "t4"), OOM_OK);
    assert_true(p->bf16_tflops == 0); /* Turing: no bf16 */
    assert_int_equal(oom_catalog_find(&p, c, "a100-81gb"), OOM_ENOTFOUND);
    assert_non_null(strstr(oom_last_message(), "a100-81gb"));
    assert_non_null(strstr(oom_last_message(), "a100-80gb")); /* closest names */
    /* every GPU the catalog promises (README.md) is there */
    {
        const char *ids[] = {"rtx-2060",
                             "rtx-2080-ti",
                             "rtx-3060",
                             "rtx-3080",
                             "rtx-3090",
                             "rtx-4060-ti",
                             "rtx-4070-ti",
                             "rtx-4080",
                             "rtx-4090",
                             "rtx-5090",
                             "quadro-rtx-6000",
                             "rtx-a4000",
                             "rtx-a5000",
                             "rtx-a6000",
                             "rtx-6000-ada",
                             "t4",
                             "v100-16gb",
                             "v100-32gb",
                             "a10",
                             "a10g",
                             "l4",
                             "l40s",
                             "a100-40gb",
                             "a100-80gb",
                             "h100-pcie",
                             "h100-sxm",
                             "h100-nvl",
                             "h200",
                             "b200",
                             "mi250",
                             "mi300x"};
        size_t i;
        for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
            if (oom_catalog_find(&p, c, ids[i]))
                fail_msg("catalog lacks %s", ids[i]);
    }
    /* matching detected devices by NVML name and memory */
    p = oom_catalog_match(c, "NVIDIA A100-SXM4-80GB", 81920 * OOM_MiB);
    assert_non_null(p);
    assert_string_equal(p->id, "a100-80gb");
    p = oom_catalog_match(c, "NVIDIA A100-PCIE-40GB", 40536 * OOM_MiB);
    assert_string_equal(p->id, "a100-40gb");
    p = oom_catalog_match(c, "NVIDIA A10G", 23028 * OOM_MiB);
    assert_string_equal(p->id, "a10g");
    p = oom_catalog_match(c, "NVIDIA L40S", 46068 * OOM_MiB);
    assert_string_equal(p->id, "l40s");
    p = oom_catalog_match(c, "NVIDIA H100 80GB HBM3", 81559 * OOM_MiB);
    assert_string_equal(p->id, "h100-sxm");
    assert_null(oom_catalog_match(c, "Matrox G200", OOM_GiB));
    oom_catalog_free(c);
    oom_catalog_free(NULL);
}

static char *write_tmp(const char *text)
{
    char *path = test_write_tmp(text);
    assert_non_null(path);
    return path;
}

static void test_config(void **state)
{
    oom_config *cfg = NULL;
    oom_catalog *c = NULL;
    const oom_gpu_profile *p;
    char *path;
    (void)state;

    path = write_tmp("# lab defaults\ndefaults:\n  safety_margin: 10%\n  profile: lab-card\n"
                     "gpus:\n  - id: lab-card\n    name: Lab card\n    memory: 20GiB\n"
                     "    bf16_tflops: 80\n  - {id: a100-80gb, memory_mib: 80000}\n");
    assert_int_equal(oom_config_load(&cfg, path), OOM_OK);
    assert_string_equal(oom_config_default_margin(cfg), "10%");
    assert_string_equal(oom_config_default_profile(cfg), "lab-card");
    assert_int_equal(oom_catalog_load(&c, cfg), OOM_OK);
    assert_int_equal(oom_catalog_find(&p, c, "lab_card"), OOM_OK);
    assert_int_equal(p->memory_bytes, 20 * OOM_GiB);
    assert_true(p->user_defined);
    assert_true(p->bf16_tflops == 80);
    assert_int_equal(oom_catalog_find(&p, c, "a100-80gb"), OOM_OK); /* user entry replaces */
    assert_int_equal(p->memory_bytes, 80000 * OOM_MiB);
    oom_catalog_free(c);
    oom_config_free(cfg);
    unlink(path);

    path = write_tmp("gpus:\n  - id: x\n    memory: banana\n");
    assert_int_equal(oom_config_load(&cfg, path), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "banana"));
    assert_null(cfg);
    unlink(path);

    path = write_tmp("defaults: [unclosed\n");
    assert_int_equal(oom_config_load(&cfg, path), OOM_EPARSE);
    assert_non_null(strstr(oom_last_message(), path));
    unlink(path);

    path = write_tmp("defaults:\n  safty_margin: 1GiB\n");
    assert_int_equal(oom_config_load(&cfg, path), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "safty_margin"));
    unlink(path);

    assert_int_equal(oom_config_load(&cfg, "/nonexistent/oomless.yaml"), OOM_EIO);
    /* no default file: defaults */
    setenv("XDG_CONFIG_HOME", "/nonexistent", 1);
    assert_int_equal(oom_config_load(&cfg, NULL), OOM_OK);
    assert_null(oom_config_path(cfg));
    assert_string_equal(oom_config_default_profile(cfg), OOM_DEFAULT_PROFILE);
    oom_config_free(cfg);
}

static void test_target_profile(void **state)
{
    oom_catalog *c = NULL;
    oom_target t = OOM_TARGET_INIT;
    oom_target_request req = {OOM_TARGET_REQUEST_VERSION, "a100_80gb", NULL, NULL, NULL};
    (void)state;
    assert_int_equal(oom_catalog_load(&c, NULL), OOM_OK);
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_int_equal(t.budget.target_bytes, 81920 * OOM_MiB);
    assert_int_equal(t.budget.usable_bytes, 80896 * OOM_MiB);
    assert_false(t.detected);
    oom_target_dispose(&t);

    req = (oom_target_request){OOM_TARGET_REQUEST_VERSION, "rtx-4090", "20.5", "512", NULL};
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_int_equal(t.budget.usable_bytes, 20 * OOM_GiB);
    oom_target_dispose(&t);

    req = (oom_target_request){OOM_TARGET_REQUEST_VERSION, "rtx-4090", "banana", NULL, NULL};
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "banana"));
    req = (oom_target_request){OOM_TARGET_REQUEST_VERSION, "rtx-4090", "1", "2GiB", NULL};
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_EINVAL);

    /* env: OOMLESS_GPU wins over GPU_PROFILE, the argument over both */
    setenv("GPU_PROFILE", "a100_40gb", 1);
    req = (oom_target_request){OOM_TARGET_REQUEST_VERSION, NULL, NULL, NULL, NULL};
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_string_equal(t.profile.id, "a100-40gb");
    oom_target_dispose(&t);
    setenv("OOMLESS_GPU", "l4", 1);
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_string_equal(t.profile.id, "l4");
    oom_target_dispose(&t);
    req.gpu = "t4";
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_string_equal(t.profile.id, "t4");
    oom_target_dispose(&t);
    unsetenv("GPU_PROFILE");
    unsetenv("OOMLESS_GPU");
    oom_catalog_free(c);
}

/* ---- the real dlopen path against the fake NVML ---------------------------------------- */

static char spec_path[512]; /* the fake NVML's spec file of the moment */

static void drop_spec(void)
{
    if (spec_path[0])
        unlink(spec_path);
    spec_path[0] = '\0';
}

static int teardown(void **state)
{
    (void)state;
    drop_spec();
    return 0;
}

static void use_fake(const char *variant, const char *spec)
{
    char lib[2048];
    const char *base = getenv("FAKE_NVML_LIB");
    assert_non_null(base);
    if (variant) {
        char dir[1024];
        snprintf(dir, sizeof(dir), "%s", base);
        *strrchr(dir, '/') = '\0';
        snprintf(lib, sizeof(lib), "%s/%s/libnvidia-ml.so.1", dir, variant);
    } else
        snprintf(lib, sizeof(lib), "%s", base);
    setenv("OOMLESS_NVML_LIBRARY", lib, 1);
    drop_spec(); /* the fake reads its spec when a session opens: the last one is done with */
    snprintf(spec_path, sizeof(spec_path), "%s", write_tmp(spec));
    setenv("FAKE_NVML_SPEC", spec_path, 1);
}

static const char two_gpus[] =
    "driver 550.54.15\ncuda 12040\n"
    "gpu name=\"NVIDIA GeForce RTX 4090\" uuid=GPU-4090aaaa-0000-0000-0000-000000000000 "
    "total=25757220864 used=1073741824 cc=8.9 util=30 temp=55\n"
    "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-a100bbbb-0000-0000-0000-000000000000 "
    "total=85899345920 used=0 cc=8.0\n"
    "proc gpu=1 pid=4242 used=2147483648\n";

static void test_nvml_fake(void **state)
{
    oom_gpu_session *s = NULL;
    oom_gpu_list *l = NULL;
    (void)state;
    use_fake(NULL, two_gpus);
    unsetenv("CUDA_VISIBLE_DEVICES");
    assert_int_equal(oom_gpu_open(&s), OOM_OK);
    assert_int_equal(oom_gpu_sample(&l, s, OOM_SAMPLE_PROCESSES), OOM_OK);
    assert_int_equal(l->count, 2);
    assert_string_equal(l->driver_version, "550.54.15");
    assert_int_equal(l->cuda_driver_version, 12040);
    assert_string_equal(l->gpus[0]->name, "NVIDIA GeForce RTX 4090");
    assert_int_equal(l->gpus[0]->total_bytes, 25757220864ULL);
    assert_int_equal(l->gpus[0]->used_bytes, 1073741824ULL);
    assert_int_equal(l->gpus[0]->free_bytes, 25757220864ULL - 1073741824ULL);
    assert_true(l->gpus[0]->has_cc && l->gpus[0]->cc_major == 8 && l->gpus[0]->cc_minor == 9);
    assert_true(l->gpus[0]->has_utilization && l->gpus[0]->utilization_gpu == 30);
    assert_false(l->gpus[1]->has_utilization);
    assert_int_equal(l->gpus[1]->used_bytes, 2147483648ULL); /* its process */
    assert_int_equal(l->gpus[1]->process_count, 1);
    assert_int_equal(l->gpus[1]->processes[0]->pid, 4242);
    assert_int_equal(l->gpus[1]->processes[0]->used_bytes, 2147483648ULL);
    /* what the library hands out carries the versions it filled in */
    assert_int_equal(l->version, OOM_GPU_LIST_VERSION);
    assert_int_equal(l->gpus[0]->version, OOM_GPU_INFO_VERSION);
    assert_int_equal(l->gpus[1]->processes[0]->version, OOM_GPU_PROCESS_VERSION);
    oom_gpu_list_free(l);

    setenv("CUDA_VISIBLE_DEVICES", "GPU-a100", 1);
    assert_int_equal(oom_gpu_sample(&l, s, 0), OOM_OK);
    assert_int_equal(l->count, 1);
    assert_int_equal(l->gpus[0]->index, 0);
    assert_int_equal(l->gpus[0]->nvml_index, 1);
    assert_string_equal(l->gpus[0]->name, "NVIDIA A100-SXM4-80GB");
    oom_gpu_list_free(l);
    assert_int_equal(oom_gpu_sample(&l, s, OOM_SAMPLE_ALL_GPUS), OOM_OK);
    assert_int_equal(l->count, 2);
    oom_gpu_list_free(l);
    unsetenv("CUDA_VISIBLE_DEVICES");
    oom_gpu_close(s);
}

static void test_nvml_variants(void **state)
{
    oom_gpu_session *s = NULL;
    oom_gpu_list *l = NULL;
    (void)state;

    /* only the v1 symbols: memory still read, optional fields unknown */
    use_fake("minimal", two_gpus);
    assert_int_equal(oom_gpu_open(&s), OOM_OK);
    assert_int_equal(oom_gpu_sample(&l, s, OOM_SAMPLE_PROCESSES), OOM_OK);
    assert_int_equal(l->count, 2);
    assert_int_equal(l->gpus[0]->total_bytes, 25757220864ULL);
    assert_false(l->gpus[0]->has_cc);
    assert_string_equal(l->gpus[0]->uuid, "");
    assert_string_equal(l->driver_version, "");
    assert_int_equal(l->gpus[1]->process_count, 0);
    oom_gpu_list_free(l);
    oom_gpu_close(s);

    /* a required symbol missing: named in the error */
    use_fake("no_name", two_gpus);
    assert_int_equal(oom_gpu_open(&s), OOM_ENODEV);
    assert_non_null(strstr(oom_last_message(), "nvmlDeviceGetName"));

    /* the 32-byte _v3 process list */
    use_fake("procs_v3_32", "gpu name=X total=1000000000 used=0\n"
                            "proc gpu=0 pid=101 used=1000\nproc gpu=0 pid=202 used=2000\n"
                            "proc gpu=0 pid=303 used=3000\n");
    assert_int_equal(oom_gpu_open(&s), OOM_OK);
    assert_int_equal(oom_gpu_sample(&l, s, OOM_SAMPLE_PROCESSES), OOM_OK);
    assert_int_equal(l->gpus[0]->process_count, 3);
    assert_int_equal(l->gpus[0]->processes[1]->pid, 202);
    assert_int_equal(l->gpus[0]->processes[2]->used_bytes, 3000);
    oom_gpu_list_free(l);
    oom_gpu_close(s);

    /* init failing */
    use_fake(NULL, "init_error 9\n");
    assert_int_equal(oom_gpu_open(&s), OOM_ENODEV);
    assert_non_null(strstr(oom_last_message(), "Driver Not Loaded"));

    /* library missing */
    setenv("OOMLESS_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    assert_int_equal(oom_gpu_open(&s), OOM_ENODEV);
    assert_non_null(strstr(oom_last_message(), "/nonexistent/libnvidia-ml.so.1"));

    /* a GPU lost mid-session */
    use_fake(
        NULL,
        "gpu name=Y total=1000000000 used=0 lost_after=1\ngpu name=Z total=2000000000 used=0\n");
    assert_int_equal(oom_gpu_open(&s), OOM_OK);
    assert_int_equal(oom_gpu_sample(&l, s, 0), OOM_OK);
    assert_false(l->gpus[0]->lost);
    oom_gpu_list_free(l);
    assert_int_equal(oom_gpu_sample(&l, s, 0), OOM_OK);
    assert_true(l->gpus[0]->lost);
    assert_false(l->gpus[1]->lost);
    oom_gpu_list_free(l);
    oom_gpu_close(s);
}

/* The idle H100 of 2026-11-25 (driver 580.159.04): total 81559 MiB, used 0, free 81079 MiB; the
 * 480 MiB in neither are the driver's. Read from _v2's reserved field and inferred with v1. */
static void test_nvml_reserved(void **state)
{
    static const char h100[] = "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-6144c1d5-0000 "
                               "total=85520809984 used=0 reserved=503316480 cc=9.0\n";
    const char *variants[] = {NULL, "mem_v1"};
    oom_catalog *c = NULL;
    size_t i;
    (void)state;
    assert_int_equal(oom_catalog_load(&c, NULL), OOM_OK);
    for (i = 0; i < 2; i++) {
        oom_gpu_session *s = NULL;
        oom_gpu_list *l = NULL;
        oom_target t = OOM_TARGET_INIT;
        oom_target_request req = {OOM_TARGET_REQUEST_VERSION, NULL, NULL, NULL, NULL};
        use_fake(variants[i], h100);
        assert_int_equal(oom_gpu_open(&s), OOM_OK);
        assert_int_equal(oom_gpu_sample(&l, s, 0), OOM_OK);
        assert_int_equal(l->gpus[0]->total_bytes, 81559 * OOM_MiB);
        assert_int_equal(l->gpus[0]->used_bytes, 0);
        assert_int_equal(l->gpus[0]->free_bytes, 81079 * OOM_MiB);
        assert_int_equal(oom_gpu_reserved_bytes(l->gpus[0]), 480 * OOM_MiB);
        oom_gpu_list_free(l);
        oom_gpu_close(s);
        /* the budget starts from 81079 MiB (torch's total_memory), not 81559 */
        assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
        assert_string_equal(t.profile.id, "h100-sxm");
        assert_int_equal(t.budget.target_bytes, 81079 * OOM_MiB);
        assert_int_equal(t.budget.usable_bytes, 80055 * OOM_MiB);
        assert_int_equal(t.others_bytes, 0);
        oom_target_dispose(&t);
    }
    assert_int_equal(oom_gpu_reserved_bytes(NULL), 0);
    oom_catalog_free(c);
}

static void test_target_detected(void **state)
{
    oom_catalog *c = NULL;
    oom_target t = OOM_TARGET_INIT;
    oom_target_request req = {OOM_TARGET_REQUEST_VERSION, NULL, NULL, NULL, NULL};
    (void)state;
    assert_int_equal(oom_catalog_load(&c, NULL), OOM_OK);
    use_fake(NULL, two_gpus);
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_true(t.detected && t.mixed);
    assert_int_equal(t.gpu_count, 2);
    assert_string_equal(t.profile.id, "rtx-4090"); /* the smallest, matched in the catalog */
    assert_true(t.profile.bf16_tflops > 100);
    assert_int_equal(t.budget.target_bytes, 25757220864ULL);
    /* the 4090 has 1 GiB in use (no process named): usable = total - 1 GiB - 1 GiB margin */
    assert_int_equal(t.others_bytes, OOM_GiB);
    assert_null(t.others);
    assert_int_equal(t.budget.usable_bytes, 25757220864ULL - 2 * OOM_GiB);
    oom_target_dispose(&t);
    req.gpu = "1";
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_string_equal(t.profile.id, "a100-80gb");
    assert_int_equal(t.gpu_count, 1);
    /* pid 4242 holds 2 GiB of the A100 */
    assert_int_equal(t.others_bytes, 2 * OOM_GiB);
    assert_string_equal(t.others, "pid 4242 (2.00 GiB)");
    assert_int_equal(t.budget.usable_bytes, 85899345920ULL - 3 * OOM_GiB);
    oom_target_dispose(&t);
    /* --vram free: what is free now is the target */
    req.vram = "free";
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_int_equal(t.budget.target_bytes, 85899345920ULL - 2 * OOM_GiB);
    assert_int_equal(t.budget.usable_bytes, 85899345920ULL - 3 * OOM_GiB);
    oom_target_dispose(&t);
    /* --vram over the detected card: refused with the card's size */
    req.vram = "96";
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "80.00 GiB"));
    /* ... unless a profile that large is named */
    req.gpu = "h200";
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_int_equal(t.budget.target_bytes, 96 * OOM_GiB);
    assert_false(t.detected);
    assert_int_equal(t.others_bytes, 0);
    oom_target_dispose(&t);
    req.vram = NULL;
    req.gpu = "1";
    /* a version 1 target: the library writes nothing past its fields */
    {
        unsigned char raw[sizeof(oom_target) + 8];
        oom_target *old = (oom_target *)raw;
        memset(raw, 0xAB, sizeof(raw));
        assert_int_equal(oom_target_init(old, 1), OOM_OK);
        assert_int_equal(oom_target_resolve(old, &req, c), OOM_OK);
        assert_int_equal(old->budget.usable_bytes, 85899345920ULL - 3 * OOM_GiB);
        assert_int_equal(raw[offsetof(oom_target, others_bytes)], 0xAB);
        assert_int_equal(raw[sizeof(oom_target) - 1], 0xAB);
        oom_target_dispose(old);
    }
    req.gpu = "5";
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "read as a GPU index"));
    /* no GPU: a bare number is a profile id, and says so when none has it */
    setenv("OOMLESS_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    req.gpu = "1";
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_ENODEV);
    assert_non_null(strstr(oom_last_message(), "'1' read as a profile, as no GPU is detected"));
    use_fake(NULL, two_gpus);
    /* no NVML: fallback to the default profile, with the reason */
    setenv("OOMLESS_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    req.gpu = NULL;
    assert_int_equal(oom_target_resolve(&t, &req, c), OOM_OK);
    assert_true(t.fallback);
    assert_string_equal(t.profile.id, OOM_DEFAULT_PROFILE);
    assert_non_null(strstr(t.reason, "NVML"));
    oom_target_dispose(&t);
    oom_catalog_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_visible),    cmocka_unit_test(test_catalog),
        cmocka_unit_test(test_config),          cmocka_unit_test(test_target_profile),
        cmocka_unit_test(test_nvml_fake),       cmocka_unit_test(test_nvml_variants),
        cmocka_unit_test(test_target_detected), cmocka_unit_test(test_nvml_reserved),
    };
    unsetenv("OOMLESS_GPU");
    unsetenv("GPU_PROFILE");
    return cmocka_run_group_tests(tests, NULL, teardown);
}
