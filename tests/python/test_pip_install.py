"""`pip install ./bindings/python` in a fresh virtual environment, offline: the wheel bundles the
built liboomless, the oomless program and the data files, and the installed package uses them;
its console script `oomless` and `python -m oomless` exec the bundled program (arguments, exit
status and signals are the program's); with bundling off it is pure Python and takes the
library named by $OOMLESS_LIBRARY, and the console script an `oomless` named or on PATH."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
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

    def cli(self, *args, **kw):
        env = dict(self.env, **kw.pop("env", {}))
        return subprocess.run(list(args), env=env, cwd=self.tmp.name, capture_output=True,
                              text=True, timeout=120, **kw)

    def test_1_console_script(self):
        self.install()
        script = os.path.join(self.venv, "bin", "oomless")
        version = subprocess.run([BIN, "--version"], check=True, capture_output=True,
                                 text=True).stdout
        for argv in ([script], [self.python, "-m", "oomless"]):
            proc = self.cli(*argv, "--version")
            self.assertEqual((proc.returncode, proc.stdout), (0, version), proc.stderr)
            # the arguments and the exit status are the program's: a bad option is 2
            proc = self.cli(*argv, "plan", "--no-such-option")
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn("--no-such-option", proc.stderr)
            proc = self.cli(*argv, "estimate", "--model", "gpt2", "--seq", "512", "--batch", "2",
                            "--json")
            self.assertEqual(json.loads(proc.stdout), self.cli_estimate())
        # nothing fits: 1, as the program says
        proc = self.cli(script, "plan", "--model", "llama-3.1-70b", "--gpu", "l4", "--method",
                        "full")
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)

    def test_1_console_script_execs(self):
        """The script becomes the program (exec: same process), so a signal reaches it: `run`
        passes SIGTERM to its job and exits 128 + 15."""
        self.install()
        script = os.path.join(self.venv, "bin", "oomless")
        package = os.path.dirname(os.path.realpath(self.probe()["file"]))
        proc = subprocess.Popen([script, "run", "--batch-size", "4", "--", "sleep", "60"],
                                env=self.env, cwd=self.tmp.name, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            exe, deadline = None, time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                exe = os.path.realpath("/proc/%d/exe" % proc.pid)
                if exe == os.path.join(package, "bin", "oomless"):
                    break
                time.sleep(0.05)
            self.assertEqual(exe, os.path.join(package, "bin", "oomless"))
            deadline = time.monotonic() + 60
            err = ""
            while "attempt 1" not in err and time.monotonic() < deadline:
                line = proc.stderr.readline()
                if not line:
                    break
                err += line
            proc.send_signal(signal.SIGTERM)
            out, rest = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM, err + rest)
        self.assertIn("passing SIGTERM to the job", err + rest)

    def test_1_console_script_traces_with_its_python(self):
        """`oomless trace` through the script runs the tracer with the script's Python (here
        one whose torch fails to import: the message names that Python)."""
        self.install()
        no_torch = os.path.join(self.tmp.name, "notorch")
        os.makedirs(no_torch, exist_ok=True)
        with open(os.path.join(no_torch, "torch.py"), "w") as f:
            f.write("raise ImportError('No module named torch')\n")
        proc = self.cli(os.path.join(self.venv, "bin", "oomless"), "trace", "--model", "gpt2",
                        env={"PYTHONPATH": no_torch, "PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("which is not installed for %s" % self.python, proc.stderr)

    def test_2_pure_python_with_a_library_named(self):
        self.install(OOMLESS_BUNDLE="no")
        library = os.path.join(BUILD, "liboomless.so.1")
        doc = self.probe(OOMLESS_LIBRARY=library)
        package = os.path.dirname(os.path.realpath(doc["file"]))
        self.assertFalse(os.path.exists(os.path.join(package, "lib")))
        self.assertEqual(doc["library"], library)
        self.assertEqual(doc["estimate"], self.cli_estimate())
        # the console script runs the program named, else the first `oomless` on PATH that is
        # not itself; with none: exit 3, saying so (never itself again, in a loop)
        script = os.path.join(self.venv, "bin", "oomless")
        env = {"OOMLESS_LIBRARY": library}
        proc = self.cli(script, "--version", env=dict(env, OOMLESS_CLI=BIN))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(doc["version"], proc.stdout)
        alone = os.path.dirname(script) + os.pathsep + "/usr/bin" + os.pathsep + "/bin"
        proc = self.cli(script, "--version", env=dict(env, PATH=alone))
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("the oomless program is not in this Python package", proc.stderr)
        onpath = os.path.dirname(BIN) + os.pathsep + alone
        proc = self.cli(script, "--version", env=dict(env, PATH=os.path.dirname(script) +
                                                     os.pathsep + onpath))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(doc["version"], proc.stdout)


if __name__ == "__main__":
    unittest.main()
