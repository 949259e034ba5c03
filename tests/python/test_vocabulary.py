"""Every surface says what the library's tables say. For each option of the workload and plan
tables, each command that takes it and each value that command takes, this walks: the CLI's
--help and its parsing, the man page (scripts/gen-man.sh), the bash completion, the Python
package (the Trainer's optim, the same as `plan --format args` writes), the tracer's argparse
and the web page's API and controls. A surface that lacks a value, or holds a list of its own,
fails here, naming the option, the value and the surface."""
import importlib
import json
import os
import re
import subprocess
import unittest

import oomless
from oomless import _vocab

BIN = os.environ["OOMLESS_BIN"]
SRC = os.environ.get("OOMLESS_SRC", ".")
BUILD = os.environ.get("OOMLESS_BUILD", os.path.join(SRC, "build"))
ENV = dict(os.environ, OOMLESS_NVML_LIBRARY="/nonexistent")
# the commands whose --help prints options from the tables
HELP_COMMANDS = ("estimate", "plan", "table", "trace", "probe", "gpus", "run", "watch")


def cli(*args, check=True):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=ENV, timeout=120)
    if check and r.returncode:
        raise AssertionError("oomless %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def instance(value):
    """A value as one would write it: a form's N as 2 ("every:2"), a bare placeholder (SIZE,
    INDEX, FILE) None: no instance holds for every command."""
    name = value["name"]
    if not value["form"]:
        return name
    if name == "N" or ":N" in name:
        return name.replace("N", "2")
    return None


def walk():
    """(option, command, [values that command takes]) for every option and command."""
    for o in _vocab.options():
        for cmd in o["commands"]:
            yield o, cmd, [v for v in o["values"] if cmd in v["commands"]]


class Tables(unittest.TestCase):
    def test_tables_are_complete(self):
        names = [o["name"] for o in _vocab.options()]
        self.assertEqual(len(names), len(set(names)), "an option twice")
        for o in _vocab.options():
            self.assertTrue(o["help"] and o["commands"], o["name"])
            for v in o["values"]:
                self.assertTrue(v["help"], (o["name"], v["name"]))
                self.assertLessEqual(set(v["commands"]), set(o["commands"]), (o["name"], v["name"]))
        formats = [f["name"] for f in _vocab.plan_formats(None)]
        self.assertEqual(len(formats), len(set(formats)))


class CliHelp(unittest.TestCase):
    """`oomless COMMAND --help` lists every option the command takes with every value it takes."""

    @classmethod
    def setUpClass(cls):
        cls.help = {cmd: cli(cmd, "--help").stdout for cmd in HELP_COMMANDS}

    def test_every_option_and_value_is_in_the_help(self):
        self.assertIn("every option of `oomless plan` (see oomless plan --help) except --gpu",
                      self.help["table"])
        workload = {o[0] for o in oomless.workload_options()}
        for o, cmd, values in walk():
            # table's help refers to plan's; probe's to estimate's for the workload (--set)
            cmd = "plan" if cmd == "table" else cmd
            cmd = "estimate" if cmd == "probe" and o["name"] in workload else cmd
            text = self.help[cmd]
            m = re.search(r"^  --%s (\S+)(.*(\n {20,}.*)*)" % re.escape(o["name"]), text, re.M)
            self.assertIsNotNone(m, "oomless %s --help lacks --%s" % (cmd, o["name"]))
            block = m.group(0)
            for v in values:
                self.assertIn(v["name"], block, "oomless %s --help: --%s lacks '%s'"
                              % (cmd, o["name"], v["name"]))
            self.assertIn(o["help"], block)
            if o["default"] is not None:
                self.assertIn("(default %s" % o["default"], block, (cmd, o["name"]))

    def test_formats_are_in_the_help(self):
        for cmd in ("plan", "table"):
            for f in _vocab.plan_formats(cmd):
                self.assertRegex(self.help[cmd], r"\n    %s +%s" % (re.escape(f["name"]),
                                                                   re.escape(f["help"])))

    def test_list_queries_are_the_tables(self):
        for cmd in ("estimate", "plan", "table", "trace"):
            lines = cli("--list-options", cmd).stdout.splitlines()
            names = [line.split("\t")[0] for line in lines]
            expected = [o["name"] for o in _vocab.options(cmd)]
            if cmd in ("plan", "table"):
                expected.append("format")
            if cmd == "plan":  # the version of the format's framework (table's follow none)
                expected.append("format-version")
            self.assertEqual(names, expected, cmd)
        for o, cmd, values in walk():
            out = cli("--list-values", o["name"], cmd).stdout.splitlines()
            self.assertEqual([line.split("\t")[0] for line in out], [v["name"] for v in values])


class CliParsing(unittest.TestCase):
    """The tool takes every value of every option for each command that lists it: no 'unknown
    option', no 'is not one of'."""

    def parse(self, cmd, name, value):
        if cmd == "estimate":
            args = ["estimate", "--model", "gpt2"]
        elif cmd == "plan":
            args = ["plan", "--model", "gpt2", "--gpu", "h100", "--json"]
        else:
            return
        if name in ("model", "gpu", "vram", "gpus", "calibration-command", "workload",
                    "calibration"):
            return  # set above, a file or a GPU (their values are checked by the library tests)
        r = cli(*args, "--" + name, value, check=False)
        for refusal in ("unknown option", "is not one of", "needs a value"):
            self.assertNotIn(refusal, r.stderr, "oomless %s --%s %s" % (cmd, name, value))

    def test_every_value_parses(self):
        for o, cmd, values in walk():
            for v in values:
                text = instance(v)
                if text is not None and o["name"] not in ("seq", "lora-targets"):
                    self.parse(cmd, o["name"], text)

    def test_a_word_outside_the_values_is_refused_naming_them(self):
        for o in _vocab.options("estimate"):
            if not o["values"] or any(v["form"] for v in o["values"]) or o["list"]:
                continue
            r = cli("estimate", "--model", "gpt2", "--" + o["name"], "bogus", check=False)
            self.assertEqual(r.returncode, 2, o["name"])
            for v in o["values"]:
                self.assertIn(v["name"], r.stderr, (o["name"], v["name"]))
        r = cli("plan", "--model", "gpt2", "--format", "bogus", check=False)
        self.assertEqual(r.returncode, 2)
        for f in _vocab.plan_formats("plan"):
            self.assertIn(f["name"], r.stderr)


class ManPage(unittest.TestCase):
    """The man page generated from the tables has every option with every value; its hand-written
    part writes no value list of its own."""

    @classmethod
    def setUpClass(cls):
        cls.page = subprocess.run(["sh", os.path.join(SRC, "scripts", "gen-man.sh"), BIN,
                                   os.path.join(SRC, "docs", "oomless.1.scd")],
                                  capture_output=True, text=True, check=True, env=ENV).stdout
        cls.plain = cls.page.replace("\\", "").replace("_", "")

    def test_every_value_is_in_option_values(self):
        section = self.plain.split("# OPTION VALUES", 1)[1].split("# COMMAND REFERENCE")[0]
        for o in _vocab.options():
            if not o["values"]:
                continue
            m = re.search(r"^\*--%s\* (.*)\n((?:\t.*\n|\n)*)" % re.escape(o["name"]), section, re.M)
            self.assertIsNotNone(m, "the man page lacks --%s's values" % o["name"])
            for v in o["values"]:
                self.assertIn("- %s: %s" % (v["name"].replace("_", ""), v["help"].replace("_", "")),
                              m.group(2), "man page: --%s %s" % (o["name"], v["name"]))
        for f in _vocab.plan_formats(None):
            self.assertIn("- %s: " % f["name"], section)

    def test_the_page_source_writes_no_value_list(self):
        with open(os.path.join(SRC, "docs", "oomless.1.scd"), encoding="utf-8") as fp:
            source = fp.read()
        with_values = {o["name"] for o in _vocab.options() if o["values"]} | {"format"}
        for m in re.finditer(r"^\*--([a-z0-9-]+)\* (.*)$", source, re.M):
            if m.group(1) in with_values and "|" in m.group(2):
                self.fail("docs/oomless.1.scd lists --%s's values by hand: %s (write {values})"
                          % (m.group(1), m.group(2)))


class Completion(unittest.TestCase):
    """The bash completion offers every value (a form by its prefix: every:) for each command."""

    def test_every_value_is_completed(self):
        script = ["export _OOMLESS_BIN=%s" % BIN,
                  "source %s" % os.path.join(SRC, "scripts", "oomless.bash-completion"),
                  'try() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=();'
                  ' _oomless; echo "$2 $3|${COMPREPLY[*]}"; }']
        cases = [(o, cmd, values) for o, cmd, values in walk()
                 if values and cmd in ("estimate", "plan", "table", "trace")]
        for o, cmd, _ in cases:
            script.append("try oomless %s --%s ''" % (cmd, o["name"]))
        for cmd in ("plan", "table"):
            script.append("try oomless %s --format ''" % cmd)
        script.append("try oomless ''")
        out = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True,
                             env=ENV, timeout=300).stdout.splitlines()
        got = dict(line.split("|", 1) for line in out)
        for o, cmd, values in cases:
            offered = got["%s --%s" % (cmd, o["name"])].split()
            for v in values:
                want = (v["name"] if not v["form"] else
                        v["name"].split(":")[0] + ":" if ":" in v["name"] else None)
                if want:
                    self.assertIn(want, offered, "completion of oomless %s --%s lacks %s"
                                  % (cmd, o["name"], want))
        for cmd in ("plan", "table"):
            self.assertEqual(got["%s --format" % cmd].split(),
                             [f["name"] for f in _vocab.plan_formats(cmd)])
        commands = [line.split("\t")[0] for line in cli("--list-commands").stdout.splitlines()]
        self.assertIn("trace", commands)
        for c in commands:
            self.assertIn(c, got["'' "].split() if "'' " in got else got[" "].split())


