"""`oomless trace` in a folder it must not take code from, and on a config too deep to build:
the tracer imports no module from the current folder (a downloaded model's json.py, torch.py),
runs none of the config's auto_map code, still finds a --module the user keeps there, and
refuses more layers than it builds (exit 2, the field named) before building any."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_env import HAVE, REASON  # noqa: E402

TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 256,
        "tie_word_embeddings": False}

# modules a hostile folder holds under the names the tracer imports (the standard library's,
# torch's, transformers'); each leaves a file named after it when imported
SHADOWS = ("json", "argparse", "runpy", "torch", "transformers", "numpy", "typing", "fcntl",
           "errno", "stat", "tempfile", "platform", "contextlib")

TOY = """import torch


def build():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
"""


@unittest.skipUnless(HAVE, REASON)
class Launch(unittest.TestCase):
    def run_cli(self, cwd, *args):
        env = dict(os.environ, OOMLESS_PYTHON=sys.executable)
        env.pop("PYTHONPATH", None)  # the package's own folder comes from oomless itself
        return subprocess.run([os.environ["OOMLESS_BIN"], "trace"] + list(args), cwd=cwd,
                              capture_output=True, text=True, env=env, timeout=600)

    def hostile_folder(self, d, cfg):
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        for mod in SHADOWS + ("remote_code",):
            with open(os.path.join(d, mod + ".py"), "w") as f:
                f.write("open(%r, 'w').close()\n" % os.path.join(d, "PWNED_" + mod))

    def pwned(self, d):
        return sorted(n for n in os.listdir(d) if n.startswith("PWNED_"))

    def test_no_code_from_the_model_folder(self):
        cfg = dict(TINY, auto_map={"AutoConfig": "remote_code.EvilConfig",
                                   "AutoModelForCausalLM": "remote_code.EvilModel"})
        with tempfile.TemporaryDirectory() as d:
            self.hostile_folder(d, cfg)
            r = self.run_cli(d, "--model", ".", "--batch", "1", "--seq", "16", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.pwned(d), [])
            self.assertGreater(json.loads(r.stdout)["memory"]["allocated_peak"], 0)

    def test_module_kept_in_the_current_folder(self):
        # the user's own --module is found there: after the installed packages, which the
        # folder's torch.py and json.py then cannot replace
        with tempfile.TemporaryDirectory() as d:
            self.hostile_folder(d, TINY)
            with open(os.path.join(d, "toy_model.py"), "w") as f:
                f.write(TOY)
            r = self.run_cli(d, "--module", "toy_model:build", "--input-shape", "4,8", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.pwned(d), [])
            self.assertGreater(json.loads(r.stdout)["memory"]["weights"], 0)

    def test_layers_past_the_bound_refused_before_building(self):
        from oomless.trace.limits import MAX_LAYERS
        self.assertEqual(MAX_LAYERS, 1024)
        cases = ((dict(TINY, num_hidden_layers=10_000_000), "num_hidden_layers 10000000"),
                 ({"model_type": "gpt2", "n_layer": MAX_LAYERS + 1, "n_embd": 64, "n_head": 4,
                   "vocab_size": 100, "n_positions": 256}, "n_layer 1025"),
                 (dict(TINY, text_config=dict(TINY, num_hidden_layers=1e12)),
                  "text_config.num_hidden_layers 1e+12"))
        with tempfile.TemporaryDirectory() as d:
            for cfg, named in cases:
                with open(os.path.join(d, "config.json"), "w") as f:
                    json.dump(cfg, f)
                r = self.run_cli(d, "--model", "config.json")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("model config 'config.json': %s: the tracer builds" % named,
                              r.stderr)
                self.assertIn("at most 1024", r.stderr)
                self.assertNotIn("Traceback", r.stderr)
        # (before, the 10-million-layer config ran 300 s growing past 2.3 GB: run_cli's
        # timeout fails it) the bound itself and nested configs
        from oomless.trace.limits import too_many_layers
        self.assertIsNone(too_many_layers(dict(TINY, num_hidden_layers=MAX_LAYERS)))
        self.assertEqual(too_many_layers({"decoder": {"decoder_layers": 2048}}),
                         ("decoder.decoder_layers", 2048))
        self.assertIsNone(too_many_layers([1, 2]))


if __name__ == "__main__":
    unittest.main()
