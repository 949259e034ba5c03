"""check-c-locale.py fails on each kind of locale-dependent number conversion and case folding in
lib/, and passes the wrappers of lib/core/clocale.c."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.environ.get("OOMLESS_SRC", "."), "scripts", "check-c-locale.py")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class CLocaleChecker(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="oomless-c-locale-")
        self.src = os.path.join(self.dir, "src")
        self.build = os.path.join(self.dir, "build")
        write(os.path.join(self.src, "lib/core/a.c"), "int a;\n")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def compile(self, rel, code):
        """Compiles `code` as the object file CMake would make for lib/<rel>."""
        c = os.path.join(self.src, "lib", rel)
        write(c, code)
        obj = os.path.join(self.build, "CMakeFiles/oomless_objs.dir/lib", rel + ".o")
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        subprocess.run(["cc", "-O2", "-c", "-o", obj, c], check=True)

    def run_checker(self):
        return subprocess.run([sys.executable, CHECKER, self.src, self.build],
                              capture_output=True, text=True)

    def test_wrappers_pass(self):
        self.compile("core/clocale.c", "#include <stdio.h>\n#include <stdlib.h>\n"
                     "double oomi_strtod(const char *s, char **e) { return strtod(s, e); }\n")
        self.compile("plan/p.c", "double oomi_strtod(const char *s, char **e);\n"
                     "double p(const char *s) { return oomi_strtod(s, 0); }\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_strtod_fails(self):
        self.compile("core/units.c", "#include <stdlib.h>\n"
                     "double u(const char *s) { return strtod(s, 0); }\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/core/units.c uses strtod", r.stdout)

    def test_snprintf_fails(self):
        self.compile("plan/t.c", "#include <stdio.h>\n"
                     "int t(char *b, double v) { return snprintf(b, 9, \"%.1f\", v); }\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/plan/t.c uses", r.stdout)
        self.assertIn("snprintf", r.stdout)

    def test_sscanf_of_a_float_fails(self):
        self.compile("gpu/g.c", "#include <stdio.h>\n"
                     "int g(const char *s, double *d) {\n"
                     "    return sscanf(s,\n        \"x=%lf\", d);\n}\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/gpu/g.c:3: sscanf reads a floating-point number", r.stdout)

    def test_case_folding_fails(self):
        self.compile("core/units.c", "#include <ctype.h>\n#include <strings.h>\n"
                     "int u(const char *s) { return tolower((unsigned char)*s) +\n"
                     "    strcasecmp(s, \"gib\"); }\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/core/units.c uses strcasecmp", r.stdout)
        self.assertIn("tolower", r.stdout)

    def test_letter_classes_fail(self):
        self.compile("apply/y.c", "#include <ctype.h>\n"
                     "int y(const char *s) {\n    return isalnum((unsigned char)*s); }\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/apply/y.c:3: isalnum() classifies letters", r.stdout)

    def test_sscanf_of_integers_passes(self):
        self.compile("gpu/g.c", "#include <stdio.h>\n"
                     "int g(const char *s, int *a, int *b) {\n"
                     "    return sscanf(s, \"%d.%d\", a, b);\n}\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 0, r.stdout)


if __name__ == "__main__":
    unittest.main()
