/* estimate_coef.c - loads data/coefficients.json (the estimator's empirical numbers) once. */
#include "estimate/estimate.h"

#include <float.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static oomi_coef coef;
static bool coef_loaded;
static pthread_mutex_t coef_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct rd {
    const char *path;
    int err;
} rd;

/* The number at obj.key (or obj.key.value) in [min, max]; records the first bad or missing key,
 * named with its section's key ("coefficients 'c.json': logits.backward_16bit is missing"). */
static double number(rd *r, json_object *obj, const char *key, double min)
{
    char where[PATH_MAX + 128];
    json_object *v;
    double d = 0;

    if (r->err)
        return 0;
    oomi_snprintf(where, sizeof(where), "coefficients '%s': ", r->path);
    if (json_object_is_type(v = oomi_json_get(obj, key), json_type_object)) {
        oomi_snprintf(where, sizeof(where), "coefficients '%s': %s.", r->path, key);
        obj = v, key = "value";
    }
    r->err = oomi_json_double(&d, NULL, obj, key, min, DBL_MAX, where);
    return d;
}

/* a number >= 0 */
static double num(rd *r, json_object *obj, const char *key)
{
    return number(r, obj, key, 0);
}

/* as num, negative values allowed */
static double snum(rd *r, json_object *obj, const char *key)
{
    return number(r, obj, key, -DBL_MAX);
}

static json_object *sub(rd *r, json_object *obj, const char *key)
{
    json_object *v = oomi_json_get(obj, key);
    if (r->err)
        return NULL;
    if (!json_object_is_type(v, json_type_object)) {
        r->err = oomi_fail(OOM_EPARSE, "coefficients '%s': missing section '%s'", r->path, key);
        return NULL;
    }
    return v;
}

static void read_set(rd *r, json_object *blk, oomi_act_coef *set)
{
    static const char *const regimes[] = {"16bit", "amp", "fp32"};
    size_t g;
    for (g = 0; g < OOMI_REGIMES; g++) {
        json_object *o = sub(r, blk, regimes[g]), *fr, *eg, *b1 = NULL, *mo = NULL, *ml = NULL;
        oomi_act_coef *c = &set[g];
        c->h = num(r, o, "h"), c->q = num(r, o, "q"), c->kv = num(r, o, "kv");
        c->f = num(r, o, "f"), c->lse = num(r, o, "lse"), c->score = num(r, o, "score");
        c->sdpa_score = num(r, o, "sdpa_score");
        fr = sub(r, o, "frozen");
        c->frozen_h = num(r, fr, "h"), c->frozen_q = num(r, fr, "q"), c->frozen_f = num(r, fr, "f");
        c->final_h = num(r, o, "final_h");
        c->qk_norm = num(r, o, "qk_norm"), c->frozen_qk_norm = num(r, fr, "qk_norm");
        /* eager's differences may be negative (a copy SDPA makes and eager does not) */
        eg = sub(r, o, "eager");
        c->eager_h = snum(r, eg, "h"), c->eager_q = snum(r, eg, "q");
        c->eager_kv = snum(r, eg, "kv"), c->eager_f = snum(r, eg, "f");
        /* optional: sets for blocks that have mixture-of-experts models */
        if (o && json_object_object_get_ex(o, "moe", &mo)) {
            c->moe_kh = num(r, mo, "kh"), c->moe_k = num(r, mo, "k");
            c->moe_frozen_kh = num(r, mo, "frozen_kh");
        }
        /* optional: blocks that have models with multi-head latent attention */
        if (o && json_object_object_get_ex(o, "mla", &ml)) {
            c->mla = true, c->mla_h = num(r, ml, "h"), c->mla_nope = num(r, ml, "nope");
            c->mla_rope = num(r, ml, "rope"), c->mla_v = num(r, ml, "v");
            c->mla_q_lora = num(r, ml, "q_lora"), c->mla_kv_lora = num(r, ml, "kv_lora");
            fr = sub(r, ml, "frozen");
            c->mla_frozen_h = num(r, fr, "h"), c->mla_frozen_lora = num(r, fr, "lora");
        }
        /* optional: only families whose batch-1 trace differs from the fit's batch 2 */
        if (o && json_object_object_get_ex(o, "batch1", &b1)) {
            c->b1_q = snum(r, b1, "q"), c->b1_kv = snum(r, b1, "kv");
            eg = sub(r, b1, "eager");
            c->b1_eager_q = snum(r, eg, "q"), c->b1_eager_kv = snum(r, eg, "kv");
        }
    }
}

