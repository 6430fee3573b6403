#!/bin/sh
# Rebuilds every committed fixture made by this folder, deterministically (fixed seeds):
#   tests/fixtures/models/{k3_tiny_a,k3_tiny_b}/   make_tiny_checkpoints.py
#   resources/demo/                                train_demo.py (only with K3_TRAIN_DEMO=1:
#                                                  trains for STEPS steps on 2 threads)
# Uses Debian's interpreter (python3-torch, python3-numpy, python3-jinja2).
# Bit-for-bit reproducibility holds for the same torch build and BLAS.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-/usr/bin/python3}
cd "$here"
"$py" make_tiny_checkpoints.py
if [ "${K3_TRAIN_DEMO:-0}" = 1 ]; then
    OMP_NUM_THREADS=2 "$py" train_demo.py
fi
