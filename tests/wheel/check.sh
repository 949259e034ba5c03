#!/bin/bash
# check.sh DIST - the wheels and the sdist of DIST (scripts/wheel-build.sh) as a user meets them
# (`make check-wheel`, in CI):
#  - auditwheel accepts each wheel's manylinux tag, and its ELF files need nothing but glibc;
#  - a fresh virtual environment holding only the x86_64 wheel (no source tree, no PYTHONPATH,
#    an empty LD_LIBRARY_PATH, and, where a mount namespace can be made, the system's json-c,
#    libyaml and ncursesw hidden behind /dev/null, and the source tree's data folder emptied) runs `oomless plan`, `python -m oomless` and
#    `import oomless`, with the same plan from the program and from Python;
#  - the aarch64 wheel's program plans the same under qemu-user (when qemu-aarch64-static is
#    installed), and pip installs the wheel for an aarch64 Python, whose package Debian's arm64
#    Python imports and plans with, under qemu-user;
#  - the sdist builds a wheel from its C sources, which runs.
# Ends with "N passed, N failed"; exit 1 when anything failed.
set -u
DIST=$(cd "${1:?usage: tests/wheel/check.sh DIST}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TOOLS="$SRC/build/wheel-tools/bin"
T=$(mktemp -d "${TMPDIR:-/tmp}/oomless-wheel-check.XXXXXX")
trap 'rm -rf "$T"' EXIT
PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*" >&2; }
expect_eq() { if [ "$1" = "$2" ]; then ok; else bad "$3: got '$1', expected '$2'"; fi; }
PLAN=(plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --json)

# glibc's libraries, the only ones a bundled ELF file may need
GLIBC_RE='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-(x86-64|aarch64)\.so\.[12])$'
check_wheel() { # WHEEL ARCH: the tag auditwheel gives, the files, what the ELF files need
    local wheel=$1 arch=$2 tag out dir f needed
    tag=$(basename "$wheel" .whl | sed 's/^oomless-[^-]*-py3-none-//')
    out=$("$TOOLS/auditwheel" show "$wheel" 2>&1)
    if tr '\n' ' ' <<<"$out" | grep -q "consistent with the following platform tag: \"$tag\""; then
        ok
    else
        bad "auditwheel show $(basename "$wheel"): not consistent with its tag $tag: $out"
    fi
    case $tag in manylinux_2_*_"$arch") ok ;; *) bad "$(basename "$wheel"): tag $tag" ;; esac
    dir="$T/unpacked-$arch"
    python3 -m zipfile -e "$wheel" "$dir"
    chmod +x "$dir/oomless/bin/oomless"   # (zipfile keeps no modes)
    for f in oomless/lib/liboomless.so.1 oomless/bin/oomless oomless/share/oomless/gpus/catalog.yaml \
             oomless/__main__.py oomless-*.dist-info/entry_points.txt; do
        # shellcheck disable=SC2086
        if ls "$dir"/$f >/dev/null 2>&1; then ok; else bad "$(basename "$wheel"): no $f"; fi
    done
    if readelf -d "$dir/oomless/lib/liboomless.so.1" | grep -q TEXTREL; then
        bad "liboomless.so.1 of $(basename "$wheel") has text relocations (an archive not PIC)"
    else
        ok
    fi
    for f in "$dir/oomless/lib/liboomless.so.1" "$dir/oomless/bin/oomless"; do
        needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
        if [ -n "$needed" ] && ! grep -vqE "$GLIBC_RE" <<<"$needed"; then
            ok
        else
            bad "$(basename "$f") of $(basename "$wheel") needs more than glibc: $(echo $needed)"
        fi
    done
}

# run_hidden CMD...: CMD with a clean environment, from an empty folder, LD_LIBRARY_PATH empty
# and (when a mount namespace can be made: root, or an unprivileged user namespace) the system's
# json-c, libyaml, ncursesw and tinfo replaced by /dev/null, so that nothing can load them
HIDE=""
for l in libjson-c.so.5 libyaml-0.so.2 libncursesw.so.6 libtinfo.so.6; do
    for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
        [ -e "$d/$l" ] && HIDE="$HIDE $(readlink -f "$d/$l")"
    done
