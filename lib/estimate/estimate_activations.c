/* estimate_activations.c - what the forward saves for the backward: per token and layer from
 * the fitted coefficients, attention weights, LoRA's tensors, checkpointing (full, one layer in
 * N, offloaded, op-level), sequence packing (docs/estimate.md). */
#include "estimate/estimate_ctx.h"

#include <math.h>
#include <string.h>

const oomi_act_coef *oomi_est_act_coef(const ctx *x)
{
    int b = (int)x->m->block;
    size_t i;
    for (i = 0; i < x->c->nfamilies; i++) /* a set fitted for this model_type */
        if (!strcmp(x->c->family[i].model_type, x->m->family))
            return &x->c->family[i].act[regime(x)];
    if (x->m->block == OOMI_BLOCK_T5 && x->m->gated)
        b = 4;
    return &x->c->act[b][regime(x)];
}

/* What a layer of multi-head latent attention saves per token beyond its MLP (`mla` set,
 * bench/trace/README.md): the hidden states, every head's keys without and with RoPE and values
 * (the expanded latent), the query and key/value latents; a frozen base keeps less of the
 * hidden states and of the latents */
static double mla_per_token(const ctx *x, const oomi_act_coef *a)
{
    const oomi_model *m = x->m;
    double H = (double)m->heads, lat = (double)(m->q_lora + m->kv_lora);
    double b = a->mla_h * (double)m->hidden + a->mla_nope * H * (double)m->qk_nope +
               a->mla_rope * H * (double)m->qk_rope + a->mla_v * H * (double)m->v_head +
               a->mla_q_lora * (double)m->q_lora + a->mla_kv_lora * (double)m->kv_lora;
    if (x->frozen)
        b -= a->mla_frozen_h * (double)m->hidden + a->mla_frozen_lora * lat;
    return b;
}

/* torchtune 0.6.1's decoder layer (TransformerSelfAttentionLayer, torchtune/modules/
 * transformer.py) in 16-bit with SDPA, from its code rather than transformers' fitted sets: its
 * RMSNorms (modules/rms_norm.py) keep their fp32 input (x.float()) and, where the scale is
 * trained, the fp32 normalised input (x_normed * self.scale); their 16-bit outputs are the
 * projections' inputs. MultiHeadAttention (modules/attention.py) gives SDPA the query as RoPE
 * returns it (type_as), and the keys and values expanded to every query head where there are
 * fewer (expand, then flatten: a copy each); SDPA keeps those with its output and fp32
 * log-sum-exp. FeedForward (w2(silu(w1(x)) * w3(x))) keeps its two projections' outputs, the
 * SiLU's and the product. oomless trace --stack torchtune bf16 2 x 512: Llama 3.2 1B LoRA
 * 109,969,408 bytes a layer, Qwen2.5 0.5B full 65.6 MB, as counted here */
static bool tune_layer(const ctx *x)
{
    const oomi_model *m = x->m;
    return x->w->stack == OOMI_STACK_TORCHTUNE && regime(x) == OOMI_REGIME_16BIT &&
           m->block == OOMI_BLOCK_LLAMA && x->w->k.attention != OOM_ATTENTION_EAGER &&
           !m->qk_norm && m->kv_lora == 0 && m->sparse_layers == 0;
}

static double tune_per_token(const ctx *x, double f)
{
    const oomi_model *m = x->m;
    double e = x->e, h = (double)m->hidden, qd = (double)(m->heads * m->head_dim);
    double kvd = m->kv_heads < m->heads ? qd : (double)(m->kv_heads * m->head_dim);
    double norms = 2 * (4 * h + (x->frozen ? 0 : 4 * h) + e * h);
    double attention = e * (qd + 2 * kvd + qd) + 4 * (double)m->heads;
    return norms + attention + 4 * e * f;
}

