"""The Python examples compile, and their oomless part runs: each example's main() is run with
the frameworks it hands the plan to (transformers, lightning, torch: CI lacks them) replaced by
stand-ins that record what they were given, which must be the plan's values."""
import contextlib
import glob
import importlib.util
import io
import os
import sys
import types
import unittest

import oomless

ROOT = os.environ["OOMLESS_SRC"]


class Recorder:
    """A framework class that keeps the keywords it was built with as attributes."""
    made = []

    def __init__(self, *args, **kwargs):
        self.args = args
        self.__dict__.update(kwargs)
        Recorder.made.append(self)


def module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    return m


def run_example(name, fakes):
    """Runs examples/python/NAME.py's main() with the modules in fakes; returns its stdout and
    the stand-ins it built."""
    saved = {k: sys.modules.get(k) for k in fakes}
    sys.modules.update(fakes)
    Recorder.made = []
    try:
        spec = importlib.util.spec_from_file_location(
            "example_" + name, os.path.join(ROOT, "examples", "python", name + ".py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            mod.main()
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return out.getvalue(), Recorder.made


class ExamplesTest(unittest.TestCase):
    def setUp(self):
        os.environ["OOMLESS_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"

    def test_examples_compile(self):
        files = glob.glob(os.path.join(ROOT, "examples", "python", "*.py"))
        self.assertGreaterEqual(len(files), 3)
        for path in files:
            with self.subTest(path=path):
                with open(path, encoding="utf-8") as f:
                    compile(f.read(), path, "exec")

    def test_hf_trainer_gets_the_plan(self):
        class TrainingArguments(Recorder):
            pass

        out, made = run_example("hf_trainer", {
            "transformers": module("transformers", TrainingArguments=TrainingArguments)})
        plan = oomless.plan(model="llama-3.1-8b", method="lora", seq=2048,
                            target_effective_batch=32)
        p = plan["plan"]
        self.assertEqual(p["batch_size"] * p["grad_accum"], 32)
        self.assertEqual(len(made), 1)
        args = made[0]
        self.assertEqual(args.output_dir, "out")
        self.assertEqual(args.per_device_train_batch_size, p["batch_size"])
        self.assertEqual(args.gradient_accumulation_steps, p["grad_accum"])
        self.assertEqual(args.bf16, p["precision"] in ("bf16", "amp-bf16"))
        self.assertEqual(out, "micro-batch %d x accumulation %d\n%d %d %s\n" % (
            p["batch_size"], p["grad_accum"], p["batch_size"], p["grad_accum"], args.bf16))

    def test_lightning_trainer_gets_the_plan(self):
        class Trainer(Recorder):
            pass

        class DataLoader(Recorder):
            pass

        class TensorDataset(Recorder):
            pass

        shapes = []

        def randint(low, high, shape):
            shapes.append(shape)
            return ("tokens", low, high, shape)

        torch = module("torch", randint=randint)
        utils = module("torch.utils")
        data = module("torch.utils.data", DataLoader=DataLoader, TensorDataset=TensorDataset)
        torch.utils, utils.data = utils, data
        out, made = run_example("lightning_trainer", {
            "lightning": module("lightning", Trainer=Trainer), "torch": torch,
            "torch.utils": utils, "torch.utils.data": data})
        plan = oomless.plan(model="gpt2", seq=1024, target_effective_batch=64)
        p = plan["plan"]
        self.assertEqual(p["batch_size"] * p["grad_accum"], 64)
        trainer = [m for m in made if isinstance(m, Trainer)]
        loader = [m for m in made if isinstance(m, DataLoader)]
        self.assertEqual(len(trainer), 1)
        self.assertEqual(len(loader), 1)
        self.assertEqual(trainer[0].max_steps, 10)
        self.assertEqual(trainer[0].accumulate_grad_batches, p["grad_accum"])
        self.assertEqual(loader[0].batch_size, p["batch_size"])
        self.assertEqual(shapes, [(256, 1024)])
        lines = out.splitlines()
        self.assertEqual(lines[0], "peak %.2f GiB of %.2f GiB usable" % (
            plan["memory"]["device_peak"] / 2**30, plan["budget"]["usable_bytes"] / 2**30))
        self.assertLessEqual(plan["memory"]["device_peak"], plan["budget"]["usable_bytes"])
        self.assertEqual(lines[1:], ["%d %d" % (p["grad_accum"], p["batch_size"])])


if __name__ == "__main__":
    unittest.main()
