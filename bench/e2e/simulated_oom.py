"""The out-of-memory error a CPU dry run of inloop_cuda.py and hf_cuda.py raises in place of the
GPU's: a forward pre-hook that raises torch.OutOfMemoryError (labelled simulated) when a batch
has more than `rows` rows of at least `tokens` tokens. A CPU has no allocator cap to hit."""
import torch


def raise_above(model, rows, tokens):
    def hook(_module, _args, kwargs):
        ids = kwargs["input_ids"]
        if ids.shape[0] > rows and ids.shape[1] >= tokens:
            raise torch.OutOfMemoryError("simulated: micro-batch %d of %d tokens"
                                         % tuple(ids.shape))
    model.register_forward_pre_hook(hook, with_kwargs=True)
