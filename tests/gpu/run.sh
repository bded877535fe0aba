#!/usr/bin/env bash
# On a machine with CUDA GPUs: the GPU-marked tests and the GPU figures, in one call.
# Results go under $OUT (default ./gpu-results). Usage: bash tests/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1

python3 -m pip install --quiet -e '.[test]' 2>&1 | tail -2
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
python3 -m ddpcheck env --json "$OUT/env.json" > "$OUT/env.txt" 2>&1
echo "env exit $?" >> "$OUT/summary.txt"

python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml "$OUT/gpu-tests.xml" > "$OUT/gpu-tests.txt" 2>&1
echo "gpu tests exit $?: $(tail -1 "$OUT/gpu-tests.txt")" >> "$OUT/summary.txt"

COLUMNS=120 timeout 300 python3 -m ddpcheck allreduce --json "$OUT/allreduce.json" > "$OUT/allreduce.txt" 2>&1
echo "allreduce exit $?" >> "$OUT/summary.txt"
if python3 -c "import ddpcheck.checks.profile" 2>/dev/null; then
  COLUMNS=120 timeout 300 python3 -m ddpcheck profile --hidden 4096 --json "$OUT/profile.json" > "$OUT/profile.txt" 2>&1
  echo "profile exit $?" >> "$OUT/summary.txt"
fi
if python3 -c "import ddpcheck.checks.train" 2>/dev/null; then
  COLUMNS=120 timeout 300 python3 -m ddpcheck train --json "$OUT/train.json" > "$OUT/train.txt" 2>&1
  echo "train exit $?" >> "$OUT/summary.txt"
fi
GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())")
timeout 300 python3 tests/perf/bench_profile_overhead.py --device cuda --nproc "$GPUS" > "$OUT/bench_profile_overhead.txt" 2>&1
echo "profile overhead bench exit $?: $(tail -1 "$OUT/bench_profile_overhead.txt")" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
