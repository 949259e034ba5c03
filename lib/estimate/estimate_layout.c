/*
 * estimate_layout.c - model-parallel training, one chunk of layers on one GPU: its weights,
 * gradients and optimizer states under tensor, expert and data parallelism, and what a micro-batch
 * keeps through it, as Megatron-Core or torchtitan run it (docs/parallelism.md has the sources and
 * the checks). estimate_pipeline.c runs the chunks through the pipeline's schedule.
 *
 * Bytes per token of one layer, e the compute dtype's bytes, T the micro-batch's tokens on this
 * GPU (batch x seq / context-parallel), T/s those of a sequence-parallel split (s = tp with
 * sequence parallelism, else 1), t tensor parallel, q, kv and f this GPU's query, key/value and
 * MLP widths (their totals / t; a key/value head is never split, so kv is at least one head):
 *
 *   megatron, dense layer   2 (2e h + 4) T/s + (e (2q + 2kv) + 4 heads) T + 3e f T
 *   torchtitan, dense layer 2 (e h + 4) T/s + 2e h T + (e (2q + 2kv) + 4 heads) T + 4e f T
 *
 * Megatron's Transformer Engine layers keep the norm's input, its output (the column-parallel
 * input, local under sequence parallelism: gathered again in the backward) and 1/rms; the fused
 * RoPE keeps no input; flash attention q, k, v, its output and an fp32 log-sum-exp per head;
 * SwiGLU its input (2f) and its output (f, the down projection's input). torchtitan's DTensor
 * sequence parallelism all-gathers the norms' outputs before wq/wk/wv and w1/w3, which keep the
 * gathered tensor, and its SwiGLU keeps w1's and w3's outputs, the SiLU's and the product
 * (tests/torch/parallel_worker.py measures 5,656 and 5,140 B per token and layer without and
 * with sequence parallelism, as these lines count them).
 */
#include "estimate/estimate.h"

#include <math.h>
#include <string.h>

/* a layer's parameters on one GPU, elements: attention (with the norms), the dense MLP, and for
 * a layer with experts the router and shared experts (moe) and the routed experts it holds */
typedef struct lparams {
    double attn, dense, moe, experts;
} lparams;

static bool in(const char *name, const char *const *names, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!strcmp(name, names[i]))
            return true;
    return false;
}

/* what a layer holds, from the model's linears (model.c names them as transformers does): the
 * attention's and MLPs' matrices split over t (a key/value projection never below one head), the
 * multi-head latent attention's down-projections and the router whole, the routed experts over
 * expert x expert-tensor parallel GPUs, the norms (what the linears leave of a layer) whole */
static void layer_params(lparams *p, const oomi_model *m, const oomi_dims *d)
{
    static const char *const split[] = {"q_proj",   "k_proj",   "v_proj",   "o_proj",
                                        "qkv_proj", "q_b_proj", "kv_b_proj"};
    static const char *const whole[] = {"q_a_proj", "kv_a_proj_with_mqa"};
    static const char *const dense[] = {"gate_proj", "up_proj", "down_proj", "gate_up_proj"};
    static const char *const expert[] = {"w1", "w2", "w3"};
    double L = (double)m->layers, Ls = (double)(m->sparse_layers > 0 ? m->sparse_layers : 1);
    double Ld = (double)(m->layers - m->sparse_layers), lin = 0, t = (double)d->tp;
    long kv = m->kv_heads > 0 ? m->kv_heads : m->heads;
    size_t i;

    memset(p, 0, sizeof(*p));
    if (Ld <= 0)
        Ld = 1;
    for (i = 0; i < m->nlinears; i++) {
        const oomi_linear *l = &m->linears[i];
        const char *n = l->name;
        double all =
            ((double)l->din * (double)l->dout + (l->bias ? (double)l->dout : 0)) * (double)l->count;
        lin += all;
        if (in(n, split, OOMI_ARRAY_LEN(split)))
            p->attn +=
                all / L /
                ((!strcmp(n, "k_proj") || !strcmp(n, "v_proj")) && kv < d->tp ? (double)kv : t);
        else if (in(n, whole, OOMI_ARRAY_LEN(whole)))
            p->attn += all / L;
        else if (in(n, dense, OOMI_ARRAY_LEN(dense)))
            p->dense += all / Ld / t;
        else if (in(n, expert, OOMI_ARRAY_LEN(expert)))
            p->experts += all / Ls / (double)(d->ep * d->etp);
        else if (!strcmp(n, "gate") || !strcmp(n, "shared_expert_gate"))
            p->moe += all / Ls;
        else /* shared_expert(s).gate_proj, up_proj, down_proj */
            p->moe += all / Ls / t;
    }
    /* the norms: all the parameters less the embeddings, head, final norm and linears */
    p->attn +=
        ((double)(m->params - m->params_embed - m->params_lm_head) - (double)m->hidden - lin) / L;
}

