#!/usr/bin/env bash
# test_watch.sh - `oomless watch`: text, JSON and CSV against the fake NVML, the no-terminal
# fallback, a lost GPU, no NVML, bad options, and the interactive view driven through tmux.
. "$(dirname "$0")/lib.sh"

# a live process on GPU 0 (procdir) and a PID that does not exist here (static proc line)
# wait_exec PID: until the forked child shows `sleep 300` in /proc (up to 10 s)
wait_exec() {
    local i
    for i in $(seq 200); do
        [ "$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)" = "sleep 300 " ] && return 0
        sleep 0.05
    done
    bad "process $1 did not exec sleep"
}
mkdir -p "$TMP/procs"
sleep 300 &
JOB=$!
wait_exec "$JOB"
echo "0 4294967296" >"$TMP/procs/$JOB"
cleanup() {
    kill "$JOB" 2>/dev/null
    [ -n "${TMUX_SOCK:-}" ] && tmux -S "$TMUX_SOCK" kill-server 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

SPEC="gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-aaaa total=85899345920 used=1073741824 util=45 temp=62
gpu name=\"Tesla T4\" total=16106127360 used=0
proc gpu=0 pid=999999 used=2147483648
procdir $TMP/procs"
fake_nvml "$SPEC"

# ---- --once, text ----------------------------------------------------------------------------
oom watch --once
expect_rc 0 "watch --once"
expect_contains "$OUT" "GPU 0  NVIDIA A100-SXM4-80GB  [" "text: GPU 0 line with a bar"
expect_contains "$OUT" "7.00 GiB / 80.00 GiB  safe  util 45%  62 C" "text: used/total, band, util, temp"
expect_contains "$OUT" "GPU 1  Tesla T4" "text: GPU 1"
expect_contains "$OUT" "budget 79.00 GiB usable" "text: budget"
expect_contains "$OUT" "$JOB" "text: the live job's pid"
expect_contains "$OUT" "sleep 300" "text: the live job's command"
expect_contains "$OUT" "999999   ?             2.00 GiB       -  (not in this PID namespace)" "text: foreign pid flagged"
expect_contains "$OUT" "note: 1 process on the GPUs does not exist in this PID namespace" "text: namespace note"
expect_eq "$(grep -c '^oomless watch ' <<<"$OUT")" 1 "text: one snapshot"

# ---- --once --json ---------------------------------------------------------------------------
oom watch --once --json
expect_rc 0 "watch --once --json"
expect_one_json "watch --once --json"
expect_json '.gpus | length' 2 "json: two GPUs"
expect_json '.gpus[0].name' "NVIDIA A100-SXM4-80GB" "json: name"
expect_json '.gpus[0].used_bytes' 7516192768 "json: used = base + processes"
expect_json '.gpus[0].total_bytes' 85899345920 "json: total"
expect_json '.gpus[0].utilization' 45 "json: utilization"
expect_json '.gpus[0].temperature_c' 62 "json: temperature"
expect_json '.gpus[0].lost' false "json: not lost"
expect_json '.gpus[0].band' safe "json: band"
expect_json '.gpus[0].budget.usable_bytes' 84825604096 "json: budget = total - 1 GiB"
expect_json '.gpus[0].processes | map(.pid) | join(",")' "$JOB,999999" "json: processes by memory"
expect_json '.gpus[0].processes[0].command' "sleep 300" "json: command"
expect_json '.gpus[0].processes[0].local' true "json: local pid"
expect_json '.gpus[0].processes[0].user' "$(id -un)" "json: user"
expect_json '.gpus[0].processes[0].batch_size' null "json: no batch size outside oomless run"
expect_json '.gpus[0].processes[1].command' null "json: foreign command unknown"
expect_json '.gpus[0].processes[1].local' false "json: foreign pid flagged"
expect_json '.foreign_pids' 1 "json: foreign count"
expect_json '.gpus[1].utilization' null "json: utilisation unknown is null"
expect_json '.time | type' number "json: time"

# ---- a job started like `oomless run` does: batch size from its environment -----------------
env OOMLESS_BATCH_SIZE=24 OOMLESS_GRAD_ACCUM=3 sleep 300 &
RUNJOB=$!
echo "1 1073741824" >"$TMP/procs/$RUNJOB"
wait_exec "$RUNJOB"
oom watch --once --json
expect_json ".gpus[1].processes[0].pid" "$RUNJOB" "json: job on GPU 1"
expect_json ".gpus[1].processes[0].batch_size" 24 "json: OOMLESS_BATCH_SIZE"
expect_json ".gpus[1].processes[0].grad_accum" 3 "json: OOMLESS_GRAD_ACCUM"
oom watch --once
expect_contains "$OUT" "24x3  sleep 300" "text: batch x accumulation"
kill "$RUNJOB"
wait "$RUNJOB" 2>/dev/null

# ---- JSON lines ------------------------------------------------------------------------------
oom watch --count 3 --interval 0.05 --json
expect_rc 0 "watch --count 3 --json"
expect_eq "$(printf '%s\n' "$OUT" | wc -l)" 3 "jsonl: three lines"
expect_eq "$(printf '%s\n' "$OUT" | jq -c 'select(type == "object") | .gpus | length' | tr '\n' ' ')" "2 2 2 " "jsonl: each line one object"
if printf '%s\n' "$OUT" | while IFS= read -r line; do printf '%s' "$line" | jq -e -s 'length == 1' >/dev/null || exit 1; done; then ok; else bad "jsonl: a line is not exactly one JSON value"; fi

# ---- a steadily growing process: the trend and the time to the budget --------------------
sleep 300 &
GROW=$!
wait_exec "$GROW"
# its memory is 1 GiB + 100 MiB/s of real time, whenever the writer gets to run
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
for _ in $(seq 200); do [ -s "$TMP/procs/$GROW" ] && break; sleep 0.05; done
oom watch --count 40 --interval 0.1 --json
LAST=$(printf '%s\n' "$OUT" | tail -1)
OUT=$LAST
expect_json '.gpus[0].trend.growing' true "trend: the GPU's memory grows"
expect_json ".gpus[0].processes[] | select(.pid == $GROW) | (.growth_bytes_per_s > 80e6 and .growth_bytes_per_s < 130e6)" true "trend: the process grows ~100 MiB/s"
expect_json ".gpus[0].processes[] | select(.pid == $GROW) | (.seconds_to_budget > 0)" true "trend: time to the budget"
expect_json ".gpus[0].processes[] | select(.pid == $JOB) | .growth_bytes_per_s" 0 "trend: the steady job does not grow"
expect_json ".gpus[0].processes[] | select(.pid == $JOB) | .seconds_to_budget" null "trend: no ETA for it"
oom watch --count 30 --interval 0.1 --no-tui
expect_contains "$(printf '%s\n' "$OUT" | tail -12)" "trend: pid $GROW growing" "trend: text line"
expect_contains "$(printf '%s\n' "$OUT" | tail -12)" "crossed in ~" "trend: text ETA"
kill "$GROW" "$WRITER" 2>/dev/null
wait "$GROW" "$WRITER" 2>/dev/null
rm -f "$TMP/procs/$GROW"

# ---- CSV log ---------------------------------------------------------------------------------
oom watch --count 2 --interval 0.05 --json --log "$TMP/log.csv"
expect_rc 0 "watch --log"
oom watch --once --log "$TMP/log.csv"
expect_eq "$(head -1 "$TMP/log.csv")" "timestamp,kind,gpu_index,gpu_name,pid,command,user,used_bytes,total_bytes,utilization_gpu,temperature_c,band,lost,batch_size,grad_accum" "csv: header"
expect_eq "$(grep -c '^timestamp,' "$TMP/log.csv")" 1 "csv: header written once"
expect_eq "$(wc -l <"$TMP/log.csv")" 13 "csv: header + 3 samples x (2 GPUs + 2 processes)"
expect_eq "$(grep -c ',gpu,0,NVIDIA A100-SXM4-80GB,,,,7516192768,85899345920,45,62,safe,0,,$' "$TMP/log.csv")" 3 "csv: GPU rows"
expect_eq "$(grep -c ",process,0,NVIDIA A100-SXM4-80GB,$JOB,sleep 300,$(id -un),4294967296,,,,,,,$" "$TMP/log.csv")" 3 "csv: process rows"
expect_eq "$(grep -c ',process,0,NVIDIA A100-SXM4-80GB,999999,,,2147483648,,,,,,,$' "$TMP/log.csv")" 3 "csv: foreign process rows"
oom watch --once --log "$TMP/no/such/dir/log.csv"
expect_rc 3 "csv: unwritable log"
expect_contains "$ERR" "no/such/dir/log.csv" "csv: names the file"

# ---- no terminal: text snapshots, never a crash ---------------------------------------------
run env TERM=dumb "$OOMLESS_BIN" watch --count 2 --interval 0.05
expect_rc 0 "TERM=dumb, stdout a pipe"
expect_eq "$(grep -c '^oomless watch ' <<<"$OUT")" 2 "TERM=dumb: two text snapshots"
run env -u TERM "$OOMLESS_BIN" watch --count 2 --interval 0.05
expect_rc 0 "TERM unset"
expect_eq "$(grep -c '^oomless watch ' <<<"$OUT")" 2 "TERM unset: two text snapshots"
run env TERM=no-such-terminal "$OOMLESS_BIN" watch --count 1 --interval 0.05
expect_rc 0 "TERM unknown"
expect_contains "$OUT" "GPU 0  NVIDIA A100-SXM4-80GB" "TERM unknown: text"

# ---- budget, plan, events --------------------------------------------------------------------
oom watch --once --json --vram 8 --vram-safety-margin 1024
expect_json '.gpus[0].budget.usable_bytes' 7516192768 "--vram applies to each GPU"
expect_json '.gpus[0].band' warning "7 GiB of 7 GiB usable: warning"
expect_json '.gpus[1].band' safe "GPU 1 under the same budget: safe"
oom watch --once --json --vram 6
expect_json '.gpus[0].band' critical "over the budget: critical"
oom watch --once --json --vram-safety-margin 10%
expect_json '.gpus[1].budget.safety_margin_bytes' 1610612736 "a percentage margin per GPU"
printf '{"memory": {"device_peak": 5368709120}}\n' >"$TMP/plan.json"
oom watch --once --json --plan "$TMP/plan.json"
expect_json '.plan_peak_bytes' 5368709120 "--plan: peak"
expect_json '.gpus[0].band' elevated "above the plan's peak: elevated"
expect_json '.gpus[1].band' safe "under the plan's peak: safe"
oom watch --once --plan "$TMP/missing.json"
expect_rc 3 "--plan: missing file"
printf '{"memory": {}}\n' >"$TMP/plan.json"
oom watch --once --plan "$TMP/plan.json"
expect_rc 2 "--plan without a peak"
expect_contains "$ERR" "device_peak" "--plan: names the key"
{
    printf '{"alternatives": ["%s"],\n' "$(head -c 1100000 /dev/zero | tr '\0' x)"
    printf '"memory": {"device_peak": "5GiB"}}\n'
} >"$TMP/plan.json"
oom watch --once --json --plan "$TMP/plan.json"
expect_json '.plan_peak_bytes' 5368709120 "--plan: a plan above 1 MiB"
truncate -s 73505997 "$TMP/plan.json"
oom watch --once --plan "$TMP/plan.json"
expect_rc 2 "--plan past the 64 MiB cap"
expect_contains "$ERR" "plan.json: 70.1 MiB is larger than the 64 MiB this reads" "--plan: the cap"
cat >"$TMP/events.jsonl" <<'EOF'
{"time": 1700000000.0, "event": "launch", "pid": 100, "attempt": 1, "batch": 32, "grad_accum": 4}
{"time": 1700000010.0, "event": "oom", "pid": 100, "attempt": 1, "batch": 32, "peak_bytes": 85899345920}
{"time": 1700000011.0, "event": "restart", "pid": 101, "attempt": 2, "batch": 16, "grad_accum": 8}
EOF
printf '{"time": 1700000012.0, "event": "ex' >>"$TMP/events.jsonl"
oom watch --once --events "$TMP/events.jsonl"
expect_rc 0 "--events"
expect_contains "$OUT" "Events:" "events listed"
expect_contains "$OUT" "oom     pid 100 attempt 1 batch 32 peak 80.00 GiB" "events: oom"
expect_contains "$OUT" "restart pid 101 attempt 2 batch 16 (changed) grad_accum 8" "events: batch change"
expect_eq "$(grep -cE '^  [0-9]{2}:[0-9]{2}:[0-9]{2}  ' <<<"$OUT")" 3 "events: a partial line waits"
oom watch --once --events "$TMP/not-yet.jsonl"
expect_rc 0 "--events: a file that does not exist yet"

# ---- a GPU lost mid-run ----------------------------------------------------------------------
fake_nvml "gpu name=\"NVIDIA A100-SXM4-80GB\" total=85899345920 used=1073741824
gpu name=\"Tesla T4\" total=16106127360 used=0 lost_after=1"
oom watch --count 3 --interval 0.05 --json
expect_rc 0 "lost GPU: no crash"
expect_eq "$(printf '%s\n' "$OUT" | jq -r '.gpus[1].lost' | tr '\n' ' ')" "false true true " "lost GPU: lost from the second sample"
expect_eq "$(printf '%s\n' "$OUT" | jq -r '.gpus[1].name' | tr '\n' ' ')" "Tesla T4 Tesla T4 Tesla T4 " "lost GPU: keeps its name"
expect_eq "$(printf '%s\n' "$OUT" | sed -n 3p | jq -r '[.gpus[1].used_bytes, .gpus[1].band] | join(",")')" ",unknown" "lost GPU: no stale numbers"
expect_eq "$(printf '%s\n' "$OUT" | jq -r '.gpus[0].lost' | tr '\n' ' ')" "false false false " "lost GPU: the other one still answers"
fake_nvml "gpu name=\"Tesla T4\" total=16106127360 used=0 lost_after=1"
oom watch --count 2 --interval 0.05
expect_rc 0 "lost GPU, text"
expect_contains "$OUT" "GPU 0  Tesla T4  lost (the device stopped answering)" "lost GPU: text"

# ---- environment and usage errors ------------------------------------------------------------
no_nvml
oom watch --once
expect_rc 3 "no NVML: exit 3"
expect_contains "$ERR" "NVML not available" "no NVML: says so"
expect_contains "$ERR" "libnvidia-ml.so.1" "no NVML: names the library"
expect_eq "$OUT" "" "no NVML: nothing on stdout"
fake_nvml "init_error 9"
oom watch --once --json
expect_rc 3 "NVML init failing: exit 3"
expect_contains "$ERR" "Driver Not Loaded" "NVML init failing: NVML's message"
fake_nvml "$SPEC"
for bad in 0.01 0 -1 abc 1s "" nan inf; do
    oom watch --once --interval "$bad"
    expect_rc 2 "--interval '$bad'"
    expect_contains "$ERR" "--interval '$bad'" "--interval '$bad' named"
done
oom watch --once --interval 0.05
expect_rc 0 "--interval 0.05 is the minimum"
oom watch --count 0
expect_rc 2 "--count 0"
oom watch --count x
expect_rc 2 "--count x"
oom watch --bogus
expect_rc 2 "unknown option"
oom watch extra
expect_rc 2 "unexpected argument"
oom watch --once --vram-safety-margin lots
expect_rc 2 "bad margin"
oom watch --help
expect_rc 0 "--help"
expect_contains "$OUT" "--interval SECONDS" "--help lists --interval"

# ---- the interactive view, in tmux -----------------------------------------------------------
if ! command -v tmux >/dev/null; then
    bad "tmux is not installed"
    finish
    exit
fi
# the T4 stops answering after 15 memory queries: about 3 s into the first session
fake_nvml "${SPEC/used=0/used=0 lost_after=15}"
TMUX_SOCK="$TMP/tmux.sock"
T() { tmux -S "$TMUX_SOCK" -f /dev/null "$@"; }
cat >"$TMP/watch.sh" <<EOF
export OOMLESS_NVML_LIBRARY='$OOMLESS_NVML_LIBRARY' FAKE_NVML_SPEC='$FAKE_NVML_SPEC'
export OOMLESS_DATA_DIR='$OOMLESS_DATA_DIR' XDG_CONFIG_HOME='$XDG_CONFIG_HOME'
"$OOMLESS_BIN" watch --interval 0.2 --events '$TMP/events.jsonl' "\$@"
echo "watch-exit=\$?"
EOF
# pane_wait PATTERN: polls the pane for up to 10 s; leaves the last capture in $PANE
pane_wait() {
    local i
    for i in $(seq 100); do
        PANE=$(T capture-pane -p -t w)
        case "$PANE" in *"$1"*) return 0 ;; esac
        sleep 0.1
    done
    return 1
}
expect_pane() { if pane_wait "$1"; then ok; else bad "$2: '$1' not in pane:"; printf '%s\n' "$PANE" >&2; fi; }
alt_screen() { T display -p -t w '#{alternate_on}'; }
start_watch() { # start_watch [TERM value] [args...]
    local term=$1
    shift
    T send-keys -t w "clear; TERM=$term bash $TMP/watch.sh $*" Enter
}

