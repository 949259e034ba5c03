#!/bin/bash
# test_deps.sh - scripts/install-deps.sh and a plain `make`, against fake dpkg-query, locale,
# apt-get and sudo on PATH: --check changes nothing, lists what is missing and the command that
# installs it; --build asks only for what the build needs; a plain `make` with a build package
# missing stops before configuring and installs nothing; without --check the missing packages
# are installed.
. "$(dirname "$0")/lib.sh"
DEPS="$OOMLESS_SRC/scripts/install-deps.sh"
FAKE="$TMP/bin"
LOG="$TMP/installs.log"
mkdir -p "$FAKE"
: >"$LOG"
# dpkg-query -W -f=... PKG: installed unless PKG is in $MISSING
cat >"$FAKE/dpkg-query" <<'SH'
#!/bin/sh
for p; do :; done
case " $MISSING " in *" $p "*) exit 1 ;; esac
printf 'install ok installed'
SH
# locale -a: the locales in $LOCALES_HERE
cat >"$FAKE/locale" <<'SH'
#!/bin/sh
for l in $LOCALES_HERE; do echo "$l"; done
SH
for tool in apt-get sudo localedef; do
    printf '#!/bin/sh\necho "%s $*" >>"%s"\n' "$tool" "$LOG" >"$FAKE/$tool"
done
chmod +x "$FAKE"/*
export PATH="$FAKE:$PATH" LOCALES_HERE="de_DE.utf8 tr_TR.utf8"

# everything there: silent, status 0, in every mode
for mode in "--check --build" "--check" ""; do
    # shellcheck disable=SC2086
    run env MISSING="" "$DEPS" $mode
    expect_rc 0 "all present: install-deps.sh $mode"
    expect_eq "$OUT$ERR" "" "all present: install-deps.sh $mode says nothing"
done

# a build package and a test package missing
run env MISSING="scdoc tmux" "$DEPS" --check --build
expect_rc 1 "--check --build: a build package missing"
expect_contains "$ERR" "missing Debian packages: scdoc" "--check --build: names it"
expect_not_contains "$ERR" "tmux" "--check --build: not the test packages"
expect_contains "$ERR" "run: scripts/install-deps.sh --build" "--check --build: the command"
expect_contains "$ERR" "apt-get install --no-install-recommends scdoc)" "--check --build: what it runs"
run env MISSING="tmux" "$DEPS" --check --build
expect_rc 0 "--check --build: only a test package missing"
run env MISSING="scdoc tmux" LOCALES_HERE="tr_TR.utf8" "$DEPS" --check
expect_rc 1 "--check: packages and a locale missing"
expect_contains "$ERR" "missing Debian packages: scdoc tmux" "--check: both packages"
expect_contains "$ERR" "missing locales: de_DE.UTF-8" "--check: the locale"
expect_contains "$ERR" "run: scripts/install-deps.sh" "--check: the command"
expect_eq "$(cat "$LOG")" "" "--check installs nothing"

# a plain `make`: stops before configuring, says what is missing and how to install it
run env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL MISSING="libcmocka-dev" \
    make --no-print-directory -C "$OOMLESS_SRC" BUILD="$TMP/build"
expect_rc 2 "make with a build package missing fails"
expect_contains "$ERR" "missing Debian packages: libcmocka-dev" "make: names the package"
expect_contains "$ERR" "scripts/install-deps.sh --build" "make: the command to install it"
if [ -e "$TMP/build" ]; then bad "make configured with a package missing"; else ok; fi
expect_eq "$(cat "$LOG")" "" "make installs nothing"

# without --check: installs what is missing (through sudo when not root)
run env MISSING="scdoc tmux" "$DEPS"
expect_rc 0 "install-deps.sh installs"
if [ "$(id -u)" -eq 0 ]; then
    expect_contains "$(cat "$LOG")" "apt-get install -y -qq --no-install-recommends scdoc tmux" \
        "apt-get install of the missing packages"
else
    expect_contains "$(cat "$LOG")" "sudo apt-get install -y -qq --no-install-recommends scdoc tmux" \
        "sudo apt-get install of the missing packages"
fi
finish
