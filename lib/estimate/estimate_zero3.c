/*
 * estimate_zero3.c - what DeepSpeed ZeRO-3 keeps on one GPU beside the shards: the parameters
 * its coordinator has gathered, the host copies of offloaded partitions on their way in, the
 * small tensors it never partitions and the gradient bucket. A replay of the coordinator over
 * the model's modules, one step of a settled run (docs/estimate.md, "ZeRO-3: what DeepSpeed
 * keeps gathered"); the rules are DeepSpeed's (deepspeed/runtime/zero/
 * partitioned_param_coordinator.py, PartitionedParameterCoordinator: fetch_sub_module,
 * release_sub_module, __params_to_release; stage3.py, DeepSpeedZeroOptimizer_Stage3).
 */
#include "estimate/estimate.h"

#include <float.h>
#include <json-c/json.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The trace: fetch i of the forward and backward is of the parameters `id` (-1: a module without
 * parameters of its own, which fetches, and so prefetches, all the same) while a share `act` of
 * the step's activations is alive. An embedding used twice, or tied to the output head, is one
 * id; a block is `k` tensors of equal size, one per Linear it holds (fewer where the model has
 * more than Z3_TENSORS of them: no allocation, the estimate cannot run out of memory here).
 * next: the step that fetches the same parameters again (-1: none); sum: the elements of the
 * modules with parameters before each step, summed in order; slack: how far a difference of two
 * such sums can be from the same elements summed in order from the first (kept()). */
#define Z3_TENSORS OOMI_ZERO3_MAX_BLOCKS
#define Z3_STEPS   (2 * (2 * Z3_TENSORS + 4))
typedef struct z3_trace {
    int16_t id[Z3_STEPS];
    double act[Z3_STEPS];
    int next[Z3_STEPS];
    double sum[Z3_STEPS + 1], slack;
    int last[Z3_TENSORS + 2]; /* per id: the latest step a prefetch scan saw it for */
    bool avail[Z3_TENSORS + 2];
    double embed, enc, dec, head; /* elements of the embedding, a tensor of a block, the head */
    int steps, fwd, ids, k, enc_ids, head_id;
} z3_trace;

/* What a replay leaves at one step: the bytes there before the activations not alive come off,
 * c = (gathered + copies + gradient) x bytes, and the share of the activations not alive,
 * f = 1 - act, with the parts in elements. */
typedef struct z3_moment {
    double c, f, gathered, ahead, copy, grad;
} z3_moment;

/* A search asks for the same replay with other activations many times over (a plan's
 * micro-batches, and its families that differ in what the replay does not read: checkpointing,
 * optimizer, loss, attention). The cache keeps replays by their key (every value the replay
 * reads, z3_key): of each, the moments that can be the worst for some activations >= 0, in `pool`
 * from `first`, so that such a call costs a pass over a few dozen moments instead of a replay.
 * Full (Z3_ENTRIES replays, or no room left for the longest): everything is dropped and it fills
 * again. */
#define Z3_KEY     19
#define Z3_ENTRIES 32
#define Z3_POOL    (2 * Z3_STEPS)
typedef struct z3_entry {
    double key[Z3_KEY];
    int first, n;
    double end; /* elements still gathered after the backward */
} z3_entry;
struct oomi_zero3_cache {
    z3_entry e[Z3_ENTRIES];
    int entries, used;
    z3_moment pool[Z3_POOL];
};

/* elements of the tensor `id` */
static double size_of(const z3_trace *t, int id)
{
    return id == 0 ? t->embed : id == t->head_id ? t->head : id <= t->enc_ids ? t->enc : t->dec;
}

static bool lm_head(const oomi_model *m)
{
    return m->head == OOMI_HEAD_CAUSAL_LM || m->head == OOMI_HEAD_MASKED_LM ||
           m->head == OOMI_HEAD_SEQ2SEQ_LM;
}

/* elements of one block's parameters that DeepSpeed gathers: the block less its norms and biases
 * when those fall under the persistence threshold (a norm has `hidden` elements) */
