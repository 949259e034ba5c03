# test_run_nodes.sh - `oomless run` on each node of one job: the nodes relaunch together through
# --sync-dir, the notice when one part of a multi-node job runs without it, torchrun's
# rendezvous failures said. The "nodes" are two `oomless run` on this machine around a script
# that meets its peer before it starts (as torchrun's rendezvous does) and then runs out of
# memory, dies of its peer's death, hangs in a collective or fails otherwise.
. "$(dirname "$0")/lib.sh"
no_nvml
export XDG_CACHE_HOME="$TMP/cache"

cat >"$TMP/node.sh" <<'EOF'
#!/bin/bash
# node.sh DIR ROLE OTHER: waits (60 s at most, for a loaded machine) for OTHER's start of the same attempt, then
# batch <= 2: done; else by ROLE: oom (dies of out of memory), peer (dies when OTHER has died),
# hang (waits until stopped), fail (a bug: exit 3)
d=$1 role=$2 other=$3 a=$OOMLESS_ATTEMPT b=$OOMLESS_BATCH_SIZE
touch "$d/start.$role.$a"
for _ in $(seq 1200); do [ -e "$d/start.$other.$a" ] && break; sleep 0.05; done
echo "step 1 batch $b accum $OOMLESS_GRAD_ACCUM"
if [ "$b" -le 2 ]; then echo "done batch $b accum $OOMLESS_GRAD_ACCUM"; exit 0; fi
case $role in
oom) touch "$d/died.$role.$a"
     echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2; exit 1 ;;
peer) for _ in $(seq 1200); do [ -e "$d/died.$other.$a" ] && break; sleep 0.05; done
     echo "RuntimeError: Connection closed by peer" >&2; exit 1 ;;
hang) exec sleep 60 ;;
fail) touch "$d/died.$role.$a"; echo "ValueError: bad data" >&2; exit 3 ;;
esac
EOF
chmod +x "$TMP/node.sh"
mkdir -p "$TMP/sync"

# nodes CASE ROLE_A ROLE_B [OPTIONS...]: both nodes under `oomless run --json`, A's results in
# $RC_A $OUT_A $ERR_A, B's in $RC_B $OUT_B $ERR_B
nodes() {
    local c=$1 ra=$2 rb=$3 pa pb
    shift 3
    mkdir -p "$TMP/$c"
    timeout 120 "$OOMLESS_BIN" run --json --sync-id "$c" --kill-grace 2 "$@" -- \
        "$TMP/node.sh" "$TMP/$c" "$ra" "$rb" >"$TMP/$c/a.out" 2>"$TMP/$c/a.err" &
    pa=$!
    timeout 120 "$OOMLESS_BIN" run --json --sync-id "$c" --kill-grace 2 "$@" -- \
        "$TMP/node.sh" "$TMP/$c" "$rb" "$ra" >"$TMP/$c/b.out" 2>"$TMP/$c/b.err" &
    pb=$!
    wait $pa
    RC_A=$?
    wait $pb
    RC_B=$?
    OUT_A=$(cat "$TMP/$c/a.out") ERR_A=$(cat "$TMP/$c/a.err")
    OUT_B=$(cat "$TMP/$c/b.out") ERR_B=$(cat "$TMP/$c/b.err")
}
summary() { printf '%s' "$1" | jq -r '"\(.exit_code) \(.attempts) \(.batch) \(.grad_accum)"' 2>&1; }
records() { jq -r "select(.event == \"$2\") | .node" "$TMP/sync/oomless-sync-$1.jsonl" | wc -l; }

# ---- A runs out of memory, B dies of it: both relaunch at the batch A chose ----------------------
OOMLESS_SYNC_DIR="$TMP/sync" nodes c1 oom peer --batch-size 4 --grad-accum 2
expect_eq "$RC_A $RC_B" "0 0" "oom + peer: both recover"
expect_eq "$(summary "$OUT_A")" "0 2 2 4" "oom node: 2 attempts, batch 2 x 4"
expect_eq "$(summary "$OUT_B")" "0 2 2 4" "peer node: 2 attempts, batch 2 x 4"
expect_contains "$ERR_A" "agree on relaunches in '$TMP/sync/oomless-sync-c1.jsonl'" "where they agree"
expect_contains "$ERR_A" "out of memory at step 1 (peak N/A): restarting with batch 4 -> 2" "oom node's restart"
# (B's job dies of A's death, or is stopped when A's record appears first: exit 1 or 143)
expect_contains "$ERR_B" " at step 1: relaunching with the other nodes, batch 4 -> 2, accumulation 2 -> 4 (effective 8); the batch node " "peer node's restart"
expect_contains "$ERR_B" "chose after its job ran out of memory at batch 4" "peer node: whose batch"
expect_eq "$(records c1 oom) $(records c1 end) $(records c1 launch) $(records c1 exit)" "1 1 4 2" "c1: the records"
expect_eq "$(ls "$TMP/c1" | grep -c '^start')" 4 "c1: two attempts on each node"

# ---- B hangs in a collective: stopped when A's record appears, then relaunched -----------------
nodes c2 oom hang --sync-dir "$TMP/sync" --batch-size 4 --grad-accum 2
expect_eq "$RC_A $RC_B" "0 0" "oom + hang: both recover"
expect_eq "$(summary "$OUT_B")" "0 2 2 4" "hung node: stopped and relaunched at 2 x 4"
expect_contains "$ERR_B" "the job exited 143 at step 1: relaunching with the other nodes" "hung node: SIGTERM"
expect_not_contains "$ERR_B" "SIGKILL" "hung node: stopped within the grace"

