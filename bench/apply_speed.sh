#!/bin/bash
# apply_speed.sh - wall time, CPU time and peak memory (max RSS) of `oomless apply` on generated
# configs of about MEGABYTES MB: a Hydra YAML (tests/data/apply/config.yaml followed by a long
# `layers:` map, comments with non-ASCII text) and a DeepSpeed JSON (tests/data/apply/
# ds_config.json's keys followed by a long "layers" object), each edited as a user would.
# usage: bench/apply_speed.sh [OOMLESS_BINARY] [MEGABYTES]
set -eu
BIN=$(cd "$(dirname "${1:-build/oomless}")" && pwd)/$(basename "${1:-build/oomless}")
MB=${2:-50}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$HERE/../tests/data/apply
export OOMLESS_DATA_DIR=${OOMLESS_DATA_DIR:-$HERE/../data}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/oomless-bench.XXXXXX")
trap 'rm -rf "$DIR"' EXIT

python3 - "$DATA" "$DIR" "$MB" <<'EOF'
import json, sys
data, out, mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
target = int(mb * 1000 * 1000)

parts = [open(f"{data}/config.yaml", encoding="utf-8").read(), "\nlayers:\n"]
size, i = sum(len(p.encode()) for p in parts), 0
while size < target:
    block = (f"  layer_{i:07d}:            # Schicht {i} — größe\n"
             f"    name: \"block {i}\"\n"
             f"    dims: [{i % 97}, {i % 89}, 4096]\n"
             f"    settings:\n"
             f"      dropout: 0.1\n"
             f"      enabled: true\n")
    parts.append(block)
    size += len(block.encode())
    i += 1
open(f"{out}/big.yaml", "w", encoding="utf-8").write("".join(parts))

head = json.load(open(f"{data}/ds_config.json"))
text = json.dumps(head, indent=2)[:-2] + ',\n  "layers": {\n'
parts, size, i = [text], len(text), 0
while size < target:
    item = json.dumps({"name": f"block {i} é", "dims": [i % 97, i % 89, 4096],
                       "settings": {"dropout": 0.1, "enabled": True}})
    line = f'    "layer_{i:07d}": {item},\n'
    parts.append(line)
    size += len(line.encode())
    i += 1
parts[-1] = parts[-1][:-2] + "\n"
parts.append("  }\n}\n")
open(f"{out}/big.json", "w", encoding="utf-8").write("".join(parts))
EOF

# measure FILE ARGS...: a fresh copy of FILE, then `oomless apply ARGS... FILE` in $DIR
measure() {
    local file=$1
    shift
    cp "$DIR/$file" "$DIR/w.$file"
    rm -f "$DIR/w.$file.bak"
    python3 - "$BIN" "$DIR" "$file" "$@" <<'EOF'
import os, resource, subprocess, sys, time
binary, folder, name, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
size = os.path.getsize(f"{folder}/{name}")
t0 = time.perf_counter()
p = subprocess.run([binary, "apply", *args, f"w.{name}"], cwd=folder,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
note = "" if p.returncode == 0 else f"  [exit {p.returncode}: {p.stderr.strip().splitlines()[-1]}]"
print(f"{wall:6.2f} s wall {ru.ru_utime + ru.ru_stime:6.2f} s CPU {ru.ru_maxrss / 1024:7.0f} MiB "
      f"max RSS  {size / 1e6:5.1f} MB {name}: apply {' '.join(args)}{note}")
EOF
}

cp "$DATA/plan.json" "$DIR/plan.json"
PLAN=plan.json
measure big.yaml --plan "$PLAN" --preset hydra-lightning --no-backup
measure big.yaml --plan "$PLAN" --preset hydra-lightning
measure big.yaml --plan "$PLAN" --preset hydra-lightning --dry-run
measure big.yaml --plan "$PLAN" --preset hydra-lightning --create --set notes.added=literal:1 \
    --set layers.layer_0000000.settings.dropout=literal:0.2 --diff
measure big.json --plan "$PLAN" --preset deepspeed --no-backup
measure big.json --plan "$PLAN" --preset deepspeed --dry-run
