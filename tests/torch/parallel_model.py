"""A small Llama-shaped decoder and its mixture-of-experts variant, written the way torchtitan
0.3.0 writes its decoders (torchtitan/models/llama3, models/common/moe.py and
token_dispatcher.py; our own code, not theirs), with the layouts torchtitan applies to them:

- tensor parallelism through DTensor's parallelize_module (ColwiseParallel on wq/wk/wv/w1/w3 and
  the output head, RowwiseParallel on wo/w2 and the vocabulary-split embedding), with or without
  SequenceParallel on the norms (apply_tp);
- pipeline stages: the layers of a stage, the embedding on the first, the final norm and head on
  the last (stage_model), for torch.distributed.pipelining's PipelineStage;
- expert parallelism: the routed experts split over the ranks, tokens sent to their experts' rank
  and back by an all-to-all, as torchtitan's AllToAllTokenDispatcher does (MoE).

The model is the parallel memory reference of `oomless estimate --engine torchtitan`
(test_parallel_memory.py, bench/parallel). Two kernels are replaced by what their CUDA versions
keep for the backward, because the reference stands for a GPU run and the CPU kernels keep other
tensors:
- RMSNorm: torch's fused CUDA kernel (aten::_fused_rms_norm, what nn.RMSNorm runs on a GPU) keeps
  the input and the fp32 reciprocal root mean square per token; the CPU runs the composite, which
  keeps two fp32 copies of the input (RMSNormFn keeps what the fused kernel keeps);
- flash attention: the CUDA kernel writes its output in (batch, seq, heads, head_dim) order, so
  the view the output projection takes is that same tensor; the CPU kernel's output is in
  (batch, heads, seq, head_dim) order and the reshape copies it (FlashAttnFn keeps the output in
  the CUDA order, with the same query, key, value and fp32 log-sum-exp the CPU kernel keeps).

Routing is forced balanced (token t goes to experts tK .. tK+K-1, modulo E, as torchtitan's
_debug_force_load_balance does) so that every expert rank receives the same tokens in every run:
what a rank holds then does not depend on the random weights.
"""
import torch
import torch.nn.functional as F
from torch import nn

_ROPE = {}


def rope_cache(seq, head_dim, dtype):
    """cos and sin of the rotary embedding for `seq` positions, made once (not activations)"""
    key = (seq, head_dim, dtype)
    if key not in _ROPE:
        inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
        ang = torch.cat([ang, ang], dim=-1)
        _ROPE[key] = (ang.cos().to(dtype)[:, None, :], ang.sin().to(dtype)[:, None, :])
    return _ROPE[key]


