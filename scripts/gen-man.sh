#!/bin/sh
# gen-man.sh OOMLESS_BINARY PAGE.scd - prints the scdoc source of the man page: the hand-written
# page, then each command's --help text (options are described once, in the code).
set -eu
BIN=$1
PAGE=$2
sed '/^# SEE ALSO/,$d' "$PAGE"
echo "# COMMAND REFERENCE"
echo
echo "The text each command prints for *--help*."
for cmd in gpus estimate plan table probe run watch apply trace; do
    echo
    echo "## oomless $cmd"
    echo
    echo '```'
    OOMLESS_NVML_LIBRARY=/nonexistent "$BIN" "$cmd" --help 2>/dev/null | sed 's/\t/    /g'
    echo '```'
done
echo
sed -n '/^# SEE ALSO/,$p' "$PAGE"
