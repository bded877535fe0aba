#!/usr/bin/env bash
# The test suite on another torch release, in a throwaway virtual environment.
#
#   bash tests/compat/run.sh 2.2.2     # the oldest release pyproject.toml admits
#   bash tests/compat/run.sh 2.11.0    # the GPU machines' release
#   TYPER=0.16.0 bash tests/compat/run.sh 2.4.1   # with the oldest Typer pyproject.toml admits
#
# PyPI's Linux wheels are CUDA builds: each release brings 3 to 5 GB of NVIDIA
# libraries. They run on CPU ranks as well; the GPU-marked tests stay deselected.
# Extra arguments go to pytest (e.g. -x, or a test file).
set -euo pipefail
VERSION=${1:?usage: bash tests/compat/run.sh TORCH_VERSION [PYTEST_ARGS...]}
shift
cd "$(dirname "$0")/../.."
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
python3 -m venv "$SCRATCH/venv"
PY="$SCRATCH/venv/bin/python"
# Releases before 2.4 were built against NumPy 1.
NUMPY=$("$PY" -c "import sys; v = tuple(map(int, sys.argv[1].split('.')[:2])); print('numpy<2' if v < (2, 4) else 'numpy')" "$VERSION")
"$PY" -m pip install --quiet "torch==$VERSION" "$NUMPY" ${TYPER:+"typer==$TYPER"}
"$PY" -m pip install --quiet -e '.[test]'
"$PY" -c "import torch, typer; print('torch', torch.__version__, 'typer', typer.__version__)"
OMP_NUM_THREADS=1 "$PY" -m pytest -q -p no:cacheprovider "$@"
