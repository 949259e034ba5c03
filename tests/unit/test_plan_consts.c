/* test_plan_consts.c - the planner's constants: the defaults of data/gpus/planner.yaml (the
 * values the model had when they were compiled in), the config's `cluster:` and per-GPU
 * overrides and their precedence, the catalog's own, refusals of bad values, and a slow
 * inter-node link slowing a communication-bound plan by the expected ratio. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oomless.h"
#include "plan/plan.h"
#include "unit/tmpdir.h"

static const oom_gpu_profile GPU_H100 = {OOM_GPU_PROFILE_VERSION,
                                         "test-h100",
                                         "Test H100 80GB",
                                         "nvidia",
                                         "",
                                         80 * OOM_GiB,
                                         3350,
                                         989,
                                         989,
                                         67,
                                         9,
                                         0,
                                         1,
                                         1,
                                         0};

/* |a - b| <= eps, in double (cmocka's assert_float_equal rounds to float) */
#define assert_near(a, b, eps)                                                                     \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (eps)))                                                             \
            fail_msg("%.17g is not %.17g (within %g)", a_, b_, (double)(eps));                     \
    } while (0)

static char *write_tmp(const char *text)
{
    char *path = test_write_tmp(text);
    assert_non_null(path);
    return path;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

/* loads a config text and its catalog; the config file is removed again */
static void load(oom_config **cfg, oom_catalog **cat, const char *text)
{
    char *path = write_tmp(text);
    if (oom_config_load(cfg, path))
        fail_msg("config refused: %s", oom_last_message());
    unlink(path);
    if (oom_catalog_load(cat, *cfg))
        fail_msg("catalog refused: %s", oom_last_message());
}

/* a config text the loader must refuse with `code`, its message holding each of the needles */
static void refused(const char *text, int code, const char *const *needles)
{
    oom_config *cfg = NULL;
    char *path = write_tmp(text);
    size_t i;
    assert_int_equal(oom_config_load(&cfg, path), code);
    assert_null(cfg);
    assert_non_null(strstr(oom_last_message(), path));
    for (i = 0; needles[i]; i++)
        if (!strstr(oom_last_message(), needles[i]))
            fail_msg("'%s' not in: %s", needles[i], oom_last_message());
    unlink(path);
}
#define REFUSED(text, code, ...) refused(text, code, (const char *const[]){__VA_ARGS__, NULL})

static void test_defaults(void **state)
{
    const struct oomi_plan_consts *k = NULL;
    const char *const *sources = NULL;
    int i;
    (void)state;
    assert_int_equal(oomi_plan_defaults(&k, &sources), OOM_OK);
    /* the values the throughput model had as compiled-in macros: plans stay the same */
    assert_true(k->v[OOMI_PK_MFU_MAX] == 0.5);
    assert_true(k->v[OOMI_PK_RIDGE] == 200.0);
    assert_true(k->v[OOMI_PK_TFLOPS] == 100.0);
    assert_true(k->v[OOMI_PK_FP32_DIVISOR] == 8.0);
    assert_true(oomi_pk_si(k, OOMI_PK_INTRA) == 100e9);
    assert_true(oomi_pk_si(k, OOMI_PK_INTER) == 25e9); /* 200 Gb/s */
    assert_true(oomi_pk_si(k, OOMI_PK_PCIE) == 25e9);
    assert_true(oomi_pk_si(k, OOMI_PK_CPU_ADAM) == 1e9);
    assert_true(k->v[OOMI_PK_NF4_SPEED] == 0.75);
    assert_true(k->v[OOMI_PK_INT8_SPEED] == 0.5);
    assert_true(k->v[OOMI_PK_CHUNKED_LOSS] == 0.02);
    assert_true(k->v[OOMI_PK_EAGER_ATTN] == 0.15);
    for (i = 0; i < OOMI_PK_COUNT; i++) {
        assert_int_equal(k->origin[i], OOMI_PK_FROM_DEFAULT);
        assert_non_null(sources[i]);
        assert_true(strlen(sources[i]) > 20); /* a citation or a reasoned assumption */
    }
    /* a GPU without TFLOP/s figures gets the default, FP32 at the divisor */
    assert_true(oomi_plan_tflops(NULL, OOM_PRECISION_BF16, k) == 100.0);
    assert_true(oomi_plan_tflops(NULL, OOM_PRECISION_FP32, k) == 12.5);
}

/* one multi-GPU full-training choice of a 7e9-parameter model; its step, tokens/s and the
 * seconds of its matmuls (step minus communication) */
static void choice_step(const struct oomi_plan_consts *k, long nodes, double *step, double *tok,
                        double *compute)
{
    oom_plan_request r;
    oom_plan_choice c;
    oom_plan_request_init(&r, OOM_PLAN_REQUEST_VERSION);
    r.gpu = &GPU_H100;
    memset(&c, 0, sizeof(c));
    c.knobs.batch = 4, c.knobs.grad_accum = 1, c.knobs.seq_len = 2048, c.knobs.gpus = 16;
    c.knobs.method = OOM_METHOD_FULL, c.knobs.precision = OOM_PRECISION_AMP_BF16;
    c.knobs.sharding = OOM_SHARDING_ZERO2, c.knobs.offload = OOM_OFFLOAD_NONE;
    c.estimate.params_total = c.estimate.params_trainable = 7000000000ULL;
    c.estimate.flops_per_step = 6.0 * 7e9 * 4 * 2048;
    oomi_plan_throughput(&c, &r, nodes, k);
    assert_true(c.has_throughput);
    *step = c.step_s;
    *tok = c.tokens_per_s;
    *compute = c.estimate.flops_per_step / (989e12 * c.utilisation);
}

static void test_slow_inter_node_link(void **state)
{
    const struct oomi_plan_consts *def = NULL;
    struct oomi_plan_consts eth;
    struct oomi_pk_over over;
    double s_ib, t_ib, c_ib, s_eth, t_eth, c_eth, s1_ib, t1, c1, s1_eth;
    (void)state;
    assert_int_equal(oomi_plan_defaults(&def, NULL), OOM_OK);
    memset(&over, 0, sizeof(over));
    over.v[OOMI_PK_INTER] = 100; /* 100 Gb/s Ethernet instead of 200 Gb/s InfiniBand */
    over.set = 1u << OOMI_PK_INTER;
    eth = *def;
    oomi_pk_apply(&eth, &over, OOMI_PK_FROM_CONFIG);
    assert_int_equal(eth.origin[OOMI_PK_INTER], OOMI_PK_FROM_CONFIG);

    choice_step(def, 2, &s_ib, &t_ib, &c_ib);
    choice_step(&eth, 2, &s_eth, &t_eth, &c_eth);
    assert_true(c_ib == c_eth); /* the matmuls do not care */
    /* the gradient all-reduce moves 2 x 2 bytes per parameter: 28e9 bytes over 25e9 B/s */
    assert_near(s_ib - c_ib, 28e9 / 25e9, 1e-9);
    assert_true(s_ib - c_ib > c_ib); /* communication-bound */
    /* half the link: twice the communication, the step and tokens/s by the same ratio */
    assert_near((s_eth - c_eth) / (s_ib - c_ib), 2.0, 1e-9);
    assert_true(s_eth > s_ib);
    assert_near(t_ib / t_eth, s_eth / s_ib, 1e-9);

    /* one node uses the link inside the node, which the inter-node value leaves alone */
    choice_step(def, 1, &s1_ib, &t1, &c1);
    choice_step(&eth, 1, &s1_eth, &t1, &c1);
    assert_true(s1_ib == s1_eth);
    assert_near(s1_ib - c1, 28e9 / 100e9, 1e-9);
}

static void test_cluster_and_gpu_overrides(void **state)
{
    oom_config *cfg = NULL;
    oom_catalog *cat = NULL;
    struct oomi_plan_consts k;
    (void)state;
    load(&cfg, &cat,
         "cluster:\n"
         "  inter_node_gbps: 100\n"
         "  pcie_gbs: 64\n"
         "gpus:\n"
         "  - id: lab-card\n"
         "    memory: 20GiB\n"
         "    pcie_gbs: 12\n"
         "    intra_node_gbs: 50\n");
    assert_int_equal(oomi_catalog_plan_consts(&k, cat, "h100-sxm"), OOM_OK);
    assert_true(k.v[OOMI_PK_INTER] == 100 && k.origin[OOMI_PK_INTER] == OOMI_PK_FROM_CONFIG);
    assert_true(oomi_pk_si(&k, OOMI_PK_INTER) == 12.5e9);
    assert_true(k.v[OOMI_PK_PCIE] == 64 && k.origin[OOMI_PK_PCIE] == OOMI_PK_FROM_CONFIG);
    assert_true(k.v[OOMI_PK_INTRA] == 100 && k.origin[OOMI_PK_INTRA] == OOMI_PK_FROM_DEFAULT);
    assert_true(k.v[OOMI_PK_MFU_MAX] == 0.5 && k.origin[OOMI_PK_MFU_MAX] == OOMI_PK_FROM_DEFAULT);
    /* the user's GPU entry beats the cluster section */
    assert_int_equal(oomi_catalog_plan_consts(&k, cat, "lab-card"), OOM_OK);
    assert_true(k.v[OOMI_PK_PCIE] == 12 && k.origin[OOMI_PK_PCIE] == OOMI_PK_FROM_CONFIG);
    assert_true(k.v[OOMI_PK_INTRA] == 50 && k.origin[OOMI_PK_INTRA] == OOMI_PK_FROM_CONFIG);
    assert_true(k.v[OOMI_PK_INTER] == 100);
    oom_catalog_free(cat);
    oom_config_free(cfg);

    /* no config: the defaults everywhere */
    assert_int_equal(oom_catalog_load(&cat, NULL), OOM_OK);
    assert_int_equal(oomi_catalog_plan_consts(&k, cat, "h100-sxm"), OOM_OK);
    assert_true(oomi_pk_si(&k, OOMI_PK_INTER) == 25e9);
    assert_int_equal(k.origin[OOMI_PK_INTER], OOMI_PK_FROM_DEFAULT);
    oom_catalog_free(cat);
}

/* a whole plan through the options: a cluster on 100 Gb/s Ethernet against the default */
static oom_plan_result *plan_multi_node(const char *config)
{
    static const char *const kv[] = {
        "model", "llama-2-7b", "gpu", "h100-sxm", "nodes", "2", "gpus-per-node", "8", "batch",
        "1",     "grad-accum", "1",   "seq",      "512",   NULL};
    oom_plan_options *o = NULL;
    oom_plan_result *res = NULL;
    size_t i;
    assert_int_equal(oom_plan_options_create(&o), OOM_OK);
    for (i = 0; kv[i]; i += 2)
        assert_int_equal(oom_plan_options_set(o, kv[i], kv[i + 1]), OOM_OK);
    if (config)
        assert_int_equal(oom_plan_options_set(o, "config", config), OOM_OK);
    if (oom_plan_options_run(&res, o))
        fail_msg("plan failed: %s", oom_last_message());
    oom_plan_options_free(o);
    assert_true(res->found && res->best->has_throughput);
    return res;
}

static void test_plan_on_ethernet(void **state)
{
    oom_plan_result *ib, *eth;
    char *path;
    double c_ib, c_eth;
    (void)state;
    ib = plan_multi_node(NULL);
    path = write_tmp("cluster:\n  inter_node_gbps: 100  # 100 Gb/s Ethernet\n");
    eth = plan_multi_node(path);
    unlink(path);
    assert_memory_equal(&ib->best->knobs, &eth->best->knobs, sizeof(oom_knobs));
    c_ib = ib->best->estimate.flops_per_step / (ib->peak_tflops * 1e12 * ib->best->utilisation);
    c_eth = eth->best->estimate.flops_per_step / (eth->peak_tflops * 1e12 * eth->best->utilisation);
    assert_near(c_ib, c_eth, 1e-12);
    assert_true(ib->best->step_s - c_ib > c_ib); /* communication-bound */
    assert_true(eth->best->step_s > ib->best->step_s);
    assert_true(eth->best->tokens_per_s < ib->best->tokens_per_s);
    assert_near((eth->best->step_s - c_eth) / (ib->best->step_s - c_ib), 2.0, 1e-9);
    assert_near(ib->best->tokens_per_s / eth->best->tokens_per_s,
                eth->best->step_s / ib->best->step_s, 1e-9);
    oom_plan_free(ib);
    oom_plan_free(eth);
}

static void test_bad_values(void **state)
{
    (void)state;
    REFUSED("cluster:\n  inter_node_gbps: fast\n", OOM_EINVAL, ":2: cluster.inter_node_gbps",
            "'fast' is not a number", "Gb/s");
    REFUSED("# a comment\ncluster:\n  pcie_gbs: 64\n  mfu_max: 1.5\n", OOM_EINVAL,
            ":4: cluster.mfu_max", "1.5 is out of range");
    REFUSED("cluster:\n  pcie_gbs: 0\n", OOM_EINVAL, ":2: cluster.pcie_gbs", "0 is out of range");
    REFUSED("cluster:\n  cpu_adam_params_per_s: -1e9\n", OOM_EINVAL,
            "cluster.cpu_adam_params_per_s", "out of range");
    REFUSED("cluster:\n  nvlink_gbs: 900\n", OOM_EINVAL, "unknown key 'cluster.nvlink_gbs'",
            "intra_node_gbs");
    REFUSED("cluster: 400\n", OOM_EINVAL, "'cluster' must be a mapping");
    /* a GPU entry: only the per-GPU keys, each checked, with its line */
    REFUSED("gpus:\n  - id: lab\n    memory: 20GiB\n    inter_node_gbps: 100\n", OOM_EINVAL,
            "gpus[0]", "unknown key 'inter_node_gbps'");
    REFUSED("gpus:\n  - id: lab\n    memory: 20GiB\n    pcie_gbs: -3\n", OOM_EINVAL,
            ":4: gpu 'lab': pcie_gbs", "-3 is out of range");
}

/* a data folder whose catalog sets its own constants for one GPU */
static void test_catalog_values(void **state)
{
    char dir[512], gpus[600], file[700], src[1024], *saved, *text = NULL;
    const char *data = getenv("OOMLESS_DATA_DIR");
    oom_config *cfg = NULL;
    oom_catalog *cat = NULL;
    struct oomi_plan_consts k;
    json_object *root, *g, *v;
    FILE *f;
    long n;
    (void)state;
    assert_non_null(data);
    saved = strdup(data);
    assert_non_null(mkdtemp(test_tmp_path(dir, sizeof(dir), "oomless-data-XXXXXX")));
    snprintf(gpus, sizeof(gpus), "%s/gpus", dir);
    assert_int_equal(mkdir(gpus, 0700), 0);
    snprintf(src, sizeof(src), "%s/gpus/planner.yaml", saved);
    assert_non_null(f = fopen(src, "r"));
    assert_non_null(text = calloc(1, 1 << 16));
    n = (long)fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    assert_true(n > 0);
    snprintf(file, sizeof(file), "%s/planner.yaml", gpus);
    write_file(file, text);
    free(text);
    snprintf(file, sizeof(file), "%s/catalog.yaml", gpus);
    write_file(file, "gpus:\n"
                     "  - {id: nv-box, name: Box, match: Box, memory_mib: 81920,\n"
                     "     bf16_tflops: 500, intra_node_gbs: 450, pcie_gbs: 50}\n"
                     "  - {id: plain, name: Plain, match: Plain, memory_mib: 16384}\n");
    setenv("OOMLESS_DATA_DIR", dir, 1);

    load(&cfg, &cat, "cluster:\n  pcie_gbs: 32\n");
    assert_int_equal(oomi_catalog_plan_consts(&k, cat, "nv-box"), OOM_OK);
    assert_true(k.v[OOMI_PK_INTRA] == 450 && k.origin[OOMI_PK_INTRA] == OOMI_PK_FROM_CATALOG);
    /* the cluster section beats the catalog's entry */
    assert_true(k.v[OOMI_PK_PCIE] == 32 && k.origin[OOMI_PK_PCIE] == OOMI_PK_FROM_CONFIG);
    assert_int_equal(oomi_catalog_plan_consts(&k, cat, "plain"), OOM_OK);
    assert_true(k.v[OOMI_PK_INTRA] == 100 && k.origin[OOMI_PK_INTRA] == OOMI_PK_FROM_DEFAULT);

    /* the JSON says so: catalog-wide values, and what one GPU changes */
    assert_int_equal(oom_catalog_to_json(&text, cat), OOM_OK);
    assert_non_null(root = json_tokener_parse(text));
    oom_free(text);
    assert_true(json_object_object_get_ex(root, "planner", &v));
    assert_true(json_object_object_get_ex(v, "pcie_gbs", &v));
    assert_string_equal(json_object_get_string(json_object_object_get(v, "origin")), "config");
    assert_non_null(
        strstr(json_object_get_string(json_object_object_get(v, "source")), ":2: cluster"));
    g = json_object_array_get_idx(json_object_object_get(root, "gpus"), 0);
    assert_true(json_object_object_get_ex(g, "planner", &v));
    assert_int_equal(json_object_object_length(v), 1); /* pcie: the cluster's, as everywhere */
    assert_true(json_object_object_get_ex(v, "intra_node_gbs", &v));
    assert_true(json_object_get_double(json_object_object_get(v, "value")) == 450);
    assert_string_equal(json_object_get_string(json_object_object_get(v, "origin")), "catalog");
    assert_non_null(strstr(json_object_get_string(json_object_object_get(v, "source")),
                           "catalog.yaml:3: gpu 'nv-box'"));
    g = json_object_array_get_idx(json_object_object_get(root, "gpus"), 1);
    assert_false(json_object_object_get_ex(g, "planner", NULL));
    json_object_put(root);
    oom_catalog_free(cat);
    oom_config_free(cfg);

    /* a bad value in the catalog names the file and line */
    write_file(file, "gpus:\n  - {id: nv-box, memory_mib: 81920,\n     mfu_max: 2}\n");
    assert_int_equal(oom_catalog_load(&cat, NULL), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "catalog.yaml:3: gpu 'nv-box': mfu_max"));

    setenv("OOMLESS_DATA_DIR", saved, 1);
    free(saved);
    unlink(file);
    snprintf(file, sizeof(file), "%s/planner.yaml", gpus);
    unlink(file);
    rmdir(gpus);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_slow_inter_node_link),
        cmocka_unit_test(test_cluster_and_gpu_overrides),
        cmocka_unit_test(test_plan_on_ethernet),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_catalog_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
