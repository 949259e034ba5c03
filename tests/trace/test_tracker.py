"""The tracker on toy programs whose allocations are worked out by hand."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.environ.get("OOMLESS_SRC", "."), "bindings", "python"))

try:
    import torch
    from oomless.trace import Tracker, rounded
    from oomless.trace.emulate import CudaEmulation
except ImportError as exc:  # pragma: no cover - reported as a skip with the reason
    torch = None
    REASON = "torch is not installed for %s (%s); run `make venv`" % (sys.executable, exc)

KIB = 1024


@unittest.skipIf(torch is None, "" if torch else REASON)
class Toy(unittest.TestCase):
    def test_rounding_is_the_caching_allocators(self):
        self.assertEqual(rounded(1), 512)
        self.assertEqual(rounded(512), 512)
        self.assertEqual(rounded(513), 1024)
        self.assertEqual(rounded(4000), 4096)
        self.assertEqual(rounded(0), 0)

    def test_views_and_inplace_are_not_allocations(self):
        t = Tracker()
        with t:
            x = torch.empty(1024, device="meta")          # 4 KiB
            v = x.view(32, 32).t()[1:]                   # views: nothing new
            x.add_(1.0)                                  # in place: nothing new
            y = x * 2                                    # a new 4 KiB tensor
        self.assertEqual([a.nbytes for a in t.allocs], [4 * KIB, 4 * KIB])
        self.assertEqual(t.live_bytes(), 8 * KIB)
        del v, x
        self.assertEqual(t.live_bytes(), 4 * KIB)        # y alone
        del y
        self.assertEqual(t.live_bytes(), 0)

    def test_storage_resized_in_place_frees_and_allocates(self):
        # FSDP2 frees an unsharded parameter with untyped_storage().resize_(0) and allocates it
        # again with resize_(n): on a GPU that is memory returned and taken
        t = Tracker()
        with t:
            x = torch.empty(1 << 20, dtype=torch.bfloat16, device="meta")
            self.assertEqual(t.live_bytes(), 2 << 20)
            x.untyped_storage().resize_(0)
            t.resized(x.untyped_storage())
            self.assertEqual(t.live_bytes(), 0)
            x.untyped_storage().resize_(2 << 20)
            t.resized(x.untyped_storage())
            self.assertEqual(t.live_bytes(), 2 << 20)
        self.assertEqual(len(t.allocs), 2)

    def test_small_tensors_are_rounded(self):
        t = Tracker()
        with t:
            a = torch.empty(10, device="meta")           # 40 B -> 512
            b = torch.empty(1000, device="meta")         # 4000 B -> 4096
        self.assertEqual(t.live_bytes(), 512 + 4096)
        del a, b

    def test_autograd_keeps_saved_outputs_alive(self):
        t = Tracker()
        x = torch.empty(1024, device="meta", requires_grad=True)
        t.register([x])
        with t:
            t.set_phase("forward", 0)
            y = x.exp()            # exp saves its output for the backward: 4 KiB
            z = y.sum()            # 512 (a 4-byte scalar)
            del y                  # the graph still holds exp's output
            self.assertEqual(t.live_bytes(), 4 * KIB + 4 * KIB + 512)
            t.set_phase("backward", 0)
            z.backward()           # x.grad: 4 KiB; the saved output is freed with the graph
            t.mark_gradients([x])
            t.set_phase("idle", 0)
        del z
        self.assertEqual(t.live_bytes(), 4 * KIB + 4 * KIB)  # x and x.grad
        peak = t.peak()
        # the peak is in the backward, when exp's gradient (x.grad) is made while the saved output
        # and the loss still live: x 4 KiB (weights), exp out 4 KiB + z 512 (activations: made in
        # the forward, alive after it), the incoming gradient ones_like(z) 512 (temporaries),
        # x.grad 4 KiB (gradients)
        self.assertEqual(peak["phase"], "backward")
        self.assertEqual(peak["allocated_peak"], 13312)
        self.assertEqual(peak["breakdown"], {"weights": 4096, "gradients": 4096, "optimizer": 0,
                                             "activations": 4608, "logits": 0, "kv_cache": 0,
                                             "temporaries": 512})

    def test_checkpoint_drops_the_inside_of_a_block(self):
        import torch.utils.checkpoint as ckpt

        def block(x):
            # a = exp(x) is saved (exp keeps its output); a * 3 is not (a scalar product keeps
            # nothing) and dies; the final exp keeps its output, which is the block's output
            return (x.exp() * 3).exp()

        # x (4 KiB, registered) + y (4 KiB) + without checkpointing the saved exp(x) (4 KiB)
        for use_ckpt, expect in ((False, 12 * KIB), (True, 8 * KIB)):
            t = Tracker()
            x = torch.empty(1024, device="meta", requires_grad=True)
            t.register([x])
            with t:
                t.set_phase("forward", 0)
                y = ckpt.checkpoint(block, x, use_reentrant=False) if use_ckpt else block(x)
                self.assertEqual(t.live_bytes(), expect, "checkpoint=%s" % use_ckpt)
                t.set_phase("idle", 0)
            del y

    def test_adam_states_are_two_copies_of_the_parameter(self):
        p = torch.nn.Parameter(torch.empty(4096, device="meta"))   # 16 KiB
        opt = torch.optim.Adam([p], lr=0.1, foreach=True)
        t = Tracker()
        t.register([p])
        with t:
            t.set_phase("forward", 0)
            loss = (p * p).sum()
            t.set_phase("backward", 0)
            loss.backward()
            t.mark_gradients([p])
            del loss
            t.set_phase("optimizer", 0)
            opt.step()
            t.set_phase("idle", 0)
        states = sum(a.nbytes for a in t.allocs
                     if t.classify(a, t.clock) == "optimizer" and a.t_free is None)
        self.assertEqual(states, 2 * 16 * KIB)     # exp_avg and exp_avg_sq, fp32
        grads = sum(a.nbytes for a in t.allocs if a.kind == "gradients" and a.t_free is None)
        self.assertEqual(grads, 16 * KIB)


@unittest.skipIf(torch is None, "" if torch else REASON)
class Kernels(unittest.TestCase):
    """What CUDA's SDPA keeps for fewer key/value heads than query heads, worked out by hand."""

    def _forward_bytes(self, heads_kv, enable_gqa, b=2, h=8, s=64, d=64):
        t = Tracker()
        bf = torch.bfloat16
        q = torch.empty(b, h, s, d, device="meta", dtype=bf, requires_grad=True)
        k = torch.empty(b, heads_kv, s, d, device="meta", dtype=bf, requires_grad=True)
        v = torch.empty(b, heads_kv, s, d, device="meta", dtype=bf, requires_grad=True)
        t.register([q, k, v])
        with t, CudaEmulation():
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                   enable_gqa=enable_gqa)
            live = t.live_bytes()
        del out
        return live

    def test_flash_takes_grouped_heads_without_copies(self):
        # the inputs (q 2*8*64*64 bf16 = 128 KiB, k and v at 2 heads: 32 KiB each), out
        # (128 KiB), log-sum-exp (2*8*64 fp32 = 4 KiB) and flash's rng state (two 8-byte
        # tensors, 512 B each); k and v repeated to 8 heads would add 2 * 128 KiB
        self.assertEqual(self._forward_bytes(2, True),
                         128 * KIB + 2 * 32 * KIB + 128 * KIB + 4 * KIB + 2 * 512)

    def test_broadcast_heads_run_the_math_path(self):
        # heads that differ without enable_gqa (Falcon's multi-query): the math path keeps the
        # attention weights, 2*8*64*64 scores, far more than the fused kernels' output + lse
        inputs = 128 * KIB + 2 * 16 * KIB
        self.assertGreaterEqual(self._forward_bytes(1, False),
                                inputs + 128 * KIB + 2 * 8 * 64 * 64 * 2)

    def test_narrower_values_take_the_memory_efficient_kernel(self):
        # multi-head latent attention: 96-wide queries and keys, 64-wide values. Flash attention
        # wants one head size, so CUDA runs the memory-efficient kernel: the inputs (q and k
        # 2*8*64*96 bf16 = 192 KiB each, v 128 KiB), out of the values' width (128 KiB),
        # the fp32 log-sum-exp (4 KiB) and its rng seed and offset (512 B each); no attention
        # weights (the math path would add 2*8*64*64 scores)
        t = Tracker()
        bf = torch.bfloat16
        q, k = (torch.empty(2, 8, 64, 96, device="meta", dtype=bf, requires_grad=True)
                for _ in range(2))
        v = torch.empty(2, 8, 64, 64, device="meta", dtype=bf, requires_grad=True)
        t.register([q, k, v])
        with t, CudaEmulation():
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            live = t.live_bytes()
        self.assertEqual(tuple(out.shape), (2, 8, 64, 64))
        self.assertEqual(live, 2 * 192 * KIB + 128 * KIB + 128 * KIB + 4 * KIB + 2 * 512)

    def test_casts_of_parameter_views_are_weight_copies(self):
        t = Tracker()
        w = torch.nn.Parameter(torch.empty(64, 32, device="meta"))
        x = torch.empty(4, 32, device="meta")
        with t, CudaEmulation(amp_dtype=torch.bfloat16, tracker=t):
            y = x @ w.T            # Falcon's linear: the cast of the view is a weight copy
        tags = {a.tag for a in t.allocs if a.nbytes == rounded(64 * 32 * 2)}
        self.assertIn("weight_cast", tags)
        del y


if __name__ == "__main__":
    unittest.main()
