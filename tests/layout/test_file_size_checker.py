"""The file-size checker fails on a C file over 800 lines in lib/, cli/ or web/api/, and passes the
public header and a file of exactly 800 lines."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.environ.get("OOMLESS_SRC", "."), "scripts", "check-file-size.py")


def write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("int x;\n" * lines)


class FileSize(unittest.TestCase):
    def setUp(self):
        self.src = tempfile.mkdtemp(prefix="oomless-size-")
        write(os.path.join(self.src, "lib/core/a.c"), 800)
        write(os.path.join(self.src, "cli/main.c"), 10)
        write(os.path.join(self.src, "web/api/page.c"), 10)
        write(os.path.join(self.src, "include/oomless.h"), 3000)

    def tearDown(self):
        shutil.rmtree(self.src)

    def run_checker(self):
        return subprocess.run([sys.executable, CHECKER, self.src], capture_output=True, text=True)

    def test_at_most_800_passes_and_the_public_header_is_exempt(self):
        r = self.run_checker()
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_each_folder_over_800_fails(self):
        write(os.path.join(self.src, "lib/core/a.c"), 801)
        write(os.path.join(self.src, "cli/main.c"), 900)
        write(os.path.join(self.src, "web/api/page.c"), 1000)
        write(os.path.join(self.src, "lib/plan/plan.h"), 850)
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/core/a.c: 801 lines, more than 800", r.stdout)
        self.assertIn("cli/main.c: 900 lines", r.stdout)
        self.assertIn("web/api/page.c: 1000 lines", r.stdout)
        self.assertIn("lib/plan/plan.h: 850 lines", r.stdout)
        self.assertIn("4 file(s) over 800 lines", r.stdout)


if __name__ == "__main__":
    unittest.main()
