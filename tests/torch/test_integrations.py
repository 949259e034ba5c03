"""oomless.hf and oomless.lightning against the real frameworks (pinned in
bindings/python/requirements-test.txt): a transformers.TrainingArguments and a lightning.Trainer
are built on the CPU from the helpers' output for plans the library makes, and the memory-log
callbacks run inside real training loops with the measurement injected.

What the CPU cannot build is tested as far as it goes, and each such test says so: DeepSpeed
needs the deepspeed package (not pinned: it compiles CUDA kernels), so the DeepSpeed settings are
checked against DeepSpeedStrategy's signature and the DeepSpeed config reaches
TrainingArguments, which then asks for the package; Lightning's FSDPStrategy is built, but a
Trainer with it needs a GPU.
"""
import inspect
import os
import sys
import tempfile
import unittest
import warnings
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import missing  # noqa: E402

REASON = missing("transformers") or missing("lightning")
if not REASON:
    import lightning
    import torch
    import transformers
    from lightning.pytorch import strategies
    from lightning.pytorch.plugins.precision import HalfPrecision, MixedPrecision
    from torch.distributed.fsdp import ShardingStrategy

    import oomless
    import oomless.hf
    import oomless.lightning


def plans():
    """Plans of the library, one per precision family and sharding case."""
    return {
        "amp-bf16": oomless.plan(model="gpt2", seq=512, gpu="a100-80gb",
                                 target_effective_batch=32),
        "bf16": oomless.plan(model="llama-3.1-8b", method="lora", seq=2048, gpu="a100-80gb",
                             target_effective_batch=32),
        "amp-fp16": oomless.plan(model="gpt2", seq=512, gpu="rtx-3090", precision="amp-fp16",
                                 target_effective_batch=32),
        "fp32": oomless.plan(model="gpt2", seq=512, gpu="rtx-3090", precision="fp32",
                             target_effective_batch=32),
        "zero3-offload": oomless.plan(model="llama-2-7b", seq=2048, gpu="rtx-4090",
                                      allow="checkpointing,offload,precision",
                                      target_effective_batch=32),
        "zero2-8gpu": oomless.plan(model="llama-2-7b", seq=2048, gpus=8, gpu="a100-80gb",
                                   target_effective_batch=64),
    }


def quiet_trainer(**kwargs):
    return lightning.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, **kwargs)


class WithPlans(unittest.TestCase):
    """A test class with the plans of plans() made once."""

    @classmethod
    def setUpClass(cls):
        cls.plans = plans()


