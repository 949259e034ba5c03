#!/bin/bash
# test_install.sh - `cmake --install` lays out binary, library, header, pkg-config file, man page,
# completion and data; a C program builds against the installed library with pkg-config, and the
# installed binary finds its data without help.
. "$(dirname "$0")/lib.sh"
PREFIX="$TMP/prefix"
run cmake --install "$OOMLESS_BUILD" --prefix "$PREFIX"
expect_rc 0 "cmake --install"
LIBDIR=$(ls -d "$PREFIX"/lib* | head -1)
for f in bin/oomless include/oomless.h share/man/man1/oomless.1 \
         share/bash-completion/completions/oomless share/oomless/gpus/catalog.yaml; do
    if [ -e "$PREFIX/$f" ]; then ok; else bad "installed $f missing"; fi
done
for f in liboomless.so liboomless.a pkgconfig/oomless.pc; do
    if ls "$LIBDIR"/$f >/dev/null 2>&1 || ls "$LIBDIR"/*/$f >/dev/null 2>&1; then ok; else bad "installed $f missing"; fi
done
PC_DIR=$(dirname "$(find "$PREFIX" -name oomless.pc | head -1)")
SO=$(find "$PREFIX" -name 'liboomless.so.1' | head -1)
if [ -n "$SO" ]; then ok; else bad "installed liboomless.so.1 (the soname of major version 1) missing"; fi
run env PKG_CONFIG_PATH="$PC_DIR" pkg-config --modversion oomless
expect_eq "$OUT" "1.0.0" "pkg-config version"
# the .pc file names the prefix given to `cmake --install --prefix` (not the configured one),
# and the folders the library and the header were installed into: used as installed
run env PKG_CONFIG_PATH="$PC_DIR" pkg-config --variable=prefix oomless
expect_eq "$OUT" "$PREFIX" "pkg-config prefix is the install prefix"
run env PKG_CONFIG_PATH="$PC_DIR" pkg-config --variable=libdir oomless
expect_eq "$OUT" "$(dirname "$PC_DIR")" "pkg-config libdir is where the library went"
run env PKG_CONFIG_PATH="$PC_DIR" pkg-config --variable=includedir oomless
expect_eq "$OUT" "$PREFIX/include" "pkg-config includedir is where the header went"
run env PKG_CONFIG_PATH="$PC_DIR" pkg-config --cflags --libs oomless
expect_rc 0 "pkg-config"
FLAGS=$(sed 's/ *$//' <<<"$OUT")   # pkg-config ends the line with a space
expect_eq "$FLAGS" "-I$PREFIX/include -L$(dirname "$PC_DIR") -loomless" "pkg-config flags"
# a second install to another prefix writes that prefix (the file is made at install time)
run cmake --install "$OOMLESS_BUILD" --prefix "$TMP/second"
expect_rc 0 "cmake --install to a second prefix"
run env PKG_CONFIG_PATH="$(dirname "$(find "$TMP/second" -name oomless.pc | head -1)")" \
    pkg-config --variable=prefix oomless
expect_eq "$OUT" "$TMP/second" "pkg-config prefix of the second install"
for ex in "$OOMLESS_SRC"/examples/*.c; do
    name=$(basename "$ex" .c)
    # shellcheck disable=SC2086
    run cc -std=c11 -Wall -Wextra -Werror "$ex" $FLAGS -o "$TMP/$name"
    expect_rc 0 "examples/$name.c builds against the installed library"
done
unset OOMLESS_DATA_DIR
run env LD_LIBRARY_PATH="$(dirname "$PC_DIR")" "$TMP/budget" a100_80gb
expect_rc 0 "example runs"
expect_eq "$OUT" "a100-80gb: 79.00 GiB usable" "example output"
run env LD_LIBRARY_PATH="$(dirname "$PC_DIR")" "$TMP/plan" llama-3.1-8b rtx-4090
expect_rc 0 "examples/plan.c runs"
expect_contains "$OUT" "OOMLESS_BATCH_SIZE=" "examples/plan.c prints the plan"
run "$PREFIX/bin/oomless" gpus --gpu l4 --json
expect_rc 0 "installed binary finds its data"
expect_contains "$OUT" '"usable_bytes": 23079157760' "installed binary budget"
# the installed tree moved elsewhere and run through PATH (argv[0] a bare "oomless", as the
# wheel's console script runs it) reads the data beside it: a preset removed there is gone
cp -R "$PREFIX" "$TMP/moved"
rm "$TMP/moved/share/oomless/models/gpt2.json"
run env PATH="$TMP/moved/bin:$PATH" oomless estimate --model gpt2 --gpu l4
expect_rc 2 "a moved tree run through PATH reads its own data"
expect_contains "$ERR" "model 'gpt2' is neither a preset" "the moved tree's presets"
run env PATH="$TMP/moved/bin:$PATH" oomless estimate --model bert-base --gpu l4
expect_rc 0 "the moved tree's other presets are there"

# the man page renders without a single groff warning and documents every command (in COMMANDS
# and in the COMMAND REFERENCE) and every exit status
MANPAGE="$PREFIX/share/man/man1/oomless.1"
if command -v man >/dev/null; then
    run env MANWIDTH=100 LC_ALL=C.UTF-8 man --warnings=w -E UTF-8 -l "$MANPAGE"
    expect_rc 0 "man -l renders the page"
    expect_eq "$ERR" "" "the page renders without warnings"
else
    bad "man is not installed (scripts/install-deps.sh installs man-db)"
    OUT=
fi
# section NAME: the rendered section NAME, up to the next one
section() { awk -v s="$1" '/^[A-Z]/ { on = ($0 == s); next } on' <<<"$OUT"; }
COMMANDS=$(section COMMANDS)
REFERENCE=$(section "COMMAND REFERENCE")
for cmd in gpus estimate plan table probe run watch apply trace; do
    if grep -qE "^       $cmd( |\$)" <<<"$COMMANDS"; then ok; else bad "man page: $cmd not in COMMANDS"; fi
    if grep -qx "   oomless $cmd" <<<"$REFERENCE"; then ok; else bad "man page: no reference for $cmd"; fi
    expect_contains "$REFERENCE" "usage: oomless $cmd " "man page: the reference holds $cmd --help"
done
STATUS=$(section "EXIT STATUS")
for code in 0 1 2 3; do
    if grep -qE "^       $code  +[a-z]" <<<"$STATUS"; then ok; else bad "man page: exit status $code not explained"; fi
done
expect_contains "$STATUS" "128+N" "man page: the exit status after a signal"
finish
