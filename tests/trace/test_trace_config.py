"""Hostile and unlucky model configs given to `oomless trace`: each is refused as `oomless estimate`
refuses it (the library reads the file first), naming the file and the field, with exit 2 and no
Python traceback; a config with a UTF-8 byte order mark is traced."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from trace_env import HAVE, REASON, SRC

TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
        "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 1024,
        "tie_word_embeddings": False, "rms_norm_eps": 1e-5}


def oomless(verb, *args, timeout=300):
    env = dict(os.environ, OOMLESS_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([os.environ["OOMLESS_BIN"], verb] + list(args), capture_output=True,
                          text=True, env=env, timeout=timeout)


@unittest.skipUnless(HAVE, "" if HAVE else REASON)
class HostileConfigs(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
        return path

    def refused(self, path, *needles, estimate_too=True):
        """trace exits 2 with the needles in its one-line message; estimate too, where given"""
        verbs = ("trace", "estimate") if estimate_too else ("trace",)
        for verb in verbs:
            r = oomless(verb, "--model", path, "--seq", "16")
            self.assertEqual(r.returncode, 2, (verb, r.stderr[-2000:]))
            self.assertNotIn("Traceback", r.stderr, verb)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, (verb, r.stderr[-2000:]))
            for needle in needles:
                self.assertIn(needle, r.stderr, verb)

    def test_out_of_range_and_fractional_widths(self):
        for value, word in (("1e18", "out of range"), ("NaN", "out of range"),
                            ("2048.5", "is not a whole number")):
            text = json.dumps(TINY).replace('"hidden_size": 256', '"hidden_size": ' + value)
            path = self.write("hidden.json", text)
            self.refused(path, "hidden.json", "hidden_size", word)

    def test_architectures_not_a_model_class(self):
        path = self.write("auto.json", json.dumps(dict(TINY, architectures=["AutoModel"])))
        self.refused(path, "auto.json", "architectures", "'AutoModel'", estimate_too=False)
        path = self.write("three.json", json.dumps(dict(TINY, architectures=[3])))
        self.refused(path, "three.json", "architectures [3]", estimate_too=False)

    def test_nested_200k_deep(self):
        text = json.dumps(TINY)[:-1] + ', "x": ' + "[" * 200000 + "]" * 200000 + "}"
        path = self.write("deep.json", text)
        self.refused(path, "deep.json", "nests deeper than 32 levels")

    def test_larger_than_estimate_reads(self):
        # valid JSON of 65 MiB: the library's cap is 64 MiB for every document
        text = json.dumps(dict(TINY, pad="x" * (65 << 20)))
        path = self.write("big.json", text)
        self.refused(path, "big.json", "larger than the 64 MiB")

    def test_fifo_in_a_folder_is_named_not_waited_on(self):
        os.mkfifo(os.path.join(self.dir.name, "config.json"))
        self.refused(self.dir.name, "config.json' is a FIFO, not a regular file")

    def test_byte_order_mark_is_read(self):
        path = self.write("bom.json", b"\xef\xbb\xbf" + json.dumps(TINY).encode())
        r = oomless("trace", "--model", path, "--seq", "16", "--json")
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertEqual(json.loads(r.stdout)["workload"]["model"], path)


if __name__ == "__main__":
    unittest.main()
