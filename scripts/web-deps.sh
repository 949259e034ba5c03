#!/bin/sh
# Builds the two C libraries liboomless needs (json-c, libyaml) for WebAssembly, for `make web`.
# Usage: scripts/web-deps.sh DIR   (DIR/prefix receives include/ and lib/*.a; DIR/src the sources)
#
# The sources are Debian's own source packages of the versions Debian builds the native library
# with, fetched by `apt-get source` through a private apt configuration: deb-src entries made from
# this machine's deb entries, its own lists and cache under DIR. The system's apt configuration is
# not touched, and no root is needed. apt checks the files against the signed Sources index.
# Nothing is done when DIR/prefix is already complete.
set -eu

DIR=${1:?usage: scripts/web-deps.sh DIR}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
PREFIX="$DIR/prefix"
if [ -f "$PREFIX/lib/libjson-c.a" ] && [ -f "$PREFIX/lib/libyaml.a" ] &&
   [ -f "$PREFIX/include/yaml.h" ] && [ -f "$PREFIX/include/json-c/json.h" ]; then
    exit 0
fi
# Debian's nodejs finds its modules (acorn, which emcc's optimizer needs) in /usr/share/nodejs
# by itself; another node (nodesource's) needs telling.
export NODE_PATH="${NODE_PATH:+$NODE_PATH:}/usr/share/nodejs"

fetch_sources() {
    apt="$DIR/apt"
    rm -rf "$apt"
    mkdir -p "$apt/sources.list.d" "$apt/lists/partial" "$apt/cache/archives/partial" "$DIR/src"
    # deb-src twins of the configured Debian entries (deb822 .sources and one-line .list files)
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        sed 's/^Types:.*/Types: deb-src/' "$f" > "$apt/sources.list.d/$(basename "$f")"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" > "$apt/sources.list.d/$(basename "$f")"
    done
    set -- -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt/sources.list.d" \
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Debug::NoLocking=1" \
        -o "APT::Sandbox::User=$(id -un)"
    echo "oomless web: fetching the json-c and libyaml source packages (apt-get source)" >&2
    # a repository without sources only warns here; apt-get source below says what is missing
    apt-get "$@" -qq update || true
    (cd "$DIR/src" && apt-get "$@" -qq source --download-only json-c libyaml)
    rm -rf "$apt"
}

if ! ls "$DIR"/src/json-c_*.orig.tar.* >/dev/null 2>&1 ||
   ! ls "$DIR"/src/libyaml_*.orig.tar.* >/dev/null 2>&1; then
    fetch_sources
fi

build() { # NAME TARBALL
    name=$1
    tarball=$2
    rm -rf "$DIR/$name-src" "$DIR/$name-build"
    mkdir -p "$DIR/$name-src"
    tar -xf "$tarball" -C "$DIR/$name-src" --strip-components=1
    # CMAKE_POLICY_VERSION_MINIMUM: both projects ask for a CMake older than 3.5, which CMake 4
    # no longer accepts without it (older CMake ignores the variable)
    shift 2
    emcmake cmake -S "$DIR/$name-src" -B "$DIR/$name-build" -G Ninja \
        -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DBUILD_TESTING=OFF -DCMAKE_INSTALL_PREFIX="$PREFIX" "$@" \
        > "$DIR/$name-build.log" 2>&1 ||
        { cat "$DIR/$name-build.log" >&2; exit 1; }
    cmake --build "$DIR/$name-build" >> "$DIR/$name-build.log" 2>&1 &&
        cmake --install "$DIR/$name-build" >> "$DIR/$name-build.log" 2>&1 ||
        { tail -40 "$DIR/$name-build.log" >&2; exit 1; }
    rm -rf "$DIR/$name-src" "$DIR/$name-build"
}

echo "oomless web: building json-c and libyaml with emscripten" >&2
build json-c "$(ls "$DIR"/src/json-c_*.orig.tar.* | head -n 1)" \
    -DBUILD_STATIC_LIBS=ON -DDISABLE_WERROR=ON -DBUILD_APPS=OFF
build libyaml "$(ls "$DIR"/src/libyaml_*.orig.tar.* | head -n 1)"
ls "$DIR"/src/*.dsc | sed 's|.*/||; s|\.dsc$||' > "$PREFIX/SOURCES"