/* torchtitan 0.3.0's Qwen3 block (models/qwen3/model.py on models/common/) under FSDP2's bf16
 * MixedPrecisionPolicy, from the tensors its trace keeps (Qwen3 0.6B amp-bf16 1 x 2048: 87,168
 * bytes a token a layer, as counted here): each nn.RMSNorm (its decomposition on this path)
 * keeps its fp32 input and normalised input and its 16-bit output; the per-head q_norm and
 * k_norm their fp32 input and normalised input and a 1/rms per head; CosSinRoPE
 * (models/common/rope.py) computes in fp32 and returns 16-bit queries and keys, its cos and sin
 * rows for the positions kept by its products; SDPA keeps a contiguous copy of the queries and
 * of the values, its output and fp32 log-sum-exp; the MLP its two projections' outputs, the
 * SiLU's and the product. */
static bool titan_qwen3_layer(const ctx *x)
{
    const oomi_model *m = x->m;
    return x->w->stack == OOMI_STACK_TORCHTITAN && regime(x) != OOMI_REGIME_FP32 && !x->frozen &&
           m->block == OOMI_BLOCK_LLAMA && m->qk_norm && x->w->k.attention == OOM_ATTENTION_SDPA &&
           m->kv_lora == 0 && m->sparse_layers == 0;
}

static double titan_qwen3_per_token(const ctx *x, double f)
{
    const oomi_model *m = x->m;
    double h = (double)m->hidden, hd = (double)m->head_dim, heads = (double)m->heads;
    double kvh = (double)m->kv_heads, qd = heads * hd, kvd = kvh * hd;
    double norms = 2 * (4 * h + 4 * h + 2 * h);
    double qk_norms = 8 * qd + 4 * heads + 8 * kvd + 4 * kvh;
    double rope = 2 * qd + 2 * kvd + 2 * hd * 4;
    double attention = 2 * qd + 2 * kvd + 2 * qd + 4 * heads;
    return norms + qk_norms + rope + attention + 4 * 2 * f;
}

/* whether a LoRA adapter without dropout takes the input of one of these linears: lora_A then
 * keeps that very tensor (PEFT's nn.Identity for a dropout of 0) */
static bool input_kept_by_lora(const ctx *x, const char *const *names)
{
    if (!x->lora_on || x->w->lora.dropout > 0)
        return false;
    for (; *names; names++)
        if (oomi_lora_adapts(x->m, x->w->lora.targets, *names))
            return true;
    return false;
}

/* bitsandbytes 0.43 and earlier: MatMul4Bit.forward keeps its 16-bit input A for the backward
 * (`ctx.tensors = (A, B)` whenever A or B needs a gradient; bitsandbytes/autograd/_functions.py
 * at 0.43.3) though the frozen weight's backward needs only B; bitsandbytes PR #1270 (0.44.0)
 * keeps (None, B). A frozen nn.Linear keeps nothing of its input (autograd saves mm's input
 * only for the weight's gradient), so under 0.43 a layer keeps in addition, where no other op
 * keeps them: the attention's input (the first norm's output), o_proj's input (under SDPA and
 * eager a contiguous copy of the kernel's output; under flash-attention the kernel's own
 * output, already kept), the MLP's input (the second norm's output) and down_proj's input. A
 * group's input is kept already where LoRA adapts one of its linears without dropout. Bytes
 * per token of a layer whose MLP is `f` wide, `share` of it the experts' (left out: an expert
 * is an nn.Linear under bitsandbytes only in some families). */