T new-session -d -s w -x 110 -y 36 "env PS1='ready> ' bash --norc --noprofile"
expect_pane "ready>" "tmux: shell started"
start_watch screen
expect_pane "NVIDIA A100-SXM4-80GB" "tui: GPU name drawn"
expect_pane "[||" "tui: a bar drawn"
expect_pane "7.00 GiB / 80.00 GiB" "tui: used / total"
expect_pane "Tesla T4" "tui: second GPU panel"
expect_pane "sleep 300" "tui: process command"
expect_pane "(not in this PID namespace)" "tui: foreign pid flagged"
expect_pane "restart pid 101 attempt 2 batch 16 (changed)" "tui: events listed"
expect_eq "$(alt_screen)" 1 "tui: alternate screen while running"
printf '%s\n' "$PANE" >"$TMP/screen.txt"
expect_pane "lost: the device stopped answering" "tui: a GPU lost mid-watch is shown lost"
expect_pane "  GPU 1  Tesla T4" "tui: the lost GPU keeps its name"
T send-keys -t w p
expect_pane "[PAUSED]" "tui: p pauses"
T send-keys -t w p
if pane_wait "[PAUSED]"; then
    for _ in $(seq 50); do PANE=$(T capture-pane -p -t w); case "$PANE" in *"[PAUSED]"*) sleep 0.1 ;; *) break ;; esac; done
