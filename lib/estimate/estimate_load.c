/* estimate_load.c - loading the weights, a phase of its own (docs/estimate.md, "Loading"): the
 * weights resident when the last one has arrived, and the largest copy beside them while one is
 * put on the GPU, by the code that loads them. */
#include "estimate/estimate_ctx.h"

/* torchao 0.15's NF4Tensor.from_tensor on a bf16 weight of `n` elements, beyond its input
 * (torchao/dtypes/nf4tensor.py): get_block_absmax takes the absolute value of the whole weight
 * (2n, freed after its max); convert_to_norm_float_weight keeps the scaled blocks (2n) and the
 * 8-bit codes (n), and finds the nearest of the 16 levels a chunk of 2^20 elements at a time
 * (CHUNK_SIZE): the chunk's difference to the levels and its absolute value, 16 bf16 an element
 * each (64 MiB); last, two halves of the codes are shifted and or-ed into the packed codes (n/2
 * each). The meta-device tracer's count of from_tensor, input aside, is 0.3 to 1.1 % above this
 * on 2048 x 2048, 8192 x 2048 and 14336 x 4096 (the block maxima's indices and the scalers it
 * leaves out; tests/trace/test_load_torchao.py) */
double oomi_est_torchao_nf4(double n)
{
    double chunk = 2.0 * 16 * 2 * 1048576, absmax = 2 * n, nearest = 3 * n + chunk;
    double pack = 4 * n, work = absmax > nearest ? absmax : nearest;
    return work > pack ? work : pack;
}

int oomi_est_load(const ctx *x, const phase_bytes *step, phase_bytes *out, const char **how)
{
    const oomi_model *m = x->m;
    double tp = x->w->parallel.tp > 1 ? (double)x->w->parallel.tp : 1, n, head, t = 0;

    *how = "each weight copied into its parameter, nothing beside it";
    if (x->nf4 && x->w->stack == OOMI_STACK_TORCHTUNE) {
        /* torchtune builds the model on the GPU (LoRALinear: nn.Linear in bf16, then to_nf4) and
         * then loads the checkpoint with load_state_dict: torchao's copy_ into an NF4Tensor
         * brings the bf16 tensor from the host (copy_in.to(original.device), 2n) and quantizes
         * it there (NF4Tensor.from_tensor) beside the weights, the old codes included, until its
         * new codes are copied over them */
        n = oomi_est_max_linear(m);
        t = 2 * n + oomi_est_torchao_nf4(n);
        *how = "torchao quantizes each linear to NF4 on the GPU from its bf16 copy";
    } else if (x->nf4 && oomi_bnb_linears(x->w) && x->w->quant.quantizer == OOMI_QUANTIZER_FABRIC) {
        /* Lightning Fabric loads the checkpoint into layers it has quantized already: its
         * _quantize_on_load_hook quantizes each incoming weight from an fp16 copy on the GPU
         * (_Linear4bit.quantize: weight.contiguous().to(device, torch.half)), the head too; its
         * new codes replace the old ones (_replace_param) */
        n = oomi_est_max_linear(m), head = oomi_est_quantized_head(x);
        n = head > n ? head : n;
        t = 2 * n + 0.5 * n;
        *how = "Lightning Fabric quantizes each linear on the GPU from an fp16 copy";
    } else if (x->quant && oomi_bnb_base(x->w) && m->quant_bytes <= 0) {
        /* transformers quantizes as it loads, one tensor at a time (on-the-fly quantization
         * loads synchronously, core_model_loading.py): the 16-bit checkpoint tensor comes to the
         * GPU and bitsandbytes quantizes it there (Bnb4bitQuantize: Params4bit(value).to(device),
         * whose _quantize calls quantize_4bit on it; 8-bit: Int8Params.cuda, data.half()) */
        n = oomi_est_max_linear(m);
        t = 2 * n;
        *how = "bitsandbytes quantizes each linear on the GPU from its 16-bit copy";
    }
    *out = (phase_bytes){.weights = step->weights, .temps = t / tp};
    return OOM_OK;
}