static double bnb_kept_inputs(const ctx *x, double f, double share)
{
    static const char *const attn_in[] = {"q_proj",          "k_proj", "v_proj", "qkv_proj",
                                          "query_key_value", "Wqkv",   "c_attn", NULL};
    static const char *const attn_out[] = {"o_proj", "out_proj", "dense", NULL};
    static const char *const mlp_in[] = {
        "gate_proj", "up_proj", "gate_up_proj", "fc1", "dense_h_to_4h", "c_fc", NULL};
    static const char *const mlp_out[] = {"down_proj", "fc2", "dense_4h_to_h", NULL};
    const oomi_model *m = x->m;
    double h = (double)m->hidden, qd = (double)(m->heads * m->head_dim), b = 0;
    if (!oomi_bnb_keeps_inputs(x->w))
        return 0;
    if (!input_kept_by_lora(x, attn_in))
        b += h;
    if (x->w->k.attention != OOM_ATTENTION_FLASH && !input_kept_by_lora(x, attn_out))
        b += qd;
    if (share < 1 && !input_kept_by_lora(x, mlp_in))
        b += (1 - share) * h;
    if (share < 1 && !input_kept_by_lora(x, mlp_out))
        b += (1 - share) * f;
    return 2 * b; /* a 4-bit base computes in 16 bits */
}

/* bytes saved per token by a layer of MLP width `f` per token, `share` of it a layer with the
 * experts, without the eager score term */
static double per_token_of(const ctx *x, double f, double share)
{
    const oomi_model *m = x->m;
    const oomi_act_coef *a = oomi_est_act_coef(x);
    double qd = (double)(m->heads * m->head_dim), kvd = (double)(m->kv_heads * m->head_dim);
    double h = (double)m->hidden, b;
    if (tune_layer(x)) /* a stack's layer counted from its code, not from the fitted sets */
        return tune_per_token(x, f);
    if (titan_qwen3_layer(x))
        return titan_qwen3_per_token(x, f);
    b = a->h * h + a->q * qd + a->kv * kvd + a->f * f;
    if (x->w->k.attention != OOM_ATTENTION_EAGER)
        b += a->lse * (double)m->heads;
    else
        b += a->eager_h * h + a->eager_q * qd + a->eager_kv * kvd + a->eager_f * f;
    if (m->qk_norm)
        b += (a->qk_norm - (x->frozen ? a->frozen_qk_norm : 0)) * (qd + kvd);
    if (x->frozen)
        b -= a->frozen_h * h + a->frozen_q * qd + a->frozen_f * f;
    if (m->kv_lora > 0 && a->mla) /* multi-head latent attention instead of h, q and kv */
        b += mla_per_token(x, a) - (a->h - (x->frozen ? a->frozen_h : 0)) * h -
             (a->q - (x->frozen ? a->frozen_q : 0)) * qd - a->kv * kvd;
    if (share > 0) {
        double k = (double)m->routed, kh = a->moe_kh - (x->frozen ? a->moe_frozen_kh : 0);
        /* Llama 4 under autocast: the repeated input stays fp32 (4 bytes, kept for the score's
         * gradient) and a trained expert keeps its 16-bit cast (2 more); the other regimes'
         * sets hold as fitted (oomless trace, a Llama 4 config of two expert layers, amp-bf16
         * LoRA: 320 MiB of fp32 repeats at 512 tokens where bf16 keeps 160) */
        if (m->moe_repeat_input && regime(x) == OOMI_REGIME_AMP)
            kh = x->frozen ? 4.0 : 6.0;
        b += share * (kh * k * h + a->moe_k * k);
    }
    if (x->w->k.batch == 1)
        b += x->w->k.attention == OOM_ATTENTION_EAGER ? a->b1_eager_q * qd + a->b1_eager_kv * kvd
                                                      : a->b1_q * qd + a->b1_kv * kvd;
    return b + bnb_kept_inputs(x, f, share);
}

/* bytes saved per token by one (encoder or only) layer, averaged over the layers (the MLP
 * width and the experts' terms are) */
static double layer_per_token(const ctx *x)
{
    const oomi_model *m = x->m;
    return per_token_of(x, m->ffn_tok_mean,
                        m->sparse_layers > 0 ? (double)m->sparse_layers / (double)m->layers : 0);
}

/* whether layers with the experts alternate with dense ones (Llama 4 Maverick, DeepSeek's first
 * layers), which are then counted each as it is, not as the average layer */
bool oomi_est_mixed_layers(const oomi_model *m)
{
    return m->sparse_layers > 0 && m->sparse_layers < m->layers;
}

