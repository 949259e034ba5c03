#!/bin/sh
# The static libraries and headers a cross-built wheel links (scripts/wheel-build.sh aarch64):
# Debian's own -dev packages of json-c, libyaml and ncurses for the target architecture, of the
# versions this machine's Debian builds, unpacked into DIR/sysroot (OOMLESS_DEPS_SYSROOT).
# Usage: scripts/wheel-deps.sh ARCH DIR [--python]   (ARCH a Debian architecture: arm64)
#   --python  instead: Debian's Python 3 of ARCH (interpreter, standard library, the libraries
#             ctypes and the standard modules load) unpacked into DIR/python-sysroot, for
#             tests/wheel/check.sh to import the wheel's package under qemu-user
#
# They are fetched by `apt-get download` through a private apt configuration: this machine's deb
# entries, APT::Architecture=ARCH, its own lists and cache under DIR and an empty dpkg status. The
# system's apt configuration and its list of architectures are not touched, and no root is
# needed; apt checks the files against the signed Packages index. Nothing is done when
# DIR/sysroot already holds them.
set -eu

ARCH=${1:?usage: scripts/wheel-deps.sh ARCH DIR}
DIR=${2:?usage: scripts/wheel-deps.sh ARCH DIR}
PKGS="libjson-c-dev libyaml-dev libncurses-dev"
PYTHON=""
[ "${3:-}" != --python ] || PYTHON=1
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
SYSROOT="$DIR/sysroot"
[ -z "$PYTHON" ] || SYSROOT="$DIR/python-sysroot"
case $ARCH in
arm64) triplet=aarch64-linux-gnu ;;
amd64) triplet=x86_64-linux-gnu ;;
*) echo "oomless wheel: no wheel for the Debian architecture '$ARCH' (arm64, amd64)" >&2; exit 2 ;;
esac
libdir="$SYSROOT/usr/lib/$triplet"
if [ -z "$PYTHON" ] && [ -f "$libdir/libjson-c.a" ] && [ -f "$libdir/libyaml.a" ] &&
   [ -f "$libdir/libncursesw.a" ] && [ -f "$libdir/libtinfo.a" ]; then
    exit 0
fi
if [ -n "$PYTHON" ] && ls "$SYSROOT"/usr/bin/python3.* >/dev/null 2>&1; then
    exit 0
fi

apt="$DIR/apt"
rm -rf "$apt" "$SYSROOT"
mkdir -p "$apt/sources.list.d" "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && cp "$f" "$apt/sources.list.d/"
done
# (sources.list is read only under a name ending in .list)
[ ! -f "$apt/sources.list.d/sources.list" ] ||
    mv "$apt/sources.list.d/sources.list" "$apt/sources.list.d/main.list"
set -- -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt/sources.list.d" \
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Dir::State::status=/dev/null" \
    -o "Debug::NoLocking=1" -o "APT::Architecture=$ARCH" -o "APT::Architectures::=$ARCH" \
    -o "APT::Sandbox::User=$(id -un)"
apt-get "$@" -qq update
if [ -n "$PYTHON" ]; then
    # python3-minimal's interpreter (python3.11 on Debian 12) and what it and ctypes load
    py=$(apt-cache "$@" depends python3-minimal | sed -n 's/.*Depends: \(python3\.[0-9]*\)-minimal.*/\1/p' | head -n 1)
    [ -n "$py" ] || { echo "oomless wheel: no python3-minimal for $ARCH" >&2; exit 1; }
    PKGS="$py-minimal lib$py-minimal lib$py-stdlib libc6 libffi8 zlib1g libexpat1 libbz2-1.0 liblzma5"
fi
echo "oomless wheel: fetching $PKGS for $ARCH (apt-get download)" >&2
# shellcheck disable=SC2086
(cd "$apt/debs" && apt-get "$@" -qq download $PKGS)
mkdir -p "$SYSROOT"
for deb in "$apt"/debs/*.deb; do
    dpkg-deb -x "$deb" "$SYSROOT"
    basename "$deb" >> "$SYSROOT/PACKAGES"
done
rm -rf "$apt"
[ -z "$PYTHON" ] || exit 0
for a in libjson-c.a libyaml.a libncursesw.a libtinfo.a; do
    [ -f "$libdir/$a" ] || { echo "oomless wheel: $a is not in $PKGS for $ARCH" >&2; exit 1; }
done
