"""The build backend of the oomless Python package (PEP 517, PEP 660), standard library only.

It needs nothing installed, so that ``pip install --no-build-isolation ./bindings/python`` works
offline in a fresh virtual environment (setuptools would need ``wheel`` as well, and Python 3.12
venvs have neither).

The wheel holds the ``oomless`` package and, when a built liboomless is found, bundles it:
``oomless/lib/liboomless.so.1``, the ``oomless`` program as ``oomless/bin/oomless`` and the
data files as ``oomless/share/oomless/`` (the library finds its data at ``../share/oomless``
from its own file, so the bundled tree needs no environment variable); the console script
``oomless`` (``oomless.__main__:main``) runs the bundled program. The build directory is
``$OOMLESS_BUILD_DIR``, else the source tree's ``build/``; ``OOMLESS_BUNDLE=no`` (or pip's
``--config-settings bundle=no``) builds a pure-Python wheel that uses an installed liboomless
(``make install``) instead.

A bundled wheel is tagged ``py3-none-linux_<machine>``, the machine read from the bundled
library's ELF header (a cross build is tagged for its target). Built with
``-DOOMLESS_STATIC_DEPS=ON`` (scripts/wheel-build.sh) its two ELF files need nothing but glibc,
and ``auditwheel repair`` gives it the manylinux tag a package index takes; a build linking the
system's json-c and libyaml is for this machine only.

The sdist holds the C sources under ``source/`` (CMake project, headers, library, tool, data):
a wheel built from it (``pip install oomless`` where no wheel fits) configures and builds them
with CMake first, against the system's json-c, libyaml and ncursesw.
"""
import base64
import hashlib
import io
import os
import re
import stat
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)                      # bindings/python, or the unpacked sdist
SDIST_SOURCE = os.path.join(PKG_ROOT, "source")       # the C sources, in an sdist
IN_SDIST = os.path.isfile(os.path.join(SDIST_SOURCE, "CMakeLists.txt"))
SRC_ROOT = SDIST_SOURCE if IN_SDIST else os.path.dirname(os.path.dirname(PKG_ROOT))
VERSION_FILE = os.path.join(HERE, "VERSION")          # written into an sdist
# what the sdist carries of the source tree: enough for CMake to build the library and the tool
SDIST_TREE = ("CMakeLists.txt", "cmake", "include", "lib", "cli", "data")


def _toml_value(text):
    """A TOML string or array of strings (the only values pyproject.toml uses here)."""
    text = text.strip()
    if text.startswith("["):
        return re.findall(r'"((?:[^"\\]|\\.)*)"', text)
    m = re.match(r'"((?:[^"\\]|\\.)*)"', text)
    return m.group(1) if m else text


def _project():
    """pyproject.toml's [project] table, with its sub-tables ([project.urls], ...) as dicts.
    tomllib is in the standard library from Python 3.11 on; before, a reader of the subset this
    file uses: strings, arrays of strings (over several lines), tables of those."""
    path = os.path.join(PKG_ROOT, "pyproject.toml")
    try:
        import tomllib
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    except ImportError:
        pass
    out, table, pending = {}, None, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split(" #")[0].strip() if not line.lstrip().startswith("#") else ""
            if pending is not None:
                key, text = pending
                text += " " + line
                if "]" in line:
                    table[key] = _toml_value(text)
                    pending = None
                else:
                    pending = (key, text)
                continue
            if not line:
                continue
            if line.startswith("["):
                name = line.strip("[]").strip()
                if name == "project":
                    table = out
                elif name.startswith("project."):
                    table = out.setdefault(name[len("project."):].strip('"'), {})
                else:
                    table = None
                continue
            m = re.match(r'("?[A-Za-z0-9_.-]+"?)\s*=\s*(.*)$', line)
            if table is None or not m:
                continue
            key, value = m.group(1).strip('"'), m.group(2)
            if value.startswith("[") and "]" not in value:
                pending = (key, value)
            else:
                table[key] = _toml_value(value)
    return out


