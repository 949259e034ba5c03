#!/bin/bash
# test_calibration_store.sh - the calibration store (and run's events file) when the disk fills,
# after a crash, and when the store is a symbolic link, a FIFO, under a relative $XDG_CACHE_HOME
# or a $HOME that does not exist. The full disk is a file-size limit (ulimit -f), with SIGXFSZ
# left at its default action (the death of the process that writes past the limit): oomless
# itself must not die of it (write() stops part way, then fails with EFBIG), its jobs still do.
. "$OOMLESS_SRC/tests/cli/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset OOMLESS_BATCH_SIZE OOMLESS_GPU GPU_PROFILE CUDA_VISIBLE_DEVICES

fake_job_gpu
JOB=("$FAKE_JOB" --batch-size '{batch}' --procdir "$TMP/procs" --capacity 8G --fixed 1G --per-sample 10M)
cd "$TMP" || exit 1

# limited CMD...: CMD with a 64 KiB file-size limit, SIGXFSZ not ignored (a shell that ignores
# it hands that on to what it runs, which would hide a death by it)
limited() { (ulimit -f 64 && trap - XFSZ && exec "$@"); }
# pad FILE: appends a JSON line that makes FILE 100 bytes short of the 64 KiB limit
pad() {
    python3 -c 'import os, sys
p = sys.argv[1]
n = 65536 - 100 - (os.path.getsize(p) if os.path.exists(p) else 0) - len("{\"pad\":\"\"}\n")
open(p, "ab").write(b"{\"pad\":\"" + b"x" * n + b"\"}\n")' "$1"
}

# one good record to build the damaged stores from
oom probe --calibration cal.jsonl -- "${JOB[@]}"
expect_rc 0 "probe"
REC=$(cat cal.jsonl)

# ---- disk full while the record is appended: exit 3, the real reason, the file as it was --------
pad cal.jsonl
cp cal.jsonl before.jsonl
run limited "$OOMLESS_BIN" probe --calibration cal.jsonl -- "${JOB[@]}"
expect_rc 3 "full disk: probe fails"
expect_contains "$ERR" "oomless probe: cannot save the calibration record to 'cal.jsonl': File too large (nothing was saved)" \
    "full disk: the reason"
expect_not_contains "$ERR" "File exists" "full disk: no stale errno"
expect_not_contains "$ERR" "calibration saved" "full disk: not said to be saved"
expect_contains "$OUT" "Recommended batch: 614" "full disk: the measurement is still shown"
if cmp -s cal.jsonl before.jsonl; then ok; else bad "full disk: the file changed"; fi

# ---- the same for run's events: only whole lines stay -------------------------------------------
pad ev.jsonl
run limited "$OOMLESS_BIN" run --batch-size 8 --events ev.jsonl -- "${JOB[@]}"
expect_rc 3 "full disk: run reports the events file"
expect_contains "$ERR" "cannot write the events file 'ev.jsonl': File too large" "events: the reason"
if jq -e . ev.jsonl >/dev/null 2>&1; then ok; else bad "events: a half line left: $(tail -c 120 ev.jsonl)"; fi
expect_eq "$(wc -c <ev.jsonl)" 65436 "events: the file as it was"
expect_contains "$OUT" "step 3/3" "events: the job ran to its end all the same"
expect_eq "$(grep -c '"event":"exit"' ev.jsonl)" 0 "events: no line of this run"

# ---- the job keeps SIGXFSZ's default: it dies of it past the limit, as it would alone -----------
run limited "$OOMLESS_BIN" run --batch-size 1 -- sh -c 'exec head -c 200000 /dev/zero >big.bin'
expect_rc 153 "a job writing past the limit dies of SIGXFSZ (128+25)"
expect_eq "$(wc -c <big.bin)" 65536 "the job's file stopped at the limit"
rm -f big.bin

