/* estimate_overhead.c - the memory a process holds outside PyTorch's caching allocator, part by
 * part: the CUDA context with the kernels a step loads, and NCCL's buffers when GPUs talk.
 * docs/estimate.md ("Memory outside PyTorch") has the arithmetic and its sources. */
#include "estimate/estimate.h"

#include <json-c/json.h>
#include <string.h>

static const char *const CONTEXT_SOURCE =
    "CUDA context + lazily loaded kernels, measured per compute capability "
    "(data/coefficients.json context)";
static const char *const CONTEXT_GENERIC_SOURCE =
    "CUDA context + lazily loaded kernels, generic (no --gpu given: "
    "data/coefficients.json context.generic)";
static const char *const NCCL_SOURCE =
    "NCCL buffers per communicator: channels x (NCCL_BUFFSIZE + LL + LL128 buffers), plus "
    "NVLink SHARP's channels x 2 x (NCCL_BUFFSIZE + 2 MiB) x GPUs of the node "
    "(data/coefficients.json parallel.nccl)";

static const char *const NCCL_LAYOUT_SOURCE =
    "NCCL buffers of each process group of the layout (the estimate's parallel.groups): a "
    "collective group's ring of channels x (NCCL_BUFFSIZE + LL + LL128) and NVLS within a node, a "
    "point-to-point group's channels x chunk x NCCL_STEPS per peer and direction "
    "(data/coefficients.json parallel.nccl)";

/* the CUDA context and the kernels a step loads: the measured bytes of the GPU's compute
 * capability (its major version when the minor is not measured), else the generic figure */
static double context(const oom_workload *w, const oomi_coef *c, bool train, bool *exact_out)
{
    double b = c->ctx_generic;
    bool exact = false, major = false;
    size_t i;
    for (i = 0; w->gpu.known && i < c->nctx; i++) {
        double v = train ? c->ctx[i].bytes : c->ctx[i].inference_bytes;
        if (c->ctx[i].major == w->gpu.cc_major && c->ctx[i].minor == w->gpu.cc_minor)
            b = v, exact = true;
        else if (!exact && c->ctx[i].major == w->gpu.cc_major)
            b = v, major = true;
    }
    *exact_out = exact || major;
    return b;
}

/* NVLink SHARP: set on or off, else NCCL's own choice (NCCL_NVLS_ENABLE's default): a GPU of
 * compute capability 9.0 or later (NVSwitch assumed) and more than two GPUs in the communicator
 * (https://github.com/vllm-project/vllm/issues/9699: NVLS appears above 2 GPUs on H100 and H200) */
static bool nvls_on(const oom_workload *w, const oomi_coef *c, long ranks)
{
    if (w->nccl.nvls)
        return w->nccl.nvls == 2;
    return w->gpu.known && w->gpu.cc_major >= c->nccl.nvls_min_cc && ranks >= c->nccl.nvls_min_gpus;
}

/* communicators with buffers: as set, else two for a serving engine's tensor parallelism (vLLM
 * keeps its own PyNcclCommunicator beside torch.distributed's group: turning NVLS off gave back
 * some 5 GiB per GPU there, twice one communicator's 2.25 GiB of NVLS buffers,
 * https://github.com/vllm-project/vllm/issues/9699), else one (the default process group) */
static long communicators(const oom_workload *w)
{
    if (w->nccl.comms)
        return w->nccl.comms;
    return w->k.method == OOM_METHOD_INFERENCE && !w->serve.kv_transformers ? 2 : 1;
}

static void nccl(oomi_overhead *o, const oom_workload *w, const oomi_coef *c, long ranks)
{
    double heads = (double)ranks < c->nccl.node_gpus ? (double)ranks : c->nccl.node_gpus;
    o->ranks = ranks;
    o->comms = communicators(w);
    o->buffsize = w->nccl.buffsize ? (double)w->nccl.buffsize : c->nccl.buffsize;
    o->channels = w->nccl.channels ? w->nccl.channels : (long)c->nccl.channels;
    /* one ring connection per channel, a buffer per protocol (SIMPLE, LL, LL128) */
    o->ring = (double)o->channels * (o->buffsize + c->nccl.ll + c->nccl.ll128);
    o->nvls = nvls_on(w, c, ranks);
    /* NCCL's NVLS buffer: nvlsPerRankSize = nChannels x 2 x (buffSize + memSize), mapped for
     * every GPU of the node (nvlsTotalSize = nvlsPerRankSize x nHeads) */
    o->nvls_bytes =
        o->nvls ? c->nccl.nvls_channels * 2 * (o->buffsize + c->nccl.nvls_mem) * heads : 0;
}

