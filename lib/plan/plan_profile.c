/* plan_profile.c - a serving engine's start-up profile run and its rotary cache, as vLLM counts
 * them: shared by the vLLM format of inference plans (plan_notes.c) and the colocated rollout
 * engine of GRPO plans (plan_rollout.c). */
#include "plan/plan.h"

#include <math.h>

/* The sampler's working set in vLLM's profile run, bytes per logit (rows x vocabulary): the
 * model's 16-bit logits (2), their fp32 copy (4), and the top-k/top-p sort of that copy
 * (vllm/v1/sample/sampler.py, Sampler.forward; vllm/v1/sample/ops/topk_topp_sampler.py,
 * apply_top_k_top_p: logits.sort()): its fp32 values and int64 indices (12) and, while it runs,
 * the work buffers of PyTorch's sort of many long rows (aten/src/ATen/native/cuda/Sort.cu,
 * segmented_sort_pairs_by_full_sort: the (row, index) pairs, 8, and the radix sort's sorted keys
 * and pairs, 4 + 8): 38. vLLM's own logs (bench/accuracy/vllm-logs.csv) give 38.3 for the whole:
 * "PyTorch activation peak memory" less the forward's output, over 1024 x vocabulary logits, is
 * 38.3 bytes for Llama-3.1-8B, Qwen3-0.6B and Qwen3-32B alike; the 0.3 left is the radix sort's
 * own scratch storage. */
#define SERVE_SAMPLER_BYTES 38.3

double oomi_serve_sampler(const oomi_model *m, long rows)
{
    return (double)rows * (double)m->vocab * SERVE_SAMPLER_BYTES;
}

/* vLLM's rotary embedding keeps a cos/sin cache of max_position_embeddings x rotary_dim in the
 * model's dtype, one for all layers and whole on every GPU
 * (vllm/model_executor/layers/rotary_embedding, RotaryEmbedding._compute_cos_sin_cache); it is
 * allocated with the weights and counted in "Model loading took": 0.03 GiB for Llama-3.1-8B
 * (131 072 x 128 x 2 bytes), the difference between vLLM's 14.99 GiB and the 14.96 GiB of the
 * parameters. Models with a learned position table (GPT-2) and encoder-decoders have none. */
uint64_t oomi_serve_rope(const oomi_model *m, oom_precision p)
{
    long hd = m->head_dim > 0 ? m->head_dim : m->heads > 0 ? m->hidden / m->heads : 0;
    if (m->enc_layers > 0 || m->max_pos <= 0 || m->params_embed > (uint64_t)m->vocab * m->hidden)
        return 0;
    return (uint64_t)m->max_pos * (uint64_t)hd * (p == OOM_PRECISION_FP32 ? 4 : 2);
}

/* The activation peak of a serving engine's start-up profile run (vLLM's
 * vllm/v1/worker/gpu_model_runner.py, GPUModelRunner.profile_run): _dummy_run, one forward over
 * max_num_batched_tokens tokens with FlashAttention (no score matrix), then _dummy_sampler_run
 * over min(max_num_seqs, tokens) rows. The forward's working set is freed before the sampler
 * runs, its output hidden states (tokens x hidden) stay: the peak is the larger of the forward's
 * and the output's plus the sampler's (the logged peak of Qwen3-32B is within 0.1 GiB of
 * Qwen3-0.6B's at the same 1024 x 151 936 logits, though its forward is ten times larger). The
 * forward is the estimator's prefill at batch 1 (its one-row logits are left out: the sampler
 * counts its own). This gives the forward's working set and its output. */
int oomi_serve_forward(const oom_workload *src, oom_knobs k, long tokens, double *fwd, double *out)
{
    oom_workload *w = NULL;
    oom_estimate e = OOM_ESTIMATE_INIT;
    const oomi_coef *c;
    int err;

    if ((err = oomi_coef_get(&c)) || (err = oom_workload_clone(&w, src)))
        return err;
    k.batch = 1;
    k.seq_len = tokens;
    k.attention = OOM_ATTENTION_FLASH;
    if (w->model->max_pos > 0 && tokens > w->model->max_pos)
        w->shape.max_positions = tokens;
    if (!(err = oom_workload_set_knobs(w, &k)) && !(err = oom_estimate_run(&e, w))) {
        *out =
            (double)tokens * (double)w->model->hidden * (k.precision == OOM_PRECISION_FP32 ? 4 : 2);
        /* the forward's working set; the cuBLAS workspace left out: vLLM's logged peaks are
         * matched without it (docs/plan.md) */
        *fwd = (double)(e.activations + e.temporaries) - oomi_cublas_workspace(w, c, NULL);
    }
    oom_workload_free(w);
    return err;
}
