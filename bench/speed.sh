#!/bin/bash
# speed.sh BUILD - oomless's speed limits (issue 34), checked: every plan of bench/speed/speed.py
# under 50 ms of CPU, the 31-GPU table under 500 ms, the ZeRO-3 replay linear in its steps from 32
# to 1024 layers, run and probe passing on 1 GiB of a job's output to a pipe with under 1 s of
# their own CPU. Exits 1 when a figure is over its limit. The page's searches (WebAssembly):
# bench/speed/web_speed.py, after make web.
set -eu
BUILD=${1:-build}
exec python3 "$(dirname "$0")/speed/speed.py" --build "$BUILD"