/* Names the next of OOMI_COEF_FAMILIES per-model_type sets (`out`, `size` bytes; NULL when n
 * sets are already there) after `key`; false with r->err set when there are too many or the
 * name is too long. */
static bool name_set(rd *r, const char *what, const char *key, char *out, size_t size)
{
    if (!out || strlen(key) >= size) {
        r->err = oomi_fail(OOM_EPARSE,
                           "coefficients '%s': %s set '%s': too many sets or too long a name (at "
                           "most %d of %zu characters)",
                           r->path, what, key, OOMI_COEF_FAMILIES, size - 1);
        return false;
    }
    memcpy(out, key, strlen(key) + 1);
    return true;
}

static bool is_block(const char *key, const char *const *blocks, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!strcmp(key, blocks[i]))
            return true;
    return false;
}

static void read_act(rd *r, json_object *acts)
{
    static const char *const blocks[] = {"llama", "gpt", "bert", "t5", "t5_gated"};
    size_t b;
    for (b = 0; b < OOMI_COEF_BLOCKS; b++)
        read_set(r, sub(r, acts, blocks[b]), coef.act[b]);
    coef.decoder_factor = num(r, acts, "decoder_factor");
    coef.nfamilies = 0;
    if (r->err)
        return;
    /* every other object with a "16bit" set is fitted for the model_type it is named after */
    json_object_object_foreach(acts, key, val)
    {
        json_object *probe = NULL;
        if (r->err || is_block(key, blocks, OOMI_COEF_BLOCKS) ||
            !json_object_is_type(val, json_type_object) ||
            !json_object_object_get_ex(val, "16bit", &probe))
            continue;
        if (!name_set(r, "activation", key,
                      coef.nfamilies < OOMI_COEF_FAMILIES ? coef.family[coef.nfamilies].model_type
                                                          : NULL,
                      sizeof(coef.family[0].model_type)))
            return;
        read_set(r, val, coef.family[coef.nfamilies].act);
        coef.nfamilies++;
    }
}

static void read_ctx(rd *r, json_object *ctx)
{
    json_object *list = NULL;
    size_t i, n;
    coef.ctx_generic = num(r, ctx, "generic");
    if (r->err)
        return;
    if (!json_object_object_get_ex(ctx, "by_compute_capability", &list) ||
        !json_object_is_type(list, json_type_array)) {
        r->err =
            oomi_fail(OOM_EPARSE, "coefficients '%s': missing 'by_compute_capability'", r->path);
        return;
    }
    n = json_object_array_length(list);
    for (i = 0; i < n && i < OOMI_ARRAY_LEN(coef.ctx) && !r->err; i++) {
        json_object *e = json_object_array_get_idx(list, i), *cc = NULL;
        const char *s;
        if (!json_object_object_get_ex(e, "cc", &cc) || !(s = json_object_get_string(cc)) ||
            sscanf(s, "%d.%d", &coef.ctx[i].major, &coef.ctx[i].minor) != 2) {
            r->err = oomi_fail(OOM_EPARSE,
                               "coefficients '%s': context entry %zu needs \"cc\": "
                               "\"MAJOR.MINOR\"",
                               r->path, i);
            return;
        }
        coef.ctx[i].bytes = num(r, e, "bytes");
        coef.ctx[i].inference_bytes = json_object_object_get_ex(e, "inference_bytes", NULL)
                                          ? num(r, e, "inference_bytes")
                                          : coef.ctx[i].bytes;
        coef.nctx = i + 1;
    }
}