fi
expect_not_contains "$PANE" "[PAUSED]" "tui: p again resumes"
T send-keys -t w +
expect_pane "every 0.5 s" "tui: + slows down"
T send-keys -t w - -
expect_pane "every 0.1 s" "tui: - speeds up"
T send-keys -t w Down
expect_pane "> GPU 1  Tesla T4" "tui: arrow selects GPU 1"
T resize-window -t w -x 80 -y 24 2>/dev/null || T resize-pane -t w -x 80 -y 24
expect_pane "NVIDIA A100" "tui: redrawn after a resize"
T send-keys -t w q
expect_pane "watch-exit=0" "tui: q exits with 0"
expect_eq "$(alt_screen)" 0 "tui: q leaves the alternate screen"
expect_pane "ready>" "tui: the prompt is back"

T resize-window -t w -x 110 -y 36 2>/dev/null
start_watch screen
expect_pane "NVIDIA A100-SXM4-80GB" "tui (2): started"
pid=$(pgrep -n -f "$OOMLESS_BIN watch --interval 0.2" || true)
if [ -n "$pid" ]; then kill -TERM "$pid"; else bad "tui: no watch process to signal"; fi
expect_pane "watch-exit=143" "tui: SIGTERM exits with 128+15"
expect_eq "$(alt_screen)" 0 "tui: SIGTERM restores the terminal"