/* bytes saved per token by a layer with the experts and by a dense one */
static void per_token_kinds(const ctx *x, double *sparse, double *dense)
{
    const oomi_model *m = x->m;
    *sparse = per_token_of(x, (double)m->routed * (double)m->ffn + (double)m->shared_ffn, 1);
    *dense = per_token_of(x, (double)m->ffn_dense, 0);
}

/* ... and by the layer that saves the most: what one recomputed layer holds (oomless trace, a
 * Llama 4 config of two dense and two expert layers, amp-bf16 LoRA 2 x 1024 with full
 * checkpointing: at the peak an expert layer's recomputed tensors, 3.9 GiB, where the average
 * layer's are 1.2 GiB) */
static double heaviest_per_token(const ctx *x)
{
    double sparse, dense;
    if (!oomi_est_mixed_layers(x->m))
        return layer_per_token(x);
    per_token_kinds(x, &sparse, &dense);
    return sparse > dense ? sparse : dense;
}

/* attention weights kept per layer for `q` query and `k` key tokens per sample: eager
 * attention's, or SDPA's where no fused kernel takes the shapes (math path: sdpa_score) */
static double scores(const ctx *x, double q, double k)
{
    double per;
    if (x->w->k.checkpointing == OOM_CHECKPOINTING_SELECTIVE)
        return 0;
    per = x->w->k.attention == OOM_ATTENTION_EAGER  ? oomi_est_act_coef(x)->score
          : x->w->k.attention == OOM_ATTENTION_SDPA ? oomi_est_act_coef(x)->sdpa_score
                                                    : 0;
    /* a softmax in the compute dtype keeps one 16-bit tensor, which the matmul after it saves
     * too; under autocast the softmax runs in fp32 all the same (autocast's fp32 list) */
    if (x->w->k.attention == OOM_ATTENTION_EAGER && x->m->eager_softmax_compute &&
        regime(x) == OOMI_REGIME_16BIT)
        per = x->e;
    return per * (double)x->w->k.batch * (double)x->m->heads * q * k;
}

/* attention weights of one layer when they are materialised (eager, SDPA's math path), else 0 */
double oomi_est_scores_elems(const ctx *x)
{
    double s = (double)x->w->k.seq_len;
    const oomi_act_coef *a = oomi_est_act_coef(x);
    if (x->w->k.attention == OOM_ATTENTION_EAGER ||
        (x->w->k.attention == OOM_ATTENTION_SDPA && a->sdpa_score > 0))
        return (double)x->w->k.batch * (double)x->m->heads * s * s;
    return 0;
}

/* bytes of one attention score's gradient: SDPA's math path computes 16-bit inputs in fp32
 * (PyTorch's _scaled_dot_product_attention_math upcasts half and bfloat16 query/key/value);
 * eager attention in the compute dtype */
double oomi_est_score_size(const ctx *x)
{
    return x->w->k.attention == OOM_ATTENTION_SDPA ? 4.0 : x->e;
}

/* LoRA's own saved tensors per token (whole model): the adapter-dtype input copies, A's output */
static double lora_per_token(const ctx *x)
{
    double in;
    if (!x->lora_on)
        return 0;
    if (tune_layer(x)) /* torchtune's LoRALinear (modules/peft/lora.py): lora_a's output, which
                        * lora_b keeps; the input is the base's, counted with the layer */
        return x->ab * (double)x->w->lora.rank * (double)x->lora.n_adapted;
    if (x->ab < 4) /* 16-bit adapters: the input cast to them where the compute dtype differs;
                    * with dropout the 1-byte mask and the dropped copy lora_A saves */
        in = x->w->lora.dropout > 0 ? 1 + x->ab : x->e != x->ab ? x->ab : 0;
    else if (x->w->lora.dropout > 0)
        in = x->c->lora_dropout_in[x->e < 4 ? 0 : 1]; /* the mask and the dropped copy */
    else
        in = x->e < 4 ? x->c->lora_in_fp32 : 0;
    return in * (double)x->lora.in_elems +
           8.0 * (double)x->w->lora.rank * (double)x->lora.n_adapted;
}