# ---- a half line (an older version, a full disk): the next record starts a line of its own ------
printf '%s' "${REC:0:40}" >half.jsonl
oom probe --calibration half.jsonl -- "${JOB[@]}"
expect_rc 0 "half line: probe"
oom run --calibration half.jsonl -- "${JOB[@]}"
expect_rc 0 "half line: run finds the new record"
expect_contains "$ERR" "batch 614 from the calibration record" "half line: batch"
expect_contains "$ERR" "oomless: calibration file 'half.jsonl': skipped 1 damaged line (the first is line 1" \
    "half line: reported"

# ---- NUL bytes where records were (ext4 after a crash): the records after them are found ---------
{ printf '%s' "${REC:0:60}"; head -c 8192 /dev/zero; printf '%s\n' "$REC"; } >nul.jsonl
oom run --calibration nul.jsonl -- "${JOB[@]}"
expect_rc 0 "NUL bytes: run"
expect_contains "$ERR" "batch 614 from the calibration record" "NUL bytes: the record after them"
expect_eq "$(grep -c 'damaged line' <<<"$ERR")" 1 "NUL bytes: one notice"
oom plan --calibration nul.jsonl --target-effective-batch 64 --json -- "${JOB[@]}"
expect_rc 0 "NUL bytes: plan"
expect_json .plan.batch_size 64 "NUL bytes: plan on the record"

# ---- a symbolic link as the store: refused, its target untouched --------------------------------
printf 'keep\n' >target
ln -s target link.jsonl
oom probe --calibration link.jsonl -- "${JOB[@]}"
expect_rc 3 "symlink: refused"
expect_contains "$ERR" "calibration file 'link.jsonl' is a symbolic link: refused" "symlink: message"
expect_eq "$(cat target)" "keep" "symlink: target untouched"

# ---- a FIFO as the store: refused at once, not waited on ----------------------------------------
mkfifo fifo.jsonl
run timeout 30 "$OOMLESS_BIN" run --calibration fifo.jsonl -- "${JOB[@]}"
expect_rc 2 "FIFO: run does not hang"
expect_contains "$ERR" "calibration file 'fifo.jsonl' is a FIFO, not a regular file" "FIFO: run's message"
run timeout 30 "$OOMLESS_BIN" probe --calibration fifo.jsonl -- "${JOB[@]}"
expect_rc 3 "FIFO: probe does not hang"
expect_contains "$ERR" "is a FIFO, not a regular file" "FIFO: probe's message"
mkdir -p fifocache/oomless && mkfifo fifocache/oomless/calibration.jsonl
XDG_CACHE_HOME="$TMP/fifocache" run timeout 30 "$OOMLESS_BIN" run -- "${JOB[@]}"
expect_rc 2 "FIFO at the default path: run does not hang"

# ---- a relative $XDG_CACHE_HOME: ignored (XDG Base Directory spec), one notice --------------------
mkdir -p home cwd
cd cwd || exit 1
XDG_CACHE_HOME=relcache HOME="$TMP/home" oom probe -- "${JOB[@]}"
cd "$TMP" || exit 1
expect_rc 0 "relative XDG_CACHE_HOME: probe"
expect_eq "$(grep -c "XDG_CACHE_HOME 'relcache' is not an absolute path: ignored" <<<"$ERR")" 1 \
    "relative XDG_CACHE_HOME: one notice"
expect_contains "$ERR" "calibration saved to $TMP/home/.cache/oomless/calibration.jsonl" \
    "relative XDG_CACHE_HOME: saved under \$HOME/.cache"
if [ -e cwd/relcache ]; then bad "relative XDG_CACHE_HOME: cwd/relcache created"; else ok; fi

# ---- $HOME that does not exist: not created ----------------------------------------------------
run env -u XDG_CACHE_HOME HOME="$TMP/nonexistent" "$OOMLESS_BIN" probe -- "${JOB[@]}"
expect_rc 3 "missing HOME: probe fails"
expect_contains "$ERR" "\$HOME '$TMP/nonexistent' does not exist; not creating it" "missing HOME: message"
if [ -e nonexistent ]; then bad "missing HOME: created"; else ok; fi
finish