static bool sparse_layer(const oomi_model *m, long i)
{
    if (m->sparse_layers <= 0)
        return false;
    if (m->sparse_layers >= m->layers || i >= OOMI_SPARSE_MAP_LAYERS)
        return true;
    return (m->sparse_map[i / 8] >> (i % 8)) & 1;
}

void oomi_layout_dims(oomi_dims *d, const oom_workload *w)
{
    const oomi_layout *l = &w->layout;
    double V = (double)w->model->vocab;
    memset(d, 0, sizeof(*d));
    d->tp = w->parallel.tp, d->pp = l->pp, d->vpp = l->vpp, d->ep = l->ep, d->cp = l->cp;
    d->etp = oomi_layout_etp(w);
    d->dp = w->k.gpus;
    d->edp = d->tp * d->cp * d->dp / (d->ep * d->etp);
    if (d->edp < 1)
        d->edp = 1;
    d->m = w->k.grad_accum;
    d->sp = oomi_layout_sp(w);
    d->titan = l->engine == OOMI_ENGINE_TORCHTITAN;
    d->grads_kept = !d->titan; /* Megatron's gradient buffer lives from the start */
    d->runtime = d->titan && d->vpp > 1;
    /* Megatron pads the vocabulary to a multiple of 128 x tp (make_vocab_size_divisible_by,
     * megatron/training/tokenizer: _vocab_size_with_padding); DTensor splits it as it is */
    if (!d->titan)
        V = ceil(V / (128.0 * (double)d->tp)) * 128.0 * (double)d->tp;
    d->vocab_local = ceil(V / (double)d->tp);
    /* Transformer Engine's cuBLAS workspace, a tensor of PyTorch's allocator: 32 MiB from
     * compute capability 9.0 on, else 4 MiB (get_cublas_workspace_size_bytes,
     * transformer_engine/pytorch/module/base.py), and one per stream of its grouped GEMMs
     * (num_cublas_streams 4) where experts run as TEGroupedMLP */
    if (!d->titan)
        d->te_workspace = (w->gpu.known && w->gpu.cc_major >= 9 ? 33554432.0 : 4194304.0) *
                          (w->model->experts > 0 ? 5 : 1);
}

/* the engine's bytes of a weight, its gradient, the optimizer's states per parameter and the
 * step's temporaries, for `dense` parameters sharded over data x context parallel GPUs and
 * `expert` ones over the expert data-parallel GPUs */
static void model_states(oomi_chunk *k, const oom_workload *w, const oomi_coef *c,
                         const oomi_dims *d, double dense, double expert)
{
    oom_precision p = oomi_resolved_precision(w);
    oom_optimizer o = w->k.optimizer;
    double states = o == OOM_OPTIMIZER_ADAMW || o == OOM_OPTIMIZER_ADAMW_FUSED ? 2
                    : o == OOM_OPTIMIZER_SGD_MOMENTUM                          ? 1
                                                                               : 0;
    double all = dense + expert, sharded, ep = p == OOM_PRECISION_FP32 ? 4 : 2;
    k->params = all;
    if (!d->titan) {
        /* Megatron: 16-bit weights in its parameter buffer, fp32 main gradients (bf16 forces
         * accumulate_allreduce_grads_in_fp32), fp32 master weights and states, all three
         * sharded by the distributed optimizer (--sharding zero1) over data x context parallel
         * GPUs, the experts' over their own data-parallel group; its fused Adam makes no
         * step temporaries */
        double per = states * 4 + (ep < 4 && o != OOM_OPTIMIZER_NONE ? 4 : 0);
        sharded = w->k.sharding == OOM_SHARDING_ZERO1
                      ? dense / (double)(d->dp * d->cp) + expert / (double)d->edp
                      : all;
        if (w->k.offload == OOM_OFFLOAD_OPTIMIZER) /* --optimizer-cpu-offload: on the CPU */
            per = 0;
        k->w = all * ep, k->g = all * 4, k->o = sharded * per, k->topt = 0;
        return;
    }
    if (oomi_fsdp2(w) || p == OOM_PRECISION_AMP_BF16 || p == OOM_PRECISION_AMP_FP16) {
        /* FSDP2 over data x context parallel GPUs (torchtitan's fsdp mesh); torchtitan applies
         * it with its MixedPrecisionPolicy even unsharded (parallelize_llama: "Always run
         * apply_fsdp_to_decoder -- with shard_degree=1 it is a no-op for the all-gather but
         * still installs the MixedPrecisionPolicy"): amp-* without fsdp2 is that */
        ep = w->fsdp2.bf16 ? 2 : 4;
        sharded = oomi_fsdp2(w) ? dense / (double)(d->dp * d->cp) + expert / (double)d->edp : all;
        k->w = k->g = sharded * ep, k->o = sharded * ep * states;
        k->topt = sharded * ep * c->opt_temp[o];
        return;
    }
    /* a 16-bit or fp32 model and torch's optimizer: states in the parameters' dtype */
    k->w = k->g = all * ep, k->o = all * ep * states, k->topt = all * ep * c->opt_temp[o];
}