/* --checkpointing op-sac: the bytes per token that torchtitan's op-level selective policy keeps
 * of one layer beside its input (SelectiveAC, torchtitan/distributed/activation_checkpoint.py,
 * pytorch/torchtitan b5bcd76): the outputs of the mm ops save every second one (counted from 1
 * in the order the block runs them: q, k, v, o, the MLP's, each adapted linear's base mm then
 * LoRA's A and B), of every addmm (a linear with a bias, saved uncounted), and of the attention:
 * the fused kernel's output and fp32 log-sum-exp per head and row (in rows of 32 for the
 * memory-efficient kernel that fp32 runs), or the matmuls' (eager: the scores, bmm, saved
 * uncounted) or the math path's output and weights. Outputs are in the compute dtype, 16-bit
 * under autocast; LoRA's adapters compute in fp32 outside autocast (PEFT's
 * autocast_adapter_dtype). A Llama-style dense block (workload_set.c refuses the others):
 * oomless trace, Llama-3.2-1B bf16 4 x 1024, 29824 bytes per token per layer, as counted here. */
double oomi_est_op_sac(const ctx *x, double *recomputed)
{
    const oomi_model *m = x->m;
    double e = amp(x) ? 2 : x->e, le = amp(x) ? 2 : 4, b = 0, s = (double)x->w->k.seq_len;
    double qd = (double)(m->heads * m->head_dim), H = (double)m->heads, r = x->w->lora.rank;
    long mms = 0;
    size_t i;
    *recomputed = 0; /* multiply-adds per token of the mms recomputed */
    for (i = 0; i < m->nlinears; i++) {
        const oomi_linear *l = &m->linears[i];
        double in = (double)l->din, out = (double)l->dout;
        if (l->count != m->layers)
            continue;
        if (l->bias || ++mms % 2)
            b += e * out;
        else
            *recomputed += in * out;
        if (x->lora_on && oomi_lora_adapts(m, x->w->lora.targets, l->name)) {
            if (++mms % 2)
                b += le * r;
            else
                *recomputed += in * r;
            if (++mms % 2)
                b += le * out;
            else
                *recomputed += r * out;
        }
    }
    if (oomi_est_scores_elems(x) > 0)
        return b + e * qd +
               (x->w->k.attention == OOM_ATTENTION_EAGER ? e : oomi_est_score_size(x)) * H * s;
    return b + e * qd + 4.0 * H * (x->e >= 4 && !amp(x) ? ceil(s / 32) * 32 / s : 1);
}

/* the layers full checkpointing wraps: every one, or one in N with every:N / nth:N
 * (workload_set.c); *above: the layers above the last one wrapped (not checkpointed). 0 without */
double oomi_est_ckpt_layers(const ctx *x, double *above)
{
    long L = x->m->layers + x->m->enc_layers, n = x->w->ckpt.every > 1 ? x->w->ckpt.every : 1;
    long c = x->w->ckpt.nth ? L / n : (L + n - 1) / n;
    long top = x->w->ckpt.nth ? n * c - 1 : n * (c - 1); /* 0-based index of the last wrapped */
    *above = 0;
    if (x->w->k.checkpointing != OOM_CHECKPOINTING_FULL || L <= 0 || c <= 0)
        return 0;
    *above = (double)(L - 1 - top);
    return (double)c;
}

/* the share of the layers that full checkpointing wraps */
double oomi_est_ckpt_share(const ctx *x)
{
    double above, L = (double)(x->m->layers + x->m->enc_layers);
    return L > 0 ? oomi_est_ckpt_layers(x, &above) / L : 0;
}

/* Where layers with the experts alternate with dense ones and every:N or nth:N leaves some
 * unwrapped: how many layers are left unwrapped (*left) and how many of those have the experts
 * (*left_sparse), and the same of the layers above the last one wrapped. false where the layers
 * are alike, nothing is wrapped, or the model's map of its expert layers does not reach */
