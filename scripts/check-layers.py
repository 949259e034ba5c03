#!/usr/bin/env python3
"""check-layers.py - the library's folders depend on each other one way only.

Usage: scripts/check-layers.py SOURCE_DIR [BUILD_DIR]

Two checks, both against the table LAYERS below (lib/README.md explains it):
  1. includes: a file in lib/X may include "X/..." and "Y/..." only for Y in LAYERS[X], and X has
     a README and its contract X/X.h but no X/X.c (the file the contract would seem to belong
     to: each file is named after what it does, as plan_search.c); the tool
     (cli/) only "oomless.h", "core/core.h" and its own headers; the page's API (web/api/) only
     "oomless.h", but for the files WEB_LIBRARY names, which the WebAssembly build links into the
     library in place of one of its own and which belong to that folder's layer;
  2. symbols (when BUILD_DIR holds the object files): every function or variable one object file
     uses from another must come from the same folder or an allowed one, the tool's from the
     public API (oom_*) or core/, and no two files (in lib/ or cli/) may use each other, directly
     or around a longer circle. web/api/ is not built natively: its sources are read for oomi_
     names instead.
The symbol check is the stronger one: a call through a public oom_* function declared in
oomless.h needs no internal include, but it is still a dependency. Exit 1 with one line per
violation, 0 when the tree is clean.
"""
import os
import re
import subprocess
import sys

