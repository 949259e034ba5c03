#!/bin/bash
# test_security.sh - what oomless must never do with the user's data:
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
    oom apply --plan "$P" --preset hydra-lightning "$f"
    expect_rc 1 "apply $f: refused"
    expect_contains "$ERR" "--follow-symlinks" "apply $f: says how"
    if cmp -s "$TMP/outside/config.yaml" "$ORIG"; then ok; else bad "apply $f: outside file changed"; fi
    expect_eq "$(ls "$TMP/outside")" "config.yaml
victim" "apply $f: nothing written outside"
done

# a backup path that is a link to a file outside: replaced by the backup, the outside file kept
cp "$ORIG" "$W/conf/config.yaml"
ln -s "$TMP/outside/victim" "$W/conf/config.yaml.bak"
oom apply --plan "$P" --preset hydra-lightning conf/config.yaml
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
    (umask 077 && "$OOMLESS_BIN" apply --plan "$P" --preset hydra-lightning "${force[@]}" \
        conf/config.yaml) >/dev/null 2>"$TMP/err"
    RC=$? ERR=$(cat "$TMP/err")
    expect_rc 0 "apply, mode $mode, umask 077"
    expect_eq "$(stat -c %a "$W/conf/config.yaml")" "$mode" "apply keeps mode $mode"
    expect_eq "$(stat -c %a "$W/conf/config.yaml.bak")" "$mode" "backup has mode $mode"
    if cmp -s "$W/conf/config.yaml" "$ORIG"; then bad "apply, mode $mode: not edited"; else ok; fi
done
expect_eq "$(find "$W" -name '.*.oomless-*' | wc -l)" 0 "no temporary file left"
finish
