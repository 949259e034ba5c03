#!/bin/sh
# `make web`: the WebAssembly build of liboomless and the page, into BUILD/web.
# Usage: scripts/web-build.sh BUILD   (BUILD/oomless, the native tool, must be built: the page's
# accuracy figure is measured with it, and the browser test compares the page with it)
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
# Debian's nodejs finds its modules (acorn, for emcc's optimizer) in /usr/share/nodejs by itself;
# another node needs telling
export NODE_PATH="${NODE_PATH:+$NODE_PATH:}/usr/share/nodejs"

scripts/web-deps.sh "$BUILD/web-deps"
if [ ! -f "$BUILD/web-cmake/build.ninja" ]; then
    emcmake cmake -S web -B "$BUILD/web-cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DOOMLESS_WEB_DEPS="$BUILD/web-deps/prefix" -DOOMLESS_WEB_OUT="$BUILD/web" >/dev/null
fi
cmake --build "$BUILD/web-cmake"

# The accuracy figure the page shows, measured now by the native estimator (the same code) against
# the public measurements in bench/accuracy/public, with the command that measured it.
python3 web/accuracy.py "$BUILD/oomless" > "$BUILD/web/accuracy.json.tmp"
mv "$BUILD/web/accuracy.json.tmp" "$BUILD/web/accuracy.json"
echo "oomless web: $BUILD/web (make web-serve, or python3 -m http.server -d $BUILD/web)"