start_watch screen
expect_pane "NVIDIA A100-SXM4-80GB" "tui (3): started"
T send-keys -t w C-c
expect_pane "watch-exit=130" "tui: Ctrl-C exits with 128+2"
expect_eq "$(alt_screen)" 0 "tui: Ctrl-C restores the terminal"

start_watch screen
expect_pane "NVIDIA A100-SXM4-80GB" "tui (4): started"
T send-keys -t w 'C-\'
expect_pane "watch-exit=131" "tui: Ctrl-\\ exits with 128+3"
expect_eq "$(alt_screen)" 0 "tui: Ctrl-\\ restores the terminal"

# a log that cannot be written: the view says so and goes on; the message comes after it
start_watch screen --log /dev/full
expect_pane "[LOG NOT WRITTEN]" "tui: a failing --log shown in the title bar"
expect_pane "Tesla T4" "tui: still watching with the log failing"
T send-keys -t w q
expect_pane "watch-exit=3" "tui: exit 3 when samples were not logged"
expect_pane "cannot write '/dev/full': No space left on device" "tui: the log's failure said after the view"
expect_eq "$(alt_screen)" 0 "tui: the terminal restored"

start_watch dumb --count 2
expect_pane "watch-exit=0" "TERM=dumb on a terminal: text mode"
expect_contains "$PANE" "GPU 0  NVIDIA A100-SXM4-80GB  [" "TERM=dumb on a terminal: text snapshot"
expect_eq "$(alt_screen)" 0 "TERM=dumb: no alternate screen"

finish