/* FSDP2 (torchtitan's apply_fsdp, one group per block and the root): the largest block's
 * parameters gathered in 16-bit with its all-gather output during its forward, and in its
 * backward the next block's prefetched beside its reduce-scatter buffers (the single-GPU terms of
 * docs/estimate.md, "FSDP2"); kept unsharded from the forward to the backward: the root's
 * (embedding, final norm, head) always, every block's when they do not reshard, which torchtitan
 * does not under pipeline parallelism (fsdp_reshard_after_forward "default") */
static void fsdp2_gathers(oomi_chunk *k, const oom_workload *w, const oomi_dims *d,
                          const lparams *lp, double vocab_rows)
{
    double B = lp->attn + fmax(lp->dense, lp->moe + lp->experts), c = 2;
    double ps = w->fsdp2.bf16 ? 2 : 4, n = (double)(d->dp * d->cp);
    double root =
        (k->first ? vocab_rows : 0) + (k->last ? vocab_rows + (double)w->model->hidden : 0);
    bool keep = w->fsdp2.reshard_set ? w->fsdp2.reshard < 0 : d->pp > 1;
    k->gathered = c * (keep ? k->params : root);
    k->fws = fmax(k->fws, keep ? 0 : 2 * B * c);
    k->bws += B * (c + ps + ps / n) + (keep ? 0 : 2 * B * c);
}

/* a layer's activations for one micro-batch, bytes (see the top of the file) */
typedef struct lacts {
    double full;  /* all it keeps */
    double input; /* its input, the residual stream on this GPU */
    double core;  /* the attention core's output and log-sum-exp (Megatron's selective) */
    double sac;   /* what torchtitan's op-level policy keeps beside the input */
    double ws;    /* its backward's moment beyond what it keeps: the MLP's input gradients */
    double wgrad; /* the weight gradient made first in its backward (torchtitan) */
    double fws;   /* its forward's moment: a hidden-size temporary, a context ring's keys */
} lacts;

