#!/usr/bin/env bash
# test_watch_log.sh - `oomless watch --log` when the file misbehaves: a full disk (/dev/full, a
# file size limit), recovery, a file that ends inside a row, a log deleted, renamed away
# (logrotate create) or truncated in place (copytruncate), a command line that would be a
# spreadsheet formula and is longer than the field, and a FIFO with no reader (refused at once).
. "$(dirname "$0")/lib.sh"

HEADER="timestamp,kind,gpu_index,gpu_name,pid,command,user,used_bytes,total_bytes,utilization_gpu,temperature_c,band,lost,batch_size,grad_accum,reserved_bytes"
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

# wait_cmdline PID PREFIX: until /proc shows the exec'd command (up to 10 s)
wait_cmdline() {
    local i
    for i in $(seq 200); do
        case "$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)" in "$2"*) return 0 ;; esac
        sleep 0.05
    done
    bad "process $1 did not exec '$2'"
}
mkdir -p "$TMP/procs"
sleep 300 &
PIDS+=($!)
wait_cmdline "$!" "sleep 300"
echo "0 1073741824" >"$TMP/procs/$!"
fake_nvml "gpu name=\"NVIDIA A100-SXM4-80GB\" total=85899345920 used=1073741824 util=45 temp=62
procdir $TMP/procs"

# every line of FILE after the header has the 16 columns (no comma inside these fields)
all_rows_whole() { awk -F, 'NR > 1 && NF != 16 { bad = 1 } END { exit bad }' "$1"; }
# count_in TEXT NEEDLE: how many lines of TEXT hold NEEDLE
count_in() { grep -cF -- "$2" <<<"$1"; }

# ---- a write error (/dev/full): watching goes on, said once ---------------------------------
oom watch --count 3 --interval 0.05 --json --log /dev/full
expect_rc 3 "/dev/full: exit 3 at the end (samples not written)"
expect_eq "$(printf '%s\n' "$OUT" | grep -c '^{')" 3 "/dev/full: all 3 samples still printed"
expect_eq "$(count_in "$ERR" "cannot write '/dev/full': No space left on device")" 1 "/dev/full: said once"
expect_contains "$ERR" "3 samples were not written to '/dev/full'" "/dev/full: the count at the end"

