#!/usr/bin/env bash
# test_watch_trend.sh - `oomless watch` on a process whose memory grows steadily: the trend, the
# growth rate and the time to the budget, in JSON and in text, next to a steady process.
. "$(dirname "$0")/watch_common.sh"

# a process whose memory is 1 GiB + 100 MiB/s of real time, whenever the writer gets to run
sleep 300 &
GROW=$!
PIDS+=("$GROW")
wait_exec "$GROW"
(
    t0=${EPOCHREALTIME/./}
    while kill -0 "$GROW" 2>/dev/null; do
        t=${EPOCHREALTIME/./}
        echo "0 $((1073741824 + (t - t0) * 104857600 / 1000000))" >"$TMP/procs/grow.tmp"
        mv "$TMP/procs/grow.tmp" "$TMP/procs/$GROW"
        sleep 0.02
    done
) &
WRITER=$!
PIDS+=("$WRITER")
for _ in $(seq 200); do [ -s "$TMP/procs/$GROW" ] && break; sleep 0.05; done

# 30 samples 0.1 s apart: a window past the trend's 2 s minimum; the text and the JSON watches
# run side by side
"$OOMLESS_BIN" watch --count 30 --interval 0.1 --no-tui >"$TMP/text.out" 2>"$TMP/text.err" &
TEXT=$!
oom watch --count 30 --interval 0.1 --json
expect_rc 0 "trend: watch --json"
OUT=$(printf '%s\n' "$OUT" | tail -1)
expect_json '.gpus[0].trend.growing' true "trend: the GPU's memory grows"
expect_json '.gpus[1].trend.growing' false "trend: the idle GPU does not"
expect_json ".gpus[0].processes[] | select(.pid == $GROW) | (.growth_bytes_per_s > 80e6 and .growth_bytes_per_s < 130e6)" true "trend: the process grows ~100 MiB/s"
expect_json ".gpus[0].processes[] | select(.pid == $GROW) | (.seconds_to_budget > 0)" true "trend: time to the budget"
expect_json ".gpus[0].processes[] | select(.pid == $JOB) | .growth_bytes_per_s" 0 "trend: the steady job does not grow"
expect_json ".gpus[0].processes[] | select(.pid == $JOB) | .seconds_to_budget" null "trend: no ETA for it"
wait "$TEXT"
expect_eq "$?" 0 "trend: watch --no-tui"
TAIL=$(tail -12 "$TMP/text.out")
expect_contains "$TAIL" "trend: pid $GROW growing" "trend: text line"
expect_contains "$TAIL" "crossed in ~" "trend: text ETA"
expect_not_contains "$TAIL" "trend: pid $JOB " "trend: no text line for the steady job"

finish
