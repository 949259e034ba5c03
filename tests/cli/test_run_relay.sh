# test_run_relay.sh - a job's output relayed to pipes: every byte, in order, on its own stream,
# whether it goes by tee(2) (nothing queued, the pipe has room) or through the queue (a reader
# that falls behind); the OOM scan still reads it all; the destination pipe is grown to the
# queue's size (256 KiB), never shrunk.
. "$(dirname "$0")/lib.sh"

# relay.py BINARY JOB fast|slow default|PIPESIZE: runs `oomless run -- python3 JOB` with its
# stdout and stderr pipes that threads here drain (fast: 1 MiB reads; slow: 4 KiB every 2 ms);
# prints the exit status, whether oomless said the job ran out of memory, stdout's pipe size before and while oomless runs, then the bytes and
# sha256 of what came out of each pipe (of stderr, the job's lines: not oomless's own)
cat >"$TMP/relay.py" <<'PY'
import fcntl, hashlib, os, subprocess, sys, threading, time

F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032
binary, job, slow, size = sys.argv[1], sys.argv[2], sys.argv[3] == "slow", sys.argv[4]
r_out, w_out = os.pipe()
r_err, w_err = os.pipe()
if size != "default":
    fcntl.fcntl(w_out, F_SETPIPE_SZ, int(size))
before = fcntl.fcntl(r_out, F_GETPIPE_SZ)
p = subprocess.Popen([binary, "run", "--batch-size", "1", "--calibration", "off", "--",
                      sys.executable, job], stdin=subprocess.DEVNULL, stdout=w_out, stderr=w_err)
os.close(w_out)
os.close(w_err)
got, sizes, kept, said = {}, [], {}, []

def drain(name, fd):
    while True:
        if slow:
            time.sleep(0.002)
        b = os.read(fd, 4096 if slow else 1 << 20)
        if not b:
            break
        if name == "out" and not sizes:
            sizes.append(fcntl.fcntl(fd, F_GETPIPE_SZ))  # oomless has set it up by now
        kept.setdefault(name, []).append(b)
    data = b"".join(kept[name]) if name in kept else b""
    if name == "err":  # oomless's own lines (its attempt and OOM notices) are not the job's
        lines = data.splitlines(True)
        data = b"".join(l for l in lines if not l.startswith(b"oomless"))
        said.extend(l for l in lines if l.startswith(b"oomless"))
    got[name] = (len(data), hashlib.sha256(data).hexdigest())

ts = [threading.Thread(target=drain, args=("out", r_out)),
      threading.Thread(target=drain, args=("err", r_err))]
for t in ts:
    t.start()
rc = p.wait()
for t in ts:
    t.join()
oom = any(b"ran out of memory at batch 1" in l for l in said)
print(rc, "oom" if oom else "no-oom", before, sizes[0], *got["out"], *got["err"])
PY

# the job's output: 6 MiB to stdout, then 3 MiB to stderr, in writes of many sizes (1 to 200
# lines of up to 300 bytes), every line different; then an OOM on stderr, exit 1
cat >"$TMP/stream.py" <<'PY'
import hashlib, os, sys
OOM = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
def chunks(tag, total):
    n = i = 0
    while n < total:
        line = ("%s %d %s\n" % (tag, i, "x" * (i * 7919 % 300))).encode()
        chunk = (line * (1 + i * 104729 % 200))[: total - n]
        n += len(chunk)
        i += 1
        yield chunk
if sys.argv[1:] == ["sums"]:  # what the job writes: bytes and sha256 of stdout, then stderr
    o, e = b"".join(chunks("out", 6 << 20)), b"".join(chunks("err", 3 << 20)) + OOM
    print(len(o), hashlib.sha256(o).hexdigest(), len(e), hashlib.sha256(e).hexdigest())
    sys.exit(0)
for c in chunks("out", 6 << 20):
    os.write(1, c)
for c in chunks("err", 3 << 20):
    os.write(2, c)
os.write(2, OOM)
sys.exit(1)
PY
WANT=$(python3 "$TMP/stream.py" sums)

for mode in fast slow; do
    run python3 "$TMP/relay.py" "$OOMLESS_BIN" "$TMP/stream.py" "$mode" default
    read -r rc oom before during sums <<<"$OUT"
    expect_eq "$rc $oom" "1 oom" "$mode reader: the OOM at the end of 3 MiB of stderr found"
    expect_eq "$before $during" "65536 262144" "$mode reader: the pipe grown from 64 to 256 KiB"
    expect_eq "$sums" "$WANT" "$mode reader: stdout and stderr relayed byte for byte"
done

# A reader that drains only at the end (a parent waiting on its children one by one, as
# tests/torch's two-node tests do): a chatty job's lines must fill the destination's bytes, not
# its slots. A pipe counts its buffers (64 in 256 KiB) and tee(2) gives what each call passes
# a buffer of its own, so passing each 60-byte line on by tee filled the pipe with 3,840 bytes
# and oomless then waited on its reader with the rest queued (the two-node relaunch hung on
# it); below 64 KiB waiting, the bytes are copied, and a copy merges into the last buffer.
# 150 KB of lines, one write each, fit in the grown pipe: oomless must end without a reader.
cat >"$TMP/chatty.py" <<'PY'
import os, time
line = b"y" * 59 + b"\n"
for i in range(2500):
    os.write(1, line)
    time.sleep(0.0005)
PY
cat >"$TMP/lazy.py" <<'PY'
import os, subprocess, sys
r, w = os.pipe()
p = subprocess.Popen([sys.argv[1], "run", "--batch-size", "1", "--calibration", "off", "--",
                      sys.executable, sys.argv[2]], stdin=subprocess.DEVNULL, stdout=w,
                     stderr=subprocess.DEVNULL)
os.close(w)
try:
    rc = p.wait(timeout=60)  # nobody reads the pipe meanwhile
except subprocess.TimeoutExpired:
    p.kill()
    rc = "blocked"
got = 0
while True:
    b = os.read(r, 1 << 16)
    if not b:
        break
    got += len(b)
print(rc, got)
PY
run python3 "$TMP/lazy.py" "$OOMLESS_BIN" "$TMP/chatty.py"
expect_eq "$OUT" "0 150000" "150 KB of lines to a pipe read only at the end: oomless ends, all there"

# a larger pipe is left as it is
run python3 "$TMP/relay.py" "$OOMLESS_BIN" "$TMP/stream.py" fast 1048576
read -r rc oom before during sums <<<"$OUT"
expect_eq "$before $during" "1048576 1048576" "a 1 MiB pipe is not shrunk"
expect_eq "$sums" "$WANT" "a 1 MiB pipe: relayed byte for byte"

finish
