#!/bin/bash
# test_abi.sh - liboomless exports only oom_* symbols, under its soname of major version 1; the
# oomless tool and the Python package refuse a library of another major version.
. "$(dirname "$0")/lib.sh"
LIB="$OOMLESS_BUILD/liboomless.so"

# ---- only the public prefix leaves the library ----------------------------------------------
run nm -D --defined-only "$LIB"
expect_rc 0 "nm -D liboomless.so"
# the version script's node (OOMLESS_1) is listed as an absolute symbol; every other one is oom_*
OTHERS=$(printf '%s\n' "$OUT" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | grep -v '^oom_')
expect_eq "$OTHERS" "" "exported symbols outside oom_*"
expect_contains "$OUT" " oom_version_number" "oom_version_number is exported"
expect_contains "$OUT" " oom_plan_result_dispose" "the _dispose functions are exported"
expect_contains "$OUT" " oom_plan_request_init" "the _init functions are exported"
run readelf -d "$LIB"
expect_contains "$OUT" "[liboomless.so.1]" "soname of major version 1"

# ---- a library of another major version is refused ------------------------------------------
# the tool linked with a library that says it is 2.0.0 (tests/cli/other_major.c): it must ask
# before doing anything
OTHER="$OOMLESS_BUILD/tests/oomless_other_major"
run "$OTHER" gpus --gpu a100-80gb
expect_rc 3 "another major: the environment exit code"
expect_eq "$OUT" "" "another major: nothing on stdout"
expect_contains "$ERR" "the oomless library loaded is version 2.0.0" "the library's version"
expect_contains "$ERR" "built for major version 1 (1.0.0)" "the header's version"
run "$OTHER" --version
expect_rc 3 "another major: even --version"
oom --version
expect_rc 0 "the same major: runs"
expect_contains "$OUT" "library 1.0.0" "the same major: --version"

# the Python package: an ImportError naming both versions
if command -v python3 >/dev/null; then
    cat >"$TMP/stub.c" <<'C'
const char *oom_version(void) { return "2.1.0"; }
unsigned oom_version_number(void) { return 20100; }
C
    run cc -shared -fPIC -o "$TMP/libstub.so" "$TMP/stub.c"
    run env OOMLESS_LIBRARY="$TMP/libstub.so" PYTHONPATH="$OOMLESS_SRC/bindings/python" \
        python3 -c 'import oomless'
    expect_rc 1 "python: another major is refused"
    expect_contains "$ERR" "ImportError: oomless: the liboomless found is version 2.1.0" \
        "python: the message names the library's version"
    expect_contains "$ERR" "this package was written for major version 1" \
        "python: the message names the package's major version"
fi
finish
