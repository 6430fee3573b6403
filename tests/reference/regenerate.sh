#!/bin/sh
# Rebuilds every committed fixture made by this folder, deterministically (fixed seeds):
#   tests/fixtures/models/{k3_tiny_a,k3_tiny_b,k3_tiny_f32,k3_tiny_bf16}/   make_tiny_checkpoints.py
#   tests/fixtures/vision/                         make_vision_fixtures.py (after pillow_resample.py)
#   resources/demo/ weights + tokenizer            train_demo.py (only with K3_TRAIN_DEMO=1:
#                                                  about 10 minutes of training, 1 thread)
#   resources/demo/expected.json + .f32            train_demo.py --expected-only (always:
#                                                  recomputed from the committed files)
# Uses Debian's interpreter (python3-torch, python3-numpy, python3-jinja2).
# Bit-for-bit reproducibility holds for the same torch build and BLAS.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-/usr/bin/python3}
cd "$here"
"$py" make_tiny_checkpoints.py
"$py" pillow_resample.py
"$py" make_vision_fixtures.py
if [ "${K3_TRAIN_DEMO:-0}" = 1 ]; then
    OMP_NUM_THREADS=1 "$py" train_demo.py          # trains, exports, writes expected.json
else
    OMP_NUM_THREADS=1 "$py" train_demo.py --expected-only
fi
