"""The stack the tracer detects, and the versions a result records, are the installed
distributions', not a folder of that name on sys.path (bench/trace/torchtune, the stack's
results, is one when bench/trace is on the path)."""
import os
import sys
import tempfile
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")
sys.path.insert(0, os.path.join(SRC, "bindings", "python"))

from oomless.trace import stacks, versions  # noqa: E402


class StackDetect(unittest.TestCase):
    def test_folder_named_like_a_stack_is_not_that_stack(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("torchtune", "torchtitan"):
                os.mkdir(os.path.join(d, name))
            sys.path.insert(0, d)
            try:
                self.assertIsNone(stacks.version_of("torchtune"))
                self.assertIsNone(stacks.version_of("torchtitan"))
                v = versions()
                self.assertEqual((v["torchtune"], v["torchtitan"]), (None, None))
            finally:
                sys.path.remove(d)
                for name in ("torchtune", "torchtitan"):
                    sys.modules.pop(name, None)

    def test_installed_transformers_named_by_its_version(self):
        import transformers
        self.assertEqual(stacks.version_of("transformers"), transformers.__version__)
        self.assertEqual(stacks.detect(), "transformers")


if __name__ == "__main__":
    unittest.main()