# folder -> folders it may use (besides itself). Keep in step with lib/README.md.
LAYERS = {
    "core": [],
    "gpu": ["core"],
    "model": ["core"],
    "estimate": ["model", "gpu", "core"],
    "calib": ["gpu", "core"],
    "plan": ["estimate", "model", "calib", "gpu", "core"],
    "job": ["calib", "gpu", "core"],
    "watch": ["gpu", "core"],
    "apply": ["core"],
}
# The tool may use, of the library's internals, only these headers (docs/HACKING.md)
CLI_INCLUDES = {"oomless.h", "core/core.h"}
# web/api/ files the WebAssembly build links into the library in place of a library file, and the
# folder whose layer they belong to (web/CMakeLists.txt)
WEB_LIBRARY = {"gpu_none.c": "gpu", "hub_none.c": "model"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
INTERNAL_NAME = re.compile(r"\b(oomi_\w+|OOMI_\w+)")


def check_includes(src):
    errors = []
    lib = os.path.join(src, "lib")
    for folder in sorted(os.listdir(lib)):
        path = os.path.join(lib, folder)
        if not os.path.isdir(path):
            continue
        if folder not in LAYERS:
            errors.append("lib/%s: a folder the layer table does not know (add it to "
                          "scripts/check-layers.py and lib/README.md)" % folder)
            continue
        allowed = set(LAYERS[folder]) | {folder}
        for needed in ("README.md", folder + ".h"):
            if not os.path.isfile(os.path.join(path, needed)):
                errors.append("lib/%s: no %s (each folder states its job in a README and shares "
                              "its declarations in one header named after it)" % (folder, needed))
        if os.path.isfile(os.path.join(path, folder + ".c")):
            errors.append("lib/%s/%s.c: %s/%s.h is the folder's contract, not this file's header: "
                          "name the file after what it does (%s_run.c, ...)"
                          % (folder, folder, folder, folder, folder))
        for name in sorted(os.listdir(path)):
            if not name.endswith((".c", ".h")):
                continue
            with open(os.path.join(path, name), encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    if target == "oomless.h":
                        continue
                    if "/" not in target:
                        errors.append("lib/%s/%s:%d: include \"%s\": name the folder "
                                      "(\"%s/%s\")" % (folder, name, lineno, target, folder,
                                                       target))
                        continue
                    dep = target.split("/", 1)[0]
                    if dep not in allowed:
                        errors.append("lib/%s/%s:%d: include \"%s\": %s may not use %s (allowed: "
                                      "%s)" % (folder, name, lineno, target, folder, dep,
                                               ", ".join(LAYERS[folder]) or "nothing"))
    return errors


def includes(path):
    """(line number, included name) of each #include "..." of a file"""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield lineno, m.group(1)


def sources(folder):
    return sorted(n for n in os.listdir(folder) if n.endswith((".c", ".h"))) \
        if os.path.isdir(folder) else []


def check_tool_includes(src):
    """cli/: the public header, core/core.h and the tool's own headers; web/api/: the public
    header, but for the WEB_LIBRARY files (their folder's rule)"""
    errors = []
    cli = os.path.join(src, "cli")
    own = set(sources(cli))
    for name in sources(cli):
        for lineno, target in includes(os.path.join(cli, name)):
            if target not in CLI_INCLUDES and target not in own:
                errors.append("cli/%s:%d: include \"%s\": the tool uses the public API "
                              "(oomless.h) and core/core.h only" % (name, lineno, target))
    api = os.path.join(src, "web", "api")
    for name in sources(api):
        layer = WEB_LIBRARY.get(name)
        path = os.path.join(api, name)
        for lineno, target in includes(path):
            dep = target.split("/", 1)[0] if "/" in target else None
            if target == "oomless.h" or (layer and dep in set(LAYERS[layer]) | {layer}):
                continue
            errors.append("web/api/%s:%d: include \"%s\": %s" % (
                name, lineno, target,
                "the page's API uses the public API (oomless.h) only" if not layer else
                "%s belongs to lib/%s, which may not use %s" % (name, layer, dep)))
        if layer:
            continue
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                m = INTERNAL_NAME.search(line)
                if m:
                    errors.append("web/api/%s:%d: uses %s: the page's API uses the public API "
                                  "only" % (name, lineno, m.group(1)))
    return errors


def object_files(build):
    # only the targets' own folders: elsewhere in the build tree, the checker's tests build fake
    # trees (under the tests' TMPDIR) while this runs
    found = []
    for target in ("oomless_objs.dir", "oomless_cli_objs.dir"):
        top = os.path.join(build, "CMakeFiles", target)
        for root, _dirs, files in os.walk(top):
            for name in files:
                if name.endswith(".c.o"):
                    full = os.path.join(root, name)  # "lib/core/alloc.c":
                    found.append((os.path.relpath(full, top).replace(os.sep, "/")[:-2], full))
    return found


def symbols(path):
    out = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRC":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def find_cycle(graph):
    """Some circle of the file graph as a list of files, or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def check_symbols(build):
    objs = object_files(build)
    if not objs:
        return ["%s: no object files of liboomless found (build first)" % build]
    owner, uses = {}, {}
    for src, path in objs:
        defined, used = symbols(path)
        for sym in defined:
            owner[sym] = src
        uses[src] = used
    errors = []
    graph = {}
    for src, used in sorted(uses.items()):
        for sym in sorted(used):
            dst = owner.get(sym)
            if not dst or dst == src:
                continue
            graph.setdefault(src, set()).add(dst)
            if not (src.startswith("lib/") and dst.startswith("lib/")):
                if src.startswith("lib/") and dst.startswith("cli/"):
                    errors.append("%s uses %s from %s: the library never calls the tool"
                                  % (src, sym, dst))
                elif (src.startswith("cli/") and dst.startswith("lib/") and
                      not sym.startswith("oom_") and not dst.startswith("lib/core/")):
                    errors.append("%s uses %s from %s: the tool uses the public API (oom_*) "
                                  "and core/ only" % (src, sym, dst))
                continue
            a, b = src.split("/")[1], dst.split("/")[1]
            if a != b and b not in LAYERS.get(a, []):
                errors.append("%s uses %s from %s: %s may not use %s" % (src, sym, dst, a, b))
    cycle = find_cycle(graph)
    if cycle:
        errors.append("files depend on each other in a circle: " + " -> ".join(cycle))
    return errors


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    errors = check_includes(argv[1]) + check_tool_includes(argv[1])
    if len(argv) == 3:
        errors += check_symbols(argv[2])
    for e in errors:
        print(e)
    if errors:
        print("check-layers: %d problem(s); the rules are in lib/README.md" % len(errors))
        return 1
    print("check-layers: every dependency points one way")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