/* a group of `size` GPUs `stride` apart: within a node when it spans no more than a node */
static oomi_group group(const char *name, long size, long stride, long peers, double node_gpus)
{
    return (oomi_group){name, size, peers, (double)(size * stride) <= node_gpus};
}

size_t oomi_layout_groups(oomi_group *out, const oom_workload *w, double node_gpus)
{
    oomi_dims d;
    size_t n = 0;
    oomi_layout_dims(&d, w);
    if (d.tp > 1)
        out[n++] = group("tensor", d.tp, 1, 0, node_gpus);
    /* Megatron's ring attention sends key/value chunks to the next rank and receives from the
     * previous one; torch's context_parallel all-gathers them */
    if (d.cp > 1)
        out[n++] = group("context", d.cp, d.tp, d.titan ? 0 : 2, node_gpus);
    /* the gradients' reduction over data (x context) parallel GPUs: all-reduce, or the
     * distributed optimizer's and FSDP2's reduce-scatter and all-gather */
    if (d.dp * d.cp > 1)
        out[n++] = group("data", d.dp * d.cp, d.tp, 0, node_gpus);
    if (d.pp > 1) /* activations to the next stage, gradients back: two neighbours, one at ends */
        out[n++] = group("pipeline", d.pp, d.tp * d.cp * d.dp, d.pp > 2 ? 2 : 1, node_gpus);
    if (d.ep > 1) /* the token all-to-all: a connection to every other expert rank */
        out[n++] = group("expert", d.ep, d.etp, d.ep - 1, node_gpus);
    if (d.etp > 1 && w->model->experts > 0 && d.etp != d.tp)
        out[n++] = group("expert-tensor", d.etp, 1, 0, node_gpus);
    if (d.edp > 1 && w->model->experts > 0 && d.edp != d.dp * d.cp)
        out[n++] = group("expert-data", d.edp, d.etp * d.ep, 0, node_gpus);
    return n;
}

double oomi_layout_nccl(const oom_workload *w, const oomi_coef *c, double each[OOMI_GROUPS_MAX])
{
    oomi_group g[OOMI_GROUPS_MAX];
    size_t n = oomi_layout_groups(g, w, c->nccl.node_gpus), i;
    double total = 0;
    for (i = 0; i < n; i++) {
        oomi_overhead o;
        double b;
        memset(&o, 0, sizeof(o));
        nccl(&o, w, c, g[i].size);
        if (!g[i].peers) { /* a ring, and NVLink SHARP's buffers within a node */
            b = o.ring + (g[i].intra ? o.nvls_bytes : 0);
        } else { /* each peer, sending and receiving: channels x chunk x steps (p2p_source) */
            double chunk = g[i].intra ? c->nccl.p2p_nvl_chunk : c->nccl.p2p_net_chunk;
            double ch = g[i].intra ? c->nccl.p2p_nvl_channels : c->nccl.p2p_net_channels;
            if (chunk * c->nccl.p2p_steps > o.buffsize) /* at most NCCL_BUFFSIZE a connection */
                chunk = o.buffsize / c->nccl.p2p_steps;
            if (w->nccl.channels && (double)w->nccl.channels < ch)
                ch = (double)w->nccl.channels;
            b = (double)g[i].peers * 2 * ch * chunk * c->nccl.p2p_steps;
        }
        if (each)
            each[i] = b;
        total += b;
    }
    return total;
}

int oomi_overhead_of(oomi_overhead *out, const oom_workload *w)
{
    const oomi_coef *c;
    bool train = w->k.method != OOM_METHOD_INFERENCE, exact;
    long ranks = train ? w->k.gpus : w->parallel.tp;
    int err;

    memset(out, 0, sizeof(*out));
    if ((err = oomi_coef_get(&c)))
        return err;
    if (w->runtime.overhead != OOM_UNKNOWN) {
        out->part[out->n++] =
            (oomi_overhead_part){"given", (double)w->runtime.overhead,
                                 "--overhead (CUDA context, workspaces, NCCL)", NULL};
        out->total = (double)w->runtime.overhead;
        return OOM_OK;
    }
    out->part[out->n].name = "cuda_context";
    out->part[out->n].bytes = context(w, c, train, &exact);
    out->part[out->n].source = exact ? CONTEXT_SOURCE : CONTEXT_GENERIC_SOURCE;
    out->part[out->n++].change = "--overhead (replaces every part)";
    if (train && oomi_layout_on(w)) { /* every process group of the layout (its own list) */
        nccl(out, w, c, w->parallel.tp);
        out->part[out->n].name = "nccl";
        out->part[out->n].bytes = oomi_layout_nccl(w, c, NULL);
        out->part[out->n].source = NCCL_LAYOUT_SOURCE;
        out->part[out->n++].change = "--nccl-buffsize (NCCL_BUFFSIZE), --nccl-channels "
                                     "(NCCL_MAX_NCHANNELS), --nccl-nvls (NCCL_NVLS_ENABLE)";
    } else if (ranks > 1) { /* single-GPU work creates no communicator */
        nccl(out, w, c, ranks);
        out->part[out->n].name = "nccl";
        out->part[out->n].bytes = (double)out->comms * (out->ring + out->nvls_bytes);
        out->part[out->n].source = NCCL_SOURCE;
        out->part[out->n++].change =
            w->nccl.buffsize && w->nccl.channels && w->nccl.nvls && w->nccl.comms
                ? NULL
                : "--nccl-buffsize (NCCL_BUFFSIZE), --nccl-channels (NCCL_MAX_NCHANNELS), "
                  "--nccl-nvls (NCCL_NVLS_ENABLE), --nccl-communicators";
    }
    for (size_t i = 0; i < out->n; i++)
        out->total += out->part[i].bytes;
    return OOM_OK;
}

