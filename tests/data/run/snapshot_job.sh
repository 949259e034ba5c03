#!/bin/sh
# A job that fails its first attempt as PyTorch does, after appending the oom_snapshot event that
# oomless.torch writes (what filled the memory) to the events file `oomless run` names in
# $OOMLESS_RECOVERY_EVENTS; SNAP set empty leaves the event out. Used by
# tests/cli/test_run_snapshot.sh and by the example in docs/probe-run.md.
echo "history=${OOMLESS_MEMORY_HISTORY:-none}"
if [ "$OOMLESS_ATTEMPT" = 1 ]; then
    if [ -n "${SNAP-1}" ]; then
        printf '%s\n' '{"time":5.5,"event":"oom_snapshot","pid":7,"rank":0,"step":2,"allocated_bytes":6442450944,"reserved_bytes":7516192768,"inactive_split_bytes":536870912,"frames":true,"tried_bytes":2147483648,"device_free_bytes":0,"reason":"CUDA out of memory.","largest":[{"bytes":3328599654,"where":"model.py:88 forward","code":"logits = self.lm_head(h)"}],"origins":[{"where":"model.py:88 forward","code":"logits = self.lm_head(h)","bytes":3328599654,"count":1},{"where":"model.py:40 forward","code":null,"bytes":2362232012,"count":4}]}' >>"$OOMLESS_RECOVERY_EVENTS"
    fi
    echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB." >&2
    exit 1
fi
exit 0
