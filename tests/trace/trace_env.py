"""What a trace test needs: the package from the source tree, and whether the virtual environment
has torch, transformers and peft (HAVE; REASON says what is missing)."""
import os
import sys

SRC = os.environ.get("OOMLESS_SRC", ".")
sys.path.insert(0, os.path.join(SRC, "bindings", "python"))

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import peft  # noqa: F401
    import oomless.trace  # noqa: F401
    HAVE, REASON = True, ""
except ImportError as exc:  # pragma: no cover
    HAVE, REASON = False, "torch/transformers/peft missing for %s (%s): `make venv`" % (
        sys.executable, exc)


def estimate(model, **kw):
    """`oomless estimate --json` for the workload a trace test traced: `kw` as flags, and no cuBLAS
    workspace (the meta device runs no cuBLAS; on a GPU it is in the temporaries)"""
    import json
    import subprocess
    args = [os.environ["OOMLESS_BIN"], "estimate", "--json", "--model", model,
            "--cublas-workspace", ":0:1"]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(r.stdout)


COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "temporaries",
              "allocated_peak")
# a component agrees when within 3 % of the trace, or within 2 MiB where it is small
REL, ABS = 0.03, 2 << 20


def assert_agrees(test, model, **kw):
    """Traces the workload and holds `oomless estimate` of it to the trace: every component within
    REL of it (ABS where small), and the same peak phase"""
    from oomless.trace import Workload, trace_hf
    t = trace_hf(Workload(model, **kw))
    e = estimate(model, **kw)
    for c in COMPONENTS:
        got, want = e["memory"][c], t["memory"][c]
        test.assertLessEqual(abs(got - want), max(REL * want, ABS),
                             "%s %s %s: estimate %d, trace %d" % (model, kw, c, got, want))
    test.assertEqual(e["peak_phase"], t["peak_phase"], (model, kw))