bool oomi_est_unwrapped_mix(const ctx *x, long *left, long *left_sparse, long *top_left,
                            long *top_sparse)
{
    const oomi_model *m = x->m;
    long L = m->layers, n = x->w->ckpt.every > 1 ? x->w->ckpt.every : 1, last, i;
    double above;
    *left = *left_sparse = *top_left = *top_sparse = 0;
    if (m->enc_layers > 0 || !oomi_est_mixed_layers(m) || L > OOMI_SPARSE_MAP_LAYERS ||
        oomi_est_ckpt_layers(x, &above) <= 0)
        return false;
    last = L - 1 - (long)above;
    for (i = 0; i < L; i++) {
        bool wrapped = x->w->ckpt.nth ? (i + 1) % n == 0 : i % n == 0;
        bool sparse = (m->sparse_map[i / 8] >> (i % 8)) & 1;
        if (wrapped)
            continue;
        *left += 1, *left_sparse += sparse;
        if (i > last)
            *top_left += 1, *top_sparse += sparse;
    }
    return *left > 0;
}

/* ---- sequence packing (docs/estimate.md, "Sequence packing") ------------------------------ */

/* the micro-batch as the model sees it: padding-free one row of all its tokens, block-mask
 * `batch` rows of packs (oomi_packed_shape); every per-token term then counts the packed tokens
 * and every attention-score term (eager) the packed row's length squared: eager attention
 * computes the whole row's scores and masks the other documents' away */
void oomi_est_packed_batch(oom_workload *wb)
{
    long rows, len;
    if (wb->packing.mode == OOMI_PACKING_NONE)
        return;
    oomi_packed_shape(wb, &rows, &len);
    wb->k.batch = rows, wb->k.seq_len = len;
}

/* What SDPA keeps per layer for a packed row's document mask. transformers builds a 4D boolean
 * mask (rows x 1 x len x len) from the restarting position ids (masking_utils.py,
 * find_packed_sequence_indices and sdpa_mask, transformers 5.23); no flash kernel takes a mask,
 * so CUDA runs the memory-efficient one, after converting the boolean mask to an additive one in
 * the query's dtype in every call (convert_boolean_attn_mask, PyTorch
 * aten/src/ATen/native/transformers/attention.cpp), which that kernel saves for its backward.
 * With a mask transformers does not pass enable_gqa (sdpa_attention.py, use_gqa_in_sdpa), so
 * grouped key/value heads are repeated to the query heads and the copies saved instead (2 x
 * (q width - k/v width) more per token; oomless trace, Llama-3.2-1B bf16 2 x 1024: 320 MiB more
 * padding-free, 256 MiB block-mask, both to the MiB) where unpacked 16-bit rows would run flash
 * attention on the grouped heads as they are (fp32 runs the memory-efficient kernel on repeated
 * heads either way). Flash attention (varlen: cu_seqlens from the position ids) and eager
 * attention (its mask and scores are there unpacked) add nothing. */
static double doc_mask_per_layer(const ctx *x)
{
    const oomi_model *m = x->m;
    double rows = (double)x->w->k.batch, len = (double)x->w->k.seq_len, ea = amp(x) ? 2 : x->e;
    double qd = (double)(m->heads * m->head_dim), kvd = (double)(m->kv_heads * m->head_dim);
    if (x->w->packing.mode == OOMI_PACKING_NONE || x->w->k.attention != OOM_ATTENTION_SDPA)
        return 0;
    return rows * len * len * ea + (kvd < qd && ea < 4 ? rows * len * 2.0 * (qd - kvd) * ea : 0);
}

/* the checkpointed layers' inputs kept in host memory: +offload (transformers' save_on_cpu), or
 * Unsloth's checkpointing under --stack unsloth (use_gradient_checkpointing="unsloth":
 * Unsloth_Offloaded_Gradient_Checkpointer copies each wrapped layer's input to pinned host memory
 * in its forward and back in its backward, unsloth_zoo/gradient_checkpointing.py L267-282,
 * unsloth-zoo 2026.8.13, docs/stacks.md) */
