#!/bin/bash
# test_security.sh - what oomless must never do with the user's data:
#  - run code it was not asked to: `trace` imports no module from the folder it runs in;
#  - let another user's text drive the terminal: escape sequences in a co-tenant's command line
#    or an events file reach watch's text, CSV and events only escaped;
#  - run a shell: job arguments with shell syntax ('; touch X', '$(touch X)', backquotes, pipes)
#    reach the job verbatim, placeholders are substituted inside one argument and never re-split;
#    a batch size from the environment with shell syntax is refused, not run;
#  - write outside the files named: a symlinked directory or a chain of links leading outside the
#    current directory is refused without --follow-symlinks; a backup path that is a symlink to
#    a file outside is replaced, the outside file untouched;
#  - lose a file's mode: the temporary file is created 0600 whatever the umask, and the result
#    gets the original mode (also unusual ones).
# (More of each: tests/unit/test_proc.c test_argv_not_resplit; tests/cli/test_apply.sh symlink and
# kill-at-step cases, which check the temporary file's 0600 mode at each step.)
. "$OOMLESS_SRC/tests/cli/lib.sh"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE OOMLESS_BATCH_SIZE OOMLESS_GRAD_ACCUM
export XDG_CACHE_HOME="$TMP/cache"
W="$TMP/w"
mkdir -p "$W"
cd "$W" || exit 1

no_files() { # no_files DESCRIPTION: nothing was created in $W by a shell
    local left
    left=$(find "$W" -name 'PWNED*' | wc -l)
    expect_eq "$left" 0 "$1: no file created by shell syntax"
}

# ---- run: arguments reach the job as given ---------------------------------------------------
ARGS=('{batch}; touch PWNED1' '$(touch PWNED2)' '`touch PWNED3`' 'a b {batch}' '{accum}|touch PWNED4'
    '&& touch PWNED5 #' "it's \"quoted\" {effective}" '*' '' '{batch}')
