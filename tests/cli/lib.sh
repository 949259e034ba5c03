# lib.sh - a small harness for the CLI tests. Source it, call the checks, end with `finish`.
# Environment (set by ctest): OOMLESS_BIN, OOMLESS_SRC, OOMLESS_BUILD, FAKE_NVML_LIB, FAKE_JOB.
set -u
PASS=0
FAIL=0
: "${OOMLESS_BIN:?run through ctest}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/oomless-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

ok() { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*" >&2; }

# run CMD...: runs the command, leaving $OUT (stdout), $ERR (stderr), $RC (status)
run() {
    "$@" >"$TMP/out" 2>"$TMP/err"
    RC=$?
    OUT=$(cat "$TMP/out")
    ERR=$(cat "$TMP/err")
}
# oom ARGS...: run oomless
oom() { run "$OOMLESS_BIN" "$@"; }

expect_rc() { # expect_rc N description
    if [ "$RC" -eq "$1" ]; then ok; else bad "$2: exit $RC, expected $1; stderr: $ERR"; fi
}
expect_eq() { # expect_eq ACTUAL EXPECTED description
    if [ "$1" = "$2" ]; then ok; else bad "$3: got '$1', expected '$2'"; fi
}
expect_contains() { # expect_contains HAYSTACK NEEDLE description
    case "$1" in *"$2"*) ok ;; *) bad "$3: '$2' not in: $1" ;; esac
}
expect_not_contains() {
    case "$1" in *"$2"*) bad "$3: '$2' unexpectedly in: $1" ;; *) ok ;; esac
}
# expect_json FILTER EXPECTED description: jq over $OUT
expect_json() {
    local got
    got=$(printf '%s' "$OUT" | jq -r "$1" 2>&1)
    expect_eq "$got" "$2" "$3"
}
# the whole of stdout must be exactly one JSON document
expect_one_json() {
    if printf '%s' "$OUT" | jq -e -s 'length == 1' >/dev/null 2>&1; then ok; else bad "$1: stdout is not one JSON document: $OUT"; fi
}
# expect_golden FILE description: compares $OUT with tests/cli/golden/FILE (UPDATE_GOLDEN=1 rewrites)
expect_golden() {
    local g="$OOMLESS_SRC/tests/cli/golden/$1"
    if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then printf '%s\n' "$OUT" >"$g"; ok; return; fi
    if diff -u "$g" - <<<"$OUT" >"$TMP/diff"; then ok; else bad "$2: differs from golden $1:"; cat "$TMP/diff" >&2; fi
}
# use the fake NVML with a spec (text, see tests/fake/fake_nvml.c)
fake_nvml() {
    printf '%s\n' "$1" >"$TMP/nvml.spec"
    export OOMLESS_NVML_LIBRARY="$FAKE_NVML_LIB" FAKE_NVML_SPEC="$TMP/nvml.spec"
}
# fake_job_gpu [EXTRA]: the fake NVML reports one 8 GiB "A100" (EXTRA appended to its line) whose
# processes are the fake jobs writing to $TMP/procs; calibration records go to $TMP/cache.
fake_job_gpu() {
    mkdir -p "$TMP/procs"
    fake_nvml "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-11111111-2222-3333-4444-555555555555 total=8589934592 used=0${1:+ $1}
procdir $TMP/procs"
    export XDG_CACHE_HOME="$TMP/cache"
}
# poll SECONDS CMD...: runs CMD every 0.1 s until it succeeds (status 0) or SECONDS have passed (1)
poll() {
    local i n=$(($1 * 10))
    shift
    for ((i = 0; i < n; i++)); do
        "$@" && return 0
        sleep 0.1
    done
    return 1
}
no_nvml() { export OOMLESS_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1; unset FAKE_NVML_SPEC; }

finish() {
    echo "$(basename "$0"): $PASS passed, $FAIL failed"
    [ "$FAIL" -eq 0 ]
}