@unittest.skipIf(REASON, REASON or "")
class LightningTest(WithPlans):
    def test_the_plans_cover_the_cases(self):
        exact = {k: d["plan"]["exact_precision"] for k, d in self.plans.items()}
        self.assertEqual(exact["amp-bf16"], "amp-bf16")
        self.assertEqual(exact["bf16"], "bf16")
        self.assertEqual(exact["amp-fp16"], "amp-fp16")
        self.assertEqual(exact["fp32"], "fp32")
        self.assertEqual(self.plans["zero3-offload"]["plan"]["sharding"], "zero3")
        self.assertEqual(self.plans["zero3-offload"]["plan"]["offload"], "optimizer+params")
        self.assertEqual(self.plans["zero2-8gpu"]["plan"]["sharding"], "zero2")
        self.assertEqual(self.plans["zero2-8gpu"]["plan"]["gpus"], 8)

    def test_precision_reaches_a_real_trainer(self):
        expected = {"amp-bf16": ("bf16-mixed", MixedPrecision),
                    "bf16": ("bf16-true", HalfPrecision),
                    "amp-fp16": ("16-mixed", MixedPrecision),
                    "fp32": ("32-true", None)}
        for name, (precision, plugin) in expected.items():
            with self.subTest(plan=name):
                doc = self.plans[name]
                kwargs = oomless.lightning.trainer_kwargs(doc)
                self.assertNotIn("strategy", kwargs)
                self.assertEqual(kwargs["precision"], precision)
                trainer = quiet_trainer(**kwargs)
                # CPU: Lightning runs "16-mixed" as bf16 autocast (CPU autocast is bf16)
                self.assertEqual(trainer.precision,
                                 "bf16-mixed" if precision == "16-mixed" else precision)
                if plugin is not None:
                    self.assertIsInstance(trainer.precision_plugin, plugin)
                else:
                    self.assertNotIsInstance(trainer.precision_plugin,
                                             (HalfPrecision, MixedPrecision))
                self.assertEqual(trainer.accumulate_grad_batches, doc["plan"]["grad_accum"])
                self.assertEqual(oomless.lightning.dataloader_kwargs(doc),
                                 {"batch_size": doc["plan"]["batch_size"]})

    def test_pure_bf16_converts_the_weights_and_amp_does_not(self):
        # the difference exact_precision exists for: bf16-true holds bf16 weights
        for name, dtype in (("bf16", torch.bfloat16), ("amp-bf16", torch.float32)):
            with self.subTest(plan=name):
                trainer = quiet_trainer(**oomless.lightning.trainer_kwargs(self.plans[name]))
                module = trainer.precision_plugin.convert_module(torch.nn.Linear(2, 2))
                self.assertEqual(module.weight.dtype, dtype)

    def test_deepspeed_settings(self):
        # CPU: DeepSpeedStrategy needs the deepspeed package, which is not pinned; the settings
        # are checked against its signature, and building it fails only for the package
        doc = self.plans["zero3-offload"]
        name, settings = oomless.lightning.strategy_settings(doc)
        self.assertEqual(name, "DeepSpeedStrategy")
        self.assertEqual(settings, {"stage": 3, "offload_optimizer": True,
                                    "offload_parameters": True,
                                    "logging_batch_size_per_gpu": doc["plan"]["batch_size"]})
        params = inspect.signature(strategies.DeepSpeedStrategy.__init__).parameters
        self.assertLessEqual(set(settings), set(params))
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            with self.assertRaisesRegex(Exception, "DeepSpeed"):
                oomless.lightning.trainer_kwargs(doc)
        else:
            kwargs = oomless.lightning.trainer_kwargs(doc)
            self.assertIsInstance(kwargs["strategy"], strategies.DeepSpeedStrategy)
        name, settings = oomless.lightning.strategy_settings(self.plans["zero2-8gpu"])
        self.assertEqual((settings["stage"], settings["offload_optimizer"]), (2, False))

    def test_fsdp_strategy(self):
        # CPU: the FSDPStrategy object is built; a Trainer with it needs a GPU accelerator
        cases = {"zero3-offload": (ShardingStrategy.FULL_SHARD, True),
                 "zero2-8gpu": (ShardingStrategy.SHARD_GRAD_OP, False)}
        for name, (sharding, offload) in cases.items():
            with self.subTest(plan=name):
                kwargs = oomless.lightning.trainer_kwargs(self.plans[name], backend="fsdp")
                strategy = kwargs.pop("strategy")
                self.assertIsInstance(strategy, strategies.FSDPStrategy)
                self.assertEqual(strategy.sharding_strategy, sharding)
                self.assertEqual(bool(strategy.cpu_offload and strategy.cpu_offload.offload_params),
                                 offload)
                with self.assertRaisesRegex(ValueError, "GPU"):
                    quiet_trainer(strategy=strategy, **kwargs)
        eight = oomless.lightning.trainer_kwargs(self.plans["zero2-8gpu"], backend="fsdp")
        self.assertEqual(eight["devices"], 8)
        with self.assertRaises(ValueError):
            oomless.lightning.trainer_kwargs(self.plans["zero2-8gpu"], backend="megatron")

    def test_plain_multi_gpu_is_ddp(self):
        doc = oomless.plan(model="gpt2", seq=512, gpus=2, gpu="a100-80gb",
                           target_effective_batch=32)
        self.assertEqual(doc["plan"]["sharding"], "none")
        kwargs = oomless.lightning.trainer_kwargs(doc)
        self.assertEqual((kwargs["strategy"], kwargs["devices"]), ("ddp", 2))