static void block_sizes(const oom_workload *w, double *dec, double *enc, double *small)
{
    const oomi_model *m = w->model;
    double blocks = m->layers + m->enc_layers > 0 ? (double)(m->layers + m->enc_layers) : 1;
    double other = (double)m->params - (double)m->params_linear - (double)m->params_embed -
                   (double)m->params_lm_head - (double)m->params_vision;
    *small = other > 0 && (double)m->hidden < w->zero3.persistence ? other : 0;
    *dec = (double)m->params_layer_max - *small / blocks;
    *enc = 0;
    if (m->enc_layers > 0)
        *enc = ((double)m->params - (double)m->params_embed - (double)m->params_lm_head -
                (double)m->params_vision - (double)m->layers * (double)m->params_layer_max) /
                   (double)m->enc_layers -
               *small / blocks;
    if (*dec < 0)
        *dec = 0;
    if (*enc < 0)
        *enc = 0;
}

/* Linears per block, on average over the blocks (at least one) */
static int linears_per_block(const oomi_model *m)
{
    double n = 0;
    size_t i;
    for (i = 0; i < m->nlinears; i++)
        n += (double)m->linears[i].count;
    if (m->layers + m->enc_layers > 0)
        n = floor(n / (double)(m->layers + m->enc_layers) + 0.5);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

static bool frozen_of(const oom_workload *w)
{
    return w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;
}

/* bytes of a gathered element: the parameters' dtype */
static double bytes_of(const oom_workload *w)
{
    oom_precision p = oomi_resolved_precision(w);
    return p == OOM_PRECISION_FP32 || p == OOM_PRECISION_AMP_FP16 || p == OOM_PRECISION_AMP_BF16
               ? 4
               : 2;
}

/* Every value the replay of w reads, in key: the blocks and their tensors, the sizes, the tokens
 * (the activations' shares grow with them), the trained parameters, DeepSpeed's knobs, the
 * offload and the dtype. Two workloads with the same key replay alike. */
static void z3_key(double *key, const oom_workload *w)
{
    const oomi_model *m = w->model;
    double dec, enc, small;
    int L = (int)m->layers, E = (int)m->enc_layers, k = linears_per_block(m), n = 0;
    if (k * (L + E) > Z3_TENSORS)
        k = Z3_TENSORS / (L + E);
    block_sizes(w, &dec, &enc, &small);
    memset(key, 0, Z3_KEY * sizeof(*key));
    key[n++] = L, key[n++] = E, key[n++] = k;
    key[n++] = !lm_head(m) ? 0 : m->params_lm_head > 0 ? 1 : m->tied ? 2 : 0;
    key[n++] = dec, key[n++] = enc, key[n++] = small;
    key[n++] = (double)m->params_embed, key[n++] = (double)m->params_lm_head;
    key[n++] = (double)w->k.seq_len, key[n++] = (double)w->shape.decoder_seq;
    key[n++] = frozen_of(w);
    key[n++] = w->zero3.persistence, key[n++] = w->zero3.reuse, key[n++] = w->zero3.max_live;
    key[n++] = w->zero3.prefetch, key[n++] = w->zero3.reduce;
    key[n++] = w->k.offload == OOM_OFFLOAD_OPTIMIZER_PARAMS ? 1.0 / (double)w->k.gpus : 0;
    key[n++] = bytes_of(w);
}

static void add(z3_trace *t, int id, double act)
{
    t->act[t->steps] = act;
    t->id[t->steps++] = (int16_t)id;
}

/* one block's forward (fwd) or backward: per tensor, its Linear and one module without
 * parameters */
static void add_block(z3_trace *t, int first, bool fwd, double act)
{
    int j;
    for (j = 0; j < t->k; j++) {
        add(t, first + (fwd ? j : t->k - 1 - j), act);
        add(t, -1, act);
    }
}

/* next, sum and slack of the trace t (z3_trace) */
static void trace_index(z3_trace *t)
{
    int s, at[Z3_TENSORS + 2];
    for (s = 0; s < t->ids; s++)
        at[s] = -1;
    for (s = t->steps - 1; s >= 0; s--) {
        int u = t->id[s];
        t->next[s] = u >= 0 ? at[u] : -1;
        if (u >= 0)
            at[u] = s;
    }
    t->sum[0] = 0;
    for (s = 0; s < t->steps; s++)
        t->sum[s + 1] = t->sum[s] + (t->id[s] >= 0 ? size_of(t, t->id[s]) : 0);
    /* each sum in order of n non-negative terms is within n u of its exact value (u = 2^-53,
     * DBL_EPSILON / 2), so a difference of two and the same terms summed from the first are
     * within 3 n u of each other and of the total: 8 n DBL_EPSILON is a bound with room */
    t->slack = 8.0 * (double)(t->steps + 2) * DBL_EPSILON * t->sum[t->steps];
}

static void trace_build(z3_trace *t, const oom_workload *w, bool frozen)
{
    const oomi_model *m = w->model;
    int L = (int)m->layers, E = (int)m->enc_layers, i, head = -1, k = linears_per_block(m);
    double small, te = (double)w->k.seq_len, td, all, done = 0;
    t->steps = 0;
    if (k * (L + E) > Z3_TENSORS)
        k = Z3_TENSORS / (L + E);
    t->k = k;
    block_sizes(w, &t->dec, &t->enc, &small);
    t->dec /= k, t->enc /= k;
    t->enc_ids = k * E;
    t->ids = 1 + k * (L + E);
    t->embed = (double)m->params_embed;
    t->head_id = -2;
    if (lm_head(m) && m->params_lm_head > 0)
        head = t->head_id = t->ids++, t->head = (double)m->params_lm_head;
    else if (lm_head(m) && m->tied)
        head = 0;
    for (i = 0; i < t->ids; i++)
        t->last[i] = -1, t->avail[i] = false;
    /* the activations a block leaves grow with the tokens it sees: the encoder's --seq, the
     * decoder's --decoder-seq (enc-dec) */
    td = E > 0 && w->shape.decoder_seq ? (double)w->shape.decoder_seq : te;
    all = E * te + L * td;
    /* forward: embedding, encoder blocks, the embedding again for the decoder, blocks, head */
    add(t, 0, 0);
    for (i = 0; i < E; i++)
        done += te, add_block(t, 1 + k * i, true, done / all);
    if (E > 0)
        add(t, 0, done / all);
    for (i = 0; i < L; i++)
        done += td, add_block(t, 1 + k * (E + i), true, done / all);
    if (head >= 0)
        add(t, head, 1);
    t->fwd = t->steps;
    /* backward, where a module's output needs a gradient: not a frozen embedding's */
    if (head >= 0)
        add(t, head, 1);
    for (i = L - 1; i >= 0; i--)
        add_block(t, 1 + k * (E + i), false, done / all), done -= td;
    if (E > 0 && !frozen)
        add(t, 0, done / all);
    for (i = E - 1; i >= 0; i--)
        add_block(t, 1 + k * i, false, done / all), done -= te;
    if (!frozen)
        add(t, 0, 0);
    trace_index(t);
}

/* release_sub_module after step s: kept where a prefetch scan already saw a later use, or where
 * the same parameters come back (at next[s]) before max_reuse_distance elements of modules have
 * passed. Those elements, summed in order from s as DeepSpeed counts them, are compared with the
 * window; the difference of the running sums gives the same answer unless it lies within slack
 * of the window, where they are summed again in order: one step costs O(1) but for such ties,
 * the replay O(steps) instead of O(steps x window). */
static bool kept(const z3_trace *t, const oom_workload *w, int s)
{
    int u = t->id[s], n = t->next[s], j;
    double passed = 0, d;
    if (size_of(t, u) < w->zero3.persistence || t->last[u] > s + 1)
        return true;
    if (n < 0) /* never fetched again: the scan runs to the end */
        return false;
    d = t->sum[n] - t->sum[s + 1];
    if (d + t->slack < w->zero3.reuse)
        return true;
    if (d - t->slack >= w->zero3.reuse)
        return false;
    for (j = s + 1; j < n && passed < w->zero3.reuse; j++)
        if (t->id[j] >= 0)
            passed += size_of(t, t->id[j]);
    return passed < w->zero3.reuse;
}

static bool gather(z3_trace *t, const oom_workload *w, int u, double *live)
{
    if (u < 0 || t->avail[u] || size_of(t, u) < w->zero3.persistence)
        return false;
    t->avail[u] = true, *live += size_of(t, u);
    return true;
}

/* Where a replay's moments go: into an entry of the cache (out, from 0 to *n), each unless one of
 * the last few put there has a c at least as high and an f at most as low: for any activations
 * >= 0 that one is then worth at least as much (rounding is monotone) and comes first, which is
 * the one taken among equals (only the last few: a moment beaten by an older one is kept, a
 * longer pass for the same answer, and the replay stays linear; within a block, where f does not
 * move, they catch almost all). Without a cache (out NULL), against `act` at once into *best and
 * *at (z3_pick). */
#define Z3_LOOK_BACK 4
typedef struct z3_sink {
    z3_moment *out, last;
    int n;
    double act, best;
    bool any;
} z3_sink;

static void z3_pick(z3_sink *k, const z3_moment *m)
{
    double v = m->c - m->f * k->act;
    if (v > k->best)
        k->best = v, k->last = *m, k->any = true;
}

static void keep_moment(z3_sink *k, const z3_moment *m)
{
    int i;
    if (!k->out) {
        z3_pick(k, m);
        return;
    }
    for (i = k->n - 1; i >= 0 && i >= k->n - Z3_LOOK_BACK; i--)
        if (k->out[i].c >= m->c && k->out[i].f <= m->f)
            return;
    k->out[k->n++] = *m;
}

/* The replay of w's step (the coordinator's rules, DeepSpeed's), its moments into k; what stays
 * gathered after the backward into *end (elements) */
static void replay(z3_sink *k, z3_trace *t, const oom_workload *w, double *end)
{
    bool frozen = frozen_of(w);
    double off = w->k.offload == OOM_OFFLOAD_OPTIMIZER_PARAMS ? 1.0 / (double)w->k.gpus : 0;
    double bytes = bytes_of(w), live = 0;
    int s, q = 0;

    trace_build(t, w, frozen);
    for (s = 0; s < t->steps; s++) {
        int u = t->id[s];
        double copy = 0, ahead = 0, pcopy = 0, grad, budget, v, g;
        z3_moment m;
        /* fetch_sub_module: the module's own parameters first; an offloaded partition comes in
         * through a device copy of itself (partition_parameters.py, all_gather_coalesced:
         * "p.ds_tensor.to(get_accelerator().current_device_name())"), alive while it is sent */
        if (gather(t, w, u, &live))
            copy = size_of(t, u) * off;
        if (q <= s) {
            q = s + 1;
            if (u >= 0 && s > t->last[u])
                t->last[u] = s;
        }
        /* then, while fewer than max_live_parameters are gathered, the tensors to come until
         * prefetch_bucket_size elements are on their way: the scan stops once it has that many,
         * so it can overshoot by one tensor */
        v = live + copy, g = live;
        budget = w->zero3.max_live - live < w->zero3.prefetch ? w->zero3.max_live - live
                                                              : w->zero3.prefetch;
        for (; q < t->steps && ahead < budget; q++) {
            int n = t->id[q];
            if (n >= 0 && q > t->last[n])
                t->last[n] = q;
            if (gather(t, w, n, &live))
                ahead += size_of(t, n), pcopy += size_of(t, n) * off;
        }
        if (live + pcopy > v)
            v = live + pcopy, g = live, copy = pcopy;
        else
            ahead = 0;
        /* a trained module's weight gradient, until it is copied into the bucket */
        grad = s >= t->fwd && !frozen && u >= 0 ? size_of(t, u) : 0;
        m = (z3_moment){(v + grad) * bytes, 1 - t->act[s], g, ahead, copy, grad};
        keep_moment(k, &m);
        if (u >= 0 && !kept(t, w, s))
            t->avail[u] = false, live -= size_of(t, u);
    }
    *end = live;
}

int oomi_zero3_cache_new(oomi_zero3_cache **out)
{
    *out = oomi_calloc(1, sizeof(**out));
    return *out ? OOM_OK : oomi_nomem();
}

void oomi_zero3_cache_free(oomi_zero3_cache *c)
{
    oomi_free(c);
}

/* w's replay in c: found by its key, or replayed into it (emptied first where it is full) */
static const z3_entry *cached(oomi_zero3_cache *c, const oom_workload *w)
{
    z3_trace t;
    z3_sink k = {0};
    z3_entry *e;
    double key[Z3_KEY], end;
    int i;
    z3_key(key, w);
    for (i = 0; i < c->entries; i++)
        if (!memcmp(c->e[i].key, key, sizeof(key)))
            return &c->e[i];
    if (c->entries == Z3_ENTRIES || c->used > Z3_POOL - Z3_STEPS)
        c->entries = c->used = 0;
    e = &c->e[c->entries++];
    k.out = c->pool + c->used;
    replay(&k, &t, w, &end);
    memcpy(e->key, key, sizeof(key));
    e->first = c->used, e->n = k.n;
    e->end = end;
    c->used += k.n;
    return e;
}

int oomi_zero3_of(oomi_zero3 *out, const oom_workload *w, double act)
{
    double bytes, dec, enc, small, end;
    z3_sink k = {.act = act, .best = -1};
    int i;

    memset(out, 0, sizeof(*out));
    if (w->k.sharding != OOM_SHARDING_ZERO3 || oomi_fsdp2(w)) /* fsdp2: torch's, not DeepSpeed's */
        return OOM_OK;
    if (w->model->layers + w->model->enc_layers > OOMI_ZERO3_MAX_BLOCKS)
        return oomi_fail(OOM_EUNSUPPORTED,
                         "zero3: the replay of DeepSpeed's coordinator follows at most %d blocks "
                         "(the model has %ld)",
                         OOMI_ZERO3_MAX_BLOCKS, w->model->layers + w->model->enc_layers);
    bytes = bytes_of(w);
    block_sizes(w, &dec, &enc, &small);
    out->persistent = small * bytes;
    /* the contiguous gradient bucket, allocated when the optimizer is made and kept (stage3.py:
     * "if self.contiguous_gradients: ... torch.empty(self.reduce_bucket_size, ...)"), in the
     * communication dtype, the parameters' */
    out->bucket = w->zero3.reduce * bytes;
    /* the moment against the turn to the backward, when the activations peak: what it has fewer
     * of comes off; the first worst moment of the step (negative activations: every moment
     * counts, no cache) */
    if (w->zero3.cache && act >= 0) {
        const z3_entry *e = cached(w->zero3.cache, w);
        for (i = 0; i < e->n; i++)
            z3_pick(&k, &w->zero3.cache->pool[e->first + i]);
        end = e->end;
    } else {
        z3_trace t;
        replay(&k, &t, w, &end);
    }
    if (k.any) {
        out->gathered = k.last.gathered * bytes;
        out->prefetched = k.last.ahead * bytes;
        out->copies = k.last.copy * bytes;
        out->gradient = k.last.grad * bytes;
        out->fewer_activations = k.last.f * act;
    }
    out->end = end * bytes;
    out->turn = k.best + out->persistent + out->bucket;
    return OOM_OK;
}

int oomi_zero3_json(json_object **out, const oom_workload *w, double act)
{
    oomi_zero3 z;
    json_object *o;
    int err;
    *out = NULL;
    if (w->k.sharding != OOM_SHARDING_ZERO3 || oomi_fsdp2(w)) /* fsdp2: torch's, not DeepSpeed's */
        return OOM_OK;
    if ((err = oomi_zero3_of(&z, w, act)))
        return err;
    if (!(o = json_object_new_object()))
        return oomi_nomem();
    oomi_json_put(o, "gathered", oomi_json_size((uint64_t)z.gathered));
    oomi_json_put(o, "prefetched", oomi_json_size((uint64_t)z.prefetched));
    oomi_json_put(o, "host_copies", oomi_json_size((uint64_t)z.copies));
    oomi_json_put(o, "gradient", oomi_json_size((uint64_t)z.gradient));
    oomi_json_put(o, "persistent", oomi_json_size((uint64_t)z.persistent));
    oomi_json_put(o, "reduce_bucket", oomi_json_size((uint64_t)z.bucket));
    oomi_json_put(o, "fewer_activations", oomi_json_size((uint64_t)z.fewer_activations));
    oomi_json_put(o, "turn_total", oomi_json_size((uint64_t)z.turn));
    oomi_json_put(o, "gathered_after_backward", oomi_json_size((uint64_t)z.end));
    oomi_json_put(o, "max_live_params", json_object_new_double(w->zero3.max_live));
    oomi_json_put(o, "prefetch_bucket", json_object_new_double(w->zero3.prefetch));
    oomi_json_put(o, "persistence_threshold", json_object_new_double(w->zero3.persistence));
    oomi_json_put(o, "max_reuse_distance", json_object_new_double(w->zero3.reuse));
    oomi_json_put(o, "reduce_bucket_size", json_object_new_double(w->zero3.reduce));
    *out = o;
    return OOM_OK;
}
