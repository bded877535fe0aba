#!/usr/bin/env bash
# On a machine with CUDA GPUs: the GPU-marked tests and the GPU figures, in one call.
#
#   bash tests/gpu/run.sh            # results under ./gpu-results
#   OUT=/some/dir bash tests/gpu/run.sh
#
# Runs from this checkout with the machine's own torch (PYTHONPATH, no install), so it
# works on a machine that reaches no package index. It leaves at most 8 files under
# $OUT: summary.txt and the main printouts, with everything (JSON reports included)
# in results.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 COLUMNS=120
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# The whole script ends within DEADLINE_S (5 minutes by default): each step gets its own limit or
# what is left, whichever is less, and a step with under 10 s left is skipped and said so.
DEADLINE_S=${DEADLINE_S:-290}

# step NAME LIMIT_S COMMAND...: run it, its output in NAME.txt, one line in summary.txt.
step() {
  local name=$1 limit=$2 began=$SECONDS rc left
  shift 2
  left=$((DEADLINE_S - SECONDS))
  if [ "$left" -lt 10 ]; then
    echo "$name: skipped, the script's $DEADLINE_S s were spent" >> "$WORK/summary.txt"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout -k 5 "$limit" "$@" > "$WORK/$name.txt" 2>&1
  rc=$?
  echo "$rc" > "$WORK/$name.rc"
  echo "$name: exit $rc in $((SECONDS - began)) s: $(tail -1 "$WORK/$name.txt")" >> "$WORK/summary.txt"
}

python3 - > "$WORK/versions.txt" 2>&1 <<'EOF'
import importlib.metadata as metadata, sys
print("python", sys.version.split()[0])
for name in ("torch", "typer", "click", "rich", "psutil", "numpy", "pytest", "pytest-timeout"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, "MISSING")
import torch
print("cuda", torch.version.cuda, "gpus", torch.cuda.device_count(),
      [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
EOF
cat "$WORK/versions.txt" >> "$WORK/summary.txt"
nvidia-smi > "$WORK/nvidia-smi.txt" 2>&1

command -v py-spy >/dev/null || echo "py-spy: absent; watch reads no stacks, only the agent's records and the dumps" >> "$WORK/summary.txt"

# watch and postmortem on NCCL jobs first: the newest paths, and the ones no CPU test reaches.
# A job hung behind a spinning kernel: its last all_reduce stays `scheduled` in NCCL's recorder.
step watch-hang 75 python3 -m ddpcheck watch --hang-after 15 --dir "$WORK/watch-hang" \
  --json "$WORK/watch-hang.json" -- python3 -m torch.distributed.run --nproc-per-node 1 \
  tests/gpu/jobs/nccl_hang.py
step postmortem-hang 30 python3 -m ddpcheck postmortem "$WORK/watch-hang" --json "$WORK/postmortem-hang.json"
# A job that dies of an out-of-memory error.
step watch-oom 60 python3 -m ddpcheck watch --dir "$WORK/watch-oom" --json "$WORK/watch-oom.json" \
  -- python3 -m torch.distributed.run --nproc-per-node 1 tests/gpu/jobs/oom.py
step postmortem-oom 30 python3 -m ddpcheck postmortem "$WORK/watch-oom" --json "$WORK/postmortem-oom.json"

step env 60 python3 -m ddpcheck env --json "$WORK/env.json"
step gpu-tests 150 python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" --timeout=120 \
  --junitxml "$WORK/gpu-tests.xml" tests
step allreduce 120 python3 -m ddpcheck allreduce --json "$WORK/allreduce.json"
step collectives 180 python3 -m ddpcheck collectives --json "$WORK/collectives.json"
step train 120 python3 -m ddpcheck train --json "$WORK/train.json"
step profile 120 python3 -m ddpcheck profile --hidden 4096 --json "$WORK/profile.json"
step links 120 python3 -m ddpcheck links --json "$WORK/links.json"
step devices 180 python3 -m ddpcheck devices --json "$WORK/devices.json"
# The default batch (32 rows) is launch-bound on a large GPU; this one shows the matmuls' rate.
step profile-batch4096 120 python3 -m ddpcheck profile --hidden 4096 --batch 4096 \
  --json "$WORK/profile-batch4096.json"
GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())")
if [ "$GPUS" -gt 0 ]; then
  step bench-profile-overhead 180 python3 tests/perf/bench_profile_overhead.py --device cuda \
    --nproc "$GPUS" --hidden 4096
else
  echo "bench-profile-overhead: skipped, no GPU visible" >> "$WORK/summary.txt"
fi

# One table: each step's exit, and for the reports its verdict and first finding.
python3 tests/gpu/summary.py "$WORK" >> "$WORK/summary.txt" 2>&1

# At most 8 files come back: the rest (train, profile, profile-batch4096, the JSON reports) is in the tarball.
cp "$WORK"/{summary,gpu-tests,allreduce,collectives,links,devices,bench-profile-overhead}.txt "$OUT"/ 2>/dev/null
tar -czf "$OUT/results.tar.gz" -C "$WORK" .
cat "$WORK/summary.txt"