# ---- no node runs out of memory: each ends with its job's status, without the full wait --------
nodes c3 fail peer --sync-dir "$TMP/sync" --batch-size 4 --sync-wait 100
expect_eq "$RC_A $RC_B" "3 1" "fail + peer: the jobs' statuses"
expect_eq "$(summary "$OUT_A") | $(summary "$OUT_B")" "3 1 4 1 | 1 1 4 1" "no relaunch"
expect_not_contains "$ERR_A$ERR_B" "did not say within" "every node said how its job ended"

# ---- the node that ran out of memory cannot go lower: every node gives up ----------------------
nodes c4 oom peer --sync-dir "$TMP/sync" --batch-size 4 --min-batch-size 4
expect_eq "$RC_A $RC_B" "1 1" "give up on both"
expect_contains "$ERR_A" "no smaller batch >= 4 is left" "oom node: does not fit"
expect_contains "$ERR_B" "ran out of memory at batch 4 and no smaller batch is left there" "peer: why"

# ---- B's job hangs while A's failed without out of memory: A gives up after --sync-wait, which
# stops B's job
nodes c5 fail hang --sync-dir "$TMP/sync" --batch-size 4 --sync-wait 1
expect_eq "$RC_A $RC_B" "3 1" "fail + hang: A's status, B stopped"
expect_contains "$ERR_A" "attempt 1: 1 other node(s) did not say within 1 s how their job ended" "A: waited for B"
expect_contains "$ERR_B" "left the job (its oomless run exited 3), and the job cannot go on without it; this node's job exited 143" "B: stopped, and why"

# ---- the sync folder and the job's id -----------------------------------------------------------
oom run --batch-size 1 --sync-dir "$TMP/nope" --sync-id x -- true
expect_rc 3 "missing sync folder"
expect_contains "$ERR" "sync folder '$TMP/nope': No such file or directory" "missing sync folder: named"
oom run --batch-size 1 --sync-dir "$TMP/sync" -- true
expect_rc 2 "no job id"
expect_contains "$ERR" "give --sync-id ID" "no job id: what to give"
oom run --batch-size 1 --sync-dir "$TMP/sync" -- true --rdzv-id y
expect_rc 2 "torchrun's options only count for torchrun"
OOMLESS_SYNC_WAIT=abc oom run --batch-size 1 -- true
expect_rc 2 "bad OOMLESS_SYNC_WAIT"
oom run --batch-size 1 --sync-wait 1e308 --sync-id x --sync-dir "$TMP/sync" -- true
expect_rc 2 "--sync-wait past its bound"
expect_contains "$ERR" "--sync-wait '1e308' must be a number of seconds from 0 to 86400" \
    "--sync-wait past its bound: named"

# ---- one part of a multi-node job without a sync folder: said at the start ---------------------
mkdir -p "$TMP/bin"
cat >"$TMP/bin/torchrun" <<'EOF'
#!/bin/sh
case "$*" in *rdzv-fail*) echo "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError" >&2; exit 1 ;; esac
exit 0
EOF
chmod +x "$TMP/bin/torchrun"
printf 'import torch\n' >"$TMP/plain.py"
printf '"""uses TrainStep"""\nimport oomless.torch\n' >"$TMP/inloop.py"
NOTICE="this is one part of a job spread over several nodes (torchrun --nnodes 2)"
PATH="$TMP/bin:$PATH" oom run --batch-size 1 -- torchrun --nnodes 2 --rdzv-backend c10d "$TMP/plain.py"
expect_rc 0 "notice: the job still runs"
expect_contains "$ERR" "$NOTICE" "notice at the start"
expect_contains "$ERR" "the same --sync-dir on a shared filesystem" "notice: what works"
expect_contains "$ERR" "'oomless run -- srun ...' in the batch script" "notice: srun"
first=$(printf '%s\n' "$ERR" | head -n 1)
expect_contains "$first" "$NOTICE" "notice before the first launch"
PATH="$TMP/bin:$PATH" oom run --batch-size 1 -- torchrun --nnodes 2 "$TMP/inloop.py"
expect_not_contains "$ERR" "one part of a job" "in-loop integration: no notice"
PATH="$TMP/bin:$PATH" oom run --batch-size 1 --sync-dir "$TMP/sync" -- torchrun --nnodes 2 --rdzv-id n1 "$TMP/plain.py"
expect_rc 0 "with a sync folder"
expect_not_contains "$ERR" "one part of a job" "with a sync folder: no notice"
PATH="$TMP/bin:$PATH" oom run --batch-size 1 -- torchrun --nnodes 1 "$TMP/plain.py"
expect_not_contains "$ERR" "one part of a job" "one node: no notice"
SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=2 oom run --batch-size 1 -- true
expect_contains "$ERR" "(task 2 of the 4 tasks of a Slurm step)" "one task of a Slurm step"

# ---- torchrun's rendezvous timed out: said, with what to do ------------------------------------
PATH="$TMP/bin:$PATH" oom run --batch-size 1 -- torchrun --nnodes 2 "$TMP/plain.py" rdzv-fail
expect_rc 1 "rendezvous timeout: the job's status"
expect_contains "$ERR" "attempt 1: torchrun gave up waiting for the other nodes at its rendezvous (RendezvousTimeoutError" "rendezvous timeout said"
expect_contains "$ERR" "not every node started the job" "rendezvous timeout: on the first attempt"

finish
