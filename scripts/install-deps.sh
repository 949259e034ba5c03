#!/bin/sh
# Installs the Debian packages oomless needs to build and test, and nothing when all are present.
# Usage: scripts/install-deps.sh [--check]   (--check: only report what is missing, exit 1 if any)
set -eu

PKGS="cmake ninja-build gcc pkg-config libcmocka-dev libjson-c-dev libyaml-dev libncurses-dev scdoc python3 tmux jq clang llvm valgrind"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    exit 0
fi
if [ "${1:-}" = "--check" ]; then
    echo "missing Debian packages:$missing" >&2
    exit 1
fi

echo "oomless: installing Debian packages:$missing" >&2
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "oomless: need root or sudo to install:$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