json_object *oomi_overhead_json(const oom_workload *w)
{
    oomi_overhead o;
    json_object *root, *parts;
    size_t i;

    if (oomi_overhead_of(&o, w) || !(root = json_object_new_object()))
        return NULL;
    oomi_json_put(root, "total", oomi_json_size((uint64_t)(o.total + 0.5)));
    if (!(parts = json_object_new_array()))
        return json_object_put(root), NULL;
    for (i = 0; i < o.n; i++) {
        json_object *p = json_object_new_object();
        if (!p)
            break;
        oomi_json_put(p, "name", json_object_new_string(o.part[i].name));
        oomi_json_put(p, "bytes", oomi_json_size((uint64_t)(o.part[i].bytes + 0.5)));
        oomi_json_put(p, "source", json_object_new_string(o.part[i].source));
        oomi_json_put(p, "default", json_object_new_boolean(o.part[i].change != NULL));
        oomi_json_put(p, "change",
                      o.part[i].change ? json_object_new_string(o.part[i].change) : NULL);
        json_object_array_add(parts, p);
    }
    oomi_json_put(root, "parts", parts);
    if (o.ranks > 1) {
        json_object *n = json_object_new_object();
        if (n) {
            oomi_json_put(n, "communicators", json_object_new_int64(o.comms));
            oomi_json_put(n, "gpus", json_object_new_int64(o.ranks));
            oomi_json_put(n, "channels", json_object_new_int64(o.channels));
            oomi_json_put(n, "buffsize", oomi_json_size((uint64_t)o.buffsize));
            oomi_json_put(n, "nvls", json_object_new_boolean(o.nvls));
            oomi_json_put(n, "ring_bytes", oomi_json_size((uint64_t)(o.ring + 0.5)));
            oomi_json_put(n, "nvls_bytes", oomi_json_size((uint64_t)(o.nvls_bytes + 0.5)));
        }
        oomi_json_put(root, "nccl", n);
    }
    return root;
}

double oomi_cublas_workspace(const oom_workload *w, const oomi_coef *c, bool *is_default)
{
    if (is_default)
        *is_default = w->runtime.cublas_ws == OOM_UNKNOWN;
    if (w->runtime.cublas_ws != OOM_UNKNOWN)
        return (double)w->runtime.cublas_ws;
    return w->gpu.known && w->gpu.cc_major == 9 ? c->cublas_hopper : c->cublas_default;
}

json_object *oomi_cublas_json(const oom_workload *w)
{
    const oomi_coef *c;
    json_object *o;
    bool dflt;
    double b;
    if (oomi_coef_get(&c) || !(o = json_object_new_object()))
        return NULL;
    b = oomi_cublas_workspace(w, c, &dflt);
    oomi_json_put(o, "bytes", oomi_json_size((uint64_t)b));
    oomi_json_put(o, "counted_in", json_object_new_string("temporaries"));
    oomi_json_put(o, "source",
                  json_object_new_string(
                      dflt ? "PyTorch's default for the GPU's compute capability, from its caching "
                             "allocator (data/coefficients.json cublas_workspace)"
                           : "--cublas-workspace (CUBLAS_WORKSPACE_CONFIG)"));
    oomi_json_put(o, "default", json_object_new_boolean(dflt));
    oomi_json_put(o, "change",
                  dflt ? json_object_new_string("--cublas-workspace "
                                                "(CUBLAS_WORKSPACE_CONFIG)")
                       : NULL);
    return o;
}
