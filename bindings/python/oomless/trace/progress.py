"""What a trace is doing, on a terminal: a trace takes 10-40 s, and a silent terminal reads as a
hang. One status line on stderr, rewritten in place ("building llama-3.1-8b on the meta device",
"step 1: forward, layer 12/32", "step 2: optimizer"), and cleared before the result is written.
Off unless `start()` is given a terminal: under --json, in a pipe or a log nothing is written."""
from __future__ import annotations

from typing import TextIO

_out: TextIO | None = None
_phase = ""
_shown = False


def start(stream: TextIO) -> None:
    """Shows progress on `stream` when it is a terminal."""
    global _out
    _out = stream if stream.isatty() else None


def say(text: str) -> None:
    """The status line becomes `text`."""
    global _shown
    if _out is None:
        return
    _out.write("\r\033[Koomless trace: " + text)
    _out.flush()
    _shown = True


def phase(name: str, step: int | None) -> None:
    """Phase `name` of step `step` (0-based, as Tracker.set_phase counts) begins; the pause
    between steps ("idle") leaves the line as it is."""
    global _phase
    if name == "idle":
        return
    _phase = ("step %d: %s" % (step + 1, name)) if step is not None else name
    say(_phase)


def layer(index: int, count: int) -> None:
    """The forward reaches layer `index` (1-based) of `count` (or a checkpointed layer is
    recomputed in the backward)."""
    say("%s, layer %d/%d" % (_phase or "forward", index, count))


def clear() -> None:
    """Clears the status line for other text (a warning); the next say() shows it again."""
    global _shown
    if _out is not None and _shown:
        _out.write("\r\033[K")
        _out.flush()
    _shown = False


def stop() -> None:
    """Clears the status line and shows no more."""
    global _out, _shown, _phase
    if _out is not None and _shown:
        _out.write("\r\033[K")
        _out.flush()
    _out, _shown, _phase = None, False, ""
