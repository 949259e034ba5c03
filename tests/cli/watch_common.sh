# watch_common.sh - what the `oomless watch` tests (test_watch*.sh) share: the harness, a live
# process on GPU 0 ($JOB, in $TMP/procs as the fake NVML reads it), a PID that does not exist
# here, and the fake NVML with two GPUs ($SPEC). Source it instead of lib.sh.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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
# more processes a test starts: killed on exit with $JOB
PIDS=()
cleanup() {
    kill "$JOB" "${PIDS[@]}" 2>/dev/null
    [ -n "${TMUX_SOCK:-}" ] && tmux -S "$TMUX_SOCK" kill-server 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

SPEC="gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-aaaa total=85899345920 used=1073741824 util=45 temp=62
gpu name=\"Tesla T4\" total=16106127360 used=0
proc gpu=0 pid=999999 used=2147483648
procdir $TMP/procs"
fake_nvml "$SPEC"

# the events of a job `oomless run` restarted at half the batch, and a partial last line
write_events() { # write_events FILE
    cat >"$1" <<'EVENTS'
{"time": 1700000000.0, "event": "launch", "pid": 100, "attempt": 1, "batch": 32, "grad_accum": 4}
{"time": 1700000010.0, "event": "oom", "pid": 100, "attempt": 1, "batch": 32, "peak_bytes": 85899345920}
{"time": 1700000011.0, "event": "restart", "pid": 101, "attempt": 2, "batch": 16, "grad_accum": 8}
EVENTS
    printf '{"time": 1700000012.0, "event": "ex' >>"$1"
}