static void layer_acts(lacts *a, const oom_workload *w, const oomi_dims *d, bool moe)
{
    const oomi_model *m = w->model;
    oom_precision p = oomi_resolved_precision(w);
    double e = p == OOM_PRECISION_FP32 ? 4 : 2, h = (double)m->hidden, t = (double)d->tp;
    double T = (double)w->k.batch * (double)w->k.seq_len / (double)d->cp;
    double Tl = d->sp ? T / t : T, Hl = (double)m->heads / t, K = (double)m->topk;
    double kvh = m->kv_heads > 0 ? (double)m->kv_heads : (double)m->heads;
    double q = Hl * (double)m->head_dim, kv = (kvh >= t ? kvh / t : 1) * (double)m->head_dim;
    double f = (double)(moe ? m->ffn : m->ffn_dense), fl = f / t, E = (double)m->experts;
    double fs = (double)m->shared_ffn / t, etp = (double)d->etp;
    double pe = p == OOM_PRECISION_FP32 ? 4 : 2;
    double att, mlp;

    memset(a, 0, sizeof(*a));
    if (m->kv_lora > 0) { /* multi-head latent attention: latents whole, heads split */
        double qk = Hl * (double)(m->qk_nope + m->qk_rope), v = Hl * (double)m->v_head;
        att = (e * h + 4) * Tl + e * h * T +
              (m->q_lora > 0 ? (2 * e * (double)m->q_lora + 4) * T : 0) +
              (e * (double)(2 * m->kv_lora + m->qk_rope) + 4) * T +
              (e * (2 * qk + 2 * v) + 4 * Hl) * T;
        a->core = (e * v + 4 * Hl) * T;
        kv = v;
    } else {
        att = (d->titan ? (e * h + 4) * Tl + e * h * T : (2 * e * h + 4) * Tl) +
              (e * (2 * q + 2 * kv) + 4 * Hl) * T;
        a->core = (e * q + 4 * Hl) * T;
    }
    if (!moe)
        mlp = d->titan ? (e * h + 4) * Tl + e * h * T + 4 * e * fl * T
                       : (2 * e * h + 4) * Tl + 3 * e * fl * T;
    else if (d->titan) /* TokenChoiceTopKRouter, AllToAllTokenDispatcher, GroupedExperts */
        mlp = Tl * ((e * h + 4) + 4 * h + 4 * E + 28 * K + 4 + (d->ep > 1 ? 8 * K : 0) +
                    K * (etp * e * h + 4 * e * f) + K * (4 * h + 4)) +
              (fs > 0 ? e * h * T + 4 * e * fs * T : 0) + 4 * E * h;
    else /* TopKRouter, MoEAlltoAllTokenDispatcher, TEGroupedMLP (probs in the activation) */
        mlp =
            Tl * ((2 * e * h + 4) + (e + 5) * E + 12 * K + 8 * K + K * (etp * e * h + 3 * e * f)) +
            3 * e * fs * T;
    a->full = att + mlp;
    a->input = e * h * Tl;
    a->ws = moe ? 2 * K * e * f * Tl + 2 * e * fs * T : 2 * e * fl * T;
    a->wgrad = pe * h * (moe ? f * E / (double)(d->ep * d->etp) : fl);
    a->fws = e * h * T;
    if (d->cp > 1) /* the ring's key/value chunks (Megatron, two in flight) or all of them
                    * gathered (torch's context_parallel, rotate_method allgather) */
        a->fws += d->titan ? 2 * e * kv * T * (double)(d->cp - 1) : 4 * e * kv * T;
    if (d->titan && !moe && m->kv_lora <= 0) /* SelectiveAC: wq, wv, w1 out; attention; RS */
        a->sac = (2 * e * q + e * kv + 4 * Hl + e * fl) * T + (d->sp ? 2 * e * h * Tl : 0);
}

/* which layers of the chunk full checkpointing wraps, and so keeps only the input of: every
 * one, one in N (nth:N, torchtitan's counter from 1 in each model part), Megatron's uniform
 * groups of N (the first of each group keeps the group's input) or its block of the first N */
static int wrapped(const oom_workload *w, long j)
{
    long n = w->ckpt.every > 1 ? w->ckpt.every : 1;
    if (w->k.checkpointing != OOM_CHECKPOINTING_FULL || w->ckpt.op)
        return 0;
    if (w->layout.engine == OOMI_ENGINE_TORCHTITAN)
        return (j + 1) % n == 0;
    if (w->layout.recompute_method == 1) /* block */
        return j < w->layout.recompute_layers;
    return 1; /* uniform: every layer, in groups */
}

/* the layers' part of a chunk: kept activations, the backward's moment (the MLP's gradients,
 * and the recomputed layer or group beside them), the first backward's weight gradient */
static void chunk_layers(oomi_chunk *k, const oom_workload *w, const oomi_dims *d)
{
    const oomi_model *m = w->model;
    long j, group = w->layout.engine == OOMI_ENGINE_MEGATRON && w->layout.recompute_method == 0
                        ? w->layout.recompute_layers
                        : 1;
    double rc = 0, grp = 0, ws = 0;
    bool sel = w->k.checkpointing == OOM_CHECKPOINTING_SELECTIVE;
    for (j = 0; j < k->layers; j++) {
        lacts a;
        layer_acts(&a, w, d, sparse_layer(m, k->first_layer + j));
        if (w->ckpt.op && w->k.checkpointing == OOM_CHECKPOINTING_FULL) {
            k->act += a.input + a.sac;
            rc = fmax(rc, a.full - a.input - a.sac);
        } else if (wrapped(w, j)) {
            if (j % group == 0) /* a uniform group keeps its first layer's input */
                k->act += a.input, grp = 0;
            grp += a.full;
            rc = fmax(rc, grp);
        } else if (sel) {
            k->act += a.full - a.core;
            rc = fmax(rc, a.core);
        } else {
            k->act += a.full;
        }
        ws = fmax(ws, a.ws);
        k->fws = fmax(k->fws, a.fws);
        k->bws_first = fmax(k->bws_first, a.wgrad);
        if (j == 0 && !k->first && d->titan) /* its input is the stage's receive buffer */
            k->act -= a.input;
    }
    k->bws = ws + rc;
    if (!d->titan)
        k->bws_first = 0; /* gradients accumulate into Megatron's buffer */
}