done
HIDE=$(tr ' ' '\n' <<<"$HIDE" | sort -u | tr '\n' ' ')
hider="$T/hide.sh"
cat >"$hider" <<'SH'
#!/bin/sh
# hide.sh "LIBS" CMD...: in a new mount namespace, each of LIBS bound to /dev/null and the
# source tree's data folder (which the build names as a last resort) to an empty one, then CMD
libs=$1
shift
for l in $libs; do mount --bind /dev/null "$l" || exit 97; done
mount --bind "$EMPTY" "$SRC_DATA" || exit 97
exec "$@"
SH
mkdir -p "$T/empty"
export EMPTY="$T/empty" SRC_DATA="$SRC/data"
chmod +x "$hider"
mkdir -p "$T/home" "$T/cwd"
NS=""
if [ -n "$HIDE" ] && unshare -m --propagation private "$hider" "$HIDE" /bin/true 2>/dev/null; then
    NS=1
elif [ -n "$HIDE" ] && unshare -rm --propagation private "$hider" "$HIDE" /bin/true 2>/dev/null; then
    NS=user
else
    echo "check.sh: no mount namespace here: the system's libraries stay visible (their absence from the wheel's NEEDED entries is still checked)" >&2
fi
run_hidden() {
    local pre=()
    [ "$NS" = 1 ] && pre=(unshare -m --propagation private "$hider" "$HIDE")
    [ "$NS" = user ] && pre=(unshare -rm --propagation private "$hider" "$HIDE")
    (cd "$T/cwd" && "${pre[@]}" env -i PATH="$VENV/bin:/usr/bin:/bin" HOME="$T/home" \
        LD_LIBRARY_PATH= LANG=C.UTF-8 "$@")
}

# ---- x86_64: a fresh venv with the wheel only ---------------------------------------------------
X86=$(ls "$DIST"/oomless-*-manylinux_*_x86_64.whl 2>/dev/null | head -n 1)
if [ -z "$X86" ]; then
    bad "no x86_64 manylinux wheel in $DIST (scripts/wheel-build.sh x86_64)"
else
    check_wheel "$X86" x86_64
    VENV="$T/venv"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check "$X86"
    expect_eq "$?" 0 "pip install the wheel alone"
    if [ "$NS" ]; then
        run_hidden "$VENV/bin/python" -c 'import ctypes
try:
    ctypes.CDLL("libjson-c.so.5")
    print("loaded")
except OSError:
    print("hidden")' >"$T/hidden" 2>&1
        expect_eq "$(cat "$T/hidden")" "hidden" "the system's json-c is hidden"
    fi
    run_hidden oomless --version >"$T/version" 2>"$T/err"
    expect_eq "$?" 0 "oomless --version: $(cat "$T/err")"
    run_hidden oomless "${PLAN[@]}" >"$T/plan.json" 2>"$T/err"
    expect_eq "$?" 0 "oomless plan: $(cat "$T/err")"
    run_hidden python -m oomless --version >"$T/version-m" 2>"$T/err"
    expect_eq "$(cat "$T/version-m")" "$(cat "$T/version")" "python -m oomless --version"
    run_hidden oomless plan --no-such-option >/dev/null 2>&1
    expect_eq "$?" 2 "the program's exit status through the console script"
    run_hidden python -c 'import json, os, sys, oomless
lib = oomless._native.lib._name
assert lib.startswith(sys.prefix), lib
doc = oomless.plan(model="llama-3.1-8b", method="lora", seq=2048, gpu="rtx-4090")
print(json.dumps(doc["plan"], sort_keys=True))' >"$T/py-plan" 2>"$T/err"
    expect_eq "$?" 0 "import oomless; oomless.plan(): $(cat "$T/err")"
    expect_eq "$(cat "$T/py-plan")" \
        "$(python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["plan"], sort_keys=True))' <"$T/plan.json" 2>&1)" \
        "the same plan from Python and from the program"
fi

# ---- aarch64: the program under qemu-user plans the same ----------------------------------------
ARM=$(ls "$DIST"/oomless-*-manylinux_*_aarch64.whl 2>/dev/null | head -n 1)
if [ -z "$ARM" ]; then
    bad "no aarch64 manylinux wheel in $DIST (scripts/wheel-build.sh aarch64)"
