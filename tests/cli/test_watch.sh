#!/usr/bin/env bash
# test_watch.sh - `oomless watch`: text, JSON and CSV against the fake NVML, the no-terminal
# fallback, a lost GPU, no NVML and bad options (the growing-memory trend: test_watch_trend.sh;
# the interactive view: test_watch_tui.sh).
. "$(dirname "$0")/watch_common.sh"

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

# ---- CSV log ---------------------------------------------------------------------------------
oom watch --count 2 --interval 0.05 --json --log "$TMP/log.csv"
expect_rc 0 "watch --log"
oom watch --once --log "$TMP/log.csv"
expect_eq "$(head -1 "$TMP/log.csv")" "timestamp,kind,gpu_index,gpu_name,pid,command,user,used_bytes,total_bytes,utilization_gpu,temperature_c,band,lost,batch_size,grad_accum,reserved_bytes" "csv: header"
expect_eq "$(grep -c '^timestamp,' "$TMP/log.csv")" 1 "csv: header written once"
expect_eq "$(wc -l <"$TMP/log.csv")" 13 "csv: header + 3 samples x (2 GPUs + 2 processes)"
expect_eq "$(grep -c ',gpu,0,NVIDIA A100-SXM4-80GB,,,,7516192768,85899345920,45,62,safe,0,,,0$' "$TMP/log.csv")" 3 "csv: GPU rows"
expect_eq "$(grep -c ",process,0,NVIDIA A100-SXM4-80GB,$JOB,sleep 300,$(id -un),4294967296,,,,,,,,$" "$TMP/log.csv")" 3 "csv: process rows"
expect_eq "$(grep -c ',process,0,NVIDIA A100-SXM4-80GB,999999,,,2147483648,,,,,,,,$' "$TMP/log.csv")" 3 "csv: foreign process rows"
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
write_events "$TMP/events.jsonl"
oom watch --once --events "$TMP/events.jsonl"
expect_rc 0 "--events"
expect_contains "$OUT" "Events:" "events listed"
expect_contains "$OUT" "oom     pid 100 attempt 1 batch 32 peak 80.00 GiB" "events: oom"
expect_contains "$OUT" "restart pid 101 attempt 2 batch 16 (changed) grad_accum 8" "events: batch change"
expect_eq "$(grep -cE '^  [0-9]{2}:[0-9]{2}:[0-9]{2}  ' <<<"$OUT")" 3 "events: a partial line waits"
oom watch --once --events "$TMP/not-yet.jsonl"
expect_rc 0 "--events: a file that does not exist yet"
expect_eq "$(sed -n '/^Events:$/,$p' <<<"$OUT")" "Events:" "--events: none yet, an empty list"
expect_eq "$ERR" "" "--events: a file that does not exist yet is not an error"

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

finish
