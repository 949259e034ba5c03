"""`oomless trace` on a terminal says what it is doing (the model being built, each step's phase,
the forward's layer), one status line rewritten in place and cleared before the result; under
--json, or with stderr a pipe, it writes no such line."""
import os
import pty
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trace_env import HAVE, REASON  # noqa: E402  (the package from the source tree)

ARGS = ["--model", "gpt2", "--method", "full", "--precision", "bf16", "--batch", "1", "--seq",
        "64", "--steps", "1"]


def trace(*extra, tty):
    """(stdout, what the tracer wrote to stderr) with stderr a terminal or a pipe"""
    env = dict(os.environ, OOMLESS_PYTHON=sys.executable)
    cmd = [os.environ["OOMLESS_BIN"], "trace"] + ARGS + list(extra)
    if not tty:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        return r.stdout, r.stderr
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        seen += chunk
    out = p.communicate(timeout=600)[0]
    os.close(master)
    return out.decode(), seen.decode(errors="replace")


@unittest.skipUnless(HAVE, REASON)
class Progress(unittest.TestCase):
    def test_a_terminal_sees_the_phases_and_layers(self):
        out, err = trace(tty=True)
        self.assertIn("oomless trace: building gpt2 on the meta device", err)
        self.assertIn("oomless trace: step 1: forward, layer 1/12", err)
        self.assertIn("oomless trace: step 1: forward, layer 12/12", err)
        self.assertIn("oomless trace: step 1: backward", err)
        self.assertIn("oomless trace: step 1: optimizer", err)
        self.assertTrue(err.endswith("\r\x1b[K"), "the status line is cleared: %r" % err[-80:])
        self.assertIn("Traced on the meta device: gpt2", out)

    def test_none_under_json_or_in_a_pipe(self):
        _out, err = trace("--json", tty=True)
        self.assertNotIn("oomless trace: step", err)
        self.assertNotIn("\x1b[K", err)
        _out, err = trace(tty=False)
        self.assertNotIn("oomless trace: step", err)
        self.assertNotIn("\x1b[K", err)


if __name__ == "__main__":
    unittest.main()
