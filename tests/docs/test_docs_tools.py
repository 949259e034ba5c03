"""The two checkers of the documentation fail on what they are there to catch: scripts/examples.py
on a console example whose number changed, scripts/check-docs.py on a broken link, anchor, path
or quote. Each is run on small Markdown files written here, against the built oomless."""
import os
import subprocess
import sys
import tempfile
import unittest

SRC = os.environ["OOMLESS_SRC"]
EXAMPLES = os.path.join(SRC, "scripts", "examples.py")
CHECK_DOCS = os.path.join(SRC, "scripts", "check-docs.py")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(SRC, "scripts"))
import examples  # noqa: E402

# what `oomless estimate --model gpt2 --json | jq .params.total` prints (the preset's parameters)
GPT2 = "124439808"


def run(*argv):
    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


class Examples(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.doc = os.path.join(self.dir.name, "doc.md")

    def tearDown(self):
        self.dir.cleanup()

    def write(self, text):
        with open(self.doc, "w") as f:
            f.write(text)

    def read(self):
        with open(self.doc) as f:
            return f.read()

    def example(self, output, marker="<!-- example: gpt2 -->"):
        return (f"Text.\n\n{marker}\n```console\n"
                f"$ oomless estimate --model gpt2 --json | jq .params.total\n{output}\n```\n")

    def test_a_true_example_passes(self):
        self.write(self.example(GPT2))
        rc, out = run(EXAMPLES, "check", self.doc)
        self.assertEqual(rc, 0, out)
        self.assertIn("1 example(s) run, 0 skipped, 0 problem(s)", out)

    def test_a_changed_number_fails_naming_the_line(self):
        self.write(self.example("124439809"))
        rc, out = run(EXAMPLES, "check", self.doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("documented line 1 is not printed there: 124439809", out)
        self.assertIn("+" + GPT2, out)

    def test_update_writes_what_the_command_prints(self):
        self.write(self.example("124439809"))
        rc, out = run(EXAMPLES, "update", self.doc)
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.read(), self.example(GPT2))
        self.assertEqual(run(EXAMPLES, "check", self.doc)[0], 0)

    def test_gaps(self):
        cmd = "$ oomless estimate --model gpt2 --batch 2"
        ok = ("<!-- example: gaps -->\n```console\n" + cmd + "\n...\n  micro-batch x seq             : 2 x 512"
              " tokens, grad-accum 1\n...\n```\n")
        self.write(ok)
        rc, out = run(EXAMPLES, "check", self.doc)
        self.assertEqual(rc, 0, out)
        self.write(ok.replace("2 x 512", "3 x 512"))
        rc, out = run(EXAMPLES, "check", self.doc)
        self.assertEqual(rc, 1, out)
        # update keeps the gaps and puts the new value in the line of the same shape
        rc, out = run(EXAMPLES, "update", self.doc)
        self.assertEqual((rc, self.read()), (0, ok), out)

    def test_lines_that_are_not_checked_are_refused(self):
        self.write("```console\n$ oomless gpus\n```\n\n    $ oomless gpus\n\n```sh\n$ make\n```\n")
        rc, out = run(EXAMPLES, "check", self.doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("a ```console block without <!-- example: ID -->", out)
        self.assertIn("a console line outside a marked ```console block", out)
        self.assertIn("commands with `$ ` in a ```sh block", out)

    def test_an_absolute_path_and_a_repeated_id_are_refused(self):
        self.write(self.example(GPT2) + self.example(GPT2) +
                   "<!-- example: tmp -->\n```console\n$ oomless run --checkpoint /tmp/ck -- ./job\n```\n")
        rc, out = run(EXAMPLES, "check", self.doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("id already used", out)
        self.assertIn("an absolute path in a command", out)

    def test_a_transcript_example_is_held_to_its_file(self):
        t = "transcript=bench/e2e/h100-2026-11-25/transcript.log"
        line = "oomless probe: trial 2: batch 24: peak 19.24 GiB, exit 0 (13.5 s)"
        ok = (f"<!-- example: h100 {t} -->\n```console\n$ oomless gpus\nDetected GPUs: 1 (NVML, driver "
              f"580.159.04, CUDA 13.0)\n...\n{line}\n```\n")
        self.write(ok)
        self.assertEqual(run(EXAMPLES, "check", self.doc)[0], 0)
        self.write(ok.replace("19.24", "19.25"))
        rc, out = run(EXAMPLES, "check", self.doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("not, in this order, in bench/e2e/h100-2026-11-25/transcript.log", out)

    def test_unknown_setup(self):
        self.write(self.example(GPT2, "<!-- example: x setup=mars -->"))
        rc, out = run(EXAMPLES, "check", self.doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("unknown setup 'mars'", out)


class Matching(unittest.TestCase):
    def test_gap_lines(self):
        self.assertTrue(examples.lines_match(["a", "...", "d"], ["a", "b", "c", "d"]))
        self.assertTrue(examples.lines_match(["a", "...", "b"], ["a", "b"]))
        self.assertFalse(examples.lines_match(["a", "...", "d"], ["a", "b", "c", "d", "e"]))
        self.assertFalse(examples.lines_match(["a", "d"], ["a", "b", "d"]))

    def test_a_gap_inside_a_line(self):
        self.assertTrue(examples.line_matches("oomless: no GPU found (...); planning",
                                              "oomless: no GPU found (NVML: none); planning"))
        self.assertFalse(examples.line_matches("oomless: no GPU found (...); planning",
                                               "oomless: 1 GPU found; planning"))

    def test_volatile_fields_match_any_value_of_their_shape(self):
        want = "oomless run: 05:15:10 attempt 1: batch 32, accumulation 2 (pid 27579)"
        got = "oomless run: 11:02:59 attempt 1: batch 32, accumulation 2 (pid 4)"
        self.assertTrue(examples.line_matches(want, got))
        self.assertFalse(examples.line_matches(want, got.replace("batch 32", "batch 33")))
        self.assertEqual(examples.updated([want, "x"], [got, "y"]), [want, "y"])

    def test_normalize(self):
        where = {"cwd": "/t/ex", "home": "/t/ex.home"}
        self.assertEqual(examples.normalize("/t/ex.home/.cache/a /t/ex/procs", where), "~/.cache/a procs")


class CheckDocs(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        os.makedirs(os.path.join(self.root, "docs"))
        os.makedirs(os.path.join(self.root, "tests", "data"))
        with open(os.path.join(self.root, "tests", "data", "f.yaml"), "w") as f:
            f.write("a: 1\nb: 2\nc: 3\n")
        with open(os.path.join(self.root, "docs", "other.md"), "w") as f:
            f.write("# Other\n\n## The `plan` options: 95 % and more\n\n## Repeated\n\n## Repeated\n")

    def tearDown(self):
        self.dir.cleanup()

    def check(self, text):
        with open(os.path.join(self.root, "README.md"), "w") as f:
            f.write(text)
        return run(CHECK_DOCS, self.root)

    def test_clean(self):
        rc, out = self.check("[o](docs/other.md#the-plan-options-95--and-more) "
                             "[r](docs/other.md#repeated-1) `tests/data/f.yaml` `bench/<gpu>.csv`\n"
                             "<!-- quote: tests/data/f.yaml -->\n```yaml\na: 1\n...\nc: 3\n```\n"
                             "```python\nx = 1\n```\n")
        self.assertEqual(rc, 0, out)

    def test_each_kind_of_problem(self):
        rc, out = self.check("[a](docs/missing.md) [b](docs/other.md#nowhere) `tests/data/g.yaml`\n"
                             "<!-- quote: tests/data/f.yaml -->\n```yaml\nc: 3\na: 1\n```\n"
                             "```python\nf(x=1, 2)\n```\n")
        self.assertEqual(rc, 1, out)
        for what in ("link to docs/missing.md: no docs/missing.md",
                     "no heading '#nowhere' in docs/other.md",
                     "`tests/data/g.yaml`: no such path",
                     "not, in this order, in tests/data/f.yaml",
                     "python block does not compile"):
            self.assertIn(what, out)


if __name__ == "__main__":
    unittest.main()
