#!/bin/bash
# run.sh BUILD - `make bench`: every bench/*.sh benchmark with the built binary, the plan corpus
# (bench/corpus: answers unchanged), then the accuracy comparisons (bench/accuracy/compare). Each
# script prints the numbers bench/README.md records; speed.sh and the corpus fail the run when a
# figure is over its limit or an answer changed.
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
    watch_cpu.sh | run_cpu.sh | speed.sh) bash "$s" "$(cd "$BUILD" && pwd)" ;; # the build folder
    *) bash "$s" "$BIN" ;;
    esac
done
echo "== corpus/run.py (the plans' answers, byte for byte)"
python3 "$HERE/corpus/run.py" --bin "$BIN" --check
echo "== search/run.sh"
bash "$HERE/search/run.sh" "$(cd "$BUILD" && pwd)"
echo "== accuracy/compare"
python3 "$HERE/accuracy/compare" "$BIN"
