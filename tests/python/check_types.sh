#!/bin/sh
# The oomless Python package type-checked: mypy with bindings/python/mypy.ini (every function
# annotated, every body checked), torch's, transformers' and Lightning's own types taken from
# the Python given (build/venv: `make check-types`, ctest -L types). Exit 77 (skipped) when that
# Python is missing or has no mypy (`make venv` installs the version requirements-test.txt pins).
# $OOMLESS_MYPY runs another mypy (a command) against the same Python.
py=${1:-}
if [ -z "$py" ] || [ ! -x "$py" ]; then
    echo "skipped: no Python with the frameworks at '$py' (make venv)"
    exit 77
fi
if [ -n "${OOMLESS_MYPY:-}" ]; then
    mypy=$OOMLESS_MYPY
elif "$py" -m mypy --version >/dev/null 2>&1; then
    mypy="$py -m mypy"
else
    echo "skipped: no mypy in $py (make venv installs it from requirements-test.txt)"
    exit 77
fi
cache=${2:-${TMPDIR:-/tmp}/oomless-mypy-cache}
cd "$(dirname "$0")/../../bindings/python" || exit 1
# shellcheck disable=SC2086  # $mypy is a command with its arguments
exec $mypy --config-file mypy.ini --python-executable "$py" --cache-dir "$cache"
