/* plan_cost.c - the planner's objective: estimated training/inference throughput of a choice. */
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

double oomi_plan_tflops(const oom_gpu_profile *gpu, oom_precision p,
                        const struct oomi_plan_consts *k)
{
    double bf16, fp16, fp32, div = k->v[OOMI_PK_FP32_DIVISOR], def = k->v[OOMI_PK_TFLOPS];
    if (!gpu || !gpu->has_tflops)
        return p == OOM_PRECISION_FP32 ? def / div : def;
    fp16 = gpu->fp16_tflops > 0 ? gpu->fp16_tflops : gpu->fp32_tflops;
    bf16 = gpu->bf16_tflops > 0 ? gpu->bf16_tflops : fp16;
    fp32 = gpu->fp32_tflops > 0 ? gpu->fp32_tflops : fp16 / div;
    switch (p) {
    case OOM_PRECISION_FP32:
        return fp32;
    case OOM_PRECISION_FP16:
    case OOM_PRECISION_AMP_FP16:
        return fp16;
    default: /* bf16, amp-bf16, and the 16-bit compute of int8/4bit bases */
        return bf16;
    }
}

/* Compute slows down on quantised bases: bitsandbytes dequantises NF4 per matmul, LLM.int8()
 * splits each matmul (nf4_speed, int8_speed; sources in data/gpus/planner.yaml). */
static double quant_factor(oom_precision p, const struct oomi_plan_consts *k)
{
    return p == OOM_PRECISION_4BIT   ? k->v[OOMI_PK_NF4_SPEED]
           : p == OOM_PRECISION_INT8 ? k->v[OOMI_PK_INT8_SPEED]
                                     : 1.0;
}

/* Roofline-shaped utilisation: a micro-batch of t tokens multiplies each weight t times per byte
 * read, so the matmuls are memory-bound below the GPU's ridge point (peak FLOP/s / bandwidth) and
 * reach the large-batch MFU above it: u(t) = MFU_MAX * t / (t + ridge). */
double oomi_plan_utilisation(const oom_plan_request *r, double tokens, double peak_flops,
                             const struct oomi_plan_consts *k)
{
    double ridge = k->v[OOMI_PK_RIDGE];
    if (r->gpu && r->gpu->has_bandwidth && r->gpu->bandwidth_gbs > 0 && peak_flops > 0)
        ridge = peak_flops / (r->gpu->bandwidth_gbs * 1e9);
    if (tokens < 1)
        tokens = 1;
    return k->v[OOMI_PK_MFU_MAX] * tokens / (tokens + ridge);
}

/* Kernel choices that cost compute time: a chunked loss adds a little (its chunks and launches:
 * chunked_loss_cost), eager attention is slower than the fused kernels SDPA and FlashAttention
 * use (eager_attention_cost); sources in data/gpus/planner.yaml. Checkpointing's recomputed
 * forward is in the estimate's FLOPs already. */
static double kernel_factor(const oom_knobs *k, const oom_plan_request *r,
                            const struct oomi_plan_consts *pk)
{
    double f = 1.0;
    if (!r->workload)
        return f; /* a measured line: what was measured is what runs */
    if (k->loss == OOM_LOSS_CHUNKED && k->method != OOM_METHOD_INFERENCE)
        f += pk->v[OOMI_PK_CHUNKED_LOSS];
    if (k->attention == OOM_ATTENTION_EAGER)
        f += pk->v[OOMI_PK_EAGER_ATTN];
    return f;
}

/* seconds per optimizer step spent outside the matmuls: gradient reduction, ZeRO-3 gathers,
 * CPU offload transfers and the CPU optimizer step (none overlapped: conservative) */