@unittest.skipIf(REASON, REASON or "")
class HfTest(WithPlans):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def args(self, kwargs):
        return transformers.TrainingArguments(output_dir=self.tmp.name, use_cpu=True,
                                              report_to="none", **kwargs)

    def test_real_training_arguments(self):
        expected = {"amp-bf16": (True, False), "bf16": (True, False), "fp32": (False, False),
                    "amp-fp16": (False, True)}
        for name, (bf16, fp16) in expected.items():
            with self.subTest(plan=name):
                doc = self.plans[name]
                kwargs = oomless.hf.training_arguments(doc)
                self.assertNotIn("deepspeed", kwargs)
                # the keys the installed transformers reads, none of its deprecated ones
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    args = self.args(kwargs)
                self.assertEqual([str(w.message) for w in caught
                                  if "deprecated" in str(w.message)], [])
                self.assertEqual((args.bf16, args.fp16), (bf16, fp16))
                self.assertEqual(args.per_device_train_batch_size, doc["plan"]["batch_size"])
                self.assertEqual(args.gradient_accumulation_steps, doc["plan"]["grad_accum"])
                self.assertEqual(args.activation_checkpointing,
                                 doc["plan"]["checkpointing"] != "none")
                self.assertEqual(str(args.optim.value), "adamw_torch")

    def test_checkpointing_plan(self):
        doc = oomless.plan(model="llama-3.1-8b", seq=4096, gpu="a100-80gb", method="lora",
                           checkpointing="full", target_effective_batch=16)
        self.assertTrue(self.args(oomless.hf.training_arguments(doc)).activation_checkpointing)

    def test_deepspeed_config_reaches_training_arguments(self):
        # CPU: with the config TrainingArguments sets up DeepSpeed, which needs the package
        doc = self.plans["zero3-offload"]
        kwargs = oomless.hf.training_arguments(doc)
        self.assertEqual(kwargs["deepspeed"], doc["deepspeed"])
        self.assertEqual(kwargs["deepspeed"]["zero_optimization"]["stage"], 3)
        self.assertEqual(kwargs["deepspeed"]["train_micro_batch_size_per_gpu"],
                         kwargs["per_device_train_batch_size"])
        self.assertEqual(kwargs["deepspeed"]["gradient_accumulation_steps"],
                         kwargs["gradient_accumulation_steps"])
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            with self.assertRaisesRegex(Exception, "deepspeed"):
                self.args(kwargs)
        else:
            self.assertEqual(self.args(kwargs).deepspeed, doc["deepspeed"])
        rest = dict(kwargs)
        del rest["deepspeed"]
        self.assertTrue(self.args(rest).bf16)

    def test_fsdp_reaches_training_arguments(self):
        cases = {"zero3-offload": (True, True), "zero2-8gpu": (False, False)}
        for name, (reshard, offload) in cases.items():
            with self.subTest(plan=name):
                kwargs = oomless.hf.training_arguments(self.plans[name], backend="fsdp")
                self.assertNotIn("deepspeed", kwargs)
                args = self.args(kwargs)
                plugin = args.fsdp_plugin_args
                self.assertEqual(plugin["fsdp_version"], 2)
                self.assertEqual(plugin["reshard_after_forward"], reshard)
                self.assertEqual(plugin.get("cpu_offload", False), offload)
                self.assertEqual(plugin.get("activation_checkpointing", False),
                                 self.plans[name]["plan"]["checkpointing"] != "none")
                self.assertFalse(args.activation_checkpointing)