class PythonPackage(unittest.TestCase):
    def test_trainer_optim_is_the_tables_and_the_clis(self):
        """hf.training_arguments and `plan --format args` give the Trainer the optimizer planned,
        both from the optimizer table"""
        for v in _vocab.option("optimizer")["values"]:
            if not v["trainer"]:
                continue
            plan = {"plan": {"batch_size": 1, "grad_accum": 1, "optimizer": v["name"],
                             "precision": "bf16", "checkpointing": "none"}}
            kwargs = importlib.import_module("oomless.hf").training_arguments(plan)
            self.assertEqual(kwargs["optim"], v["trainer"], v["name"])
            self.assertEqual(kwargs.get("optim_args"), v["trainer_args"], v["name"])
            args = cli("plan", "--model", "gpt2", "--gpu", "h100", "--optimizer", v["name"],
                       "--format", "args").stdout
            self.assertIn(" --optim %s" % v["trainer"], args, v["name"])
            if v["trainer_args"]:
                self.assertIn(" --optim_args %s" % v["trainer_args"], args, v["name"])

    def test_option_lists_of_the_package(self):
        self.assertEqual([o[0] for o in oomless.workload_options()],
                         [o["name"] for o in _vocab.options()][:len(oomless.workload_options())])
        method = dict((o[0], o) for o in oomless.workload_options())["method"]
        self.assertEqual(method[1], "|".join(v["name"] for v in _vocab.option("method")["values"]))

    def test_the_package_writes_no_value_list(self):
        """No module of the package spells out an option's values or the formats: three or more
        values of one option quoted on one line of source, but as the keys of a mapping to a
        framework's names (checked complete below), is a copy"""
        pkg = os.path.dirname(oomless.__file__)
        lists = [[v["name"] for v in o["values"] if not v["form"]] for o in _vocab.options()]
        lists.append([f["name"] for f in _vocab.plan_formats(None)])
        names = {o["name"] for o in _vocab.options()}
        for root, _, files in os.walk(pkg):
            for f in files:
                if not f.endswith(".py"):
                    continue
                with open(os.path.join(root, f), encoding="utf-8") as fp:
                    for n, line in enumerate(fp, 1):
                        if re.search(r"[\"'][a-z0-9+:-]+[\"']\s*:", line):
                            continue  # a mapping to a framework's names (checked below)
                        quoted = set(re.findall(r"[\"']([a-z0-9+:-]+)[\"']", line))
                        quoted -= names  # an option's name: a key of a plan document
                        for values in lists:
                            if len(values) >= 3 and len(quoted & set(values)) >= 3:
                                self.fail("%s:%d spells out values %s" % (
                                    os.path.relpath(os.path.join(root, f), pkg), n,
                                    sorted(quoted & set(values))))

    def test_the_framework_mappings_cover_every_value(self):
        """What the package maps to a framework's names (Lightning's precision and FSDP's
        sharding strategy, the Trainer's bf16/fp16 switches) has every value of the option"""
        lightning = importlib.import_module("oomless.lightning")
        hf = importlib.import_module("oomless.hf")
        precisions = {v["name"] for v in _vocab.option("precision")["values"]} - {"auto"}
        self.assertEqual(set(lightning._PRECISION), precisions)
        self.assertEqual(set(hf._SWITCH), precisions)
        shardings = {v["name"] for v in _vocab.option("sharding", "plan")["values"]}
        self.assertEqual(set(lightning._FSDP_SHARDING), shardings)