static double extra_seconds(const oom_knobs *k, const oom_estimate *e, long nodes,
                            const struct oomi_plan_consts *pk)
{
    double link = oomi_pk_si(pk, nodes > 1 ? OOMI_PK_INTER : OOMI_PK_INTRA);
    double pcie = oomi_pk_si(pk, OOMI_PK_PCIE), adam = oomi_pk_si(pk, OOMI_PK_CPU_ADAM);
    double trainable = (double)e->params_trainable, total = (double)e->params_total, s = 0;
    if (k->method == OOM_METHOD_INFERENCE)
        return 0;
    if (k->gpus > 1) {
        s += 2.0 * trainable * 2.0 / link;     /* ring all-reduce / reduce-scatter of bf16 grads */
        if (k->sharding == OOM_SHARDING_ZERO3) /* params gathered in forward and in backward */
            s += (double)k->grad_accum * 2.0 * total * 2.0 / link;
    }
    if (k->offload != OOM_OFFLOAD_NONE) /* grads down, params up, Adam on the CPU */
        s += trainable * 4.0 / pcie + trainable / adam;
    if (k->offload == OOM_OFFLOAD_OPTIMIZER_PARAMS) /* params streamed in forward and backward */
        s += (double)k->grad_accum * 2.0 * total * 2.0 / pcie;
    return s;
}

/* seconds per optimizer step moving offloaded checkpoints (a +offload variant): every layer's
 * input to pinned host memory in the forward and back in the backward, over PCIe, not
 * overlapped (conservative) */
static double offload_ckpt_seconds(const oom_plan_choice *c, const oom_plan_request *r,
                                   const struct oomi_plan_consts *pk)
{
    const oom_knobs *k = &c->knobs;
    const oomi_model *m = r->workload ? r->workload->model : NULL;
    double elem = k->precision == OOM_PRECISION_FP32 || k->precision == OOM_PRECISION_AMP_BF16 ||
                          k->precision == OOM_PRECISION_AMP_FP16
                      ? 4
                      : 2;
    if (!m || !strstr(oomi_plan_ck(c), "+offload"))
        return 0;
    return 2.0 * (double)(m->layers + m->enc_layers) * (double)k->batch * (double)k->seq_len *
           (double)m->hidden * elem * (double)k->grad_accum / oomi_pk_si(pk, OOMI_PK_PCIE);
}

void oomi_plan_throughput(oom_plan_choice *c, const oom_plan_request *r, long nodes,
                          const struct oomi_plan_consts *pk)
{
    const oom_knobs *k = &c->knobs;
    double peak, tokens_micro, compute, step, samples;

    c->has_throughput = 1;
    if (r->line && !r->workload && r->line->flops_per_sample <= 0) {
        /* no FLOP count: rank by micro-batch (bigger kernels), report no throughput */
        c->has_throughput = 0;
        c->score = (double)k->batch;
        c->utilisation = 0;
        c->tokens_per_s = c->samples_per_s = c->step_s = 0;
        return;
    }
    peak = oomi_plan_tflops(r->gpu, k->precision, pk) * 1e12 * quant_factor(k->precision, pk);
    tokens_micro = (double)k->batch * (double)k->seq_len;
    c->utilisation = oomi_plan_utilisation(r, tokens_micro, peak, pk);
    compute = c->estimate.flops_per_step / (peak * c->utilisation) * kernel_factor(k, r, pk);
    step = compute + extra_seconds(k, &c->estimate, nodes, pk) + offload_ckpt_seconds(c, r, pk);
    samples = (double)k->batch * (double)k->grad_accum * (double)k->gpus;
    c->step_s = step;
    c->samples_per_s = step > 0 ? samples / step : 0;
    c->tokens_per_s = c->samples_per_s * (double)k->seq_len;
    c->score = c->tokens_per_s;
}

int oomi_plan_note(oom_plan_result *res, const char *fmt, ...)
{
    va_list ap;
    int err;
    va_start(ap, fmt);
    err = oomi_strv_addv(&res->notices, &res->n_notices, fmt, ap);
    va_end(ap);
    return err;
}
