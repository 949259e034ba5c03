"""`pip install ./bindings/python` in a fresh virtual environment, offline: the wheel bundles the
built liboomless, the oomless program and the data files, and the installed package uses them;
with bundling off it is pure Python and takes the library named by $OOMLESS_LIBRARY."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("OOMLESS_SRC") or os.path.dirname(os.path.dirname(HERE))
BIN = os.environ["OOMLESS_BIN"]
BUILD = os.path.dirname(os.path.abspath(BIN))

PROBE = """
import json, os, oomless, oomless._native as n
doc = {"file": oomless.__file__, "library": n.lib._name, "version": oomless.version(),
       "estimate": oomless.estimate(model="gpt2", seq=512, batch=2)}
try:
    doc["cli"] = oomless.cli_path()
except oomless.FileError:
    doc["cli"] = None
try:
    doc["catalog"] = len(oomless.catalog()["gpus"])
except oomless.OomlessError as exc:
    doc["catalog"] = type(exc).__name__
print(json.dumps(doc))
"""


def venv_available():
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
        return None
    except ImportError as exc:
        return "python3 cannot make a virtual environment with pip here (%s)" % exc


REASON = venv_available()


@unittest.skipIf(REASON, REASON or "")
class PipInstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()  # in the test's TMPDIR
        cls.venv = os.path.join(cls.tmp.name, "venv")
        subprocess.run([sys.executable, "-m", "venv", cls.venv], check=True, timeout=300)
        cls.python = os.path.join(cls.venv, "bin", "python")
        # the installed package only: not the source tree's, not a library named outside
        cls.env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "OOMLESS_LIBRARY", "OOMLESS_CLI",
                                "OOMLESS_DATA_DIR", "OOMLESS_BUNDLE")}
        cls.env.update(OOMLESS_BUILD_DIR=BUILD, PIP_NO_INDEX="1",
                       PIP_DISABLE_PIP_VERSION_CHECK="1")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def install(self, **env):
        proc = subprocess.run([self.python, "-m", "pip", "install", "--no-deps",
                               "--no-build-isolation", "--force-reinstall",
                               os.path.join(SRC, "bindings", "python")],
                              env=dict(self.env, **env), capture_output=True, text=True,
                              timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def probe(self, **env):
        proc = subprocess.run([self.python, "-c", PROBE], env=dict(self.env, **env),
                              cwd=self.tmp.name, capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return json.loads(proc.stdout)

    def cli_estimate(self):
        out = subprocess.run([BIN, "estimate", "--model", "gpt2", "--seq", "512", "--batch", "2",
                              "--json"], check=True, capture_output=True, text=True).stdout
        return json.loads(out)

    def test_1_bundled(self):
        self.install()
        doc = self.probe()
        site = os.path.realpath(self.venv)
        package = os.path.dirname(os.path.realpath(doc["file"]))
        self.assertTrue(package.startswith(site), doc["file"])
        self.assertEqual(os.path.realpath(doc["library"]),
                         os.path.join(package, "lib", "liboomless.so.1"))
        self.assertEqual(doc["cli"], os.path.join(package, "bin", "oomless"))
        version = subprocess.run([BIN, "--version"], check=True, capture_output=True,
                                 text=True).stdout
        self.assertIn(doc["version"], version)
        self.assertEqual(doc["estimate"], self.cli_estimate())
        self.assertTrue(os.path.exists(os.path.join(package, "py.typed")))
        self.assertGreater(doc["catalog"], 10)
        # the bundled library reads the bundled data (../share/oomless from its file): without
        # the bundled catalog there is none
        os.remove(os.path.join(package, "share", "oomless", "gpus", "catalog.yaml"))
        self.assertEqual(self.probe()["catalog"], "FileError")

    def test_2_pure_python_with_a_library_named(self):
        self.install(OOMLESS_BUNDLE="no")
        library = os.path.join(BUILD, "liboomless.so.1")
        doc = self.probe(OOMLESS_LIBRARY=library)
        package = os.path.dirname(os.path.realpath(doc["file"]))
        self.assertFalse(os.path.exists(os.path.join(package, "lib")))
        self.assertEqual(doc["library"], library)
        self.assertEqual(doc["estimate"], self.cli_estimate())


if __name__ == "__main__":
    unittest.main()
