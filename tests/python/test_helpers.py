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
        self.assertNotIn("use_liger_kernel", args)
        chunked = dict(PLAN["plan"], loss="chunked", attention="flash")
        self.assertTrue(oomless.hf.training_arguments(chunked)["use_liger_kernel"])
        with self.assertRaises(KeyError):
            oomless.hf.training_arguments({"memory": {}})

    def test_lightning(self):
        self.assertEqual(oomless.lightning.trainer_kwargs(PLAN),
                         {"accumulate_grad_batches": 8, "precision": "bf16-mixed"})
        self.assertEqual(oomless.lightning.dataloader_kwargs(PLAN), {"batch_size": 4})
        multi = dict(PLAN["plan"], gpus=8, sharding="zero3", offload="optimizer",
                     precision="amp-fp16")
        self.assertEqual(oomless.lightning.trainer_kwargs(multi),
                         {"accumulate_grad_batches": 8, "precision": "16-mixed", "devices": 8,
                          "strategy": "deepspeed_stage_3_offload"})
        ddp = dict(PLAN["plan"], gpus=2)
        self.assertEqual(oomless.lightning.trainer_kwargs(ddp)["strategy"], "ddp")


if __name__ == "__main__":
    unittest.main()
