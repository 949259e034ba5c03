"""The tracer's workload options, made from the library's option table: each option the table
lists for `oomless trace`, with its values (those the tracer runs), its default and its help, as
`oomless trace --help` prints them. No option, value or default is written here; the value of an
option with a form ("every:N") is checked against the table's forms. Validation beyond the
values (which combinations the tracer can run) is run.Workload.check()'s."""
import argparse
from typing import Any, Dict, List

from .._vocab import form_matches, option, options

# how the tracer reads a metavar's value (the table's metavars): whole numbers, a probability
_INT_METAVARS = ("N", "R", "G")
_FLOAT_METAVARS = ("P",)


class _Choice:
    """An argparse type: one of the option's values in the library's table, or an instance of
    one of its forms. Every value of the table passes, also one the tracer does not run
    (qlora): run.Workload.check() then says why it cannot be traced."""

    def __init__(self, name: str) -> None:
        self.name, self.values = name, option(name)["values"]
        self.__name__ = name  # argparse names the type in its messages

    def __call__(self, text: str) -> str:
        for v in self.values:
            if (form_matches(v["name"], text) if v["form"] else v["name"] == text):
                return text
        raise argparse.ArgumentTypeError(
            "%s '%s' is not one of: %s"
            % (self.name, text, ", ".join(v["name"] for v in self.values)))


def _kind(metavar: str) -> Any:
    return int if metavar in _INT_METAVARS else float if metavar in _FLOAT_METAVARS else str


def add_workload_arguments(parser: argparse.ArgumentParser) -> List[str]:
    """Adds an argument for each workload option the tracer takes, its metavar the values it
    runs; returns their dests."""
    dests = []
    for o in options("trace"):
        forms_only = bool(o["values"]) and all(v["form"] for v in o["values"])
        kind = _kind(o["metavar"])
        default: Any = o["default"]
        if default is not None and kind is not str:
            default = kind(default)
        elif default is None and kind is int:
            default = 0  # not given: the library works it out (tokens-per-batch)
        kwargs: Dict[str, Any] = {"default": default, "help": o["help_line"].replace("%", "%%")}
        if o["values"] and not forms_only:
            kwargs["type"] = _Choice(o["name"])
            kwargs["metavar"] = "|".join(v["name"] for v in o["values"])
        else:
            kwargs["metavar"] = o["metavar"]
            if kind is not str:
                kwargs["type"] = kind
        action = parser.add_argument("--" + o["name"], **kwargs)
        dests.append(action.dest)
    return dests
