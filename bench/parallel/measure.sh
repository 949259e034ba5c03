#!/bin/sh
# The parallel memory reference: tests/torch/parallel_worker.py under torchrun on 2 and 4 gloo
# ranks (CPU), every run of bench/parallel/README.md, merged into bench/parallel/measured.json.
#   bench/parallel/measure.sh [PYTHON]      (default build/venv/bin/python)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
py=${1:-$src/build/venv/bin/python}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/parallel-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
"$py" -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29631 \
    "$src/tests/torch/parallel_worker.py" "$tmp/two.json" \
    tp:2 tp:2:sp tp:2:ac tp:2:sp:ac pp:2:1f1b:2 pp:2:1f1b:4 pp:2:1f1b:8 pp:2:1f1b:4:ac \
    pp:2:interleaved:2:4 pp:2:interleaved:2:8 ep:2
"$py" -m torch.distributed.run --nproc-per-node 4 --master-addr 127.0.0.1 --master-port 29632 \
    "$src/tests/torch/parallel_worker.py" "$tmp/four.json" pp:4:1f1b:4 pp:4:1f1b:8
"$py" - "$tmp/two.json" "$tmp/four.json" "$here/measured.json" <<'PY'
import datetime, json, platform, sys
out = {}
for path in sys.argv[1:3]:
    with open(path, encoding="utf-8") as f:
        out.update(json.load(f))
out["date"] = datetime.date.today().isoformat()
cpu = "cpu"
try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
except (OSError, StopIteration):
    pass
out["machine"] = "%s, %s" % (platform.machine(), cpu)
with open(sys.argv[3], "w", encoding="utf-8") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")
PY
