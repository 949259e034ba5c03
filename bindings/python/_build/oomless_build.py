"""The build backend of the oomless Python package (PEP 517, PEP 660), standard library only.

It needs nothing installed, so that ``pip install --no-build-isolation ./bindings/python`` works
offline in a fresh virtual environment (setuptools would need ``wheel`` as well, and Python 3.12
venvs have neither).

The wheel holds the ``oomless`` package and, when a built liboomless is found, bundles it:
``oomless/lib/liboomless.so.1``, the ``oomless`` program as ``oomless/bin/oomless`` and the
data files as ``oomless/share/oomless/`` (the library finds its data at ``../share/oomless``
from its own file, so the bundled tree needs no environment variable). The build directory is
``$OOMLESS_BUILD_DIR``, else the source tree's ``build/``; ``OOMLESS_BUNDLE=no`` (or pip's
``--config-settings bundle=no``) builds a pure-Python wheel that uses an installed liboomless
(``make install``) instead. A bundled wheel is tagged for this platform and links the system's
json-c and libyaml like the build it comes from: it is for this machine, not for an index.
"""
import base64
import hashlib
import io
import os
import re
import stat
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)                      # bindings/python
SRC_ROOT = os.path.dirname(os.path.dirname(PKG_ROOT))  # the source tree
VERSION_FILE = os.path.join(HERE, "VERSION")          # written into an sdist


def _project():
    """name, description and requires-python of pyproject.toml's [project] (string keys only:
    tomllib is in the standard library from Python 3.11 on)."""
    path = os.path.join(PKG_ROOT, "pyproject.toml")
    try:
        import tomllib
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    except ImportError:
        pass
    out, section = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]").strip()
                continue
            m = re.match(r'([A-Za-z0-9_-]+)\s*=\s*"([^"]*)"\s*$', line)
            if section == "project" and m:
                out[m.group(1)] = m.group(2)
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


def _bundle_dir(config_settings):
    """The build directory whose liboomless is bundled, or None."""
    setting = (config_settings or {}).get("bundle") or os.environ.get("OOMLESS_BUNDLE", "auto")
    if setting == "no":
        return None
    build = os.environ.get("OOMLESS_BUILD_DIR") or os.path.join(SRC_ROOT, "build")
    lib = os.path.join(build, "liboomless.so.1")
    if os.path.exists(lib):
        return build
    if setting == "yes":
        raise RuntimeError("oomless: bundle=yes but there is no %s (run make first)" % lib)
    return None


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
    project = _project()
    lines = ["Metadata-Version: 2.1", "Name: %s" % project.get("name", "oomless"),
             "Version: %s" % version(), "Summary: %s" % project.get("description", "")]
    if project.get("requires-python"):
        lines.append("Requires-Python: %s" % project["requires-python"])
    for extra, reqs in sorted((project.get("optional-dependencies") or {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        lines += ["Requires-Dist: %s; extra == \"%s\"" % (r, extra) for r in reqs]
    return "\n".join(lines) + "\n"


def _tag(bundled):
    if not bundled:
        return "py3-none-any"
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


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

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    bundle = _bundle_dir(config_settings)
    return _write_wheel(wheel_directory, _files(bundle), _tag(bundle is not None))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a .pth file that puts bindings/python on sys.path (the library is then found
    by $OOMLESS_LIBRARY, the source tree's build/ or the system's, as _native.py says)."""
    pth = (PKG_ROOT + "\n").encode()
    return _write_wheel(wheel_directory, [("oomless_editable.pth", pth, False)], "py3-none-any")


def build_sdist(sdist_directory, config_settings=None):
    name = "oomless-%s" % version()
    path = os.path.join(sdist_directory, name + ".tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(rel, data):
            info = tarfile.TarInfo("%s/%s" % (name, rel))
            info.size, info.mode, info.mtime = len(data), 0o644, 1577836800
            tar.addfile(info, io.BytesIO(data))
        for rel, data, _x in _files(None):
            add(rel, data)
        for rel in ("pyproject.toml", "README.md", "_build/oomless_build.py"):
            with open(os.path.join(PKG_ROOT, rel), "rb") as f:
                add(rel, f.read())
        add("_build/VERSION", (version() + "\n").encode())
        add("PKG-INFO", _metadata().encode())
    return os.path.basename(path)