class Tracer(unittest.TestCase):
    """The tracer's argparse is the table's: each option the table gives trace, each value parses,
    the defaults are the table's."""

    def test_argparse_is_the_table(self):
        tm = importlib.import_module("oomless.trace.__main__")
        parser = tm._parser()
        actions = {a.dest: a for a in parser._actions}
        for o in _vocab.options("trace"):
            dest = o["name"].replace("-", "_")
            self.assertIn(dest, actions, "the tracer lacks --%s" % o["name"])
            a = actions[dest]
            if o["default"] is not None:
                self.assertEqual(str(a.default), o["default"], o["name"])
            if o["values"] and not all(v["form"] for v in o["values"]):
                self.assertEqual(a.metavar, "|".join(v["name"] for v in o["values"]), o["name"])
            for v in o["values"]:
                text = instance(v)
                if text is None:
                    continue
                got = parser.parse_args(["--" + o["name"], text])
                self.assertEqual(str(getattr(got, dest)), text, (o["name"], text))

    def test_auto_is_resolved_by_the_library(self):
        r = _vocab.resolved(method="lora", objective="dpo")
        self.assertEqual((r["precision"], r["reference"]), ("bf16", "adapter"))
        r = _vocab.resolved(method="full", objective="simpo")
        self.assertEqual((r["precision"], r["reference"]), ("amp-bf16", "none"))