/* inference.by_model_type (optional): the prefill working sets fitted on the trace */
static void read_infer(rd *r, json_object *inf)
{
    json_object *by = NULL;
    coef.ninfer = 0;
    if (r->err || !json_object_object_get_ex(inf, "by_model_type", &by))
        return;
    json_object_object_foreach(by, key, val)
    {
        json_object *sd, *eg, *mo = NULL;
        if (r->err || !json_object_is_type(val, json_type_object))
            continue;
        if (!name_set(r, "inference", key,
                      coef.ninfer < OOMI_COEF_FAMILIES ? coef.infer[coef.ninfer].model_type : NULL,
                      sizeof(coef.infer[0].model_type)))
            return;
        sd = sub(r, val, "sdpa"), eg = sub(r, val, "eager");
        coef.infer[coef.ninfer].h = num(r, val, "h"), coef.infer[coef.ninfer].f = num(r, val, "f");
        coef.infer[coef.ninfer].sdpa_a = num(r, sd, "a");
        coef.infer[coef.ninfer].sdpa_score = num(r, sd, "score");
        coef.infer[coef.ninfer].eager_a = num(r, eg, "a");
        coef.infer[coef.ninfer].eager_score = num(r, eg, "score");
        /* optional: multi-head latent attention's expanded heads, layers with experts */
        coef.infer[coef.ninfer].sdpa_heads = oomi_json_get(sd, "heads") ? num(r, sd, "heads") : 0;
        coef.infer[coef.ninfer].eager_heads = oomi_json_get(eg, "heads") ? num(r, eg, "heads") : 0;
        coef.infer[coef.ninfer].moe_kh =
            json_object_object_get_ex(val, "moe", &mo) ? num(r, mo, "kh") : 0;
        coef.ninfer++;
    }
}

