#!/bin/sh
# Installs the Debian packages oomless needs to build and test, and generates the de_DE.UTF-8
# locale (the tests run the library under a decimal-comma locale); nothing when all is present.
# Usage: scripts/install-deps.sh [--check] [--build] [--web]
#   --check  change nothing: list what is missing and the command that installs it, exit 1 if
#            anything is (a plain `make` runs `--check --build`)
#   --build  only what building needs (compiler, CMake, Ninja, the libraries, scdoc for the man
#            page), not what the tests and check-sanitize/check-valgrind use
#   --web    also what `make web` and `make check-web` need: emscripten and Chromium
set -eu

BUILD_PKGS="cmake ninja-build gcc pkg-config libcmocka-dev libjson-c-dev libyaml-dev libncurses-dev scdoc"
PKGS="$BUILD_PKGS man-db python3 tmux jq clang llvm valgrind locales"
# the locales tests/unit/test_locale.c and tests/python/test_locale.py run under: ',' for '.',
# and a dotless lower-case I
LOCALES="de_DE.UTF-8 tr_TR.UTF-8"
CHECK=""
ONLY_BUILD=""
WEB=""
for arg in "$@"; do
    case $arg in
    --check) CHECK=1 ;;
    --build) ONLY_BUILD=1 ;;
    --web) WEB=1 ;;
    *) echo "usage: scripts/install-deps.sh [--check] [--build] [--web]" >&2; exit 2 ;;
    esac
done
if [ -n "$ONLY_BUILD" ]; then
    PKGS=$BUILD_PKGS
    LOCALES=""
fi
[ -z "$WEB" ] || PKGS="$PKGS emscripten chromium"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

# clang's sanitizer runtimes (libclang_rt.asan-x86_64.so, used by make check-sanitize and make fuzz)
# are a separate Debian package named after clang's major version: clang 14 needs
# libclang-rt-14-dev. Ask for the one matching the clang that is, or will be, installed.
clang_major=""
if [ -n "$ONLY_BUILD" ]; then
    :
elif command -v clang >/dev/null 2>&1; then
    clang_major=$(clang -dumpversion 2>/dev/null | cut -d. -f1)
else
    clang_major=$(apt-cache depends clang 2>/dev/null | sed -n 's/.*Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n 1)
    [ -n "$clang_major" ] || clang_major=14   # Debian 12's clang
fi
rt="libclang-rt-$clang_major-dev"
if [ -n "$ONLY_BUILD" ]; then
    :
elif ! dpkg-query -W -f='${Status}' "$rt" 2>/dev/null | grep -q "install ok installed"; then
    # older Debian releases ship the runtime inside libclang-common-N-dev: look for the file itself
    if ! { command -v clang >/dev/null 2>&1 &&
           [ -f "$(clang -print-file-name=libclang_rt.asan-x86_64.so)" ]; }; then
        missing="$missing $rt"
    fi
fi

# have_locale NAME: whether it is installed (`locale -a` spells de_DE.UTF-8 de_DE.utf8)
have_locale() {
    command -v locale >/dev/null 2>&1 && locale -a 2>/dev/null | grep -qix "${1%%.*}\.utf-\{0,1\}8"
}
need_locale=""
for l in $LOCALES; do
    have_locale "$l" || need_locale="$need_locale $l"
done

if [ -z "$missing" ] && [ -z "$need_locale" ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
else
    SUDO="sudo "
fi
if [ -n "$CHECK" ]; then
    [ -z "$missing" ] || echo "oomless: missing Debian packages:$missing" >&2
    [ -z "$need_locale" ] || echo "oomless: missing locales:$need_locale" >&2
    echo "oomless: to install them, run: scripts/install-deps.sh${ONLY_BUILD:+ --build}${WEB:+ --web}" >&2
    # shellcheck disable=SC2086
    [ -z "$missing" ] || echo "oomless:   (which runs: ${SUDO}apt-get install --no-install-recommends$missing)" >&2
    exit 1
fi

if [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; then
    echo "oomless: need root or sudo to install:$missing${need_locale:+ (and the locales$need_locale)}" >&2
    exit 1
fi
if [ -n "$missing" ]; then
    echo "oomless: installing Debian packages:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    ${SUDO}apt-get update -qq
    # shellcheck disable=SC2086
    ${SUDO}apt-get install -y -qq --no-install-recommends $missing
fi
for l in $need_locale; do
    have_locale "$l" && continue
    echo "oomless: generating the locale $l" >&2
    # listed in /etc/locale.gen so that a later locale-gen keeps it, and built now with localedef
    # (locale-gen would rebuild every listed locale)
    if [ -f /etc/locale.gen ] && ! grep -qx "$l UTF-8" /etc/locale.gen; then
        if grep -qx "# *$l UTF-8" /etc/locale.gen; then
            $SUDO sed -i "s/^# *$l UTF-8\$/$l UTF-8/" /etc/locale.gen
        else
            echo "$l UTF-8" | $SUDO tee -a /etc/locale.gen >/dev/null
        fi
    fi
    # -c: write it even with warnings (its status is then 1; have_locale is the check)
    $SUDO localedef -i "${l%%.*}" -c -f UTF-8 "$l" || true
    have_locale "$l" || { echo "oomless: the locale $l could not be generated" >&2; exit 1; }
done