class WebPage(unittest.TestCase):
    """The page's API gives every option of estimate, plan and table with its values and default,
    and the page's controls take their values and defaults from it, writing none itself."""

    def test_the_api_gives_every_value(self):
        exe = os.path.join(BUILD, "tests", "web_options")
        got = {o["name"]: o for o in json.loads(subprocess.run([exe], capture_output=True,
                                                                text=True, check=True).stdout)}
        for o in _vocab.options():
            if not set(o["commands"]) & {"estimate", "plan", "table"}:
                continue
            self.assertIn(o["name"], got)
            self.assertEqual([v["name"] for v in got[o["name"]]["values"]],
                             [v["name"] for v in o["values"]], o["name"])
            self.assertEqual(got[o["name"]]["default"], o["default"], o["name"])

    def test_the_page_writes_no_value(self):
        with open(os.path.join(SRC, "web", "app.js"), encoding="utf-8") as fp:
            app = fp.read()
        with open(os.path.join(SRC, "web", "index.html"), encoding="utf-8") as fp:
            html = fp.read()
        self.assertIn("oomw_options", app)
        quoted = set(re.findall(r"'([a-z0-9+:-]+)'", app))
        quoted -= {o["name"] for o in _vocab.options()}  # the page's fields and its documents' keys
        # the page's own first view (`make demo`'s LoRA workload) may name its method
        first = re.search(r"const FIRST_VIEW = \{(.*?)\};", app, re.S).group(1)
        own = set(re.findall(r"'([a-z0-9.+:-]+)'", first))
        # the curve's two lines: the peak without checkpointing and with full checkpointing,
        # the plan's own drawn as one of them
        own |= {"none", "full"}
        for o in _vocab.options("estimate"):
            for v in o["values"]:
                if v["name"] in quoted and v["name"] not in own:
                    self.fail("web/app.js writes %s's value '%s' itself" % (o["name"], v["name"]))
        self.assertNotIn('value="', html, "web/index.html sets a field's value itself")


if __name__ == "__main__":
    unittest.main()
