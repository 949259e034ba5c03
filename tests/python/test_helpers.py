"""oomless.hf and oomless.lightning map plan fields to the frameworks' keywords."""
import unittest

import oomless
import oomless._vocab
import oomless.hf
import oomless.lightning

PLAN = {"plan": {"batch_size": 4, "grad_accum": 8, "effective_batch": 32, "seq_len": 2048,
                 "checkpointing": "full", "precision": "amp-bf16", "optimizer": "adamw-8bit",
                 "sharding": "none", "offload": "none", "gpus": 1}}


class HelpersTest(unittest.TestCase):
    def test_training_arguments(self):
        self.assertEqual(oomless.hf.training_arguments(PLAN, transformers_version="5.23.0"), {
            "per_device_train_batch_size": 4, "gradient_accumulation_steps": 8, "bf16": True,
            "fp16": False, "activation_checkpointing": True, "optim": "adamw_bnb_8bit"})
        plain = dict(PLAN["plan"], precision="fp32", checkpointing="none", optimizer="sgd")
        args = oomless.hf.training_arguments(plain, transformers_version="5.23.0")
        self.assertFalse(args["bf16"] or args["fp16"] or args["activation_checkpointing"])
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

    def test_checkpointing_key_by_transformers_version(self):
        # 5.23 renamed the switch (the old name a deprecated alias); before, the old one
        for version, key in (("5.23.0", "activation_checkpointing"), ("6.0", "activation_checkpointing"),
                             ("5.22.1", "gradient_checkpointing"), ("4.57.1", "gradient_checkpointing")):
            with self.subTest(version=version):
                args = oomless.hf.training_arguments(PLAN, transformers_version=version)
                self.assertIs(args[key], True)
                self.assertEqual(len([k for k in args if k.endswith("_checkpointing")]), 1)
        # the installed transformers decides when none is named (the library's latest without it)
        installed = oomless._vocab.installed_version("transformers")
        self.assertEqual(oomless.hf.checkpointing_key(),
                         oomless.hf.CHECKPOINTING_KEY[oomless._vocab.format_version("args", installed)])
        # one key per version of the args format, no more
        args_format = next(f for f in oomless.plan_formats() if f["name"] == "args")
        self.assertEqual(set(oomless.hf.CHECKPOINTING_KEY), set(args_format["versions"].split(", ")))
        with self.assertRaises(ValueError):  # older than the format knows
            oomless.hf.training_arguments(PLAN, transformers_version="4.10")

    def test_checkpointing_variants(self):
        # every:N and +offload are transformers' activation_checkpointing_kwargs; nth:N and
        # op-sac (torchtitan's) are refused
        new = "5.23.0"
        every = oomless.hf.training_arguments(dict(PLAN["plan"], checkpointing="every:2"),
                                              transformers_version=new)
        self.assertEqual(every["activation_checkpointing_kwargs"], {"every_n_layers": 2})
        self.assertTrue(every["activation_checkpointing"])
        off = oomless.hf.training_arguments(dict(PLAN["plan"], checkpointing="full+offload"),
                                            transformers_version=new)
        self.assertEqual(off["activation_checkpointing_kwargs"],
                         {"every_n_layers": 1, "offload": True})
        self.assertNotIn("activation_checkpointing_kwargs",
                         oomless.hf.training_arguments(PLAN, transformers_version=new))
        for ck in ("nth:2", "op-sac"):
            with self.assertRaises(ValueError):
                oomless.hf.training_arguments(dict(PLAN["plan"], checkpointing=ck))
        # before 5.23 the Trainer has no every_n_layers: refused rather than passed to
        # torch.utils.checkpoint
        with self.assertRaisesRegex(ValueError, "needs transformers 5.23"):
            oomless.hf.training_arguments(dict(PLAN["plan"], checkpointing="every:2"),
                                          transformers_version="4.57.1")

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
