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
# dpkg-query -W -f=... PKG: installed unless PKG is in $MISSING; in dpkg's triggers-pending
# state when it is in $PENDING, half-configured when in $HALF
cat >"$FAKE/dpkg-query" <<'SH'
#!/bin/sh
for p; do :; done
case " $MISSING " in *" $p "*) exit 1 ;; esac
case " $PENDING " in *" $p "*) printf 'install ok triggers-pending'; exit 0 ;; esac
case " $HALF " in *" $p "*) printf 'install ok half-configured'; exit 0 ;; esac
printf 'install ok installed'
SH
# locale -a: the locales in $LOCALES_HERE
cat >"$FAKE/locale" <<'SH'
#!/bin/sh
for l in $LOCALES_HERE; do echo "$l"; done
SH
# apt-get: logs its arguments; while the file $LOCKS holds a number above 0 it fails as apt
# does when another apt holds the lists lock, and counts down ("forever": never lets go)
cat >"$FAKE/apt-get" <<SH
#!/bin/sh
echo "apt-get \$*" >>"$LOG"
if [ -n "\${LOCKS:-}" ] && [ -f "\$LOCKS" ]; then
    n=\$(cat "\$LOCKS")
    if [ "\$n" = forever ] || [ "\$n" -gt 0 ]; then
        [ "\$n" = forever ] || echo \$((n - 1)) >"\$LOCKS"
        echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
        exit 100
    fi
fi
SH
for tool in sudo localedef; do
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
# The wait is what is left of 600 s when apt-get starts: the seconds `apt-get update` took (the
# clock may tick over between the two calls) are gone from it, so it reads 59x or 600.
waits=$(sed -E 's/Lock::Timeout=(59[0-9]|600) /Lock::Timeout=LEFT /' "$LOG")
if [ "$(id -u)" -eq 0 ]; then
    expect_contains "$waits" \
        "apt-get -o DPkg::Lock::Timeout=LEFT install -y -qq --no-install-recommends scdoc tmux" \
        "apt-get install of the missing packages, waiting for the dpkg lock"
else
    expect_contains "$waits" \
        "sudo apt-get -o DPkg::Lock::Timeout=LEFT install -y -qq --no-install-recommends scdoc tmux" \
        "sudo apt-get install of the missing packages, waiting for the dpkg lock"
fi

# `make demo`: one line while it builds, then the answer; the build's output (191 lines of it) in
# a log, shown in full when the build fails. A fake cmake stands for the build; the tool is the
# real one.
DEMO="$TMP/demo"
mkdir -p "$DEMO"
: >"$DEMO/build.ninja"
ln -s "$OOMLESS_BIN" "$DEMO/oomless"
cat >"$FAKE/cmake" <<'SH'
#!/bin/sh
i=1
while [ $i -le 191 ]; do echo "[$i/191] Building C object lib/x$i.c.o"; i=$((i + 1)); done
if [ -n "${CMAKE_FAILS:-}" ]; then echo "lib/x.c:1:1: error: expected ';'"; exit 1; fi
SH
chmod +x "$FAKE/cmake"
run env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL MISSING="" \
    make --no-print-directory -C "$OOMLESS_SRC" BUILD="$DEMO" demo
expect_rc 0 "make demo"
expect_eq "$(head -n 1 <<<"$OUT")" \
    "oomless demo: building $DEMO/oomless (output in $DEMO/demo-build.log)..." "make demo: one line"
expect_eq "$(sed -n 2p <<<"$OUT")" \
    "$DEMO/oomless plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 32" \
    "make demo: then the command"
expect_not_contains "$OUT$ERR" "Building C object" "make demo: no build output"
run "$OOMLESS_BIN" plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 32
expect_eq "$(tail -n +3 <<<"$(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL MISSING="" \
    make --no-print-directory -C "$OOMLESS_SRC" BUILD="$DEMO" demo 2>/dev/null)")" "$OUT" \
    "make demo: then the answer"
expect_eq "$(grep -c 'Building C object' "$DEMO/demo-build.log")" "191" "the build output is in the log"
run env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL MISSING="" CMAKE_FAILS=1 \
    make --no-print-directory -C "$OOMLESS_SRC" BUILD="$DEMO" demo
expect_rc 2 "make demo: the build fails"
expect_contains "$ERR" "[191/191] Building C object" "make demo: a failed build shows its output"
expect_contains "$ERR" "error: expected ';'" "make demo: and its error"
expect_contains "$ERR" "oomless demo: the build failed" "make demo: says so"
expect_not_contains "$OUT" "OOMLESS_BATCH_SIZE" "make demo: no answer after a failed build"
rm -f "$FAKE/cmake"

# a package whose triggers have not run yet (dpkg's triggers-pending, while another apt is at
# work) is installed; a half-configured one is not
run env MISSING="" PENDING="scdoc man-db" "$DEPS" --check
expect_rc 0 "triggers-pending counts as installed"
expect_eq "$OUT$ERR" "" "triggers-pending: nothing missing"
run env MISSING="" HALF="scdoc" "$DEPS" --check --build
expect_rc 1 "half-configured is missing"
expect_contains "$ERR" "missing Debian packages: scdoc" "half-configured: named"

# another apt holds the lock (a fresh machine's unattended upgrades): apt waits for the dpkg
# lock itself (DPkg::Lock::Timeout), the lists lock is waited for here, once a second, with a
# message; then the install goes on
echo 2 >"$TMP/locks"
: >"$LOG"
run env MISSING="scdoc" LOCKS="$TMP/locks" OOMLESS_APT_LOCK_TIMEOUT=60 "$DEPS"
# (as root: the fake sudo only logs what it would run)
if [ "$(id -u)" -eq 0 ]; then
    expect_rc 0 "the lock freed: install-deps.sh installs"
    expect_eq "$(grep -c 'apt-get -o DPkg::Lock::Timeout=[0-9]* update -qq' "$LOG")" "3" \
        "apt-get update tried until the lock is free"
    expect_contains "$(cat "$LOG")" "apt-get -o DPkg::Lock::Timeout=" "apt waits for the dpkg lock"
    expect_contains "$(tail -n 1 "$LOG")" "install -y -qq --no-install-recommends scdoc" \
        "then installs"
    expect_eq "$(grep -c 'another apt holds the package lock' <<<"$ERR")" "1" "said once"
    expect_contains "$ERR" "waiting up to " "says it waits, and how long"
    # never let go: gives up when the time is up, saying why and what to do
    echo forever >"$TMP/locks"
    run env MISSING="scdoc" LOCKS="$TMP/locks" OOMLESS_APT_LOCK_TIMEOUT=1 "$DEPS"
    expect_rc 100 "the lock held past the timeout: apt-get's status"
    expect_contains "$ERR" "another apt still holds the package lock after 1 s" "says why"
    expect_contains "$ERR" "run scripts/install-deps.sh again" "says what to do"
    expect_contains "$ERR" "Could not get lock" "apt's own message is shown"
    # a timeout that is no number of seconds
    run env MISSING="scdoc" OOMLESS_APT_LOCK_TIMEOUT=abc "$DEPS"
    expect_rc 2 "a timeout that is no number"
    expect_contains "$ERR" "OOMLESS_APT_LOCK_TIMEOUT 'abc'" "names the bad value"
fi
rm -f "$TMP/locks"
finish