static bool inputs_offloaded(const ctx *x)
{
    return x->w->ckpt.offload || (x->w->stack == OOMI_STACK_UNSLOTH && oomi_est_ckpt_share(x) > 0);
}

/* Unsloth's device staging buffer for the layer inputs it moves: max(2 x 256 x 2048, batch x seq x
 * hidden) 16-bit elements (INITIAL_GPU_BUFFER_SIZE, L57; grown with resize_ to the largest hidden
 * state, L816-830), kept through the step; the second one it adds for double buffering when the
 * GPU has room after the first backward is left out (it exists only where there is room) */
static double unsloth_buffer(const ctx *x, double tokens)
{
    double n = tokens * (double)x->m->hidden;
    if (x->w->stack != OOMI_STACK_UNSLOTH || !(oomi_est_ckpt_share(x) > 0))
        return 0;
    return 2.0 * (n > 2.0 * 256 * 2048 ? n : 2.0 * 256 * 2048);
}

/* the boolean document mask itself (rows x len x len bytes): an input of every checkpointed
 * layer, which non-reentrant checkpointing keeps until the backward (unless +offload moves the
 * saved inputs to host memory); without checkpointing it is freed with the forward (oomless
 * trace, Llama-3.2-1B LoRA 1 x 8192 padding-free full: 64 MiB) */
static double doc_mask_kept(const ctx *x)
{
    double len = (double)x->w->k.seq_len;
    if (doc_mask_per_layer(x) <= 0 || oomi_est_ckpt_share(x) <= 0 || inputs_offloaded(x))
        return 0;
    return (double)x->w->k.batch * len * len;
}

/* all saved activations at the end of the forward pass, one layer's (for recompute), and those
 * still saved when the backward reaches the last checkpointed layer (the layers above it, not
 * checkpointed, have been freed by then) */