def version():
    """OOMLESS_VERSION_MAJOR.MINOR.PATCH of include/oomless.h (or the sdist's VERSION)."""
    header = os.path.join(SRC_ROOT, "include", "oomless.h")
    if os.path.exists(header):
        with open(header, encoding="utf-8") as f:
            text = f.read()
        parts = [re.search(r"#define OOMLESS_VERSION_%s (\d+)" % k, text) for k in
                 ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(m.group(1) for m in parts)
    if os.path.exists(VERSION_FILE):
        with open(VERSION_FILE, encoding="utf-8") as f:
            return f.read().strip()
    raise RuntimeError("oomless: no include/oomless.h beside bindings/python and no "
                       "_build/VERSION: build from the source tree or its sdist")


def _setting(config_settings, name, env):
    return (config_settings or {}).get(name) or os.environ.get(env)


def _bundle_dir(config_settings):
    """The build directory whose liboomless is bundled, or None. In an sdist the C sources are
    built first (_compile)."""
    setting = _setting(config_settings, "bundle", "OOMLESS_BUNDLE") or "auto"
    if setting == "no":
        return None
    build = os.environ.get("OOMLESS_BUILD_DIR") or os.path.join(SRC_ROOT, "build")
    lib = os.path.join(build, "liboomless.so.1")
    if os.path.exists(lib):
        return build
    if IN_SDIST and not os.environ.get("OOMLESS_BUILD_DIR"):
        return _compile()
    if setting == "yes":
        raise RuntimeError("oomless: bundle=yes but there is no %s (run make first)" % lib)
    return None


def _compile():
    """Configure and build the sdist's C sources with CMake (Ninja when there is one) in a
    temporary folder; its path. The tests and the man page are left out."""
    import shutil
    import subprocess
    import tempfile
    build = tempfile.mkdtemp(prefix="oomless-build-")
    args = ["cmake", "-S", SRC_ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
            "-DOOMLESS_TESTS=OFF", "-DOOMLESS_MAN=OFF"]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    for step in (args, ["cmake", "--build", build, "--parallel", str(os.cpu_count() or 1)]):
        try:
            subprocess.run(step, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise RuntimeError("oomless: building the C library from the sdist failed (%s): it "
                               "needs CMake 3.20 or later, a C compiler and the development "
                               "files of json-c, libyaml and ncursesw (Debian: libjson-c-dev "
                               "libyaml-dev libncurses-dev pkg-config)" % exc) from exc
    return build


ELF_MACHINES = {3: "i686", 62: "x86_64", 183: "aarch64", 40: "armv7l", 21: "ppc64le",
                22: "s390x", 243: "riscv64"}


def _elf_machine(path):
    """The machine an ELF file is built for, as wheel tags spell it (e_machine of its header;
    ppc64 is taken as little-endian, the only one manylinux knows)."""
    with open(path, "rb") as f:
        head = f.read(20)
    if head[:4] != b"\x7fELF":
        raise RuntimeError("oomless: %s is not an ELF file" % path)
    machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    if machine not in ELF_MACHINES:
        raise RuntimeError("oomless: %s is built for ELF machine %d, which has no wheel tag here"
                           % (path, machine))
    return ELF_MACHINES[machine]


def _files(bundle):
    """(path in the wheel, bytes, executable) of everything the package installs."""
    out = []
    pkg = os.path.join(PKG_ROOT, "oomless")
    for root, dirs, names in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith((".py", ".typed")):
                full = os.path.join(root, name)
                with open(full, "rb") as f:
                    out.append((os.path.relpath(full, PKG_ROOT).replace(os.sep, "/"), f.read(),
                                False))
    if bundle:
        with open(os.path.join(bundle, "liboomless.so.1"), "rb") as f:  # follows the links
            out.append(("oomless/lib/liboomless.so.1", f.read(), True))
        cli = os.path.join(bundle, "oomless")
        if os.path.exists(cli):
            with open(cli, "rb") as f:
                out.append(("oomless/bin/oomless", f.read(), True))
        data = os.path.join(SRC_ROOT, "data")
        for root, dirs, names in os.walk(data):
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(root, name)
                with open(full, "rb") as f:
                    out.append(("oomless/share/oomless/" + os.path.relpath(full, data)
                                .replace(os.sep, "/"), f.read(), False))
    return out


def _metadata():
    """The core metadata (METADATA, PKG-INFO) from pyproject.toml's [project], the package's
    README as its long description."""
    project = _project()
    lines = ["Metadata-Version: 2.1", "Name: %s" % project.get("name", "oomless"),
             "Version: %s" % version(), "Summary: %s" % project.get("description", "")]
    for key, field in (("requires-python", "Requires-Python"), ("keywords", "Keywords")):
        value = project.get(key)
        if value:
            lines.append("%s: %s" % (field, ",".join(value) if isinstance(value, list) else value))
    lines += ["Classifier: %s" % c for c in project.get("classifiers") or []]
    lines += ["Project-URL: %s, %s" % (k, v) for k, v in (project.get("urls") or {}).items()]
    for extra, reqs in sorted((project.get("optional-dependencies") or {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        lines += ["Requires-Dist: %s; extra == \"%s\"" % (r, extra) for r in reqs]
    readme = os.path.join(PKG_ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _entry_points():
    """entry_points.txt: [project.scripts] as console scripts."""
    scripts = _project().get("scripts") or {}
    if not scripts:
        return None
    return "[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in sorted(scripts.items()))


def _tag(bundle):
    if not bundle:
        return "py3-none-any"
    return "py3-none-linux_" + _elf_machine(os.path.join(bundle, "liboomless.so.1"))


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _write_wheel(directory, files, tag):
    name = "oomless-%s" % version()
    dist_info = name + ".dist-info"
    wheel_name = "%s-%s.whl" % (name, tag)
    files = list(files) + [
        (dist_info + "/METADATA", _metadata().encode(), False),
        (dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: oomless_build\nRoot-Is-Purelib: "
                                "%s\nTag: %s\n" % ("true" if tag.endswith("any") else "false",
                                                   tag)).encode(), False),
        (dist_info + "/top_level.txt", b"oomless\n", False),
    ]
    entry_points = _entry_points()
    if entry_points:
        files.append((dist_info + "/entry_points.txt", entry_points.encode(), False))
    record = [_record_line(p, d) for p, d, _x in files] + [dist_info + "/RECORD,,"]
    files.append((dist_info + "/RECORD", ("\n".join(record) + "\n").encode(), False))
    with zipfile.ZipFile(os.path.join(directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data, executable in files:
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel_name


# ---- PEP 517 hooks ----------------------------------------------------------------------------

def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_wheel(config_settings=None):
    """In an sdist, CMake (and a build tool) from the index when the machine has none."""
    import shutil
    if not IN_SDIST or _setting(config_settings, "bundle", "OOMLESS_BUNDLE") == "no":
        return []
    needs = [] if shutil.which("cmake") else ["cmake>=3.20"]
    if not shutil.which("ninja") and not shutil.which("make"):
        needs.append("ninja")
    return needs


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    bundle = _bundle_dir(config_settings)
    return _write_wheel(wheel_directory, _files(bundle), _tag(bundle))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a .pth file that puts bindings/python on sys.path (the library is then found
    by $OOMLESS_LIBRARY, the source tree's build/ or the system's, as _native.py says)."""
    pth = (PKG_ROOT + "\n").encode()
    return _write_wheel(wheel_directory, [("oomless_editable.pth", pth, False)], "py3-none-any")


def _source_files():
    """(path in the sdist's source/, full path) of the C sources SDIST_TREE names."""
    out = []
    for top in SDIST_TREE:
        full = os.path.join(SRC_ROOT, top)
        if os.path.isfile(full):
            out.append((top, full))
            continue
        for root, dirs, names in os.walk(full):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                path = os.path.join(root, name)
                out.append((os.path.relpath(path, SRC_ROOT).replace(os.sep, "/"), path))
    return out


def build_sdist(sdist_directory, config_settings=None):
    name = "oomless-%s" % version()
    path = os.path.join(sdist_directory, name + ".tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(rel, data, mode=0o644):
            info = tarfile.TarInfo("%s/%s" % (name, rel))
            info.size, info.mode, info.mtime = len(data), mode, 1577836800
            tar.addfile(info, io.BytesIO(data))
        for rel, data, _x in _files(None):
            add(rel, data)
        for rel in ("pyproject.toml", "README.md", "_build/oomless_build.py"):
            with open(os.path.join(PKG_ROOT, rel), "rb") as f:
                add(rel, f.read())
        for rel, full in _source_files():
            with open(full, "rb") as f:
                add("source/" + rel, f.read(), 0o755 if os.access(full, os.X_OK) else 0o644)
        add("_build/VERSION", (version() + "\n").encode())
        add("PKG-INFO", _metadata().encode())
    return os.path.basename(path)
