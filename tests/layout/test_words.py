"""The user-facing documents speak to people who only have the repository: no path outside it
(shared/...), no word of how the project was organised (the "seeds", "issue 8"). The scanner is
checked on text that has each of these, then the real README.md and docs/ must be clean."""
import os
import re
import unittest

SRC = os.environ.get("OOMLESS_SRC", ".")

# what a reader outside the project cannot follow; each with the reason printed on a hit
PATTERNS = [
    (re.compile(r"shared/"), "a path outside the repository"),
    (re.compile(r"\bseeds\b", re.I), "the project's seed material"),
    (re.compile(r"\bissues?\s+#?\d+", re.I), "a reference to an issue number"),
]


def hits(text):
    """(line number, matched text, reason) for each forbidden phrase in text."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for rx, why in PATTERNS:
            for m in rx.finditer(line):
                out.append((n, m.group(0), why))
    return out


def documents():
    """README.md and every file under docs/ that is text."""
    paths = [os.path.join(SRC, "README.md")]
    for root, _, files in os.walk(os.path.join(SRC, "docs")):
        paths += [os.path.join(root, f) for f in sorted(files) if not f.endswith(".png")]
    return paths


class Scanner(unittest.TestCase):
    def test_catches_each_phrase(self):
        self.assertEqual([h[1] for h in hits("data in ../shared/reference/x.csv")], ["shared/"])
        self.assertEqual([h[1] for h in hits("the seeds' GPU_PROFILE")], ["seeds"])
        self.assertEqual([h[1] for h in hits("Seeds say so")], ["Seeds"])
        self.assertEqual([h[1] for h in hits("calibration (issue 8) replaces")], ["issue 8"])
        self.assertEqual([h[1] for h in hits("see Issue #12")], ["Issue #12"])
        self.assertEqual([h[0] for h in hits("ok\nissues 6 and 7\n")], [2])

    def test_lets_ordinary_words_pass(self):
        for text in ("a random seed: 42", "the fuzzers' seed corpora", "a shared library",
                     "/usr/share/man", "known issues are listed", "a tmux session"):
            self.assertEqual(hits(text), [], text)


class Documents(unittest.TestCase):
    def test_readme_and_docs_are_clean(self):
        found = []
        for path in documents():
            with open(path, encoding="utf-8") as f:
                for n, what, why in hits(f.read()):
                    found.append(f"{os.path.relpath(path, SRC)}:{n}: '{what}' ({why})")
        self.assertGreater(len(documents()), 1)
        self.assertEqual(found, [], "\n" + "\n".join(found))


if __name__ == "__main__":
    unittest.main()