def rotate(x, cos, sin):
    """x (batch, seq, heads, head_dim) rotated; the products with the constant cos and sin keep
    nothing of x for the backward"""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class RMSNormFn(torch.autograd.Function):
    """RMSNorm keeping what torch's fused CUDA kernel keeps: the input and the fp32 reciprocal
    root mean square of each token (aten::_fused_rms_norm / _fused_rms_norm_backward)"""

    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rstd, weight)
        return (xf * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        x, rstd, weight = ctx.saved_tensors
        xhat = x.float() * rstd
        gf = grad.float()
        gw = (gf * xhat).sum(dim=tuple(range(grad.dim() - 1))).to(weight.dtype)
        gxhat = gf * weight.float()
        gx = rstd * (gxhat - xhat * (gxhat * xhat).mean(-1, keepdim=True))
        return gx.to(x.dtype), gw, None


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return RMSNormFn.apply(x, self.weight, self.eps)


class FlashAttnFn(torch.autograd.Function):
    """causal flash attention on (batch, seq, heads, head_dim) tensors, fewer key/value heads
    allowed; keeps the query, key, value, the output in that order and the fp32 log-sum-exp, as
    the CUDA flash kernel does"""

    @staticmethod
    def forward(ctx, q, k, v):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.0, True)
        out = out.transpose(1, 2).contiguous()
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad.transpose(1, 2).contiguous(), q.transpose(1, 2), k.transpose(1, 2),
            v.transpose(1, 2), out.transpose(1, 2), lse, 0.0, True)
        return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = h // heads
        self.wq = nn.Linear(h, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(h, kv * self.head_dim, bias=False)
        self.wv = nn.Linear(h, kv * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, h, bias=False)

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        cos, sin = rope_cache(s, self.head_dim, x.dtype)
        q = rotate(self.wq(x).view(b, s, -1, self.head_dim), cos, sin)
        k = rotate(self.wk(x).view(b, s, -1, self.head_dim), cos, sin)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        return self.wo(FlashAttnFn.apply(q, k, v).view(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    """Top-k routed experts (softmax scores renormalised over the k, as Mixtral), the router in
    fp32 as torchtitan's TokenChoiceTopKRouter runs it under autocast(float32), the experts as one
    grouped matmul per projection (GroupedExperts); with an `ep_group` the experts are split over
    its ranks and the tokens go to them and back by all-to-all (AllToAllTokenDispatcher)."""

    def __init__(self, cfg, ep_group=None):
        super().__init__()
        h, f = cfg["hidden_size"], cfg["intermediate_size"]
        self.experts, self.top_k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
        self.ep_group = ep_group
        self.ep = ep_group.size() if ep_group is not None else 1
        local = self.experts // self.ep
        self.gate = nn.Linear(h, self.experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(local, f, h))
        self.w2 = nn.Parameter(torch.empty(local, h, f))
        self.w3 = nn.Parameter(torch.empty(local, f, h))
        for w in (self.w1, self.w2, self.w3):
            nn.init.normal_(w, std=0.02)

    def _a2a(self, x, out_splits, in_splits):
        from torch.distributed._functional_collectives import all_to_all_single_autograd
        y = all_to_all_single_autograd(x, out_splits, in_splits, group=self.ep_group)
        return y.wait() if hasattr(y, "wait") else y

    def forward(self, x):
        b, s, h = x.shape
        t, k = b * s, self.top_k
        x_td = x.reshape(t, h)
        scores = F.softmax(F.linear(x_td.float(), self.gate.weight.float()), dim=-1)
        ids = (torch.arange(t * k, device=x.device) % self.experts).view(t, k)  # balanced
        top = scores.gather(-1, ids)
        top = top / top.sum(-1, keepdim=True)
        order = torch.argsort(ids.view(-1), stable=True)
        top_sorted = top.view(-1)[order]
        token_idx = order // k
        routed = x_td[token_idx]
        counts = torch.bincount(ids.view(-1), minlength=self.experts)
        if self.ep > 1:
            import torch.distributed as dist
            with torch.no_grad():
                recv = torch.empty_like(counts)
                dist.all_to_all_single(recv, counts, group=self.ep_group)
            local = self.experts // self.ep
            in_splits = counts.view(self.ep, local).sum(1).tolist()
            out_splits = recv.view(self.ep, local).sum(1).tolist()
            routed = self._a2a(routed, out_splits, in_splits)
            # rank-major (rank, local expert) segments to expert-major order
            seg = recv.view(self.ep, local).t().reshape(-1)
            starts = (recv.cumsum(0) - recv).view(self.ep, local).t().reshape(-1)
            seg_ids = torch.arange(seg.numel()).repeat_interleave(seg)
            perm = starts[seg_ids] + torch.arange(seg_ids.numel()) - (seg.cumsum(0) - seg)[seg_ids]
            routed = routed[perm]
            per_expert = recv.view(self.ep, local).sum(0)
        else:
            per_expert = counts
        offs = torch.cumsum(per_expert, 0, dtype=torch.int32)
        hid = F.silu(torch._grouped_mm(routed, self.w1.transpose(-2, -1), offs=offs))
        hid = hid * torch._grouped_mm(routed, self.w3.transpose(-2, -1), offs=offs)
        out = torch._grouped_mm(hid, self.w2.transpose(-2, -1), offs=offs)
        if self.ep > 1:
            back = out.new_empty(out.shape)
            back[perm] = out
            out = self._a2a(back, in_splits, out_splits)
        out = (out.float() * top_sorted.reshape(-1, 1)).to(x.dtype)
        idx = token_idx.reshape(-1, 1).expand(-1, h)
        return torch.zeros_like(x_td).scatter_add(0, idx, out).view(b, s, h)


class Block(nn.Module):
    def __init__(self, cfg, ep_group=None):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        self.attention_norm = RMSNorm(h, eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(h, eps)
        if cfg.get("num_local_experts"):
            self.feed_forward = MoE(cfg, ep_group)
        else:
            self.feed_forward = FeedForward(h, cfg["intermediate_size"])

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Decoder(nn.Module):
    """embedding, blocks (a dict keyed by the layer's index, as torchtitan keeps them so that a
    pipeline stage keeps its layers' names), final norm, output head; a stage's model has only
    its own parts, the others None"""

    def __init__(self, cfg, ep_group=None):
        super().__init__()
        h = cfg["hidden_size"]
        self.tok_embeddings = nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleDict(
            {str(i): Block(cfg, ep_group) for i in range(cfg["num_hidden_layers"])})
        self.norm = RMSNorm(h, cfg.get("rms_norm_eps", 1e-6))
        self.output = nn.Linear(h, cfg["vocab_size"], bias=False)

    def forward(self, x):
        if self.tok_embeddings is not None:
            x = self.tok_embeddings(x)
        for layer in self.layers.values():
            x = layer(x)
        if self.norm is not None:
            x = self.norm(x)
        if self.output is not None:
            x = self.output(x)
        return x


def stage_model(model, layers, first, last):
    """keep `layers` (indices) of the model, the embedding when `first`, the norm and head when
    `last` (torchtitan's pipeline_module_split does the same by deleting the rest)"""
    keep = {str(i) for i in layers}
    for name in list(model.layers.keys()):
        if name not in keep:
            del model.layers[name]
    if not first:
        model.tok_embeddings = None
    if not last:
        model.norm = model.output = None
    return model


def loss_fn(pred, labels):
    """torchtitan's cross_entropy_loss: the logits upcast to fp32, summed over the tokens and
    divided by their count"""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def apply_tp(model, mesh, sp):
    """Tensor parallelism as torchtitan's apply_tp lays it out, over `mesh`; sp: the norms'
    activations split along the sequence (SequenceParallel) and the block outputs reduce-scattered
    instead of all-reduced"""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
    seq = Shard(1) if sp else Replicate()
    root = {"output": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1),
                                      use_local_output=False)}
    if model.tok_embeddings is not None:
        model.tok_embeddings = VocabParallelEmbedding(model.tok_embeddings, mesh, sp)
    if sp:
        root["norm"] = SequenceParallel()
    parallelize_module(model, mesh, {k: v for k, v in root.items()
                                     if getattr(model, k.split(".")[0]) is not None})
    for layer in model.layers.values():
        plan = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(),
                "attention.wo": RowwiseParallel(output_layouts=seq),
                "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(output_layouts=seq)}
        if sp:
            plan.update({
                "attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel(),
                "attention": PrepareModuleInput(input_layouts=(Shard(1),),
                                                desired_input_layouts=(Replicate(),)),
                "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                                   desired_input_layouts=(Replicate(),))})
        parallelize_module(layer, mesh, plan)
        if not sp:
            replicate(layer.attention_norm, mesh)
            replicate(layer.ffn_norm, mesh)
    if not sp and model.norm is not None:
        replicate(model.norm, mesh)
    return model


class VocabParallelEmbedding(nn.Module):
    """The embedding split along the vocabulary (Megatron's VocabParallelEmbedding; torchtitan
    0.3.0 runs it locally the same way, decoder_sharding.py): each rank looks up the tokens of
    its rows, zeroes the others and the partial sums are all-reduced, or reduce-scattered along
    the sequence under sequence parallelism. Its weight gradient is the rank's rows only (DTensor's
    RowwiseParallel would make a replicated gradient of the whole table)."""

    def __init__(self, emb, mesh, sp):
        super().__init__()
        from torch.distributed.tensor import Shard, distribute_tensor
        self.mesh, self.sp = mesh, sp
        self.weight = nn.Parameter(distribute_tensor(emb.weight.detach(), mesh, [Shard(0)]))

    def forward(self, ids):
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
        w = self.weight.to_local()
        rows = w.shape[0]
        lo = self.mesh.get_local_rank() * rows
        outside = (ids < lo) | (ids >= lo + rows)
        out = F.embedding((ids - lo).masked_fill(outside, 0), w).masked_fill(outside[..., None], 0)
        out = DTensor.from_local(out, self.mesh, [Partial()], run_check=False)
        return out.redistribute(self.mesh, [Shard(1) if self.sp else Replicate()]).to_local()


def replicate(module, mesh):
    """the module's parameters as replicated DTensors, its input and output local tensors, so that
    one foreach optimizer step takes every parameter of a tensor-parallel model (torchtitan's
    norms without sequence parallelism)"""
    from torch.distributed.tensor import DTensor, Replicate, distribute_module

    def inputs(mod, args, mesh_):
        return tuple(DTensor.from_local(a, mesh_, [Replicate()], run_check=False) for a in args)

    distribute_module(module, mesh, input_fn=inputs,
                      output_fn=lambda mod, out, mesh_: out.to_local())
