"""oomless.hf and oomless.lightning map plan fields to the frameworks' keywords."""
import unittest

import oomless.hf
import oomless.lightning

PLAN = {"plan": {"batch_size": 4, "grad_accum": 8, "effective_batch": 32, "seq_len": 2048,
                 "checkpointing": "full", "precision": "amp-bf16", "optimizer": "adamw-8bit",
                 "sharding": "none", "offload": "none", "gpus": 1}}


class HelpersTest(unittest.TestCase):
    def test_training_arguments(self):
        self.assertEqual(oomless.hf.training_arguments(PLAN), {
            "per_device_train_batch_size": 4, "gradient_accumulation_steps": 8, "bf16": True,
            "fp16": False, "gradient_checkpointing": True, "optim": "adamw_bnb_8bit"})
        plain = dict(PLAN["plan"], precision="fp32", checkpointing="none", optimizer="sgd")
        args = oomless.hf.training_arguments(plain)
        self.assertFalse(args["bf16"] or args["fp16"] or args["gradient_checkpointing"])
        self.assertEqual(args["optim"], "sgd")
        # bitsandbytes' paged optimizers by transformers' names
        for ours, theirs in (("paged-adamw", "paged_adamw_32bit"),
                             ("paged-adamw-8bit", "paged_adamw_8bit")):
            paged = dict(PLAN["plan"], optimizer=ours)
            self.assertEqual(oomless.hf.training_arguments(paged)["optim"], theirs)
        self.assertNotIn("use_liger_kernel", args)
        chunked = dict(PLAN["plan"], loss="chunked", attention="flash")
        self.assertTrue(oomless.hf.training_arguments(chunked)["use_liger_kernel"])
        with self.assertRaises(KeyError):
            oomless.hf.training_arguments({"memory": {}})

    def test_checkpointing_variants(self):
        # every:N and +offload are transformers' activation_checkpointing_kwargs; nth:N and
        # op-sac (torchtitan's) are refused
        every = oomless.hf.training_arguments(dict(PLAN["plan"], checkpointing="every:2"))
        self.assertEqual(every["gradient_checkpointing_kwargs"], {"every_n_layers": 2})
        self.assertTrue(every["gradient_checkpointing"])
        off = oomless.hf.training_arguments(dict(PLAN["plan"], checkpointing="full+offload"))
        self.assertEqual(off["gradient_checkpointing_kwargs"],
                         {"every_n_layers": 1, "offload": True})
        self.assertNotIn("gradient_checkpointing_kwargs", oomless.hf.training_arguments(PLAN))
        for ck in ("nth:2", "op-sac"):
            with self.assertRaises(ValueError):
                oomless.hf.training_arguments(dict(PLAN["plan"], checkpointing=ck))

    def test_exact_precision(self):
        # the framework name "bf16" of plan.precision is both amp-bf16 and bf16: the exact one
        # decides; a measured line ("auto") leaves the job's precision alone
        expected = {"amp-bf16": ("bf16-mixed", True, False), "bf16": ("bf16-true", True, False),
                    "amp-fp16": ("16-mixed", False, True), "fp16": ("16-true", False, True),
                    "fp32": ("32-true", False, False), "4bit": ("bf16-mixed", True, False),
                    "int8": ("bf16-mixed", True, False)}
        for exact, (lightning, bf16, fp16) in expected.items():
            with self.subTest(exact=exact):
                doc = {"plan": dict(PLAN["plan"], precision="bf16", exact_precision=exact)}
                self.assertEqual(oomless.lightning.precision(doc), lightning)
                args = oomless.hf.training_arguments(doc)
                self.assertEqual((args["bf16"], args["fp16"]), (bf16, fp16))
        # a document of an older library: estimate_precision
        old = {"plan": dict(PLAN["plan"], precision="bf16"), "estimate_precision": "bf16"}
        self.assertEqual(oomless.lightning.precision(old), "bf16-true")
        auto = {"plan": dict(PLAN["plan"], precision="auto", exact_precision="auto")}
        self.assertIsNone(oomless.lightning.precision(auto))
        self.assertNotIn("bf16", oomless.hf.training_arguments(auto))
        with self.assertRaises(ValueError):
            oomless.lightning.precision({"plan": dict(PLAN["plan"], exact_precision="fp8")})

    def test_lightning(self):
        self.assertEqual(oomless.lightning.trainer_kwargs(PLAN),
                         {"accumulate_grad_batches": 8, "precision": "bf16-mixed"})
        self.assertEqual(oomless.lightning.dataloader_kwargs(PLAN), {"batch_size": 4})
        multi = {"plan": dict(PLAN["plan"], gpus=8, sharding="zero3", offload="optimizer",
                              precision="fp16", exact_precision="amp-fp16"),
                 "deepspeed": {"zero_optimization": {"stage": 3, "offload_optimizer": {}}}}
        self.assertEqual(oomless.lightning.strategy_settings(multi),
                         ("DeepSpeedStrategy", {"stage": 3, "offload_optimizer": True,
                                                "offload_parameters": False,
                                                "logging_batch_size_per_gpu": 4}))
        self.assertEqual(oomless.lightning.strategy_settings(multi, backend="fsdp"),
                         ("FSDPStrategy", {"sharding_strategy": "FULL_SHARD",
                                           "cpu_offload": True}))
        # the DeepSpeed config is in the whole document only
        with self.assertRaises(KeyError):
            oomless.lightning.strategy_settings(multi["plan"])
        self.assertEqual(oomless.hf.training_arguments(multi)["deepspeed"], multi["deepspeed"])
        self.assertEqual(oomless.hf.training_arguments(multi, backend="fsdp")["fsdp_config"],
                         {"version": 2, "reshard_after_forward": True, "cpu_offload": True,
                          "activation_checkpointing": True})
        ddp = dict(PLAN["plan"], gpus=2)
        self.assertEqual(oomless.lightning.trainer_kwargs(ddp)["strategy"], "ddp")


if __name__ == "__main__":
    unittest.main()
