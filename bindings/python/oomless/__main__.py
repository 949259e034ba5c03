"""The ``oomless`` command of the wheel (its console script) and ``python -m oomless``: runs the
``oomless`` program bundled in the package, with the same arguments, by exec, so that its exit
status, its signals (Ctrl-C, a SIGTERM from a scheduler), its terminal and its process id are
the program's own.

The program is the bundled one (``oomless/bin/oomless``), else ``$OOMLESS_CLI``, else the first
``oomless`` on ``$PATH`` that is not this script (a package installed without the bundled
program uses an ``oomless`` from ``make install``). ``oomless trace`` runs the tracer with the
Python that runs this script (``$OOMLESS_PYTHON`` unless set), which has this package.
"""
import os
import sys
from typing import List, Optional, Sequence, Tuple

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
# the console scripts that handed over to an `oomless` found on PATH, so that none is run twice
# (two environments' scripts would otherwise run each other forever)
_VISITED = "OOMLESS_CONSOLE_SCRIPTS"


def _program() -> Tuple[Optional[str], Optional[List[str]]]:
    """(program, visited): the program to run and, when it was found on PATH, the scripts not
    to run again."""
    bundled = os.path.join(_PACKAGE, "bin", "oomless")
    if os.path.isfile(bundled) and os.access(bundled, os.X_OK):
        return bundled, None
    env = os.environ.get("OOMLESS_CLI")
    if env:
        return env, None
    visited = [p for p in os.environ.get(_VISITED, "").split(os.pathsep) if p]
    if sys.argv and sys.argv[0]:
        visited.append(os.path.realpath(sys.argv[0]))
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(folder or ".", "oomless")
        if (os.path.isfile(path) and os.access(path, os.X_OK)
                and os.path.realpath(path) not in visited):
            return path, visited
    return None, None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exec the oomless program with ``argv`` (default: this process's arguments); returns
    only on failure, with exit status 3 (the program's "environment" status)."""
    args = sys.argv[1:] if argv is None else list(argv)
    program, visited = _program()
    if program is None:
        sys.stderr.write("oomless: the oomless program is not in this Python package (%s/bin) "
                         "and none is on PATH: install the wheel of your platform (pip install "
                         "oomless), or set OOMLESS_CLI to the program's path\n" % _PACKAGE)
        return 3
    env = dict(os.environ)
    if visited:
        env[_VISITED] = os.pathsep.join(visited)
    env.setdefault("OOMLESS_PYTHON", sys.executable)
    env.setdefault("OOMLESS_PYTHONPATH", os.path.dirname(_PACKAGE))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(program, ["oomless"] + args, env)
    except OSError as exc:
        sys.stderr.write("oomless: cannot run '%s': %s\n" % (program, exc.strerror or exc))
    return 3


if __name__ == "__main__":
    sys.exit(main())