static void read_rest(rd *r, json_object *root)
{
    json_object *lg = sub(r, root, "logits"), *inf = sub(r, root, "inference");
    json_object *q = sub(r, root, "quantization"), *o = sub(r, root, "optimizer");
    json_object *p = sub(r, root, "parallel"), *al = sub(r, root, "allocator");
    json_object *temps = sub(r, o, "step_temporaries");
    size_t i;

    coef.logits_fwd[0] = num(r, lg, "forward_16bit"),
    coef.logits_bwd[0] = num(r, lg, "backward_16bit");
    coef.logits_fwd[1] = num(r, lg, "forward_fp32"),
    coef.logits_bwd[1] = num(r, lg, "backward_fp32");
    coef.chunk_tokens = num(r, lg, "chunk_tokens");
    coef.ce_fwd = num(r, lg, "cross_entropy_forward_elements");
    coef.ce_bwd = num(r, lg, "cross_entropy_backward_elements");
    coef.softcap_elems = num(r, lg, "softcap_elements");
    coef.score_grads = num(r, sub(r, root, "activations"), "score_gradients");
    coef.infer_h = num(r, inf, "h"), coef.infer_f = num(r, inf, "f");
    read_infer(r, inf);
    coef.int8_bytes = num(r, q, "int8_bytes_per_param");
    coef.adam8_bytes = num(r, o, "adamw_8bit_bytes_per_param");
    /* one entry per optimizer, under its option value's name */
    for (i = 0; i < OOMI_ARRAY_LEN(oomi_optimizer_values); i++)
        coef.opt_temp[i] = num(r, temps, oomi_optimizer_values[i]->name);
    coef.ddp_buckets = num(r, p, "ddp_grad_buckets");
    {
        json_object *nc = sub(r, p, "nccl");
        coef.nccl.buffsize = num(r, nc, "buffsize");
        coef.nccl.ll = num(r, nc, "ll_bytes");
        coef.nccl.ll128 = num(r, nc, "ll128_bytes");
        coef.nccl.channels = num(r, nc, "channels");
        coef.nccl.nvls_channels = num(r, nc, "nvls_channels");
        coef.nccl.nvls_mem = num(r, nc, "nvls_mem_bytes");
        coef.nccl.nvls_min_gpus = num(r, nc, "nvls_min_gpus");
        coef.nccl.nvls_min_cc = num(r, nc, "nvls_min_cc");
        coef.nccl.node_gpus = num(r, nc, "node_gpus");
        coef.nccl.p2p_nvl_chunk = num(r, nc, "p2p_nvl_chunk_bytes");
        coef.nccl.p2p_net_chunk = num(r, nc, "p2p_net_chunk_bytes");
        coef.nccl.p2p_steps = num(r, nc, "p2p_steps");
        coef.nccl.p2p_nvl_channels = num(r, nc, "p2p_nvl_channels");
        coef.nccl.p2p_net_channels = num(r, nc, "p2p_net_channels");
    }
    coef.frag = num(r, al, "fragmentation");
    coef.blocks_floor = num(r, al, "training_floor_bytes");
    coef.blocks_logits = num(r, al, "logits_blocks");
    coef.blocks_optimizer = num(r, al, "optimizer_blocks");
    coef.blocks_transient = num(r, al, "transient_blocks");
    coef.round = num(r, al, "round_bytes");
    coef.lora_in_fp32 = num(r, sub(r, root, "lora"), "input_fp32_bytes");
    coef.lora_dropout_in[0] = num(r, sub(r, sub(r, root, "lora"), "dropout_input_bytes"), "16bit");
    coef.lora_dropout_in[1] = num(r, sub(r, sub(r, root, "lora"), "dropout_input_bytes"), "fp32");
    coef.cublas_default = num(r, sub(r, root, "cublas_workspace"), "default_bytes");
    coef.cublas_hopper = num(r, sub(r, root, "cublas_workspace"), "hopper_bytes");
    read_ctx(r, sub(r, root, "context"));
}

/* loads into `coef`; a failure is not latched (a later call retries) */
static int load(void)
{
    char *path = oomi_data_path("coefficients.json");
    json_object *root = NULL;
    rd r = {path, OOM_OK};

    if (!path) {
        r.err = oomi_nomem();
    } else if (!(r.err = oomi_json_load_file(&root, path, "coefficients"))) {
        read_act(&r, sub(&r, root, "activations"));
        read_rest(&r, root);
    }
    json_object_put(root);
    oomi_free(path);
    if (coef.round < 1)
        coef.round = 1;
    return r.err;
}

int oomi_coef_get(const oomi_coef **out)
{
    int err = OOM_OK;
    pthread_mutex_lock(&coef_lock);
    if (!coef_loaded && !(err = load()))
        coef_loaded = true;
    pthread_mutex_unlock(&coef_lock);
    if (!err)
        *out = &coef;
    return err;
}

int oomi_traced_to_device(oom_probe_fit *fit, int cc_major, int cc_minor)
{
    const oomi_coef *c;
    double ctx;
    size_t i;
    int err, exact = 0;

    if ((err = oomi_coef_get(&c)))
        return err;
    ctx = c->ctx_generic;
    for (i = 0; i < c->nctx; i++) {
        if (c->ctx[i].major == cc_major && c->ctx[i].minor == cc_minor)
            ctx = c->ctx[i].bytes, exact = 1;
        else if (!exact && c->ctx[i].major == cc_major)
            ctx = c->ctx[i].bytes;
    }
    fit->fixed_bytes = round(fit->fixed_bytes + ctx);
    fit->per_sample_bytes = round(fit->per_sample_bytes * (1 + c->frag));
    fit->per_sample2_bytes *= 1 + c->frag;
    return OOM_OK;
}
