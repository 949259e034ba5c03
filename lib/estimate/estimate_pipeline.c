/*
 * estimate_pipeline.c - model-parallel training per GPU: the chunks of estimate_layout.c run
 * through the pipeline's schedule, micro-batch by micro-batch, for every pipeline rank; the peak
 * of each, the rank that limits, NCCL's buffers of the layout's process groups and the estimate
 * JSON's "parallel" object. docs/parallelism.md has the schedules with their sources and the
 * gloo measurements they are held to (tests/torch/test_parallel_memory.py).
 */
#include "estimate/estimate.h"

#include <json-c/json.h>
#include <math.h>
#include <string.h>

/* a forward or a backward of one micro-batch through one of the rank's chunks */
typedef struct op {
    bool fwd;
    long chunk;
} op;

/* micro-batches a step simulates: all of them, or enough for the schedule to repeat (a multiple
 * of the stages); the interleaved runtime's kept tensors of the rest are added (sim_rank) */
static long sim_microbatches(const oomi_dims *d)
{
    long cap = 64 * d->pp;
    return d->m <= cap ? d->m : cap;
}

/* One rank's forwards and backwards in order, m micro-batches through V chunks (its virtual
 * stages r, r + P, ...). 1F1B: min(m, P - r) forwards, then a backward and a forward in turn
 * (torch's Schedule1F1B; Megatron's 1F1B runs its steady forward first and holds as many).
 * Interleaved: min((V - 1) R + 2 (P - 1 - r), m V) forwards, R = m / max(1, m / P) micro-batches
 * a round, then a forward and a backward in turn; forwards go through the chunks in order and
 * backwards in reverse, R micro-batches of a chunk at a time (torch's ScheduleInterleaved1F1B,
 * _get_warmup_ops; Megatron's get_num_warmup_microbatches, the same for m a multiple of P). */
static size_t schedule(op *ops, const oomi_dims *d, long m, long r)
{
    long V = d->vpp, P = d->pp, total = m * V, rounds = m / P > 1 ? m / P : 1, R = m / rounds;
    long warm = V > 1 ? (V - 1) * R + 2 * (P - 1 - r) : P - r, f = 0, b = 0;
    size_t n = 0;
    if (warm > total)
        warm = total;
    for (; f < warm; f++)
        ops[n++] = (op){true, V > 1 ? (f % (R * V)) / R : 0};
    while (b < total) {
        if (V > 1 && f < total)
            ops[n++] = (op){true, (f % (R * V)) / R}, f++;
        ops[n++] = (op){false, V > 1 ? V - 1 - (b % (R * V)) / R : 0}, b++;
        if (V == 1 && f < total)
            ops[n++] = (op){true, 0}, f++;
    }
    return n;
}

/* a moment of the step, the parts alive then */
static void moment(oomi_rank_mem *best, const double parts[6], int phase, long in_flight)
{
    double sum = parts[0] + parts[1] + parts[2] + parts[3] + parts[4] + parts[5];
    if (sum <= best->peak)
        return;
    best->w = parts[0], best->g = parts[1], best->o = parts[2];
    best->a = parts[3], best->l = parts[4], best->t = parts[5];
    best->peak = sum, best->phase = phase, best->in_flight = in_flight;
}

/* one pipeline rank through the step: its chunks' states from the start (Megatron's gradient
 * buffer too), activations added by each forward and freed by its backward, gradients made by a
 * chunk's first backward (torch), the moments of each forward and backward, the optimizer step */
static void sim_rank(oomi_rank_mem *out, const oomi_chunk *ch, const oomi_dims *d, const op *ops,
                     bool *seen)
{
    long V = d->vpp, m = sim_microbatches(d), in_flight = 0, c;
    double W = 0, O = 0, G = 0, Gall = 0, buf = 0, topt = 0, A = 0, L = 0, keep = 0, gath = 0;
    size_t i;

    memset(out, 0, sizeof(*out));
    memset(seen, 0, (size_t)V * sizeof(*seen));
    for (c = 0; c < V; c++) {
        W += ch[c].w, O += ch[c].o, Gall += ch[c].g, buf += ch[c].recv, topt += ch[c].topt;
        gath += ch[c].gathered;
        out->layers += ch[c].layers;
        out->block = fmax(out->block, fmax(ch[c].logits_fp32, ch[c].bws));
        if (d->runtime) /* the sends of the micro-batches not simulated, waited at the end */
            keep += (double)(d->m - m) * ch[c].keep;
    }
    buf += d->te_workspace;
    G = d->grads_kept ? Gall : 0;
    out->chunks = V, out->buffers = buf;
    for (i = 0; ops[i].chunk >= 0; i++) {
        const oomi_chunk *k = &ch[ops[i].chunk];
        bool first = !seen[ops[i].chunk];
        double t = buf + keep + gath;
        if (ops[i].fwd) {
            A += k->act - k->loss + k->out, L += k->loss, in_flight++;
            moment(out, (double[6]){W, G, O, A, L, t + k->fws}, OOM_PHASE_FORWARD, in_flight);
            moment(out, (double[6]){W, G, O, A, L + k->loss_fws, t}, OOM_PHASE_FORWARD, in_flight);
            continue;
        }
        moment(out, (double[6]){W, G, O, A, L + k->loss_bws, t}, OOM_PHASE_BACKWARD, in_flight);
        moment(out,
               (double[6]){W, G, O, A, L - k->loss, t + k->bws + (first ? k->bws_first : k->pend)},
               OOM_PHASE_BACKWARD, in_flight);
        A -= k->act - k->loss + k->out, L -= k->loss, in_flight--;
        keep += k->keep;
        if (first && !d->grads_kept)
            G += k->g;
        seen[ops[i].chunk] = true;
    }
    moment(out, (double[6]){W, Gall, O, 0, 0, topt + buf}, OOM_PHASE_OPTIMIZER, 0);
}