oom run --batch-size 6 --grad-accum 2 -- printf '[%s]\n' "${ARGS[@]}"
expect_rc 0 "run with shell syntax in the arguments"
expect_eq "$OUT" "[6; touch PWNED1]
[\$(touch PWNED2)]
[\`touch PWNED3\`]
[a b 6]
[2|touch PWNED4]
[&& touch PWNED5 #]
[it's \"quoted\" 12]
[*]
[]
[6]" "run: every argument verbatim, placeholders inside it, none re-split or globbed"
no_files "run"

# the program itself: a path with spaces and shell syntax is executed, not interpreted
mkdir "$W/bin dir"
printf '#!/bin/sh\necho "ran with $#: $1"\n' >"$W/bin dir/job; touch PWNED6"
chmod +x "$W/bin dir/job; touch PWNED6"
oom run --batch-size 1 -- "$W/bin dir/job; touch PWNED6" 'x y'
expect_rc 0 "run: program path with spaces and ';'"
expect_eq "$OUT" "ran with 1: x y" "run: the program got one argument"
no_files "run: program path"

# not found / not executable: exit 127 / 126 from execve, not a shell's message
oom run --batch-size 1 -- "no-such-program; touch PWNED7"
expect_rc 127 "run: program not found"
expect_not_contains "$ERR" "sh:" "run: no shell reported it"
printf 'echo hi\n' >"$W/notexec"
oom run --batch-size 1 -- "$W/notexec"
expect_rc 126 "run: not executable"
no_files "run: not found"

# a batch size from the environment is a number or refused
OOMLESS_BATCH_SIZE='2; touch PWNED8' oom run -- printf '%s\n' '{batch}'
expect_rc 2 "run: OOMLESS_BATCH_SIZE with shell syntax refused"
expect_contains "$ERR" "2; touch PWNED8" "run: the bad value is named"
OOMLESS_BATCH_SIZE='$(touch PWNED9)' oom run -- printf '%s\n' '{batch}'
expect_rc 2 "run: OOMLESS_BATCH_SIZE \$(...) refused"
no_files "run: environment"

# probe: the same substitution (without NVML: exit status only)
oom probe --max-trials 2 --max-batch 2 --calibration off -- printf '[%s]\n' '{batch}; touch PWNED10' \
    '$(touch PWNED11)'
expect_contains "$OUT$ERR" "[1; touch PWNED10]" "probe: argument verbatim"
no_files "probe"

# ---- trace: no module from the current folder ------------------------------------------------
# a model folder with modules named as the standard library's and torch: Python run in it must
# import none of them (each would leave a PWNED file), on whatever Python OOMLESS_PYTHON names,
# also with an empty PYTHONPATH entry (which Python reads as the current folder)
mkdir -p "$W/model"
printf '{"model_type": "llama", "num_hidden_layers": 2}\n' >"$W/model/config.json"
for mod in json argparse runpy torch importlib errno fcntl stat typing; do
    printf 'open(%s, "w").close()\n' "'$W/PWNED_trace_$mod'" >"$W/model/$mod.py"
done
for pp in unset ":" "::"; do
    if [ "$pp" = unset ]; then
        (cd "$W/model" && env -u PYTHONPATH OOMLESS_PYTHON=python3 "$OOMLESS_BIN" trace --model . \
            >/dev/null 2>"$TMP/err")
    else
        (cd "$W/model" && PYTHONPATH="$pp" OOMLESS_PYTHON=python3 "$OOMLESS_BIN" trace --model . \
            >/dev/null 2>"$TMP/err")
    fi
    RC=$? ERR=$(cat "$TMP/err")
    if [ "$RC" -eq 0 ] || [ "$RC" -eq 2 ]; then ok; else bad "trace, PYTHONPATH $pp: exit $RC: $ERR"; fi
    expect_not_contains "$ERR" "Traceback" "trace, PYTHONPATH $pp: no traceback"
    expect_eq "$(cd "$W" && echo PWNED_trace_*)" "PWNED_trace_*" \
        "trace, PYTHONPATH $pp: no module imported from the current folder"
    rm -f "$W"/PWNED_trace_*
done
rm -rf "$W/model"

# ---- watch: another user's text never drives the terminal or the log -----------------------
# a co-tenant's command line with an OSC 52 clipboard write, a window title, a screen clear, C1
# controls (UTF-8 U+009B and a raw 0x9b byte), invalid UTF-8 and a right-to-left override; and
# an events file whose job-written text holds the same. No control byte may reach the text,
# the CSV log or the events shown: each is written as \xHH.
EVIL=$'\e]52;c;cm0gLXJmIH4=\a\e]0;owned\a\e[2J\e[H\xc2\x9b31m\x9b\xff\xe2\x80\xaeevil'
(exec -a "$EVIL" sleep 300) &
EVILPID=$!
for _ in $(seq 100); do grep -q 'evil' "/proc/$EVILPID/cmdline" 2>/dev/null && break; sleep 0.05; done
mkdir -p "$TMP/procs"
echo "0 1073741824" >"$TMP/procs/$EVILPID"
fake_nvml "gpu name=\"NVIDIA A100-SXM4-80GB\" total=85899345920 used=0
procdir $TMP/procs"
printf '%s\n' '{"time": 1795237823.5, "event": "oom_snapshot", "pid": 7, "largest": [{"bytes": 1073741824, "where": "\u001b]52;c;cHduZWQ=\u0007model.py:1\u009b2J"}]}' \
    >"$TMP/events.jsonl"
# controls FILE: the control bytes in FILE (line breaks aside) and C1 in UTF-8, counted
controls() { LC_ALL=C tr -d '\n' <"$1" | LC_ALL=C grep -c -P '[\x00-\x1f\x7f\x80-\x9f]|\xc2[\x80-\x9f]|\xe2\x80\xae'; }
SHOWN='\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;owned\x07\x1b[2J\x1b[H\xc2\x9b31m\x9b\xff\xe2\x80\xaeevil 300'
for mode in "--once" "--no-tui --count 1" "--once --log $TMP/watch.csv"; do
    # shellcheck disable=SC2086 # the options, split on purpose
    "$OOMLESS_BIN" watch $mode --events "$TMP/events.jsonl" >"$TMP/watch.out" 2>"$TMP/watch.err"
    RC=$? ERR=$(cat "$TMP/watch.err")
    expect_rc 0 "watch $mode with a hostile command line"
    expect_eq "$(controls "$TMP/watch.out")" 0 "watch $mode: no control byte reaches the terminal"
    expect_contains "$(cat "$TMP/watch.out")" "$SHOWN" "watch $mode: the command shown escaped, whole"
    expect_contains "$(cat "$TMP/watch.out")" 'largest blocks: 1.00 GiB \x1b]52;c;cHduZWQ=\x07model.py:1\xc2\x9b2J' \
        "watch $mode: the events file's text escaped"
done
expect_eq "$(controls "$TMP/watch.csv")" 0 "watch --log: no control byte in the CSV"
expect_eq "$(grep ",process,0,[^,]*,$EVILPID," "$TMP/watch.csv" | cut -d, -f6)" "$SHOWN" \
    "watch --log: the command escaped in its field"
# JSON keeps the text as it is, escaped by JSON itself
"$OOMLESS_BIN" watch --once --json >"$TMP/watch.json" 2>/dev/null
expect_eq "$(LC_ALL=C grep -c $'\e' "$TMP/watch.json")" 0 "watch --json: no raw ESC"
expect_eq "$(jq -r ".gpus[0].processes[] | select(.pid == $EVILPID) | .command" "$TMP/watch.json" |
    head -c 12 | od -An -c | tr -s ' ')" " 033 ] 5 2 ; c ; c m 0 g L" "watch --json: the command itself, JSON-escaped"
# ... as valid UTF-8 (RFC 8259): the stray 0xff and 0x9b bytes become U+FFFD, the rest is kept
expect_eq "$(python3 -c 'import json, sys; d = json.loads(open(sys.argv[1], "rb").read().decode("utf-8")); print(sum("\ufffd" in p["command"] for g in d["gpus"] for p in g["processes"]))' "$TMP/watch.json" 2>&1)" 1 \
    "watch --json: valid UTF-8, the bytes that are not UTF-8 replaced"
kill "$EVILPID"
wait "$EVILPID" 2>/dev/null
unset OOMLESS_NVML_LIBRARY FAKE_NVML_SPEC

# ---- apply: nothing outside the current directory through links ------------------------------
P="$OOMLESS_SRC/tests/data/apply/plan.json"
ORIG="$OOMLESS_SRC/tests/data/apply/config.yaml"
mkdir -p "$TMP/outside" "$W/conf"
cp "$ORIG" "$TMP/outside/config.yaml"
printf 'victim\n' >"$TMP/outside/victim"
ln -s "$TMP/outside" "$W/outdir"                # a symlinked directory
ln -s outdir/config.yaml "$W/chain1"            # a link to a path through it
ln -s chain1 "$W/chain2"                        # a link to a link
for f in outdir/config.yaml chain1 chain2; do
    oom apply --plan "$P" --preset hydra-lightning --allow-effective-batch-change "$f"
    expect_rc 1 "apply $f: refused"
    expect_contains "$ERR" "--follow-symlinks" "apply $f: says how"
    if cmp -s "$TMP/outside/config.yaml" "$ORIG"; then ok; else bad "apply $f: outside file changed"; fi
    expect_eq "$(ls "$TMP/outside")" "config.yaml
victim" "apply $f: nothing written outside"
done

# a backup path that is a link to a file outside: replaced by the backup, the outside file kept
cp "$ORIG" "$W/conf/config.yaml"
ln -s "$TMP/outside/victim" "$W/conf/config.yaml.bak"
oom apply --plan "$P" --preset hydra-lightning --allow-effective-batch-change conf/config.yaml
expect_rc 0 "apply with a planted backup link"
expect_eq "$(cat "$TMP/outside/victim")" "victim" "apply: not written through the backup link"
if [ -f "$W/conf/config.yaml.bak" ] && [ ! -L "$W/conf/config.yaml.bak" ]; then ok; else
    bad "apply: the backup link was not replaced by a file"; fi
if cmp -s "$W/conf/config.yaml.bak" "$ORIG"; then ok; else bad "apply: backup content"; fi

# ---- apply: modes ----------------------------------------------------------------------------
for mode in 640 604 751 444; do
    rm -f "$W/conf/config.yaml" "$W/conf/config.yaml.bak"
    cp "$ORIG" "$W/conf/config.yaml"
    chmod "$mode" "$W/conf/config.yaml"
    force=()
    [ "$mode" = 444 ] && force=(--force) # write-protected: refused without it (test_apply_meta)
    (umask 077 && "$OOMLESS_BIN" apply --plan "$P" --preset hydra-lightning --allow-effective-batch-change "${force[@]}" \
        conf/config.yaml) >/dev/null 2>"$TMP/err"
    RC=$? ERR=$(cat "$TMP/err")
    expect_rc 0 "apply, mode $mode, umask 077"
    expect_eq "$(stat -c %a "$W/conf/config.yaml")" "$mode" "apply keeps mode $mode"
    expect_eq "$(stat -c %a "$W/conf/config.yaml.bak")" "$mode" "backup has mode $mode"
    if cmp -s "$W/conf/config.yaml" "$ORIG"; then bad "apply, mode $mode: not edited"; else ok; fi
done
expect_eq "$(find "$W" -name '.*.oomless-*' | wc -l)" 0 "no temporary file left"
finish
