"""The Python package finds a model by the library's rules (oomless.trace reads its config
through them): a Hub id in a local Hugging Face cache, refs/main before the newest snapshot,
case-insensitively; a preset by the Hub id's name with a Notice; a missing file said so."""
import json
import os
import tempfile
import unittest
import warnings
from unittest import mock

import oomless

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 128}


class LookupTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        env = {k: v for k, v in os.environ.items()
               if k not in ("HF_HUB_CACHE", "HF_HOME", "HOME", "XDG_CACHE_HOME")}
        env["HF_HUB_CACHE"] = os.path.join(self.tmp.name, "hub")
        patch = mock.patch.dict(os.environ, env, clear=True)
        patch.start()
        self.addCleanup(patch.stop)
        self.repo = os.path.join(self.tmp.name, "hub", "models--TinyOrg--Tiny-LM")

    def snapshot(self, rev, vocab, mtime):
        d = os.path.join(self.repo, "snapshots", rev)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(TINY, vocab_size=vocab), f)
        os.utime(d, (mtime, mtime))
        return os.path.join(d, "config.json")

    def test_hub_cache_snapshots(self):
        old = self.snapshot("old", 2000, 1_600_000_000)
        new = self.snapshot("new", 3000, 1_700_000_000)
        self.assertEqual(oomless._model_config_path("tinyorg/TINY-LM"), new)
        os.makedirs(os.path.join(self.repo, "refs"))
        with open(os.path.join(self.repo, "refs", "main"), "w") as f:
            f.write("old")
        self.assertEqual(oomless._model_config_path("TinyOrg/Tiny-LM"), old)
        # the estimator reads the same file
        doc = oomless.estimate(model="TinyOrg/Tiny-LM", seq=64)
        self.assertEqual(doc["model"]["vocab"], 2000)

    def test_preset_by_hub_name_with_notice(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            path = oomless._model_config_path("Qwen/Qwen2.5-0.5B-Instruct")
        self.assertEqual(os.path.basename(path), "qwen2.5-0.5b.json")
        notices = [str(w.message) for w in caught if issubclass(w.category, oomless.Notice)]
        self.assertEqual(notices, [
            "model 'Qwen/Qwen2.5-0.5B-Instruct' is not in the Hugging Face cache (%s) and could "
            "not be fetched ($HF_HUB_OFFLINE is set): using the preset qwen2.5-0.5b (instruct, "
            "chat and base variants share the architecture)" % os.environ["HF_HUB_CACHE"]])

    def test_missing_file_and_suggestions(self):
        with self.assertRaises(oomless.NotFoundError) as cm:
            oomless._model_config_path("/no/such/config.json")
        self.assertEqual(str(cm.exception), "model file '/no/such/config.json' does not exist")
        with self.assertRaises(oomless.NotFoundError) as cm:
            oomless._model_config_path("llama-3-8b")
        self.assertIn("closest presets: llama-3.1-8b,", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