void oomi_est_activations(const ctx *x, double *all, double *one, double *at_recompute)
{
    const oomi_model *m = x->m;
    double b = (double)x->w->k.batch, s = (double)x->w->k.seq_len;
    double ds = x->w->shape.decoder_seq ? (double)x->w->shape.decoder_seq : s;
    double per = layer_per_token(x), enc = 0, dec, saved, inputs, final, c = oomi_est_ckpt_share(x);
    double resid = x->e < 4 && !amp(x) ? 2 : 4; /* checkpointed layer inputs */
    double L = (double)(m->layers + m->enc_layers), above, mix_top = 0;
    long left, left_sp, top_left, top_sp;

    if (m->block == OOMI_BLOCK_T5) {
        enc = (double)m->enc_layers * (per * b * s + scores(x, s, s));
        dec = (double)m->layers *
              (per * x->c->decoder_factor * b * ds + scores(x, ds, ds) + scores(x, ds, s));
        *one = per * x->c->decoder_factor * b * ds + scores(x, ds, ds) + scores(x, ds, s);
        if (per * b * s + scores(x, s, s) > *one)
            *one = per * b * s + scores(x, s, s);
    } else {
        ds = s;
        dec = (double)m->layers * (per * b * s + scores(x, s, s) + doc_mask_per_layer(x));
        *one = heaviest_per_token(x) * b * s + scores(x, s, s) + doc_mask_per_layer(x);
    }
    /* the final norm's saved tensors, once (fitted per layer, so not in `per`) */
    final = oomi_est_act_coef(x)->final_h * (double)m->hidden * b * ds;
    if (tune_layer(x)) /* torchtune's final norm as the layers' (its fp32 input, the fp32
                        * normalised input where trained), its output kept for a trained head */
        final = (4.0 + (x->frozen ? 0 : 4.0 + x->e)) * (double)m->hidden * b * ds;
    /* every layer's saved tensors with LoRA's, and only each layer's input where checkpointed
     * (LoRA's inputs are recomputed with the layer) */
    saved = enc + dec + lora_per_token(x) * b * (m->block == OOMI_BLOCK_T5 ? (s + ds) / 2 : s);
    inputs =
        ((double)m->enc_layers * b * s + (double)m->layers * b * ds) * (double)m->hidden * resid;
    /* GPT-2's training forward fills a KV cache (config use_cache), copies of every layer's keys
     * and values (DynamicLayer.update concatenates onto an empty tensor), which the fitted
     * coefficients hold; GPT2Model hands its blocks no cache once gradient checkpointing is on
     * (past_key_values if not (self.gradient_checkpointing and self.training), transformers 5.23
     * models/gpt2/modeling_gpt2.py), so the layers left unwrapped by every:N keep none (oomless
     * trace, GPT-2 4 x 1024 every:2 and every:12: 4 bytes per token per hidden element less per
     * such layer in bf16 and amp-bf16). A packed batch is run without a cache (TRL's
     * SFTTrainer.compute_loss sets use_cache=False), so it keeps none either; under eager
     * attention the cache costs nothing there (oomless trace, GPT-2 2 x 256 bf16 and amp-bf16:
     * the same activations with and without it, to 2 KiB). */
    if ((c > 0 ||
         (x->w->packing.mode != OOMI_PACKING_NONE && x->w->k.attention != OOM_ATTENTION_EAGER)) &&
        !strcmp(m->family, "gpt2"))
        saved -= (double)m->layers * b * ds * 2.0 * (double)(m->kv_heads * m->head_dim) *
                 (amp(x) ? 2 : x->e);
    /* +offload: the wrapped layers' inputs wait in host memory (transformers'
     * activation_checkpointing_enable(offload=True) runs each checkpoint under save_on_cpu); the
     * recompute brings one back to the device (oomless trace, Llama-3.2-1B bf16 4 x 1024 full:
     * the 268 MB of layer inputs gone, the final norm's 67 MB left) */
    *all = (inputs_offloaded(x) ? 0 : c) * inputs + (1 - c) * saved + final +
           unsloth_buffer(x, b * ds);
    /* the unwrapped layers as they are, not as the average layer: Llama 4 Maverick's every:2
     * wraps the dense layers and leaves every expert layer (oomless trace, a Llama 4 config of
     * two dense and two expert layers, LoRA bf16 2 x 1024 every:2: the estimate was 8 % low) */
    if (oomi_est_unwrapped_mix(x, &left, &left_sp, &top_left, &top_sp)) {
        double ps, pd;
        per_token_kinds(x, &ps, &pd);
        *all +=
            b * ds * ((double)left_sp * ps + (double)(left - left_sp) * pd - (double)left * per);
        mix_top = b * ds *
                  ((double)top_sp * ps + (double)(top_left - top_sp) * pd - (double)top_left * per);
    }
    if (x->w->ckpt.op && c > 0) { /* what the policy keeps; the recomputation reuses it */
        double mm, kept = oomi_est_op_sac(x, &mm);
        *all += L * b * ds * kept;
        *one -= b * ds * kept;
    }
    /* ... but for a frozen base a Llama-style model's first layer input is the embedding output
     * made to require a gradient (enable_input_require_grads), a leaf that autograd holds anyway:
     * it stays where the first layer is wrapped (oomless trace, Llama-3.2-1B LoRA 2 x 256
     * full+offload). GPT-2 adds its position embeddings first, and that sum leaves. */
    if (c > 0 && inputs_offloaded(x) && x->frozen && m->block == OOMI_BLOCK_LLAMA &&
        !(x->w->ckpt.nth && x->w->ckpt.every > 1))
        *all += inputs / L;
    *all += doc_mask_kept(x);
    *at_recompute = *all;
    if (c > 0) {
        *one += lora_per_token(x) * b * ds / L + (inputs_offloaded(x) ? inputs / L : 0);
        oomi_est_ckpt_layers(x, &above);
        *at_recompute -= above / L * saved + mix_top;
    }
}