# ---- the file size limit (RLIMIT_FSIZE) as a full disk: no half row -------------------------
# 8 KiB limit (bash counts 1024-byte blocks), file 100 bytes short of it: the first sample's
# rows (~200 bytes) get partly written before the write fails
LOG=$TMP/full.csv
zeros() { head -c "$1" /dev/zero | tr '\0' 0; }
prefill() { # prefill SIZE: the header, then whole rows, SIZE bytes in all (the size counted here)
    local row="1.000,gpu,0,filler,,,,1,2,3,4,safe,0,," full size
    full="$row$(zeros 60)"
    size=$((${#HEADER} + 1))
    {
        printf '%s\n' "$HEADER"
        while [ $((size + 200)) -lt "$1" ]; do
            printf '%s\n' "$full"
            size=$((size + ${#full} + 1))
        done
        printf '%s%s\n' "$row" "$(zeros $(($1 - size - ${#row} - 1)))"
    } >"$LOG"
    [ "$(stat -c %s "$LOG")" -eq "$1" ] || bad "prefill: $(stat -c %s "$LOG") bytes, not $1"
}
prefill $((8192 - 100))
cp "$LOG" "$TMP/full.before"
run bash -c 'ulimit -f 8 && exec "$@"' _ "$OOMLESS_BIN" watch --count 3 --interval 0.05 --json --log "$LOG"
expect_rc 3 "size limit: exit 3 at the end, not killed by SIGXFSZ"
expect_eq "$(printf '%s\n' "$OUT" | grep -c '^{')" 3 "size limit: all 3 samples still printed"
expect_eq "$(count_in "$ERR" "cannot write '$LOG': File too large")" 1 "size limit: said once"
if cmp -s "$LOG" "$TMP/full.before"; then ok; else bad "size limit: the partly written rows were not taken back ($(stat -c %s "$LOG") bytes, was $(stat -c %s "$TMP/full.before"))"; fi

# ---- and when there is room again: the rows come back, whole --------------------------------
# (a 64 KiB limit: the freed room lasts far longer than the test needs it)
prefill $((65536 - 100))
cp "$LOG" "$TMP/full.before"
(ulimit -f 64 && exec "$OOMLESS_BIN" watch --interval 0.1 --json --log "$LOG" >"$TMP/bg.out" 2>"$TMP/bg.err") &
BG=$!
PIDS+=($BG)
if poll 20 grep -q "cannot write" "$TMP/bg.err"; then ok; else bad "recovery: no write error seen: $(cat "$TMP/bg.err")"; fi
if cmp -s "$LOG" "$TMP/full.before"; then ok; else bad "recovery: a half row was left while failing"; fi
truncate -s $((${#HEADER} + 1)) "$LOG" # room again: the same file, cut to its header line
if poll 20 grep -q "writing '$LOG' again" "$TMP/bg.err"; then ok; else bad "recovery: not said: $(cat "$TMP/bg.err")"; fi
if poll 20 bash -c "[ \$(wc -l <'$LOG') -ge 5 ]"; then ok; else bad "recovery: no new rows"; fi
kill -TERM "$BG"
wait "$BG"
expect_eq "$?" 143 "recovery: still watching until stopped"
expect_eq "$(head -1 "$LOG")" "$HEADER" "recovery: the header kept"
if all_rows_whole "$LOG"; then ok; else bad "recovery: a row is not whole:"; cat "$LOG" >&2; fi
expect_eq "$(grep -c "cannot write" "$TMP/bg.err")" 1 "recovery: the failure said once"
expect_contains "$(cat "$TMP/bg.err")" "not written to '$LOG'" "recovery: the count at the end"

# ---- a file that ends inside a row: the next rows start on a fresh line ---------------------
printf '%s\n1.000,gpu,0,cut here' "$HEADER" >"$TMP/cut.csv"
oom watch --once --log "$TMP/cut.csv"
expect_rc 0 "cut row: watch --once"
expect_eq "$(sed -n 2p "$TMP/cut.csv")" "1.000,gpu,0,cut here" "cut row: left as it was"
expect_eq "$(sed -n 3p "$TMP/cut.csv" | cut -d, -f2-4)" "gpu,0,NVIDIA A100-SXM4-80GB" "cut row: the next row on its own line"
expect_eq "$(wc -l <"$TMP/cut.csv")" 4 "cut row: header, the cut row, 2 new rows"

# ---- deleted, rotated (create), truncated in place (copytruncate) ---------------------------
LOG=$TMP/rot.csv
"$OOMLESS_BIN" watch --interval 0.1 --json --log "$LOG" >/dev/null 2>"$TMP/rot.err" &
BG=$!
PIDS+=($BG)
rows_at_least() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }
poll 20 rows_at_least "$LOG" 3 || bad "rotation: no rows at first"
rm "$LOG"
if poll 20 rows_at_least "$LOG" 3; then ok; else bad "deleted log: not created again"; fi
expect_eq "$(head -1 "$LOG" 2>/dev/null)" "$HEADER" "deleted log: the new file starts with the header"
mv "$LOG" "$LOG.1"
if poll 20 rows_at_least "$LOG" 3; then ok; else bad "rotated log: not created again"; fi
expect_eq "$(head -1 "$LOG" 2>/dev/null)" "$HEADER" "rotated log: the new file starts with the header"
SIZE1=$(stat -c %s "$LOG.1")
N=$(wc -l <"$LOG")
poll 20 rows_at_least "$LOG" $((N + 4)) || bad "rotated log: no further rows"
expect_eq "$(stat -c %s "$LOG.1")" "$SIZE1" "rotated log: the old file is left alone"
: >"$LOG"
if poll 20 rows_at_least "$LOG" 3; then ok; else bad "truncated log: no rows after"; fi
expect_eq "$(head -1 "$LOG")" "$HEADER" "truncated log: the header comes back first"
kill -TERM "$BG"
wait "$BG"
expect_eq "$?" 143 "rotation: watch stopped by SIGTERM only"
expect_eq "$(cat "$TMP/rot.err")" "" "rotation: nothing to say"
if all_rows_whole "$LOG" && all_rows_whole "$LOG.1"; then ok; else bad "rotation: a row is not whole"; fi

# ---- a command line made to be a formula, and longer than the 256 bytes a field once held -----
LONG="=1+2$(printf 'x%.0s' $(seq 400))"
bash -c 'exec -a "$0" sleep 300' "$LONG" &
EVIL=$!
PIDS+=($EVIL)
wait_cmdline "$EVIL" "=1+2xxx"
echo "0 2147483648" >"$TMP/procs/$EVIL"
oom watch --once --json --log "$TMP/evil.csv"
expect_rc 0 "formula command: watch --once"
FIELD=$(grep ",process,0,[^,]*,$EVIL," "$TMP/evil.csv" | cut -d, -f6)
expect_eq "${FIELD:0:6}" "'=1+2x" "formula command: written as text (a leading quote)"
expect_eq "$FIELD" "'$LONG 300" "formula command: the whole line (quote + 408 bytes), not cut"
expect_json ".gpus[0].processes[] | select(.pid == $EVIL) | .command" "$LONG 300" "json: the whole line"

# ---- a log an older version started (15 columns, no reserved_bytes): refused, left as it was ---
OLDH="${HEADER%,reserved_bytes}"
printf '%s\n%s\n' "$OLDH" "1795237823.016,gpu,0,NVIDIA A100-SXM4-80GB,,,,1,2,,,safe,0,," >"$TMP/old.csv"
cp "$TMP/old.csv" "$TMP/old.orig"
oom watch --once --log "$TMP/old.csv"
expect_rc 2 "older log: refused (a bad file)"
expect_contains "$ERR" "'$TMP/old.csv' holds a log with other columns" "older log: says why"
expect_eq "$(cmp "$TMP/old.csv" "$TMP/old.orig" && echo same)" same "older log: untouched"
# a file that is not one of our logs (no header of ours) is appended to, as before
printf 'notes\n' >"$TMP/other.csv"
oom watch --once --log "$TMP/other.csv"
expect_rc 0 "a file without our header: appended to"
expect_eq "$(head -1 "$TMP/other.csv")" notes "its first line kept"

# ---- a FIFO nobody reads: refused at once (open() no longer waits for a reader), --count or not -
mkfifo "$TMP/noreader"
for args in "--once" "--count 2 --interval 0.05" "--json --count 1"; do
    # shellcheck disable=SC2086 # the options, split on purpose
    run timeout 20 "$OOMLESS_BIN" watch $args --log "$TMP/noreader"
    expect_rc 2 "FIFO without a reader ($args): refused, not waited on"
    expect_contains "$ERR" "'$TMP/noreader' is a FIFO that nobody reads: start its reader first" \
        "FIFO without a reader ($args): says why"
    expect_eq "$OUT" "" "FIFO without a reader ($args): no sample printed"
done
# a FIFO with a reader is a log like a pipe: the header, then the rows (the reader opens it
# without waiting for a writer, says so, then reads until the writer is gone)
python3 -c 'import os, select, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
open(sys.argv[2] + ".ready", "w").close()
with open(sys.argv[2], "wb") as out:
    p = select.poll()
    p.register(fd, select.POLLIN)
    while True:
        p.poll()
        b = os.read(fd, 65536)
        if not b:
            break
        out.write(b)' "$TMP/noreader" "$TMP/fifo.csv" &
READER=$!
PIDS+=($READER)
poll 20 test -e "$TMP/fifo.csv.ready" || bad "FIFO with a reader: the reader never opened it"
oom watch --count 2 --interval 0.05 --json --log "$TMP/noreader"
expect_rc 0 "FIFO with a reader: logged"
[ "$RC" -eq 0 ] || kill "$READER" # no writer came: the reader would wait for one
wait "$READER"
expect_eq "$(head -1 "$TMP/fifo.csv")" "$HEADER" "FIFO with a reader: the header first"
expect_eq "$(grep -c ',gpu,0,' "$TMP/fifo.csv")" 2 "FIFO with a reader: a GPU row per sample"
# a FIFO whose reader goes away after the first rows: the writes fail (EPIPE), watch goes on
# sampling and ends with exit 3 saying so; it is not killed by SIGPIPE (exit 141)
mkfifo "$TMP/shortreader"
python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
open(sys.argv[1] + ".ready", "w").close()
import select
p = select.poll()
p.register(fd, select.POLLIN)
p.poll()
os.read(fd, 65536)' "$TMP/shortreader" &
READER=$!
PIDS+=($READER)
poll 20 test -e "$TMP/shortreader.ready" || bad "FIFO whose reader leaves: the reader never opened it"
oom watch --count 6 --interval 0.2 --json --log "$TMP/shortreader"
expect_rc 3 "FIFO whose reader leaves: exit 3, not killed by SIGPIPE"
expect_contains "$ERR" "cannot write '$TMP/shortreader'" "FIFO whose reader leaves: said"
expect_eq "$(printf '%s' "$OUT" | jq -s length)" 6 "FIFO whose reader leaves: every sample still taken"
wait "$READER"

finish
