#!/bin/sh
# gen-man.sh OOMLESS_BINARY PAGE.scd - prints the scdoc source of the man page: the hand-written
# page, each "{values}" on an option's line ("*--objective* {values}"; "{values plan}": those
# plan takes) replaced by the option's values; then OPTION VALUES, every option with values and
# each value's help; then each command's --help text. The options, their values, defaults and help come from the binary (the library's
# tables: `oomless --list-options`, `oomless --list-values`), never from this script or the page.
set -eu
BIN=$1
PAGE=$2
OOMLESS_NVML_LIBRARY=/nonexistent
export OOMLESS_NVML_LIBRARY
TAB=$(printf '\t')

# scdoc's formatting characters taken literally
escape() {
    sed 's/[\\*_]/\\&/g'
}
# a value for the page: a form's capitals (every:N, SIZE) in italics
value_text() {
    escape | sed 's/[A-Z][A-Z0-9]*/_&_/g'
}
# the option's values (of the command, if given), joined by |
values() {
    "$BIN" --list-values "$@" | cut -f1 | value_text | paste -sd'|' -
}

# the page, its option lines completed ("{values COMMAND}": the values that command takes)
sed '/^# SEE ALSO/,$d' "$PAGE" | while IFS= read -r line; do
    case $line in
    "*--"*"* {values"*"}"*)
        name=${line#\*--}
        name=${name%%\**}
        spec=${line#*\{values}
        spec=${spec%%\}*}
        # shellcheck disable=SC2086 # the command, if any, is one word
        printf '%s%s%s\n' "${line%%\{values*}" "$(values "$name" $spec)" "${line#*\{values*\}}"
        ;;
    *) printf '%s\n' "$line" ;;
    esac
done

echo "# OPTION VALUES"
echo
echo "The values of every option that has them, with the commands that take the option (a value"
echo "that fewer take names them). A value in italics is a form: _N_ a whole number."
"$BIN" --list-options | while IFS="$TAB" read -r name synopsis commands help; do
    list=$("$BIN" --list-values "$name" 2>/dev/null || true)
    [ -n "$list" ] || continue
    echo
    printf '*--%s* %s\n' "$(printf '%s' "$name" | escape)" "$(values "$name")"
    printf '\t%s. Taken by: %s.\n\n' "$(printf '%s' "$help" | escape)" \
        "$(printf '%s' "$commands" | sed 's/,/, /g')"
    printf '%s\n' "$list" | while IFS="$TAB" read -r value vcommands vhelp; do
        only=
        [ "$vcommands" = "$commands" ] || only=" (only $(printf '%s' "$vcommands" | sed 's/,/, /g'))"
        printf '\t- %s: %s%s\n' "$(printf '%s' "$value" | value_text)" \
            "$(printf '%s' "$vhelp" | escape)" "$only"
    done
done

echo
echo "# COMMAND REFERENCE"
echo
echo "The text each command prints for *--help*."
for cmd in $("$BIN" --list-commands | cut -f1); do
    echo
    echo "## oomless $cmd"
    echo
    echo '```'
    "$BIN" "$cmd" --help 2>/dev/null | sed 's/\t/    /g'
    echo '```'
done
echo
sed -n '/^# SEE ALSO/,$p' "$PAGE"