void oomi_layout_result_free(oomi_layout_result *r)
{
    if (r)
        oomi_free(r->rank), r->rank = NULL, r->n = 0;
}

int oomi_layout_run(oomi_layout_result *out, const oom_workload *w)
{
    const oomi_coef *c;
    oomi_dims *d = &out->d;
    long *layers = NULL, s, r, first, nst;
    oomi_chunk *ch = NULL;
    op *ops = NULL;
    bool *seen = NULL;
    int err;

    memset(out, 0, sizeof(*out));
    if ((err = oomi_coef_get(&c)))
        return err;
    oomi_layout_dims(d, w);
    nst = d->pp * d->vpp;
    layers = oomi_calloc((size_t)nst, sizeof(*layers));
    ch = oomi_calloc((size_t)nst, sizeof(*ch));
    ops = oomi_calloc((size_t)(2 * sim_microbatches(d) * d->vpp + 1), sizeof(*ops));
    out->rank = oomi_calloc((size_t)d->pp, sizeof(*out->rank));
    seen = oomi_calloc((size_t)d->vpp, sizeof(*seen));
    if (!layers || !ch || !ops || !out->rank || !seen) {
        err = oomi_nomem();
        goto done;
    }
    if ((err = oomi_layout_stage_layers(layers, w)))
        goto done;
    for (s = 0, first = 0; s < nst; first += layers[s], s++) /* rank-major: stage s on s % P */
        oomi_layout_chunk(&ch[(s % d->pp) * d->vpp + s / d->pp], w, c, d, s, first, layers[s]);
    out->n = (size_t)d->pp;
    for (r = 0; r < d->pp; r++) {
        size_t n = schedule(ops, d, sim_microbatches(d), r);
        ops[n].chunk = -1;
        sim_rank(&out->rank[r], &ch[r * d->vpp], d, ops, seen);
        if (out->rank[r].peak > out->rank[out->limiting].peak)
            out->limiting = (size_t)r;
    }
done:
    oomi_free(layers), oomi_free(ch), oomi_free(ops), oomi_free(seen);
    if (err)
        oomi_layout_result_free(out);
    return err;
}

static json_object *rank_json(const oomi_rank_mem *k, long r, const oomi_dims *d, double ws)
{
    json_object *o = json_object_new_object(), *st = json_object_new_array();
    long v;
    if (!o || !st) {
        json_object_put(o), json_object_put(st);
        return NULL;
    }
    for (v = 0; v < d->vpp; v++)
        json_object_array_add(st, json_object_new_int64(r + v * d->pp));
    oomi_json_put(o, "rank", json_object_new_int64(r));
    oomi_json_put(o, "stages", st);
    oomi_json_put(o, "layers", json_object_new_int64(k->layers));
    oomi_json_put(o, "allocated_peak", oomi_json_size((uint64_t)llround(k->peak + ws)));
    oomi_json_put(o, "peak_phase", json_object_new_string(oom_phase_name((oom_phase)k->phase)));
    oomi_json_put(o, "microbatches_in_flight", json_object_new_int64(k->in_flight));
    oomi_json_put(o, "weights", oomi_json_size((uint64_t)llround(k->w)));
    oomi_json_put(o, "gradients", oomi_json_size((uint64_t)llround(k->g)));
    oomi_json_put(o, "optimizer", oomi_json_size((uint64_t)llround(k->o)));
    oomi_json_put(o, "activations", oomi_json_size((uint64_t)llround(k->a)));
    oomi_json_put(o, "logits", oomi_json_size((uint64_t)llround(k->l)));
    oomi_json_put(o, "temporaries", oomi_json_size((uint64_t)llround(k->t + ws)));
    oomi_json_put(o, "buffers", oomi_json_size((uint64_t)llround(k->buffers)));
    return o;
}

