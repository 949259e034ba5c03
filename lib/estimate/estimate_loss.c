/* estimate_loss.c - the loss path: the logits and what the cross-entropy keeps, TRL's fused
 * LM head, a chunked loss (docs/estimate.md). */
#include "estimate/estimate_ctx.h"

#include <math.h>

/* tokens the loss scores: GRPO's completions only (logits_to_keep), every position otherwise
 * (the prompt/completion split of a DPO or KTO sample is the data's: all of --seq is counted) */
double oomi_est_loss_tokens(const ctx *x)
{
    double s = (double)x->w->k.seq_len;
    if (x->w->objective.kind == OOMI_OBJECTIVE_GRPO)
        s = x->w->objective.completion_len ? (double)x->w->objective.completion_len : floor(s / 2);
    return (double)x->w->k.batch * s;
}

/* one tile of TRL's fused LM head: 4096 tokens x 32768 vocabulary entries in the compute dtype
 * (TOKEN_CHUNK_SIZE and _CHUNKED_LOGPROB_CHUNK_SIZE, trl/kernels/chunked_logprob.py and
 * trl/trainer/utils.py add_fused_lm_head, trl 1.16.0) */
double oomi_est_fused_tile(const ctx *x)
{
    double t = oomi_est_loss_tokens(x), v = (double)x->m->vocab;
    return (t < 4096 ? t : 4096) * (v < 32768 ? v : 32768) * (amp(x) ? 2 : x->e);
}

/* TRL's fused LM head (DPO, IPO, KTO, GRPO): the forward keeps the fp32 log-normaliser and the
 * log-probs per token; its backward makes the fp32 gradient of the hidden states (and of the
 * head's weight where the head is trained) beside one tile (ChunkedLogProbFunction.backward) */
static void fused_head(const ctx *x, double *fwd, double *bwd)
{
    double t = oomi_est_loss_tokens(x);
    *fwd = 8.0 * t;
    *bwd = *fwd + 4.0 * t * (double)x->m->hidden + oomi_est_fused_tile(x);
    /* a trained head: its fp32 gradient accumulator, and its cast to the weight's dtype returned
     * beside it (grad_weight.to(weight.dtype); no copy where the weight is fp32) */
    if (!x->frozen)
        *bwd += (4.0 + (param_bytes(x) < 4 ? param_bytes(x) : 0)) * (double)x->m->vocab *
                (double)x->m->hidden;
}

/* Liger-Kernel's fused linear cross-entropy (--stack liger; ops/fused_linear_cross_entropy.py,
 * Liger-Kernel 0.8.2, docs/stacks.md): no full logits. The tokens go through the head in chunks of
 * next_pow2(ceil(BT / ceil(V / H))) rows (L66-70), each chunk's logits in the input's dtype
 * (L114) turned into their gradient in place; the hidden states' gradient is made in the forward
 * (L72) and kept for the backward (L431) with an fp32 loss per token (L86), the head's fp32
 * gradient where the head is trained (L77-81). The forward's end holds one chunk beside them; the
 * backward only scales the kept gradient in place. */
static bool liger_flce(const ctx *x)
{
    return x->w->stack == OOMI_STACK_LIGER && x->m->head == OOMI_HEAD_CAUSAL_LM && !x->fused;
}

static double liger_chunk_rows(const ctx *x, double tokens)
{
    double inc = ceil((double)x->m->vocab / (double)x->m->hidden), rows = ceil(tokens / inc), p2;
    for (p2 = 1; p2 < rows; p2 *= 2)
        ;
    return p2 < tokens ? p2 : tokens;
}

static void liger_head(const ctx *x, double tokens, double *fwd, double *bwd)
{
    double kept = tokens * ((double)x->m->hidden * x->e + 4.0);
    if (!x->frozen)
        kept += 4.0 * (double)x->m->vocab * (double)x->m->hidden;
    *bwd = kept;
    *fwd = kept + liger_chunk_rows(x, tokens) * (double)x->m->vocab * x->e;
}

