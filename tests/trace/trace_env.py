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