else
    check_wheel "$ARM" aarch64
    if command -v qemu-aarch64-static >/dev/null && [ -d /usr/aarch64-linux-gnu/lib ]; then
        run_hidden qemu-aarch64-static -L /usr/aarch64-linux-gnu \
            "$T/unpacked-aarch64/oomless/bin/oomless" "${PLAN[@]}" >"$T/arm-plan.json" 2>"$T/err"
        expect_eq "$?" 0 "the aarch64 program under qemu: $(cat "$T/err")"
        if [ -s "$T/plan.json" ]; then
            expect_eq "$(cat "$T/arm-plan.json")" "$(cat "$T/plan.json")" \
                "the aarch64 program plans as the x86_64 one"
        fi
        # pip installs the wheel for an aarch64 Python (its tag accepted), and Debian's arm64
        # Python, under qemu-user, imports the package and plans through the aarch64 library
        if "$SRC/scripts/wheel-deps.sh" arm64 "$SRC/build-wheel-deps-arm64" --python >"$T/py.log" 2>&1; then
            PYROOT="$SRC/build-wheel-deps-arm64/python-sysroot"
            PY=$(ls "$PYROOT"/usr/bin/python3.* | head -n 1)
            pyv=$(basename "$PY" | sed 's/python//; s/\.//')
            tag=$(basename "$ARM" .whl | sed 's/^oomless-[^-]*-py3-none-//')
            python3 -m pip install -q --no-deps --no-index --disable-pip-version-check \
                --platform "$tag" --python-version "$pyv" --only-binary=:all: \
                --target "$T/arm-site" "$ARM" >"$T/err" 2>&1
            expect_eq "$?" 0 "pip install --platform $tag of the aarch64 wheel: $(cat "$T/err")"
            run_hidden env PYTHONPATH="$T/arm-site" qemu-aarch64-static -L "$PYROOT" "$PY" -c 'import json, platform, sys, oomless
sys.stderr.write(platform.machine() + " " + oomless._native.lib._name + "\n")
doc = oomless.plan(model="llama-3.1-8b", method="lora", seq=2048, gpu="rtx-4090")
print(json.dumps(doc["plan"], sort_keys=True))' >"$T/arm-py-plan" 2>"$T/err"
            expect_eq "$?" 0 "import oomless on aarch64 Python: $(cat "$T/err")"
            expect_eq "$(head -c 8 "$T/err")" "aarch64 " "the Python under qemu is aarch64's"
            expect_eq "$(cat "$T/arm-py-plan")" "$(cat "$T/py-plan" 2>/dev/null)" \
                "the same plan from the aarch64 package as from the x86_64 one"
        else
            bad "an arm64 Python for the import check: $(tail -n 5 "$T/py.log")"
        fi
    else
        echo "check.sh: qemu-aarch64-static or the arm64 glibc (libc6-arm64-cross) missing: the aarch64 program is not run" >&2
    fi
fi

# ---- the sdist builds from source ---------------------------------------------------------------
SDIST=$(ls "$DIST"/oomless-*.tar.gz 2>/dev/null | head -n 1)
if [ -z "$SDIST" ]; then
    bad "no sdist in $DIST (scripts/wheel-build.sh sdist)"
else
    if tar -tzf "$SDIST" | grep -qx 'oomless-[^/]*/source/CMakeLists.txt'; then ok; else
        bad "the sdist holds no source/CMakeLists.txt"; fi
    VENV="$T/venv-sdist"
    python3 -m venv "$VENV"
    if "$VENV/bin/python" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check \
        -w "$T/from-sdist" "$SDIST" >"$T/sdist.log" 2>&1; then ok; else
        bad "a wheel from the sdist: $(tail -n 20 "$T/sdist.log")"; fi
    W=$(ls "$T"/from-sdist/oomless-*-linux_*.whl 2>/dev/null | head -n 1)
    if [ -n "$W" ]; then
        ok
        "$VENV/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check "$W"
        # (built from source, it links the system's json-c: only the source tree's data hidden)
        HIDE=" " run_hidden oomless "${PLAN[@]}" >"$T/sdist-plan.json" 2>"$T/err"
        expect_eq "$?" 0 "the program built from the sdist: $(tail -n 5 "$T/err")"
        [ ! -s "$T/plan.json" ] || expect_eq "$(cat "$T/sdist-plan.json")" "$(cat "$T/plan.json")" \
            "the program built from the sdist plans the same"
    else
        bad "the sdist's wheel bundles no library (built: $(ls "$T/from-sdist" 2>&1))"
    fi
fi

echo "check.sh: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
