"""The layer checker fails on each kind of violation it exists for, and passes a clean tree."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.environ.get("OOMLESS_SRC", "."), "scripts", "check-layers.py")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class Checker(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="oomless-layers-")
        self.src = os.path.join(self.dir, "src")
        self.build = os.path.join(self.dir, "build")
        for folder in ("core", "plan"):
            write(os.path.join(self.src, "lib", folder, "README.md"), "# " + folder + "\n")
        write(os.path.join(self.src, "lib/core/core.h"), "#include \"oomless.h\"\n")
        write(os.path.join(self.src, "lib/core/a.c"), "#include \"core/core.h\"\nint a(void);\n")
        write(os.path.join(self.src, "lib/plan/plan.h"), "#include \"core/core.h\"\n")
        write(os.path.join(self.src, "lib/plan/p.c"), "#include \"plan/plan.h\"\nint p(void);\n")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def run_checker(self, *extra):
        return subprocess.run([sys.executable, CHECKER, self.src] + list(extra),
                              capture_output=True, text=True)

    def compile(self, rel, code):
        """Compiles `code` as the object file CMake would make for lib/<rel>."""
        c = os.path.join(self.dir, "c", rel)
        write(c, code)
        obj = os.path.join(self.build, "CMakeFiles/oomless_objs.dir/lib", rel + ".o")
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        subprocess.run(["cc", "-c", "-o", obj, c], check=True)

    def compile_cli(self, name, code):
        """Compiles `code` as the object file CMake would make for cli/<name>."""
        c = os.path.join(self.dir, "c", "cli", name)
        write(c, code)
        obj = os.path.join(self.build, "CMakeFiles/oomless_cli_objs.dir/cli", name + ".o")
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        subprocess.run(["cc", "-c", "-o", obj, c], check=True)

    def test_clean_tree_passes(self):
        r = self.run_checker()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_upward_include_fails(self):
        write(os.path.join(self.src, "lib/core/a.c"), "#include \"plan/plan.h\"\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/core/a.c:1: include \"plan/plan.h\": core may not use plan", r.stdout)

    def test_include_without_folder_fails(self):
        write(os.path.join(self.src, "lib/plan/p.c"), "#include \"plan.h\"\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("name the folder", r.stdout)

    def test_unknown_folder_fails(self):
        write(os.path.join(self.src, "lib/extra/x.c"), "\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/extra", r.stdout)

    def test_folder_without_readme_fails(self):
        os.unlink(os.path.join(self.src, "lib/plan/README.md"))
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/plan: no README.md", r.stdout)

    def test_file_named_after_its_folder_fails(self):
        write(os.path.join(self.src, "lib/plan/plan.c"), "#include \"plan/plan.h\"\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/plan/plan.c: plan/plan.h is the folder's contract", r.stdout)

    def test_upward_call_fails(self):
        self.compile("plan/p.c", "int oomi_p(void) { return 1; }\n")
        self.compile("core/a.c", "int oomi_p(void);\nint oomi_a(void) { return oomi_p(); }\n")
        r = self.run_checker(self.build)
        self.assertEqual(r.returncode, 1)
        self.assertIn("lib/core/a.c uses oomi_p from lib/plan/p.c: core may not use plan",
                      r.stdout)

    def test_circle_fails(self):
        self.compile("core/a.c", "int oomi_b(void);\nint oomi_a(void) { return oomi_b(); }\n")
        self.compile("core/b.c", "int oomi_a(void);\nint oomi_b(void) { return oomi_a(); }\n")
        r = self.run_checker(self.build)
        self.assertEqual(r.returncode, 1)
        self.assertIn("circle: lib/core/a.c -> lib/core/b.c -> lib/core/a.c", r.stdout)

    def test_downward_call_passes(self):
        self.compile("core/a.c", "int oomi_a(void) { return 1; }\n")
        self.compile("plan/p.c", "int oomi_a(void);\nint oomi_p(void) { return oomi_a(); }\n")
        r = self.run_checker(self.build)
        self.assertEqual(r.returncode, 0, r.stdout)


    def test_tool_including_an_internal_header_fails(self):
        write(os.path.join(self.src, "cli/cli.h"), "#include \"oomless.h\"\n")
        write(os.path.join(self.src, "cli/cmd_x.c"),
              "#include \"cli.h\"\n#include \"core/core.h\"\n#include \"plan/plan.h\"\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("cli/cmd_x.c:3: include \"plan/plan.h\": the tool uses the public API",
                      r.stdout)
        self.assertNotIn("cmd_x.c:1", r.stdout)
        self.assertNotIn("cmd_x.c:2", r.stdout)

    def test_tool_calling_an_internal_function_fails(self):
        self.compile("core/a.c", "int oomi_a(void) { return 1; }\n")
        self.compile("plan/p.c", "int oomi_p(void) { return 1; }\nint oom_p(void) { return 2; }\n")
        self.compile_cli("cmd_x.c", "int oomi_a(void);\nint oom_p(void);\n"
                         "int x(void) { return oomi_a() + oom_p(); }\n")
        r = self.run_checker(self.build)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.compile_cli("cmd_y.c", "int oomi_p(void);\nint y(void) { return oomi_p(); }\n")
        r = self.run_checker(self.build)
        self.assertEqual(r.returncode, 1)
        self.assertIn("cli/cmd_y.c uses oomi_p from lib/plan/p.c: the tool uses the public API",
                      r.stdout)

    def test_page_api_using_internals_fails(self):
        write(os.path.join(self.src, "web/api/page.c"), "#include \"oomless.h\"\n")
        self.assertEqual(self.run_checker().returncode, 0)
        write(os.path.join(self.src, "web/api/page.c"),
              "#include \"oomless.h\"\n#include \"core/core.h\"\nint f(void) "
              "{ return oomi_a(); }\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("web/api/page.c:2: include \"core/core.h\": the page's API uses the public "
                      "API (oomless.h) only", r.stdout)
        self.assertIn("web/api/page.c:3: uses oomi_a", r.stdout)

    def test_page_backend_keeps_its_layer(self):
        write(os.path.join(self.src, "lib/gpu/README.md"), "# gpu\n")
        write(os.path.join(self.src, "lib/gpu/gpu.h"), "#include \"core/core.h\"\n")
        write(os.path.join(self.src, "web/api/gpu_none.c"),
              "#include \"gpu/gpu.h\"\nint f(void) { return oomi_fail(1, \"x\"); }\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 0, r.stdout)
        write(os.path.join(self.src, "web/api/gpu_none.c"), "#include \"plan/plan.h\"\n")
        r = self.run_checker()
        self.assertEqual(r.returncode, 1)
        self.assertIn("gpu_none.c belongs to lib/gpu, which may not use plan", r.stdout)


if __name__ == "__main__":
    unittest.main()