void oomi_layout_chunk(oomi_chunk *k, const oom_workload *w, const oomi_coef *c, const oomi_dims *d,
                       long stage, long first_layer, long layers)
{
    const oomi_model *m = w->model;
    oom_precision p = oomi_resolved_precision(w);
    double e = p == OOM_PRECISION_FP32 ? 4 : 2, h = (double)m->hidden, t = (double)d->tp;
    double T = (double)w->k.batch * (double)w->k.seq_len / (double)d->cp, Tl = d->sp ? T / t : T;
    double Vl = d->vocab_local, dense = 0, expert = 0, io = e * h * Tl;
    long n = d->pp * d->vpp, j;
    lparams lp;

    memset(k, 0, sizeof(*k));
    k->first_layer = first_layer, k->layers = layers;
    k->first = stage == 0, k->last = stage == n - 1;
    layer_params(&lp, m, d);
    for (j = 0; j < layers; j++) {
        bool moe = sparse_layer(m, first_layer + j);
        dense += lp.attn + (moe ? lp.moe : lp.dense);
        expert += moe ? lp.experts : 0;
    }
    if (k->first) /* the vocabulary-parallel embedding */
        dense += Vl * h;
    if (k->last) /* the final norm and the head (tied: a copy of the embedding on the last
                  * stage, which Megatron keeps in step through its embedding group) */
        dense += h + (m->params_lm_head > 0 || n > 1 ? Vl * h : 0);
    model_states(k, w, c, d, dense, expert);
    chunk_layers(k, w, d);
    if (k->first && t > 1) /* the masked token ids (int64) and the mask (bool) */
        k->act += 9 * T;
    if (k->last) {
        /* the final norm, the head's input (local under Megatron's sequence parallelism, the
         * gathered tensor under DTensor's), the loss: Megatron's vocab-parallel cross-entropy
         * keeps its fp32 softmax and works in place in the backward, where the bf16 gradient of
         * the logits and of the head's input come (tensor_parallel/cross_entropy.py);
         * torchtitan keeps the fp32 log-softmax and two int64 copies of the labels, the
         * pipeline keeps the logits, and the backward holds two more fp32 logit tensors, three
         * under loss_parallel (bench/parallel/README.md) */
        double head = d->titan ? e * h * T : io, loss;
        loss = d->titan ? (4 * Vl + 16 + (d->pp > 1 ? e * Vl : 0)) * T : (4 * Vl + 9) * T;
        k->act += (e * h + 4) * Tl + head + loss;
        k->loss = loss;
        k->loss_bws = d->titan ? (t > 1 ? 12 * Vl + 33 : 8 * Vl) * T : 2 * Vl * T + e * h * T;
        k->loss_fws = (d->titan ? 4 : 2) * Vl * T;
        k->logits_fp32 = 4 * Vl * T;
    }
    if (d->titan && d->pp > 1) {
        /* torch.distributed.pipelining: the stage's output kept for its backward (fwd_cache);
         * a receive buffer per micro-batch for the activations (all but the first stage) and
         * the gradients (all but the last); the runtime of the interleaved schedules waits on
         * its sends when the step ends, keeping every output and input gradient sent till then;
         * Schedule1F1B keeps an input gradient until its next send */
        k->out = k->last ? 0 : io;
        k->recv = (double)d->m * ((k->first ? 0 : io) + (k->last ? 0 : io));
        k->keep = d->runtime ? (k->last ? 0 : io) + (k->first ? 0 : io) : 0;
        k->pend = !d->runtime && !k->first ? io : 0;
    }
    /* torchtitan 0.3 has no DDP: data parallelism is FSDP2's, or replicas whose gradients are
     * reduced in place (the gloo reference's ep:2) */
    if (d->titan && (oomi_fsdp2(w) || p == OOM_PRECISION_AMP_BF16 || p == OOM_PRECISION_AMP_FP16))
        fsdp2_gathers(k, w, d, &lp, Vl * h);
}