json_object *oomi_layout_json(const oom_workload *w)
{
    const oomi_coef *c;
    oomi_layout_result r;
    oomi_group g[OOMI_GROUPS_MAX];
    double each[OOMI_GROUPS_MAX];
    json_object *o, *ranks, *groups;
    size_t i, n;
    double ws;

    if (oomi_coef_get(&c) || oomi_layout_run(&r, w))
        return NULL;
    o = json_object_new_object(), ranks = json_object_new_array(), groups = json_object_new_array();
    if (!o || !ranks || !groups) {
        json_object_put(o), json_object_put(ranks), json_object_put(groups);
        oomi_layout_result_free(&r);
        return NULL;
    }
    ws = oomi_cublas_workspace(w, c, NULL);
    oomi_json_put(o, "engine",
                  json_object_new_string(OOMI_VALUE_NAME(oomi_engine_values, w->layout.engine)));
    oomi_json_put(o, "tensor_parallel", json_object_new_int64(r.d.tp));
    oomi_json_put(o, "sequence_parallel", json_object_new_boolean(r.d.sp));
    oomi_json_put(o, "pipeline_parallel", json_object_new_int64(r.d.pp));
    oomi_json_put(o, "virtual_stages", json_object_new_int64(r.d.vpp));
    oomi_json_put(o, "expert_parallel", json_object_new_int64(r.d.ep));
    oomi_json_put(o, "expert_tensor_parallel", json_object_new_int64(r.d.etp));
    oomi_json_put(o, "context_parallel", json_object_new_int64(r.d.cp));
    oomi_json_put(o, "data_parallel", json_object_new_int64(r.d.dp));
    oomi_json_put(o, "expert_data_parallel", json_object_new_int64(r.d.edp));
    oomi_json_put(o, "gpus", json_object_new_int64(r.d.tp * r.d.pp * r.d.cp * r.d.dp));
    oomi_json_put(o, "microbatches", json_object_new_int64(r.d.m));
    oomi_json_put(o, "vocab_per_gpu", json_object_new_int64((long)r.d.vocab_local));
    for (i = 0; i < r.n; i++)
        json_object_array_add(ranks, rank_json(&r.rank[i], (long)i, &r.d, ws));
    oomi_json_put(o, "ranks", ranks);
    oomi_json_put(o, "limiting_rank", json_object_new_int64((int64_t)r.limiting));
    n = oomi_layout_groups(g, w, c->nccl.node_gpus);
    oomi_layout_nccl(w, c, each);
    for (i = 0; i < n; i++) {
        json_object *e = json_object_new_object();
        if (!e)
            break;
        oomi_json_put(e, "group", json_object_new_string(g[i].name));
        oomi_json_put(e, "gpus", json_object_new_int64(g[i].size));
        oomi_json_put(e, "kind",
                      json_object_new_string(g[i].peers ? "point-to-point" : "collective"));
        oomi_json_put(e, "peers", json_object_new_int64(g[i].peers));
        oomi_json_put(e, "within_node", json_object_new_boolean(g[i].intra));
        oomi_json_put(e, "nccl_bytes", oomi_json_size((uint64_t)llround(each[i])));
        json_object_array_add(groups, e);
    }
    oomi_json_put(o, "groups", groups);
    oomi_layout_result_free(&r);
    return o;
}

int oomi_layout_report(oom_estimate_report *out, const oom_workload *w)
{
    const oomi_coef *c;
    oomi_layout_result r;
    double ws;
    size_t i;
    int err;

    if ((err = oomi_coef_get(&c)) || (err = oomi_layout_run(&r, w)))
        return err;
    if (!(out->ranks = oomi_calloc(r.n, sizeof(*out->ranks))) ||
        !(out->engine = oomi_strdup(OOMI_VALUE_NAME(oomi_engine_values, w->layout.engine)))) {
        oomi_layout_result_free(&r);
        return oomi_nomem();
    }
    ws = oomi_cublas_workspace(w, c, NULL);
    for (i = 0; i < r.n; i++)
        out->ranks[i] =
            (oom_estimate_rank){(uint64_t)llround(r.rank[i].peak + ws), r.rank[i].layers,
                                r.rank[i].in_flight, (oom_phase)r.rank[i].phase};
    out->n_ranks = r.n, out->limiting_rank = r.limiting;
    out->tensor_parallel = r.d.tp, out->sequence_parallel = r.d.sp;
    out->pipeline_parallel = r.d.pp, out->virtual_stages = r.d.vpp;
    out->context_parallel = r.d.cp, out->data_parallel = r.d.dp;
    out->expert_parallel = r.d.ep, out->expert_tensor_parallel = r.d.etp;
    oomi_layout_result_free(&r);
    return OOM_OK;
}