class FakeMemory:
    """The measurement hook: peaks that grow by `step` bytes per call."""

    def __init__(self, start, step):
        self.value, self.step, self.calls = start, step, 0

    def __call__(self):
        self.calls += 1
        self.value += self.step
        return self.value, self.value + (64 << 20)


# an estimate document with a budget: 1 GiB usable, 100 MiB outside the allocator
DOC = {"memory": {"allocated_peak": 600 << 20, "reserved_peak": 700 << 20,
                  "device_peak": 800 << 20},
       "budget": {"usable_bytes": 1 << 30}}


if not REASON:
    class TinyModule(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class TinyHfModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.layer(x), labels)}


def data(n):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)


@unittest.skipIf(REASON, REASON or "")
class CallbackTest(unittest.TestCase):
    def check(self, records, memory, steps, every):
        self.assertEqual([r["step"] for r in records], list(range(every, steps + 1, every)))
        self.assertEqual(memory.calls, len(records))
        first = records[0]
        self.assertEqual(first["estimate_allocated_peak"], 600 << 20)
        self.assertEqual(first["reserved_peak"] - first["allocated_peak"], 64 << 20)
        # device use = measured reserved + the estimate's part outside the allocator (100 MiB)
        self.assertEqual(first["device_peak"], first["reserved_peak"] + (100 << 20))
        self.assertAlmostEqual(first["budget_used"], first["device_peak"] / (1 << 30))

    def warned(self, caught):
        return [str(w.message) for w in caught if issubclass(w.category, oomless.MemoryWarning)]

    def test_lightning_callback_in_a_real_fit(self):
        # 8 optimizer steps of 2 micro-batches; the allocated peak grows 50 MiB per measurement
        # from 700 MiB, the device use (reserved + 100 MiB) is 914 MiB at step 1 (89% of 1 GiB),
        # 964 at step 2 (94%: warned), 1014, then 1064 at step 4 (past the budget: warned)
        memory = FakeMemory(700 << 20, 50 << 20)
        callback = oomless.lightning.MemoryLogCallback(DOC, every=1, memory=memory)
        x, y = data(32)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=2)
        trainer = quiet_trainer(max_steps=8, accumulate_grad_batches=2, callbacks=[callback])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(TinyModule(), loader)
        self.check(callback.records, memory, 8, 1)
        messages = self.warned(caught)
        self.assertEqual(len(messages), 2, messages)
        self.assertIn("at step 2 ", messages[0])
        self.assertIn("close to it", messages[0])
        self.assertIn("at step 4 ", messages[1])
        self.assertIn("past it", messages[1])

    def test_hf_callback_in_a_real_trainer(self):
        memory = FakeMemory(100 << 20, 1 << 20)
        logged = []
        callback = oomless.hf.MemoryLogCallback(DOC, every=3, memory=memory, log=logged.append)
        x, y = data(40)
        dataset = [{"x": x[i], "labels": y[i]} for i in range(len(x))]
        with tempfile.TemporaryDirectory() as out:
            args = transformers.TrainingArguments(output_dir=out, use_cpu=True, report_to="none",
                                                  max_steps=10, per_device_train_batch_size=2,
                                                  save_strategy="no", logging_strategy="no")
            trainer = transformers.Trainer(model=TinyHfModel(), args=args, train_dataset=dataset,
                                           callbacks=[callback])
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trainer.train()
        self.check(callback.records, memory, 10, 3)
        self.assertEqual(logged, callback.records)
        self.assertEqual(self.warned(caught), [])  # far under the budget

    def test_default_measurement_is_torch_cuda(self):
        log = oomless.MemoryLog(DOC, every=1)
        with mock.patch("torch.cuda.max_memory_allocated", return_value=123), \
                mock.patch("torch.cuda.max_memory_reserved", return_value=456):
            record = log.step(1)
        self.assertEqual((record["allocated_peak"], record["reserved_peak"]), (123, 456))


if __name__ == "__main__":
    unittest.main()
