#!/bin/sh
# Installs the Debian packages oomless needs to build and test, and generates the de_DE.UTF-8
# locale (the tests run the library under a decimal-comma locale); nothing when all is present.
# Usage: scripts/install-deps.sh [--check] [--build] [--web] [--wheel]
#   --check  change nothing: list what is missing and the command that installs it, exit 1 if
#            anything is (a plain `make` runs `--check --build`)
#   --build  only what building needs (compiler, CMake, Ninja, the libraries, scdoc for the man
#            page), not what the tests and check-sanitize/check-valgrind use
#   --web    also what `make web` and `make check-web` need: emscripten and Chromium
#   --wheel  also what `make wheel-aarch64` and `make check-wheel` need: the aarch64 cross
#            compiler and its glibc, qemu-user to run the result, python3-venv
set -eu

BUILD_PKGS="cmake ninja-build gcc pkg-config libcmocka-dev libjson-c-dev libyaml-dev libncurses-dev scdoc"
# libcurl4-openssl-dev: libcurl (loaded at run time to fetch a model's config from the Hub) and
# curl/curl.h, which tests/unit/test_model.c checks lib/model/curl_abi.h against
PKGS="$BUILD_PKGS man-db python3 tmux jq clang llvm valgrind locales libcurl4-openssl-dev"
# the locales tests/unit/test_locale.c and tests/python/test_locale.py run under: ',' for '.',
# and a dotless lower-case I
LOCALES="de_DE.UTF-8 tr_TR.UTF-8"
CHECK=""
ONLY_BUILD=""
WEB=""
WHEEL=""
for arg in "$@"; do
    case $arg in
    --check) CHECK=1 ;;
    --build) ONLY_BUILD=1 ;;
    --web) WEB=1 ;;
    --wheel) WHEEL=1 ;;
    *) echo "usage: scripts/install-deps.sh [--check] [--build] [--web] [--wheel]" >&2; exit 2 ;;
    esac
done
if [ -n "$ONLY_BUILD" ]; then
    PKGS=$BUILD_PKGS
    LOCALES=""
fi
[ -z "$WEB" ] || PKGS="$PKGS emscripten chromium"
[ -z "$WHEEL" ] || PKGS="$PKGS gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static python3-venv"

# installed PKG: whether dpkg has it configured. "triggers-pending" and "triggers-awaited" are
# installed and configured packages whose triggers (man-db's index, ldconfig) have not run yet:
# what a package is in while another apt is still at work, or after an interrupted one.
installed() {
    case $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) in
    "install ok installed" | "install ok triggers-pending" | "install ok triggers-awaited") return 0 ;;
    *) return 1 ;;
    esac
}

missing=""
for p in $PKGS; do
    installed "$p" || missing="$missing $p"
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
elif ! installed "$rt"; then
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
    echo "oomless: to install them, run: scripts/install-deps.sh${ONLY_BUILD:+ --build}${WEB:+ --web}${WHEEL:+ --wheel}" >&2
    # shellcheck disable=SC2086
    [ -z "$missing" ] || echo "oomless:   (which runs: ${SUDO}apt-get install --no-install-recommends$missing)" >&2
    exit 1
fi

if [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; then
    echo "oomless: need root or sudo to install:$missing${need_locale:+ (and the locales$need_locale)}" >&2
    exit 1
fi
# apt_get ARGS...: apt-get, waiting for the package locks another apt holds (on a fresh cloud
# machine, unattended-upgrades runs `apt-get update` and an upgrade in its first minutes) for at
# most $OOMLESS_APT_LOCK_TIMEOUT seconds in all (default 600). apt waits for the dpkg lock itself
# (DPkg::Lock::Timeout) but fails at once on the lists lock `apt-get update` takes: that failure
# is retried, once a second, until the time is up; any other failure is final.
LOCK_TIMEOUT=${OOMLESS_APT_LOCK_TIMEOUT:-600}
case $LOCK_TIMEOUT in
'' | *[!0-9]*) echo "oomless: OOMLESS_APT_LOCK_TIMEOUT '$LOCK_TIMEOUT' must be a number of seconds" >&2; exit 2 ;;
esac
LOCK_DEADLINE=$(($(date +%s) + LOCK_TIMEOUT))
apt_get() {
    said=""
    while :; do
        left=$((LOCK_DEADLINE - $(date +%s)))
        [ "$left" -gt 0 ] || left=0
        errs=$(mktemp "${TMPDIR:-/tmp}/oomless-apt.XXXXXX")
        status=0
        ${SUDO}apt-get -o DPkg::Lock::Timeout="$left" "$@" 2>"$errs" || status=$?
        if [ "$status" -eq 0 ] || ! grep -q "Could not get lock" "$errs"; then
            cat "$errs" >&2
            rm -f "$errs"
            return "$status"
        fi
        if [ "$left" -le 0 ]; then
            cat "$errs" >&2
            rm -f "$errs"
            echo "oomless: another apt still holds the package lock after ${LOCK_TIMEOUT} s" \
                "(unattended-upgrades on a new machine?): let it finish, then run" \
                "scripts/install-deps.sh again (OOMLESS_APT_LOCK_TIMEOUT=SECONDS waits longer)" >&2
            return "$status"
        fi
        rm -f "$errs"
        if [ -z "$said" ]; then
            echo "oomless: another apt holds the package lock (unattended-upgrades on a new" \
                "machine?): waiting up to ${left} s more" >&2
            said=1
        fi
        sleep 1
    done
}
if [ -n "$missing" ]; then
    echo "oomless: installing Debian packages:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt_get update -qq
    # shellcheck disable=SC2086
    apt_get install -y -qq --no-install-recommends $missing
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