/* torchtune's CEWithChunkedOutputLoss (torchtune/modules/loss/ce_chunked_output_loss.py, 0.6.1;
 * --stack torchtune --loss chunked): the model returns its logits in 8 pieces
 * (TransformerDecoder.chunked_output: self.output(chunk) for each of h.chunk(8, dim=1)), and the
 * loss upcasts one at a time (logits.float()) for cross_entropy, whose log-softmax keeps its fp32
 * output for the backward. The forward's end holds every piece's logits in the compute dtype,
 * every piece's fp32 log-softmax and the last piece's upcast (an fp32 model's .float() is the
 * tensor itself); the recipe deletes the logits before the backward (`del logits`). The
 * backward runs every piece's cross-entropy first (they are the newest nodes): the log-softmax
 * outputs not yet used, with one piece's gradient in fp32 and in the compute dtype; then each
 * piece's head, the gradients of the pieces not yet used beside it; where the head is trained,
 * its weight's gradient of one piece (mm) added to the sum so far (add): three of them at the
 * second piece. oomless trace --stack torchtune, 2 x 512: Llama 3.2 1B LoRA bf16, 6.5 bytes per
 * logit at the forward's end (0.795 GiB); Qwen2.5 0.5B full bf16, at the backward's peak 6 of
 * the 8 pieces' gradients and 3 x 272 MB of the head's (0.98 GiB) */
static bool tune_chunked(const ctx *x)
{
    return x->w->stack == OOMI_STACK_TORCHTUNE && x->w->k.loss == OOM_LOSS_CHUNKED &&
           x->m->head == OOMI_HEAD_CAUSAL_LM && !x->fused;
}

#define TUNE_PIECES 8.0 /* CEWithChunkedOutputLoss(num_output_chunks=8), the recipes' default */

static void tune_chunked_head(const ctx *x, double *fwd, double *bwd)
{
    double n = oomi_est_loss_tokens(x) * (double)x->m->vocab, piece = n / TUNE_PIECES;
    double head = 0, ce, first, second;
    double grad_bytes, state_bytes, master_bytes;
    if (!x->frozen) { /* a causal LM's head, trained */
        oomi_est_train_bytes(x, &grad_bytes, &state_bytes, &master_bytes);
        head = (double)x->m->vocab * (double)x->m->hidden * grad_bytes;
    }
    if (x->w->runtime.compile) {
        /* compile=True compiles the loss (training.compile_loss): Inductor fuses the upcast
         * into the cross-entropy, which keeps its 16-bit input and an fp32 statistic per row
         * (measured: torch.compile of cross_entropy(logits.float()) on bf16 logits saves 2
         * bytes a logit, eager 8, saved_tensors_hooks, torch 2.13 Inductor on the CPU); the
         * backward makes each piece's gradient in the compute dtype from them */
        *fwd = n * x->e;
        ce = n * x->e + piece * x->e;
    } else { /* an fp32 model's .float() is the tensor itself: no upcast */
        *fwd = n * (x->e + 4) + piece * (x->e < 4 ? 4 : 0);
        ce = n * 4 + piece * (4 + x->e);
    }
    first = (n - piece) * x->e + head;
    second = head > 0 ? (n - 2 * piece) * x->e + 3 * head : 0;
    *bwd = ce > first ? ce : first;
    if (second > *bwd)
        *bwd = second;
}

/* logits and the loss path: bytes live at the end of the forward and at the loss backward */
/* The rows of logits the loss holds at once: every target token (the decoder's for T5), one
 * chunk under --loss chunked; 0 where there are no vocabulary logits (classification and base
 * heads, reward models) */
