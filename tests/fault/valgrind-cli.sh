#!/bin/bash
# valgrind-cli.sh BUILD_DIR [REGEX] - runs the shell tests (ctest names matching REGEX, default
# '^(cli|fault\.sh)\.') with every `oomless` they start under valgrind memcheck: each test's
# command and environment come from `ctest --show-only=json-v1`, with OOMLESS_BIN pointing at a
# wrapper. A memory error or a definite leak in any oomless process makes it exit 97 (so the
# test's own exit-code checks fail) and leaves a log; the script fails when any test failed or
# any log is not empty. VALGRIND_CLI_EXCLUDE (a regex) skips tests (timing-sensitive ones).
set -u
BUILD=$(cd "${1:?usage: $0 BUILD_DIR [REGEX]}" && pwd) || exit 2
REGEX=${2:-'^(cli|fault\.sh)\.'}
EXCLUDE=${VALGRIND_CLI_EXCLUDE:-'^$'}
LOGS="$BUILD/Testing/valgrind-cli"
rm -rf "$LOGS"
mkdir -p "$LOGS"
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }

fail=0
json=$(cd "$BUILD" && ctest --show-only=json-v1) || exit 1
count=$(jq '.tests | length' <<<"$json")
for ((i = 0; i < count; i++)); do
    name=$(jq -r ".tests[$i].name" <<<"$json")
    [[ $name =~ $REGEX ]] || continue
    [[ $name =~ $EXCLUDE ]] && { echo "skip $name"; continue; }
    mapfile -t cmd < <(jq -r ".tests[$i].command[]" <<<"$json")
    mapfile -t envs < <(jq -r ".tests[$i].properties[]? | select(.name == \"ENVIRONMENT\") | .value[]" <<<"$json")
    wd=$(jq -r ".tests[$i].properties[]? | select(.name == \"WORKING_DIRECTORY\") | .value" <<<"$json")
    real_bin=""
    for e in "${envs[@]}"; do
        [[ $e == OOMLESS_BIN=* ]] && real_bin=${e#OOMLESS_BIN=}
        [[ $e == TMPDIR=* ]] && mkdir -p "${e#TMPDIR=}" # made by the tmp.setup test under ctest
    done
    [ -n "$real_bin" ] || { echo "$name: no OOMLESS_BIN" >&2; fail=1; continue; }
    wrapper="$LOGS/$name.oomless"
    mkdir -p "$LOGS/$name"
    # (a process told to SIGKILL itself at a write step, OOMLESS_APPLY_TEST_KILL_AT, frees
    # nothing: valgrind's leak report at that kill is meaningless, its error checks are not)
    cat >"$wrapper" <<WRAP
#!/bin/sh
leaks="--leak-check=full --errors-for-leak-kinds=definite"
[ -n "\${OOMLESS_APPLY_TEST_KILL_AT:-}" ] && leaks="--leak-check=no"
exec valgrind -q --error-exitcode=97 \$leaks --num-callers=40 \\
    --log-file="$LOGS/$name/%p.log" "$real_bin" "\$@"
WRAP
    chmod +x "$wrapper"
    start=$SECONDS
    (cd "${wd:-$BUILD}" && env "${envs[@]}" OOMLESS_BIN="$wrapper" "${cmd[@]}") >"$LOGS/$name.out" 2>&1
    rc=$?
    # a log is written per process; valgrind -q leaves it empty unless it found something
    bad_logs=$(find "$LOGS/$name" -name '*.log' -size +0 | head -5)
    if [ $rc -ne 0 ] || [ -n "$bad_logs" ]; then
        echo "FAIL $name (exit $rc, $((SECONDS - start)) s)"
        tail -20 "$LOGS/$name.out"
        for l in $bad_logs; do echo "== $l"; head -40 "$l"; done
        fail=1
    else
        echo "ok   $name ($(find "$LOGS/$name" -name '*.log' | wc -l) oomless runs, $((SECONDS - start)) s)"
    fi
done
exit $fail
