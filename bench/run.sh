#!/bin/bash
# run.sh BUILD - `make bench`: every bench/*.sh benchmark with the built binary, then the accuracy
# comparisons (bench/accuracy/compare). Each script prints the numbers bench/README.md records.
set -eu
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(cd "$BUILD" && pwd)/oomless
export OOMLESS_DATA_DIR=${OOMLESS_DATA_DIR:-$HERE/../data}
cd "$HERE/.."
for s in "$HERE"/*.sh; do
    [ "$(basename "$s")" = run.sh ] && continue
    echo "== $(basename "$s")"
    case $(basename "$s") in
    watch_cpu.sh | run_cpu.sh) bash "$s" "$(cd "$BUILD" && pwd)" ;; # the build folder (fake NVML)
    *) bash "$s" "$BIN" ;;
    esac
done
echo "== search/run.sh"
bash "$HERE/search/run.sh" "$(cd "$BUILD" && pwd)"
echo "== accuracy/compare"
python3 "$HERE/accuracy/compare" "$BIN"