static double logit_rows(const ctx *x)
{
    double tokens = (double)x->w->k.batch *
                    (double)(x->w->shape.decoder_seq ? x->w->shape.decoder_seq : x->w->k.seq_len);
    if (x->m->head == OOMI_HEAD_SEQ_CLS || x->m->head == OOMI_HEAD_BASE ||
        x->w->objective.kind == OOMI_OBJECTIVE_REWARD)
        return 0;
    if (x->w->k.loss == OOM_LOSS_CHUNKED && tokens > x->c->chunk_tokens)
        tokens = x->c->chunk_tokens;
    return tokens;
}

void oomi_est_logits(const ctx *x, double *fwd, double *bwd)
{
    int r = x->prec == OOM_PRECISION_FP32 ? 1 : 0;
    double n = logit_rows(x) * (double)x->m->vocab;
    *fwd = *bwd = 0;
    if (n <= 0)
        return;
    if (x->fused) {
        fused_head(x, fwd, bwd);
        return;
    }
    if (liger_flce(x)) { /* every token at once: liger ignores --loss chunked */
        liger_head(x, oomi_est_loss_tokens(x), fwd, bwd);
        return;
    }
    if (tune_chunked(x)) {
        tune_chunked_head(x, fwd, bwd);
        return;
    }
    if (x->w->objective.kind == OOMI_OBJECTIVE_SIMPO ||
        x->w->objective.kind == OOMI_OBJECTIVE_ORPO) {
        /* TRL's CPOTrainer (SimPO) and ORPOTrainer: the model's logits as they come (the compute
         * dtype, 16-bit under autocast), their log-probs by selective_log_softmax's kernel
         * (trl/kernels/logprob_entropy.py: fp32 values per row only, then the logits' gradient
         * beside them in the backward); ORPO's NLL of the chosen half adds a contiguous copy of
         * its logits and cross_entropy's log-softmax of it (in fp32 under autocast: 8 bytes per
         * chosen element then, traced). oomless trace --objective simpo|orpo: the logits at the
         * forward's end and twice them in the backward, ORPO's chosen half beside them */
        double le = amp(x) ? 2 : x->e;
        double nll =
            x->w->objective.kind == OOMI_OBJECTIVE_ORPO ? (le + (amp(x) ? 6 : le)) * n / 2 : 0;
        *fwd = le * n + nll;
        *bwd = 2 * le * n + nll;
    } else if (x->w->k.loss != OOM_LOSS_CHUNKED &&
               (x->m->head == OOMI_HEAD_MASKED_LM || x->m->head == OOMI_HEAD_SEQ2SEQ_LM)) {
        /* cross_entropy on the logits as they are: in the compute dtype, fp32 under autocast */
        double le = amp(x) ? 4 : x->e;
        *fwd = x->c->ce_fwd * le * n;
        *bwd = x->c->ce_bwd * le * n;
    } else {
        *fwd = x->c->logits_fwd[r] * n;
        *bwd = x->c->logits_bwd[r] * n;
    }
    if (x->m->logit_softcap && x->w->k.loss != OOM_LOSS_CHUNKED) {
        /* the tanh output, kept for its backward (a chunked loss caps inside its chunks) */
        *fwd += x->c->softcap_elems * x->e * n;
        *bwd += x->c->softcap_elems * x->e * n;
    }
}

/* One fp32 logits tensor of the loss (a chunk of it under --loss chunked): the largest blocks
 * a training step allocates and frees, whose segments the allocator keeps */
double oomi_est_logits_tensor(const ctx *x)
{
    if (x->fused) /* the fused head's largest blocks: the hidden gradient and a tile */
        return (4.0 * oomi_est_loss_tokens(x) * (double)x->m->hidden + oomi_est_fused_tile(x)) /
               4.0;
    if (liger_flce(x)) /* the kept hidden gradient and one chunk of logits */
        return (oomi_est_loss_tokens(x) * (double)x->m->hidden +
                liger_chunk_rows(x, oomi_est_loss_tokens(x)) * (double)x->m->vocab) *
               x->e / 4.0;
    return logit_rows(x) * (double)x->m->vocab * 4;
}
