#!/bin/sh
# bench/search/run.sh [BUILD] - builds bench_search against BUILD/liboomless.a (default: build)
# and prints the comparison table (markdown) on stdout.
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build}
cc -std=c11 -O2 -Wall -Wextra -I"$SRC/include" "$SRC/bench/search/bench_search.c" \
    "$BUILD/liboomless.a" $(pkg-config --libs json-c yaml-0.1) -ldl -lm -o "$BUILD/bench_search"
"$BUILD/bench_search"
